"""Fed-PNE with participant processes and a server process sharing one storage.

Five participants run ``study.optimize`` in their own processes (each study in its own journal
file), the server runs ``optuna-fedbo serve``; one participant is stopped mid-phase and restarted
in a new process on the same study. Storages: SQLite and, when ``OPTUNA_FEDBO_TEST_POSTGRES_URL``
is set, PostgreSQL (a federation over a journal file: ``test_fedpne_federation.py``, in one
process, and the eight-process FTS federation).

This file is also the participant program: ``python THIS_FILE worker STORAGE NAME CLIENT_ID
N_TRIALS STUDY_JOURNAL``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
import re
import subprocess
import sys
import uuid

N_CLIENTS = 5
HORIZON = 40
EXTRA = 2
#: What a participant rightly says when its wait has lasted long while site-0 is being restarted
#: (the test stops it mid-phase): not a failure, and when it comes depends on the machine's speed.
RESTART_GAP = f"of {N_CLIENTS} participants have joined and {N_CLIENTS - 1} run"
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}


def _objective_for(client_id: str):
    import optuna

    shift = 0.04 * int(client_id.split("-")[1])

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        y = trial.suggest_int("y", 0, 9)
        return 1.0 - (x - 0.6 - shift) ** 2 - 0.01 * (y - 4) ** 2

    return objective


def _worker(storage: str, name: str, client_id: str, n_trials: int, journal: str) -> int:
    import optuna

    from optuna_fedbo.federation import Federation
    from optuna_fedbo.samplers._fed_pne import FedPNESampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logging.getLogger("optuna_fedbo").addHandler(Collect(level=logging.WARNING))
    federation = Federation.load(name, storage)
    sampler = FedPNESampler(federation, client_id, phase_timeout=120.0, poll_interval=0.1)
    study = optuna.create_study(
        study_name=client_id,
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(journal)
        ),
        direction="maximize",
        sampler=sampler,
        load_if_exists=True,
    )
    study.optimize(_objective_for(client_id), n_trials=n_trials)
    trials = study.get_trials(deepcopy=False)
    print(
        json.dumps(
            {
                "client": client_id,
                "n_trials": len(trials),
                "modes": [t.system_attrs.get("fedbo:mode") for t in trials],
                "pulls": [
                    [t.system_attrs.get("fedpne:phase"), t.system_attrs.get("fedpne:slot")]
                    for t in trials
                ],
                "recommended": sampler.recommended_params(),
                "warnings": warnings,
            }
        ),
        flush=True,
    )
    return 1 if _unexpected(warnings) else 0


def _unexpected(warnings: list[str]) -> list[str]:
    return [w for w in warnings if RESTART_GAP not in w]


def _run_federation(storage: str, tmp_path: Path) -> None:
    from optuna.distributions import FloatDistribution
    from optuna.distributions import IntDistribution

    from optuna_fedbo.federation import Federation
    from optuna_fedbo.federation import FedPNEConfig
    from optuna_fedbo.federation.fedpne.channel import FedPNEChannel
    from optuna_fedbo.federation.fedpne.messages import parse_phase_broadcast

    name = f"pne-mp-{uuid.uuid4().hex[:8]}"
    Federation.create(
        name,
        search_space={"x": FloatDistribution(0.0, 1.0), "y": IntDistribution(0, 9)},
        n_clients=N_CLIENTS,
        storage=storage,
        protocol=FedPNEConfig(horizon=HORIZON, value_range=(0.0, 1.0)),
        seed=3,
    )
    me = str(Path(__file__).resolve())

    def launch(client: str, n_trials: int) -> subprocess.Popen:
        journal = str(tmp_path / f"{client}.log")
        return subprocess.Popen(
            [sys.executable, me, "worker", storage, name, client, str(n_trials), journal],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )

    server = subprocess.Popen(
        [sys.executable, "-m", "optuna_fedbo.federation.cli", "serve", "--storage", storage]
        + ["--name", name, "--poll-interval", "0.1", "--timeout", "900"]
        + ["--round-timeout", "none"],  # the paper's lock-step: every phase complete
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert "serving" in server.stdout.readline()  # participants start once a server runs
    total = HORIZON + EXTRA
    # site-0 stops after 3 trials (mid-phase) and is restarted afterwards on the same study.
    first = launch("site-0", 3)
    others = [launch(f"site-{i}", total) for i in range(1, N_CLIENTS)]
    processes = [server, first, *others]
    outcomes = {}
    try:
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0, f"site-0 (first run) failed:\n{out}\n{err[-3000:]}"
        restarted = launch("site-0", total - 3)
        processes.append(restarted)
        for process in [restarted, *others]:
            out, err = process.communicate(timeout=300)
            assert process.returncode == 0, f"participant failed:\n{out}\n{err[-3000:]}"
            record = json.loads(out.strip().splitlines()[-1])
            outcomes[record["client"]] = record
        server_out, server_err = server.communicate(timeout=120)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    assert server.returncode == 0, server_err[-3000:]

    federation = Federation.load(name, storage)
    channel = FedPNEChannel(federation)
    view = channel.view()
    assert view.phase.final
    n_rounds = view.phase.index - 1
    # Every phase was closed with all five uploads: none was lost, the restart included.
    rounds = re.findall(r"round (\d+): (\d+) contributors \((\w+)\)", server_out)
    assert rounds == [(str(r), str(N_CLIENTS), "complete") for r in range(n_rounds)], server_out
    phases = [channel.initial_phase] + [
        parse_phase_broadcast(federation.store.read_broadcast(t._trial_id)[1]).next_phase
        for t in federation.store.broadcast_trials()
    ]
    assert [p.index for p in phases] == list(range(1, n_rounds + 2))
    assert sum(p.budget for p in phases) == HORIZON
    # Pulls are the phases' slots in order, exactly once each.
    expected = [[p.index, s] for p in phases for s in range(p.budget)]
    for client, outcome in outcomes.items():
        assert outcome["n_trials"] == total and _unexpected(outcome["warnings"]) == []
        assert outcome["modes"] == ["pull"] * HORIZON + ["exploit"] * EXTRA
        assert outcome["recommended"] == channel.recommended_params()
        assert outcome["pulls"][:HORIZON] == expected, client
    assert channel.status().missing == ()


def test_five_processes_and_a_server_on_one_sqlite_file(tmp_path) -> None:
    _run_federation(f"sqlite:///{tmp_path / 'federation.db'}", tmp_path)


def test_five_processes_and_a_server_on_postgresql(tmp_path) -> None:
    import pytest

    url = os.environ.get("OPTUNA_FEDBO_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("set OPTUNA_FEDBO_TEST_POSTGRES_URL to run against PostgreSQL")
    _run_federation(url, tmp_path)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]))
    sys.exit(f"usage: python {sys.argv[0]} worker STORAGE NAME CLIENT_ID N_TRIALS JOURNAL")
