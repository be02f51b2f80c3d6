"""The silent cases of a federation, on real processes over SQLite: each is now said out loud.

No server, too few participants for any round to close, one id in two processes, a crashed
participant; and the lifecycle: ``serve`` ends by itself with a summary once every participant
has finished or is lost.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import re
import signal
import subprocess
import sys
import time
import uuid

from optuna.distributions import FloatDistribution

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.lease import lease_book

WORKER = Path(__file__).with_name("_lifecycle_worker.py")
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}
SPACE = {"x": FloatDistribution(0.0, 1.0)}
N_INIT = 2


def _federation(tmp_path: Path, n_clients: int) -> tuple[str, str]:
    storage = f"sqlite:///{tmp_path / 'fed.db'}"
    name = f"life-{uuid.uuid4().hex[:8]}"
    Federation.create(
        name,
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=FTSConfig(n_features=20, n_init=N_INIT, min_contributors=min(n_clients, 2)),
        seed=5,
    )
    return storage, name


def _participant(storage: str, name: str, client: str, n_trials: int, *options: str):
    seed = client.rsplit("-", 1)[-1]
    return subprocess.Popen(
        [sys.executable, str(WORKER), storage, name, client, str(n_trials), seed, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def _server(storage: str, name: str, *options: str) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "optuna_fedbo.federation.cli", "serve", "--storage", storage]
        + ["--name", name, "--poll-interval", "0.05", "--timeout", "200", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert "serving" in server.stdout.readline()
    return server


def _finish(process: subprocess.Popen, timeout: float = 200) -> tuple[str, str]:
    try:
        return process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()


def _wait_for(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_no_server_is_reported_and_so_is_a_study_without_any_broadcast(tmp_path) -> None:
    storage, name = _federation(tmp_path, n_clients=1)
    out, err = _finish(_participant(storage, name, "site-0", N_INIT + 4))
    assert json.loads(out.splitlines()[-1])["counts"] == {
        "initial": N_INIT,
        "local": 4,
        "federated": 0,
    }
    assert err.count("no server has been seen on federation") >= 1, err
    assert "site-0: no server has been seen" in err  # warned during the study ...
    assert "0 federated): no broadcast of federation" in err  # ... and when it ended
    # The participant is finished, which status shows.
    lifecycle = Federation.load(name, storage).lifecycle()
    assert lifecycle.states["site-0"].status == "finished" and lifecycle.ended
    assert [p.kind for p in lifecycle.problems] == ["no-server"]


def test_too_few_participants_for_any_round_to_close_is_reported(tmp_path) -> None:
    storage, name = _federation(tmp_path, n_clients=4)  # min_uploads "auto": 2 of 4
    server = _server(storage, name, "--max-rounds", "1", "--timeout", "60")
    try:
        out, err = _finish(_participant(storage, name, "site-0", N_INIT + 5))
    finally:
        server.kill()
    assert json.loads(out.splitlines()[-1])["counts"]["federated"] == 0
    assert "site-0: 1 of 4 participants have joined and 1 run; the server closes a round " in err
    assert "at least 2 uploads (min_uploads)" in err
    assert "0 federated): no broadcast of federation" in err
    status = subprocess.run(
        [sys.executable, "-m", "optuna_fedbo.federation.cli", "status", "--storage", storage]
        + ["--name", name],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert status.returncode == 0 and "site-0               finished" in status.stdout


def test_a_second_study_under_a_live_client_id_is_refused_and_a_killed_one_is_taken_over(
    tmp_path,
) -> None:
    # Each process here keeps its site study in memory: two live processes of site-0 are two
    # studies under one client_id (a worker of the site would load the site's study instead).
    storage, name = _federation(tmp_path, n_clients=2)
    book = lease_book(Federation.load(name, storage))
    first = _participant(storage, name, "site-0", 400, "--sleep", "0.2")  # lease_ttl 60 s
    try:
        _wait_for(lambda: "site-0" in book.states(), "the first process's lease")
        second = _participant(storage, name, "site-0", 3)
        out, err = _finish(second)
        assert second.returncode != 0 and "counts" not in out
        assert "SiteMismatchError: Participant 'site-0' of federation" in err
        assert "in a live worker, not" in err and "or use another client_id" in err
        # A hard crash, restarted at once: the dead process's lease (60 s) is taken over now.
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        third = _participant(storage, name, "site-0", 3)
        out, err = _finish(third)
        assert third.returncode == 0, err
        workers, _ = book.scan("site-0")
        assert workers[1].state == "lost" and workers[3].state == "finished"
        assert book.states()["site-0"].status == "finished"
    finally:
        if first.poll() is None:
            first.kill()


def test_a_participant_ended_by_an_unhandled_exception_is_lost_at_once(tmp_path) -> None:
    storage, name = _federation(tmp_path, n_clients=2)
    # A long lease: "lost" must not wait for it to expire.
    out, err = _finish(_participant(storage, name, "site-0", 10, "--raise-at", "3"))
    assert "RuntimeError: the objective failed" in err
    state = lease_book(Federation.load(name, storage)).states()["site-0"]
    assert state.status == "lost" and state.age < 30
    # A normal end, by contrast, is finished.
    _finish(_participant(storage, name, "site-1", 3))
    assert lease_book(Federation.load(name, storage)).states()["site-1"].status == "finished"


def test_a_crashed_participant_does_not_stall_the_others_and_serve_ends(tmp_path) -> None:
    storage, name = _federation(tmp_path, n_clients=3)
    server = _server(storage, name)  # default closing policy: auto timeout, 2 of 3 uploads
    n_trials = N_INIT + 4
    options = ("--synchronous", "--lease-ttl", "2", "--sleep", "0.05")
    crashing = _participant(storage, name, "site-2", n_trials, *options, "--crash-at", "3")
    others = [_participant(storage, name, f"site-{i}", n_trials, *options) for i in (0, 1)]
    try:
        outcomes = []
        for process in others:
            out, err = _finish(process)
            assert process.returncode == 0, err[-3000:]
            outcomes.append(json.loads(out.splitlines()[-1]))
        _finish(crashing)
        assert crashing.returncode == 17
        server_out, server_err = _finish(server)  # ends by itself: everyone finished or lost
    finally:
        for process in [server, crashing, *others]:
            if process.poll() is None:
                process.kill()
    assert server.returncode == 0, server_err[-3000:]
    rounds = re.findall(r"round (\d+): (\d+) contributors \((\w+)\)", server_out)
    # After the crash, rounds close on the timeout with the two running participants.
    assert ("2", "timeout") in {(n, reason) for _, n, reason in rounds}, server_out
    for outcome in outcomes:
        assert outcome["modes"][N_INIT] == "transfer"  # the broadcast is the GP's prior mean
        assert outcome["counts"]["federated"] >= 1
    # The final summary: rounds, privacy, every participant's trials by kind.
    assert f"federation {name}: {len(rounds)} rounds published; no differential privacy" in (
        server_out
    )
    assert re.search(r"site-2\s+lost", server_out), server_out
    for i, outcome in zip((0, 1), outcomes):
        counts = outcome["counts"]
        row = (
            rf"site-{i}\s+finished\s+{n_trials}\s+{counts['initial']}\s+{counts['local']}\s+"
            rf"{counts['federated']}"
        )
        assert re.search(row, server_out), server_out
    watch = subprocess.run(
        [sys.executable, "-m", "optuna_fedbo.federation.cli", "status", "--storage", storage]
        + ["--name", name, "--watch", "0.2"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert watch.returncode == 0 and watch.stdout.count("--- ") == 1
    assert "finished: site-2 lost, the others finished" in watch.stdout
