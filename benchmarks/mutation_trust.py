"""Mutation testing of the trust layer: does a test fail when a check is removed?

Runs `mutmut <https://mutmut.readthedocs.io>`_ (3.x) over the trust-critical modules listed in
``benchmarks/mutation_trust.toml``, each against only the test files that guard it, and prints
per module the mutation score (mutants killed / mutants not judged equivalent) and every
surviving mutant with its diff. A mutant judged equivalent (no test can tell it from the
original) is listed, with the reason, in the ``[equivalent]`` table of that file.

Each module runs in a fresh copy of the repository in a temporary directory (mutmut writes its
``mutants/`` tree there), so the working tree is never touched. Not part of the test suite: it
takes minutes per module (``--max-children`` processes). Examples::

    python benchmarks/mutation_trust.py                    # every module that exists
    python benchmarks/mutation_trust.py trust.py keys.py   # only these (substring of the path
                                                           # or label)
    python benchmarks/mutation_trust.py --list             # modules and their tests

Exit status: 0 when every non-equivalent mutant was killed, 1 otherwise, 2 on a bad argument.
Needs ``pip install -e '.[mutation]'``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
import json
import os
from pathlib import Path
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = Path(__file__).resolve().parents[1]
CONFIG = Path(__file__).with_name("mutation_trust.toml")

#: mutmut's verdicts: a test noticed the mutant ...
DETECTED = {"killed", "timeout", "segfault", "caught by type check"}
#: ... or none did (a mutant no test even runs counts as a survivor).
UNDETECTED = {"survived", "no tests", "suspicious"}


@dataclass(frozen=True)
class Module:
    """One module to mutate (an entry of the configuration)."""

    path: str
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()
    select: str | None = None
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.path

    @property
    def dotted(self) -> str:
        return self.path.removesuffix(".py").replace("/", ".")

    def patterns(self) -> list[str]:
        """mutmut mutant-name patterns of the selected functions (all if none)."""
        if not self.functions:
            return [f"{self.dotted}.*"]
        return [
            pattern
            for name in self.functions
            for pattern in (
                f"{self.dotted}.x_{name}__mutmut_*",
                f"{self.dotted}.xǁ*ǁ{name}__mutmut_*",
            )
        ]


@dataclass(frozen=True)
class Outcome:
    module: Module
    verdicts: dict[str, str]
    diffs: dict[str, str]
    seconds: float


def load_config(path: Path = CONFIG) -> tuple[dict, list[Module], dict[str, str]]:
    """``(settings, modules, equivalent mutants -> reason)`` from the configuration file."""
    config = tomllib.loads(path.read_text())
    modules = [
        Module(
            path=entry["path"],
            tests=tuple(entry["tests"]),
            functions=tuple(entry.get("functions", ())),
            select=entry.get("select"),
            label=entry.get("label", ""),
        )
        for entry in config.get("module", [])
    ]
    return config.get("settings", {}), modules, dict(config.get("equivalent", {}))


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def _prepare(module: Module, settings: dict, workdir: Path) -> None:
    """A copy of the repository whose pyproject tells mutmut what to mutate and test."""
    for name in ("optuna_fedbo", "tests"):
        shutil.copytree(
            ROOT / name, workdir / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    selection = list(module.tests) + (["-k", module.select] if module.select else [])
    pyproject = (ROOT / "pyproject.toml").read_text()
    pyproject += (
        "\n[tool.mutmut]\n"
        'source_paths = ["optuna_fedbo"]\n'
        f"only_mutate = {_toml_list([module.path])}\n"
        f"do_not_mutate_patterns = {_toml_list(settings.get('do_not_mutate_patterns', []))}\n"
        f"pytest_add_cli_args = {_toml_list(settings.get('pytest_args', []))}\n"
        f"pytest_add_cli_args_test_selection = {_toml_list(selection)}\n"
        "use_git_change_detection = false\n"
        f"timeout_multiplier = {float(settings.get('timeout_multiplier', 15.0))}\n"
    )
    (workdir / "pyproject.toml").write_text(pyproject)


def _mutmut(workdir: Path, *args: str, check: bool = True) -> str:
    env = {**os.environ, "PYTHONPATH": str(workdir), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    if check and done.returncode != 0:
        raise RuntimeError(
            f"mutmut {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}"
        )
    return done.stdout


#: Reads every survivor's diff in one process (``mutmut show`` takes seconds per mutant).
_SHOW = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
path, names = sys.argv[1], sys.argv[2:]
print(json.dumps({name: get_diff_for_mutant(name, path=path) for name in names}))
"""


