"""Secure aggregation with real participant processes, two of them SIGKILLed mid-round.

The server runs in the test process (so the test decides, from what the server has received,
when a step closes: no timing in the outcome); five participants are processes on one SQLite
file. ``c3`` is killed right after its keys reached the server, ``c4`` right after its shares
did: the round still publishes the sum of ``c0, c1, c2`` (``c4``'s masks removed from the
survivors' shares).
"""

from __future__ import annotations

import os
from pathlib import Path
import signal
import subprocess
import sys
import time

from _secagg_worker import packed
import numpy as np
from optuna.distributions import FloatDistribution
import pytest

import optuna_fedbo as fb
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secure_statistics import input_length
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.fts import secure
from optuna_fedbo.federation.fts.secure import pooled_from_sum
from optuna_fedbo.federation.fts.secure import secure_input
from optuna_fedbo.federation.secagg.server import SecAggCoordinator

WORKER = Path(__file__).with_name("_secagg_worker.py")
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}
M = 6
KILL_AFTER = {"c3": "keys", "c4": "shares"}


def test_sigkilled_participants_after_keys_and_after_shares(tmp_path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'secagg.db'}"
    fed = Federation.create(
        "mp-secagg",
        search_space={"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)},
        n_clients=5,
        storage=url,
        protocol=FTSConfig(n_features=M, n_init=2),
        secure_aggregation=fb.SecureAggregation(step_timeout=1e6),  # the test closes steps
    )
    clients = [f"c{i}" for i in range(5)]
    for c in clients:
        fed.join(c)
    processes = {
        c: subprocess.Popen(
            [sys.executable, str(WORKER), url, "mp-secagg", c, str(i)],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i, c in enumerate(clients)
    }
    dead: set[str] = set()
    close = SecAggCoordinator._close

    def kill_then_close(self, current, reason):
        # Right before a step closes, kill those whose message of that step is in: they drop
        # out after sending it and before seeing the step's record.
        for client, step in KILL_AFTER.items():
            if step == current.server.step:
                assert client not in current.server.missing()
                processes[client].send_signal(signal.SIGKILL)
                processes[client].wait(timeout=30)
                dead.add(client)
        return close(self, current, reason)

    sums: list[np.ndarray] = []

    def spy(values, n_features, round_index, step, slack, **kept):
        sums.append(np.array(values))
        return pooled_from_sum(values, n_features, round_index, step, slack, **kept)

    monkeypatch.setattr(SecAggCoordinator, "_close", kill_then_close)
    monkeypatch.setattr(secure, "pooled_from_sum", spy)
    server = FederationServer(fed, round_timeout=None)
    report = None
    try:
        deadline = time.monotonic() + 300
        while report is None and time.monotonic() < deadline:
            report = server.step()
            attempt = server._secure.coordinator.attempt  # type: ignore[attr-defined]
            if report is None and attempt is not None:
                missing = set(attempt.server.missing())
                if missing and missing <= dead:  # every live participant has answered
                    report = server.step(force=True)
            time.sleep(0.02)
        outputs = {c: p.communicate(timeout=120) for c, p in processes.items() if c not in dead}
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
    assert report is not None, "the round was never published"
    assert report.published and report.contributors == ("c0", "c1", "c2")
    assert report.n_recovered == 1 and dead == {"c3", "c4"}
    assert {c: processes[c].returncode for c in outputs} == dict.fromkeys(("c0", "c1", "c2"), 0)
    assert {processes[c].returncode for c in dead} == {-signal.SIGKILL}
    config = fed.secure_aggregation
    ring = config.ring(fed.n_clients, input_length(M))
    inputs = [secure_input(packed(fed, i), M, config.max_observations, ring) for i in range(3)]
    plain = sum(decode(x, ring) for x in inputs)
    assert np.max(np.abs(sums[0] - plain)) <= 3 * fed.secure_aggregation.step / 2 + 1e-9
    assert fed.latest_broadcast().n_contributors == 3


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
