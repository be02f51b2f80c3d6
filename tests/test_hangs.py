"""Nothing hangs: every wait of a participant and of ``serve`` has a bound and a message.

Each test bounds a wait with small parameters (``patience``, ``idle_timeout``, an optimize
``timeout``) and a generous wall-clock bound; without the bound each would wait for minutes (a
site's 600 s ``sync_timeout`` per trial, a Fed-PNE phase's 3600 s, ``serve`` for ever).
"""

from __future__ import annotations

import itertools
import logging
import os
import time

from _site_objective import objective as _objective
from _site_objective import warnings_with as _warnings
import optuna
from optuna.distributions import FloatDistribution
import pytest

import optuna_fedbo as fb
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.finished import FederationFinishedError
from optuna_fedbo.federation.finished import finished_record
from optuna_fedbo.federation.lifecycle import Problem
from optuna_fedbo.samplers._waiting import optimize_deadline
from optuna_fedbo.samplers._waiting import Waits

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
_names = itertools.count()
#: Wall-clock bound of every wait below (each would last minutes without its bound).
BOUND = 20.0


def _fts(n_clients: int = 1, storage=None) -> Federation:
    config = FTSConfig(n_features=20, n_init=2, aggregation="weighted", min_contributors=1)
    return Federation.create(
        f"hang-{next(_names)}", search_space=SPACE, n_clients=n_clients, storage=storage,
        protocol=config, seed=1,
    )  # fmt: skip


def _pne(n_clients: int = 1) -> Federation:
    return Federation.create(
        f"hang-pne-{next(_names)}", search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=n_clients, protocol=FedPNEConfig(horizon=40), seed=1,
    )  # fmt: skip


# ------------------------------------------------------------------ participant waits
def _no_server(fed: Federation) -> None:
    pass


def _stopped_server(fed: Federation) -> None:
    FederationServer(fed).announce(stopped="serve ended")


def _too_few_participants(fed: Federation) -> None:
    FederationServer(fed, min_uploads=2).announce()  # a live server; 1 of 3 runs


@pytest.mark.parametrize(
    ("n_clients", "situation", "patience", "limit", "reason"),
    [
        (1, _no_server, 0.2, 60.0, "no server has been seen"),
        (1, _stopped_server, 3600.0, 60.0, "the server stopped"),  # at once, whatever patience
        # Too few running: bounded by the limit (a participant may be restarting), then at once.
        (3, _too_few_participants, 0.0, 0.5, "(sync_timeout=0.5 s) has passed and 1 of 3"),
    ],
)
def test_a_synchronous_site_stops_waiting_with_the_reason_and_runs_locally(
    propagate, caplog, n_clients, situation, patience, limit, reason
) -> None:
    fed = _fts(n_clients)
    situation(fed)
    sampler = fb.FedSampler(
        fed, client_id="a", seed=0, synchronous=True, sync_timeout=limit, patience=patience,
        poll_interval=0.01, n_candidates=32, n_refinements=0,
    )  # fmt: skip
    study = optuna.create_study(direction="maximize", sampler=sampler)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        study.optimize(_objective, n_trials=8)  # 6 trials after the initial design wait
    assert time.monotonic() - started < BOUND  # not 6 x 60 s
    stops = _warnings(caplog, "stopped waiting for the broadcast")
    assert len(stops) == 1 and reason in stops[0] and "its local model" in stops[0]
    modes = [t.system_attrs["fedbo:mode"] for t in study.trials]
    assert modes[2:] == ["fallback"] * 6  # the local model, every trial after the design


def test_a_wait_ends_at_the_study_optimize_timeout_fts(propagate, caplog) -> None:
    fed = _fts(1)
    sampler = fb.FedSampler(
        fed, client_id="a", seed=0, synchronous=True, sync_timeout=None, patience=3600.0,
        poll_interval=0.01, n_candidates=32, n_refinements=0,
    )  # fmt: skip
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(_objective, n_trials=2)  # the initial design: no wait
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        study.optimize(_objective, timeout=1.0)  # no server, no limit, no patience: only this
    assert time.monotonic() - started < BOUND
    (stop,) = _warnings(caplog, "stopped waiting for the broadcast of round 0")
    assert "timeout of study.optimize" in stop


