"""A synchronous FTS worker waits for the round its site uploaded to, read from the federation
(issue 29): a restarted worker (nothing in memory) waits for the broadcast of the round its site
uploaded to before the restart, a worker whose site's newest upload was sent by another worker
waits for that round (not the older one it sent itself), and none waits for a round whose
broadcast is published already."""

from __future__ import annotations

import itertools

import optuna
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo import FedSampler
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig

optuna.logging.set_verbosity(optuna.logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore:Without differential privacy, min_contributors=1")
SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
N_INIT = 3
_names = itertools.count()


def _objective(trial: optuna.Trial) -> float:
    return -((trial.suggest_float("x", 0, 1) - 0.3) ** 2) - trial.suggest_float("y", 0, 1)


def _setup() -> tuple[Federation, FederationServer, optuna.Study]:
    fed = Federation.create(
        f"sync-{next(_names)}",
        search_space=SPACE,
        n_clients=2,
        protocol=FTSConfig(n_features=20, n_init=N_INIT, min_contributors=1),
        seed=5,
    )
    return fed, FederationServer(fed), optuna.create_study(direction="maximize")


def _worker(fed: Federation, study: optuna.Study, monkeypatch, name: str) -> FedSampler:
    """A worker of site-0 in a process of its own (its own lease), synchronous."""
    monkeypatch.setattr("optuna_fedbo.federation.lease_record._SECRET", name.encode())
    sampler = FedSampler(
        fed, client_id="site-0", seed=0, synchronous=True, sync_timeout=5.0, n_candidates=16
    )
    study.sampler = sampler
    return sampler


def _publishing_waits(fed: Federation, server: FederationServer, monkeypatch) -> list[int]:
    """Record each round a worker waits for; the server publishes it during the wait."""
    targets: list[int] = []
    wait = fed.channel.wait_for_round

    def waiting(round_index, *args, **kwargs):  # noqa: ANN001, ANN202
        targets.append(round_index)
        if fed.open_round() <= round_index:
            server.step(force=True)
        return wait(round_index, *args, **kwargs)

    monkeypatch.setattr(fed.channel, "wait_for_round", waiting)
    return targets


def _initial_design(study: optuna.Study) -> None:
    """The initial design, enqueued (fixed points: the test needs its uploads, not its LHS)."""
    for k in range(N_INIT):
        study.enqueue_trial({"x": (k + 0.5) / N_INIT, "y": 1.0 - (k + 0.5) / N_INIT})
    study.optimize(_objective, n_trials=N_INIT)


def _used(study: optuna.Study) -> int | None:
    return study.trials[-1].system_attrs.get("fedbo:broadcast_round")


def test_a_restarted_worker_waits_for_the_round_its_site_uploaded_to(monkeypatch) -> None:
    fed, server, study = _setup()
    _worker(fed, study, monkeypatch, "first")
    _initial_design(study)  # uploaded to round 0
    assert fed.open_round() == 0 and fed.has_sent("site-0", 0)
    # The worker is killed; its restart remembers nothing but finds the site's upload.
    _worker(fed, study, monkeypatch, "restarted")
    targets = _publishing_waits(fed, server, monkeypatch)
    study.optimize(_objective, n_trials=1)
    assert targets == [0]  # it waited for round 0 ...
    assert _used(study) == 0  # ... and its trial used that broadcast


def test_a_worker_waits_for_its_sites_newest_upload_not_its_own_older_one(monkeypatch) -> None:
    fed, server, study = _setup()
    first = _worker(fed, study, monkeypatch, "first")
    _initial_design(study)
    server.step(force=True)  # round 0 published; round 1 open
    assert first.last_upload_round == 0
    # Another worker of the site uploads to round 1 ...
    _worker(fed, study, monkeypatch, "second")
    study.optimize(_objective, n_trials=1)
    assert fed.open_round() == 1 and fed.has_sent("site-0", 1)
    # ... so the first one waits for round 1, not for its own (published) round 0.
    study.sampler = first
    targets = _publishing_waits(fed, server, monkeypatch)
    study.optimize(_objective, n_trials=1)
    assert targets == [1] and _used(study) == 1


def test_no_worker_waits_for_a_round_already_published(monkeypatch) -> None:
    fed, server, study = _setup()
    _worker(fed, study, monkeypatch, "first")
    _initial_design(study)
    server.step(force=True)  # the site's upload is in round 0, published
    _worker(fed, study, monkeypatch, "restarted")
    targets = _publishing_waits(fed, server, monkeypatch)
    study.optimize(_objective, n_trials=1)
    assert targets == [] and _used(study) == 0  # round 0's broadcast, used at once


def test_a_round_published_just_before_the_wait_ends_is_used(monkeypatch) -> None:
    """The server publishes its last round and at once says it stopped: a worker that learns of
    the stop after the round was published still uses that round (a race seen under load)."""
    fed, server, study = _setup()
    _worker(fed, study, monkeypatch, "first")
    _initial_design(study)
    assert fed.open_round() == 0 and fed.channel.latest_broadcast() is None

    def stop() -> bool:
        server.step(force=True)  # published between the worker's look and the stop
        return True

    broadcast = fed.channel.wait_for_round(0, None, 0.01, stop)
    assert broadcast is not None and broadcast.round == 0
