"""A DP federation across processes: 4 participants and a server on one SQLite file.

The server accounts every round in the ledger and stops at the epsilon budget; the participants
(synchronous, waiting without a timeout) must notice, finish their studies with local TS and
upload nothing more. The PostgreSQL variant reads ``OPTUNA_FEDBO_TEST_POSTGRES_URL``. (Over a
journal file, DP rounds and the budget's stop run in ``test_dp_server.py``, in one process.)
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
from optuna_fedbo.federation.dp_config import DPConfig

N_CLIENTS = 4
N_INIT = 2
N_TRIALS = N_INIT + 6
BUDGET_ROUNDS = 3  # rounds 0-2 are published, round 3 is refused
WORKER = Path(__file__).with_name("_dp_worker.py")
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}


def _run(storage: str) -> None:
    name = f"dp-mp-{uuid.uuid4().hex[:8]}"
    base = DPConfig(1.0, 0.5, 10.0, accountant="moments")
    budget = base.epsilon(BUDGET_ROUNDS, N_CLIENTS)
    Federation.create(
        name,
        search_space={"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)},
        n_clients=N_CLIENTS,
        storage=storage,
        protocol=FTSConfig(n_features=20, n_init=N_INIT, n_subregions=2),
        privacy=DPConfig(1.0, 0.5, 10.0, accountant="moments", epsilon_budget=budget),
        seed=13,
    )
    server = subprocess.Popen(
        [
            sys.executable, "-m", "optuna_fedbo.federation.cli", "serve",
            "--storage", storage, "--name", name, "--poll-interval", "0.1", "--timeout", "200",
            "--round-timeout", "none",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    assert "serving" in server.stdout.readline()  # participants start once a server runs
    participants = [
        subprocess.Popen(
            [sys.executable, str(WORKER), storage, name, f"site-{i}", str(N_TRIALS), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )  # fmt: skip
        for i in range(N_CLIENTS)
    ]
    outcomes = []
    try:
        for process in participants:
            out, err = process.communicate(timeout=240)
            assert process.returncode == 0, f"participant failed:\n{out}\n{err[-3000:]}"
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
        server_out, server_err = server.communicate(timeout=60)
    finally:
        for process in [*participants, server]:
            if process.poll() is None:
                process.kill()
    assert server.returncode == 0, server_err[-3000:]

    published = re.findall(r"round (\d+): (\d+) contributors \((\w+)\)", server_out)
    assert [int(r) for r, _, _ in published] == list(range(BUDGET_ROUNDS)), server_out
    assert f"round {BUDGET_ROUNDS}: not published: privacy budget exhausted" in server_out

    loaded = Federation.load(name, storage)
    entries = loaded.ledger_entries()
    assert [e.round for e in entries] == list(range(BUDGET_ROUNDS))
    spent, delta = loaded.privacy_spent()
    assert spent == pytest.approx(budget) and spent <= budget
    assert delta == pytest.approx(1e-5)  # the default: min(1e-5, 0.01 / N)
    trials = loaded.store.broadcast_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * BUDGET_ROUNDS
    assert [t.value for t in trials] == [-1.0] * BUDGET_ROUNDS  # participation withheld
    assert loaded.budget_exhausted()["round"] == BUDGET_ROUNDS
    for outcome in outcomes:
        assert outcome["n_trials"] == N_TRIALS and outcome["budget_exhausted"]
        assert outcome["last_upload_round"] == BUDGET_ROUNDS
        assert outcome["modes"][:N_INIT] == ["init"] * N_INIT
        # Trials after the refused round (BO iterations >= BUDGET_ROUNDS + 1) are local.
        assert set(outcome["modes"][N_INIT + BUDGET_ROUNDS :]) <= {"local", "fallback"}
        assert all(r is None or r < BUDGET_ROUNDS for r in outcome["rounds"])
        assert outcome["spent"] == [pytest.approx(spent), pytest.approx(delta)]
        others = [m for m in outcome["warnings"] if "privacy budget" not in m]
        assert others == []


def test_dp_federation_on_one_sqlite_file(tmp_path: Path) -> None:
    _run(f"sqlite:///{tmp_path / 'dp.db'}")


@pytest.mark.skipif(
    not os.environ.get("OPTUNA_FEDBO_TEST_POSTGRES_URL"),
    reason="set OPTUNA_FEDBO_TEST_POSTGRES_URL to run against PostgreSQL",
)
def test_dp_federation_on_postgresql() -> None:
    _run(os.environ["OPTUNA_FEDBO_TEST_POSTGRES_URL"])