def test_a_fed_pne_participant_without_server_honours_the_optimize_timeout(
    propagate, caplog
) -> None:
    fed = _pne(1)
    sampler = fb.FedSampler(
        fed, client_id="a", seed=0, phase_timeout=None, patience=3600.0, poll_interval=0.01
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    objective = lambda t: -abs(t.suggest_float("x", 0, 1) - 0.3)  # noqa: E731
    study.optimize(objective, n_trials=fed.channel.initial_phase.budget)  # its pulls: no wait
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        study.optimize(objective, timeout=1.0)
    assert time.monotonic() - started < BOUND  # not for ever
    modes = [t.system_attrs["fedbo:mode"] for t in study.trials]
    assert modes[-1] == "timeout" and "pull" in modes  # pulls, then the local policy
    stops = _warnings(caplog, "stopped waiting for the next phase")
    assert len(stops) == 1 and "timeout of study.optimize" in stops[0]
    assert "current best node" in stops[0]


def test_a_fed_pne_participant_without_server_falls_back_after_patience(propagate, caplog) -> None:
    fed = _pne(1)
    sampler = fb.FedSampler(
        fed, client_id="a", seed=0, phase_timeout=3600.0, patience=0.2, poll_interval=0.01
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    budget = fed.channel.initial_phase.budget
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        study.optimize(lambda t: -abs(t.suggest_float("x", 0, 1) - 0.3), n_trials=budget + 5)
    assert time.monotonic() - started < BOUND  # not 5 x 3600 s, nor FedPNEPhaseTimeout
    modes = [t.system_attrs["fedbo:mode"] for t in study.trials]
    assert modes == ["pull"] * budget + ["timeout"] * 5
    stops = _warnings(caplog, "stopped waiting for the next phase")
    assert len(stops) == 1 and "no server has been seen" in stops[0]


def test_the_optimize_deadline_is_read_from_the_running_optimize() -> None:
    seen: list[float | None] = []

    def objective(trial: optuna.Trial) -> float:
        seen.append(optimize_deadline())
        return trial.suggest_float("x", 0, 1)

    study = optuna.create_study()
    before = time.monotonic()
    study.optimize(objective, n_trials=2, timeout=30.0)
    study.optimize(objective, n_trials=2, timeout=30.0, n_jobs=2)
    study.optimize(objective, n_trials=1)
    assert all(d is not None and before < d <= time.monotonic() + 30.0 for d in seen[:4])
    assert seen[4] is None and optimize_deadline() is None  # no timeout; outside optimize


def test_wait_limits_are_checked_before_joining() -> None:
    fed = _fts(1)
    with pytest.raises(ValueError, match="sync_timeout must be None or >= 0"):
        fb.FedSampler(fed, client_id="a", synchronous=True, sync_timeout=-1.0)
    with pytest.raises(ValueError, match="patience must be None or >= 0"):
        fb.FedSampler(fed, client_id="a", patience=-1.0)
    assert fed.participants() == []  # nothing joined


# ---------------------------------------------------------------------------- serve
def test_serve_says_whom_it_waits_for_and_ends_when_idle(propagate, caplog) -> None:
    fed = _fts(3)
    fed.enroll("b")  # declared (enrolled), never started
    fb.FedSampler(fed, client_id="a", seed=0).finish()
    server = FederationServer(fed)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="optuna_fedbo"):
        server.serve(poll_interval=0.02, idle_timeout=0.5, log_interval=0.1)
    assert time.monotonic() - started < BOUND  # not for ever
    waiting = _warnings(caplog, "no participant runs: serving ends in")
    assert waiting and "joined but never started: b" in waiting[0]
    assert "finished: a" in waiting[0] and "1 never joined" in waiting[0]
    (end,) = _warnings(caplog, "ends: no participant has run for")
    assert "idle_timeout 0.5 s" in end
    assert "never started: 'b', 1 never joined (of 3 declared)" in server.summary().format()
    assert finished_record(fed) is None  # not everyone finished: not marked finished


def test_serve_logs_whom_it_waits_for_while_participants_run(propagate, caplog) -> None:
    fed = _fts(2)
    fb.FedSampler(fed, client_id="a", seed=0)  # runs (its lease is live)
    server = FederationServer(fed)
    with caplog.at_level(logging.INFO, logger="optuna_fedbo"):
        server.serve(poll_interval=0.02, timeout=0.5, log_interval=0.1)
    lines = [r.getMessage() for r in caplog.records if "active: a" in r.getMessage()]
    assert lines and "round 0 open with uploads from 0" in lines[0]
    assert "1 never joined" in lines[0]


def test_idle_timeout_is_checked() -> None:
    server = FederationServer(_fts(1))
    with pytest.raises(ValueError, match="idle_timeout must be None or >= 0"):
        server.serve(idle_timeout=-1.0)


def test_a_finished_federation_says_so_to_a_new_server_and_its_sites_run_locally(
    propagate, caplog
) -> None:
    fed = _fts(1)
    fb.FedSampler(fed, client_id="a", seed=0).finish()
    server = FederationServer(fed)
    server.serve(poll_interval=0.02)  # every participant finished: ends, marked finished
    server.announce(stopped="serve ended")  # what the CLI writes after serve: keeps the mark
    assert finished_record(fed) is not None
    epochs = [fed.store.has_server_epoch(e) for e in (1, 2)]
    with pytest.raises(FederationFinishedError, match="finished .*create the federation under"):
        FederationServer(fed)
    assert [fed.store.has_server_epoch(e) for e in (1, 2)] == epochs  # nothing written
    # A site rerun on it: one warning, then local at once (no wait, no upload).
    sampler = fb.FedSampler(
        fed, client_id="a", seed=0, synchronous=True, sync_timeout=60.0, patience=3600.0,
        poll_interval=0.01, n_candidates=32, n_refinements=0,
    )  # fmt: skip
    study = optuna.create_study(direction="maximize", sampler=sampler)
    round_index = fed.open_round()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        study.optimize(_objective, n_trials=6)
    assert time.monotonic() - started < BOUND
    (warning,) = _warnings(caplog, "finished at")
    assert "This site runs locally" in warning and "start over" in warning
    assert fed.store.upload_keys(round_index) == []
    assert [t.system_attrs["fedbo:mode"] for t in study.trials][2:] == ["fallback"] * 4
    assert not _warnings(caplog, "no broadcast of federation")  # it was told why already


def test_cli_serve_on_a_finished_federation_exits_2_with_how_to_start_over(
    tmp_path, capsys
) -> None:
    db = tmp_path / "fed.db"
    url = f"sqlite:///{db}"
    fed = _fts(1, storage=url)
    sampler = fb.FedSampler(fed, client_id="a", seed=0, lease_ttl=2.0)
    sampler.finish()
    args = ["serve", "--storage", url, "--name", fed.name, "--poll-interval", "0.02"]
    assert cli_main(args) == 0
    capsys.readouterr()
    started = time.monotonic()
    assert cli_main(args) == 2
    assert time.monotonic() - started < BOUND
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and f"federation {fed.name!r} finished at" in error
    # It names the file to delete and this key folder's pin of the federation.
    assert os.path.realpath(db) in error and "new name" in error and "joined" in error


def test_cli_serve_idle_timeout(tmp_path, capsys, caplog) -> None:
    url = f"sqlite:///{tmp_path / 'fed.db'}"
    fed = _fts(2, storage=url)
    fb.FedSampler(fed, client_id="a", seed=0, lease_ttl=2.0).finish()
    args = ["serve", "--storage", url, "--name", fed.name, "--poll-interval", "0.02"]
    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        assert cli_main([*args, "--idle-timeout", "0.3"]) == 0
    assert time.monotonic() - started < BOUND
    assert any("ends: no participant has run for" in r.getMessage() for r in caplog.records)
    assert "never started: 1 never joined (of 2 declared)" in capsys.readouterr().out
    assert cli_main([*args, "--idle-timeout", "auto"]) == 2
    assert "--idle-timeout must be a number of seconds or 'none'" in capsys.readouterr().err


class _Problems:
    """A participant stand-in whose federation reports the given lifecycle problems."""

    client_id = "a"

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.federation = self
        self.warned: set[str] = set()

    def lifecycle(self) -> _Problems:
        return self

    def _first(self, key: str) -> bool:
        first = key not in self.warned
        self.warned.add(key)
        return first


def test_a_problem_given_up_on_is_not_waited_for_again_until_it_goes_away() -> None:
    site = _Problems()
    site.problems = [Problem("no-server", "no server has been seen")]
    patient = Waits(site, limit=("sync_timeout", None), patience=3600.0, fallback="local")
    assert not patient.begin("round 1").over()  # a new problem: patience
    impatient = Waits(site, limit=("sync_timeout", None), patience=0.0, fallback="local")
    wait = impatient.begin("round 1")
    assert wait.over() and wait.reason == ("no-server", "no server has been seen")
    impatient._patience = 3600.0  # later waits: at once while the problem lasts
    assert impatient.begin("round 2").over()
    site.problems = []  # the server came
    assert not impatient.begin("round 3").over()
    site.problems = [Problem("no-server", "no server has been seen")]
    assert not impatient.begin("round 4").over()  # it went away: patience again
    site.problems = [Problem("server-stopped", "the server stopped")]
    assert impatient.begin("round 5").over()  # nothing is published until it runs: at once
    # Too few participants running: never early (one may be restarting) ...
    site.problems = [Problem("roster", "1 of 3 run")]
    assert not Waits(site, limit=("l", None), patience=0.0, fallback="local").begin("r").over()
    # ... but once a wait's limit passed while it lasted, later waits end at once.
    short = Waits(site, limit=("sync_timeout", 0.0), patience=3600.0, fallback="local")
    first = short.begin("round 6")
    assert first.over() and first.reason == (
        "limit",
        "its limit (sync_timeout=0 s) has passed and 1 of 3 run",
    )
    short._limit = ("sync_timeout", None)
    assert short.begin("round 7").over()
