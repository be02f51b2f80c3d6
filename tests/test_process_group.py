"""The group of multi-process tests (``conftest.PROCESS_TESTS``, run one after another under
``-n 2``) names tests that exist, and no test file that starts a ``serve`` process is left out."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import PROCESS_TESTS
from conftest import work_unit

TESTS = Path(__file__).parent


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name[:5] == "test_"}


def test_every_entry_names_an_existing_test_file_or_test() -> None:
    for entry in PROCESS_TESTS:
        module, _, test = entry.partition("::")
        assert (TESTS / module).is_file(), entry
        assert not test or test in _test_names(TESTS / module), entry


def test_every_file_that_starts_a_serve_process_has_its_tests_in_the_group() -> None:
    for path in sorted(TESTS.glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if path.name != Path(__file__).name and "Popen" in text and '"serve"' in text:
            names = _test_names(path)
            assert any(work_unit(f"tests/{path.name}::{n}") == "processes" for n in names), path
