"""Direct tests of ``_fresh.Freshness``: a process never goes back to an older signed pointer or
heartbeat, and starts from the newest verified published broadcast. Each was written to kill
mutants of ``benchmarks/mutation_trust.py``."""

from __future__ import annotations

import itertools
import logging

import numpy as np
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation._fresh import Freshness
from optuna_fedbo.federation.store import LATEST_KEY

M = 4
SPACE = {"x": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _published(rounds: int) -> tuple[Federation, FederationServer]:
    fed = Federation.create(
        f"fresh-{next(_names)}",
        search_space=SPACE,
        n_clients=2,
        protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted"),
    )
    for i in range(2):
        fed.join(f"c{i}")
    server = FederationServer(fed)
    for _ in range(rounds):
        for i in range(2):
            fed.upload(f"c{i}", np.linspace(-1, 1, M), n_observations=3, iteration=0)
        assert server.step() is not None
    return fed, server


def _stored_pointer(fed: Federation) -> str:
    return fed.storage.get_study_system_attrs(fed.storage.get_study_id_from_name(fed.name))[
        LATEST_KEY
    ]


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_fresh_process_starts_from_the_newest_published_broadcast() -> None:
    fed, _ = _published(2)
    signed = fed.trust.verify("latest", _stored_pointer(fed))
    fresh = Freshness(fed.store)
    start = fresh.latest(None)  # no stored pointer: the newest published one, scanned
    assert (start["round"], start["trial_id"], start["digest"]) == (
        1,
        signed["trial_id"],
        signed["digest"],
    )
    assert fresh.latest(None) is start
    # The stored pointer (the same round) then replaces the scanned one.
    assert fresh.latest(_stored_pointer(fed)) == {**signed, "round": 1}
    assert Freshness(_published(0)[0].store).latest(None) is None


def test_a_staged_but_unpublished_or_forged_newest_broadcast_is_not_the_start(caplog) -> None:
    fed, _ = _published(1)
    record = fed.store.sign_broadcast(1, "{}", epoch=1)
    fed.store.stage_broadcast(1, record)  # staged: not complete
    assert Freshness(fed.store).latest(None)["round"] == 0
    forged = fed.store.stage_broadcast(2, record)  # complete, but its round is not the record's
    fed.storage.set_trial_state_values(forged, TrialState.COMPLETE, [0.0])
    with caplog.at_level(logging.WARNING):
        assert Freshness(fed.store).latest(None)["round"] == 0


def test_a_signed_pointer_that_is_malformed_is_ignored_with_a_warning(caplog) -> None:
    fed, _ = _published(1)
    fresh = Freshness(fed.store)
    good = fresh.latest(_stored_pointer(fed))
    trial_id = good["trial_id"]
    for body in (
        {"round": 3, "trial_id": trial_id},  # no digest
        {"round": 3, "trial_id": trial_id, "digest": 5},
        {"round": "three", "trial_id": trial_id, "digest": "d" * 64},
        {"round": 3, "digest": "d" * 64},
    ):
        with caplog.at_level(logging.WARNING):
            assert fresh.latest(fed.trust.sign("latest", body)) == good
    assert sum("Ignoring the 'latest' pointer" in m for m in _warnings(caplog)) == 4
    newer = fed.trust.sign("latest", {"round": 3, "trial_id": trial_id, "digest": "d" * 64})
    assert fresh.latest(newer) == {"round": 3, "trial_id": trial_id, "digest": "d" * 64}
    assert fresh.latest(newer)["round"] == 3  # the same bytes again


def test_a_pointer_of_the_same_round_is_taken_an_older_one_refused(caplog) -> None:
    fed, _ = _published(2)
    fresh = Freshness(fed.store)
    trial_id = fresh.latest(None)["trial_id"]
    same = {"round": 1, "trial_id": trial_id, "digest": "e" * 64}  # the server re-signed it
    assert fresh.latest(fed.trust.sign("latest", same)) == same
    older = {"round": 0, "trial_id": trial_id, "digest": "f" * 64}
    with caplog.at_level(logging.WARNING):
        assert fresh.latest(fed.trust.sign("latest", older)) == same
    assert any("older 'latest' pointer" in m and "round 0" in m for m in _warnings(caplog))


def test_a_heartbeat_older_than_one_seen_or_the_published_rounds_is_refused(caplog) -> None:
    fed, _ = _published(2)  # round 1 published, round 2 open
    epoch = fed.store.server_status()["epoch"]
    fresh = Freshness(fed.store)
    beat = {"epoch": epoch, "heartbeat": 10.0, "open_round": 2}
    assert fresh.heartbeat(beat) is beat
    with caplog.at_level(logging.WARNING):
        assert fresh.heartbeat({**beat, "heartbeat": 9.0}) == beat  # older
        assert fresh.heartbeat({**beat, "epoch": epoch - 1, "heartbeat": 11.0}) == beat
    assert fresh.heartbeat({**beat, "heartbeat": 10.0})["heartbeat"] == 10.0  # not older
    newer = {**beat, "heartbeat": 12.0}
    assert fresh.heartbeat(newer) is newer
    other = Freshness(fed.store)
    with caplog.at_level(logging.WARNING):
        assert other.heartbeat({**beat, "open_round": 0}) is None  # before the published round
        assert other.heartbeat({"epoch": epoch, "heartbeat": 1.0}) is None  # no open round
    assert other.heartbeat({"epoch": epoch, "heartbeat": 1.0, "open_round": 1})["epoch"] == epoch
    assert sum("older server heartbeat" in m for m in _warnings(caplog)) == 4
    first = Freshness(_published(0)[0].store)  # nothing published: any round goes
    assert first.heartbeat({"epoch": 1, "heartbeat": 1.0, "open_round": 0})["open_round"] == 0


def test_a_stopped_heartbeat_only_of_a_superseded_server_is_refused(caplog) -> None:
    fed, server = _published(0)
    epoch = server.epoch
    stopped = {"epoch": epoch, "heartbeat": 5.0, "open_round": 0, "stopped": "ended"}
    assert Freshness(fed.store).heartbeat(stopped) is stopped
    FederationServer(Federation.load(fed.name, fed.storage))  # a newer server claims
    with caplog.at_level(logging.WARNING):
        assert Freshness(fed.store).heartbeat(stopped) is None
        running = {**stopped, "stopped": None}
        assert Freshness(fed.store).heartbeat(running) is running
    assert any("which a newer server replaced" in m for m in _warnings(caplog))


def test_a_heartbeat_is_kept_with_its_epoch_and_time_as_numbers() -> None:
    fed, _ = _published(0)
    fresh = Freshness(fed.store)
    fresh.heartbeat({"epoch": "2", "heartbeat": "3.5", "open_round": 0})
    with_strings = {"epoch": 2, "heartbeat": 3.0, "open_round": 0}
    kept = {"epoch": 2, "heartbeat": 3.5, "open_round": 0}
    assert fresh.heartbeat(with_strings) == kept  # older than (2, 3.5): compared as numbers


def test_a_signed_heartbeat_without_epoch_or_time_counts_as_the_oldest() -> None:
    fed, _ = _published(0)
    fresh = Freshness(fed.store)
    bare = {"open_round": 0}  # as a server of an older version signed it
    assert fresh.heartbeat(bare) is bare
    seen = {"epoch": 1, "heartbeat": 0.5, "open_round": 0}
    assert fresh.heartbeat(seen) is seen
    assert fresh.heartbeat({"heartbeat": 9.0, "open_round": 0}) == seen  # epoch 0 < 1
    assert fresh.heartbeat({"epoch": 1, "open_round": 0}) == seen  # time 0.0 < 0.5


def test_a_heartbeat_as_new_as_the_newest_seen_is_taken() -> None:
    fed, _ = _published(0)
    fresh = Freshness(fed.store)
    fresh.heartbeat({"epoch": 1, "heartbeat": 5.0, "open_round": 0})
    same_time = {"epoch": 1, "heartbeat": 5.0, "open_round": 0, "stopped": "ended"}
    assert fresh.heartbeat(same_time) is same_time


def test_an_empty_pointer_is_ignored_with_a_warning_a_missing_one_silently(caplog) -> None:
    fed, _ = _published(1)
    fresh = Freshness(fed.store)
    with caplog.at_level(logging.WARNING):
        assert fresh.latest("")["round"] == 0  # an empty record: not a pointer
    assert sum("Ignoring the 'latest' pointer" in m for m in _warnings(caplog)) == 1
    caplog.clear()
    seen = fresh.latest(_stored_pointer(fed))
    with caplog.at_level(logging.WARNING):
        assert fresh.latest(None) == seen  # deleted from the storage: the newest seen stands
    assert _warnings(caplog) == []
