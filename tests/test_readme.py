"""The README's two files (server side, participant side) run as written: a server and three
sites tuning a scikit-learn SVC, over an embedded SQLite file."""

from __future__ import annotations

import os
from pathlib import Path
import re
import subprocess
import sys
import time

from optuna_fedbo.federation import Federation

ROOT = Path(__file__).parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def readme_files() -> dict[str, str]:
    """The README's code blocks introduced by a bold file name, by file name."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return dict(re.findall(r"\*\*`(\w+\.py)`\*\*[^\n]*\n+```python\n(.*?)```", text, re.S))


def test_the_readme_federation_runs_as_two_files(tmp_path) -> None:
    files = readme_files()
    assert set(files) == {"fed_server.py", "fed_site.py"}
    for name, code in files.items():
        (tmp_path / name).write_text(code, encoding="utf-8")

    def run(*args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, *args], cwd=tmp_path, env=ENV, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip

    server = run("fed_server.py")
    processes = [server]
    try:
        deadline = time.monotonic() + 120
        while True:  # the sites start once the server has created the federation
            try:
                Federation.load("svm-tuning", f"sqlite:///{tmp_path / 'fed.db'}")
                break
            except (KeyError, ValueError):  # not created yet, or caught half-way (unsigned)
                assert time.monotonic() < deadline and server.poll() is None, server.stderr.read()
                time.sleep(0.2)
        sites = [run("fed_site.py", str(k)) for k in range(3)]
        processes += sites
        outputs = []
        for site in sites:
            out, err = site.communicate(timeout=400)
            assert site.returncode == 0, err[-3000:]
            outputs.append(out)
        server_out, server_err = server.communicate(timeout=120)  # ends by itself
        assert server.returncode == 0, server_err[-3000:]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for out in outputs:
        counts = re.search(r"TrialCounts\(initial=(\d+), local=(\d+), federated=(\d+)\)", out)
        assert counts is not None, out
        initial, local, federated = map(int, counts.groups())
        assert initial == 5 and local + federated == 10 and federated >= 1
    assert re.search(r"federation svm-tuning: \d+ rounds published; no differential privacy",
                     server_out), server_out  # fmt: skip
    assert len(re.findall(r"site-\d\s+finished\s+15\s+5", server_out)) == 3, server_out