def _diffs(workdir: Path, module: Module, names: list[str]) -> dict[str, str]:
    """The diff of each of the mutants ``names`` of ``module`` (an empty one if unreadable)."""
    if not names:
        return {}
    env = {**os.environ, "PYTHONPATH": str(workdir)}
    done = subprocess.run(
        [sys.executable, "-c", _SHOW, module.path, *names],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(f"  (could not read the diffs: {done.stderr.strip().splitlines()[-1:]})")
        return {}
    return json.loads(done.stdout)


def _matches(name: str, module: Module) -> bool:
    from fnmatch import fnmatchcase

    return any(fnmatchcase(name, pattern) for pattern in module.patterns())


def run_module(
    module: Module, settings: dict, equivalent: dict[str, str], max_children: int, keep: bool
) -> Outcome:
    """Mutate one module, run its tests against every mutant, collect the verdicts."""
    workdir = Path(tempfile.mkdtemp(prefix="fedbo-mutation-"))
    start = time.monotonic()
    try:
        _prepare(module, settings, workdir)
        _mutmut(
            workdir, "run", "--max-children", str(max_children), *module.patterns(), check=False
        )
        verdicts = {}
        for line in _mutmut(workdir, "results", "--all", "true").splitlines():
            name, _, verdict = line.strip().rpartition(": ")
            if name and _matches(name, module):
                verdicts[name] = verdict
        diffs = _diffs(
            workdir,
            module,
            [n for n, v in verdicts.items() if v in UNDETECTED and n not in equivalent],
        )
        return Outcome(module, verdicts, diffs, time.monotonic() - start)
    finally:
        if keep:
            print(f"  (kept {workdir})")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def report(outcomes: list[Outcome], equivalent: dict[str, str]) -> bool:
    """Print scores and survivors; whether every non-equivalent mutant was killed."""
    total_detected = total_counted = 0
    clean = True
    for outcome in outcomes:
        verdicts = outcome.verdicts
        judged = {n for n in verdicts if n in equivalent}
        counted = {n: v for n, v in verdicts.items() if n not in judged}
        detected = sum(v in DETECTED for v in counted.values())
        survivors = sorted(n for n, v in counted.items() if v in UNDETECTED)
        other = sorted(n for n, v in counted.items() if v not in DETECTED | UNDETECTED)
        considered = detected + len(survivors)
        total_detected += detected
        total_counted += considered
        score = 100.0 * detected / considered if considered else 100.0
        print(
            f"\n{outcome.module.name}: {detected}/{considered} killed ({score:.1f}%), "
            f"{len(survivors)} surviving, {len(judged)} equivalent, "
            f"{len(other)} not run ({outcome.seconds / 60:.1f} min)"
        )
        for name in survivors:
            clean = False
            print(f"  SURVIVED [{counted[name]}] {name}")
            diff = [
                line
                for line in outcome.diffs.get(name, "").splitlines()
                if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
            ]
            for line in diff:
                print(f"      {line.strip()}")
        for name in other:
            clean = False
            print(f"  NOT RUN [{counted[name]}] {name}")
    stale = sorted(
        name
        for name in equivalent
        if any(_matches(name, o.module) for o in outcomes)
        and not any(name in o.verdicts for o in outcomes)
    )
    for name in stale:
        print(f"\nstale equivalence entry (no such mutant any more: re-judge it): {name}")
    if total_counted:
        print(
            f"\nTOTAL: {total_detected}/{total_counted} non-equivalent mutants killed "
            f"({100.0 * total_detected / total_counted:.1f}%)"
        )
    return clean


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="substrings of the module paths or labels to run")
    parser.add_argument("--max-children", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--list", action="store_true", help="list the modules and exit")
    parser.add_argument("--keep", action="store_true", help="keep the working copies")
    args = parser.parse_args(argv)
    settings, modules, equivalent = load_config()
    missing = [m for m in modules if not (ROOT / m.path).exists()]
    present = [m for m in modules if (ROOT / m.path).exists()]
    if args.only:
        unknown = [o for o in args.only if not any(o in m.name for m in modules)]
        if unknown:
            print(f"error: no configured module matches {unknown} (see --list)", file=sys.stderr)
            return 2
        present = [m for m in present if any(o in m.name for o in args.only)]
    if args.list:
        for m in modules:
            state = "" if (ROOT / m.path).exists() else "  (not landed yet: skipped)"
            print(f"{m.name}{state}\n    tests: {' '.join(m.tests)}")
        return 0
    for m in missing:
        print(f"skipped (not landed yet): {m.path}")
    for stale in (name for name in equivalent if not re.match(r"^[\w.]+\.x", name)):
        print(f"error: malformed equivalent mutant name {stale!r}", file=sys.stderr)
        return 2
    outcomes = []
    for module in present:
        print(f"mutating {module.name} against {' '.join(module.tests)} ...", flush=True)
        outcomes.append(run_module(module, settings, equivalent, args.max_children, args.keep))
    return 0 if report(outcomes, equivalent) else 1


if __name__ == "__main__":
    sys.exit(main())
