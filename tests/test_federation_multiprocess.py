"""8 participant processes and a server process sharing one storage (SQLite, journal, PostgreSQL).

The PostgreSQL variant reads its URL from ``OPTUNA_FEDBO_TEST_POSTGRES_URL`` and is skipped when
that variable is unset.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import re
import subprocess
import sys
import uuid

from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig

N_CLIENTS = 8
N_INIT = 2
N_TRIALS = 5
N_ROUNDS = 1 + N_TRIALS - N_INIT  # round 0 = initial design, then one round per BO iteration
WORKER = Path(__file__).with_name("_federation_worker.py")
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}


def _run_federation(storage: str) -> None:
    name = f"mp-{uuid.uuid4().hex[:8]}"
    Federation.create(
        name,
        search_space={"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)},
        n_clients=N_CLIENTS,
        storage=storage,
        protocol=FTSConfig(n_features=30, n_init=N_INIT, n_subregions=2),
        seed=11,
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "optuna_fedbo.federation.cli",
            "serve",
            "--storage",
            storage,
            "--name",
            name,
            "--poll-interval",
            "0.1",
            "--max-rounds",
            str(N_ROUNDS),
            "--timeout",
            "240",
            "--round-timeout",
            "none",  # the papers' lock-step: every round complete (none lost)
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert "serving" in server.stdout.readline()  # participants start once a server runs
    participants = [
        subprocess.Popen(
            [sys.executable, str(WORKER), storage, name, f"site-{i}", str(N_TRIALS), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for i in range(N_CLIENTS)
    ]
    outcomes = []
    try:
        for process in participants:
            out, err = process.communicate(timeout=300)
            assert process.returncode == 0, f"participant failed:\n{out}\n{err[-3000:]}"
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
        server_out, server_err = server.communicate(timeout=300)
    finally:
        for process in [*participants, server]:
            if process.poll() is None:
                process.kill()
    assert server.returncode == 0, server_err[-3000:]

    # Every round was closed with all 8 uploads: none was lost.
    rounds = re.findall(r"round (\d+): (\d+) contributors \((\w+)\)", server_out)
    assert rounds == [(str(r), str(N_CLIENTS), "complete") for r in range(N_ROUNDS)], server_out
    assert sorted(o["index"] for o in outcomes) == list(range(N_CLIENTS))
    for outcome in outcomes:
        assert outcome["n_trials"] == N_TRIALS and outcome["warnings"] == []
        assert outcome["last_upload_round"] == N_ROUNDS - 1
        assert outcome["modes"][:N_INIT] == ["init"] * N_INIT
        # The default sampler: its own GP with the broadcast as prior mean (issue 10), from the
        # first BO iteration on (synchronous: round 0's broadcast is there by then), or its own
        # GP alone after the broadcast ordered the latest trials worse.
        assert set(outcome["modes"][N_INIT:]) <= {"transfer", "own", "fallback"}
        assert outcome["modes"][N_INIT] == "transfer"
        assert outcome["counts"]["federated"] == outcome["modes"].count("transfer")
    loaded = Federation.load(name, storage)
    assert loaded.open_round() == N_ROUNDS
    trials = loaded.store.broadcast_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * N_ROUNDS
    assert [t.value for t in trials] == [float(N_CLIENTS)] * N_ROUNDS
    assert sorted(loaded.participants()) == sorted(f"site-{i}" for i in range(N_CLIENTS))


def test_eight_processes_and_a_server_on_one_sqlite_file(tmp_path) -> None:
    _run_federation(f"sqlite:///{tmp_path / 'federation.db'}")


def test_eight_processes_and_a_server_on_one_journal_file(tmp_path) -> None:
    _run_federation(f"journal:{tmp_path / 'federation.log'}")


@pytest.mark.skipif(
    not os.environ.get("OPTUNA_FEDBO_TEST_POSTGRES_URL"),
    reason="set OPTUNA_FEDBO_TEST_POSTGRES_URL to run against PostgreSQL",
)
def test_eight_processes_and_a_server_on_postgresql() -> None:
    _run_federation(os.environ["OPTUNA_FEDBO_TEST_POSTGRES_URL"])
