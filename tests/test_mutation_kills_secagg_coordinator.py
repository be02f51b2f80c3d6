"""When the server closes a step of secure aggregation (``federation/secagg/server.py``), in
process and under an injected clock: the key step closes ``round_timeout`` after the first key
with at least ``max(t, min_uploads)`` keys, never without one; every later step
``step_timeout`` after it began; ``force`` closes at once; a message read again is not refused as
a replay; the attempt's outcome says what happened (written to kill mutants of
``benchmarks/mutation_trust.py``); and a server polling while it waits for masked inputs reads
each of them from the storage once."""

from __future__ import annotations

import logging

import optuna
import pytest
import test_secagg_federation as base
from test_secagg_federation import _coordinator
from test_secagg_federation import _federation
from test_secagg_federation import _Round

import optuna_fedbo as fb
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.secagg import server as server_module
from optuna_fedbo.federation.secagg.relay import message_key
from optuna_fedbo.federation.secagg.relay import record_key
from optuna_fedbo.federation.secagg.relay import Relay

CLIENTS = [f"c{i}" for i in range(4)]  # N = 4, t = 3


@pytest.fixture(autouse=True)
def _propagate_optuna_logs(propagate):
    """caplog sees optuna-fedbo's records at every level (the ``propagate`` fixture)."""
    yield


class _Clock:
    """The server module's ``time`` (it reads only ``time.monotonic``), set by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    fixed = _Clock()
    monkeypatch.setattr(server_module, "time", fixed)
    return fixed


def _setup(step_timeout: float = 10.0, **server_options):
    fed = _federation(step_timeout=step_timeout)
    server = FederationServer(fed, **server_options)
    driven = _Round(fed, server)
    driven.upload(CLIENTS)
    coordinator = _coordinator(server)
    assert coordinator.step(0) is None  # publishes attempt 0's setup
    return fed, driven, coordinator


def _poll(driven: _Round, clients) -> None:
    for client in clients:
        driven.driver._participants[client].poll()


def _records(fed: Federation) -> set[str]:
    return set(Relay(fed.store).entries(0))


def test_the_key_step_waits_for_max_t_min_uploads_keys_even_after_the_timeout(clock) -> None:
    fed, driven, coordinator = _setup(round_timeout=60.0, min_uploads=4)
    _poll(driven, CLIENTS[:3])
    assert coordinator.step(0) is None  # first keys at 1000
    clock.now = 1060.0  # the round timeout is over, but 3 keys < min_uploads = 4
    assert coordinator.step(0) is None and coordinator.step(0) is None
    attempt = coordinator.attempt
    assert attempt.server.step == "keys" and record_key(0, "keys") not in _records(fed)
    assert attempt.rejected == {}  # the same messages read three times: none is a replay


def test_the_key_step_closes_exactly_round_timeout_after_the_first_key(clock) -> None:
    fed, driven, coordinator = _setup(round_timeout=60.0, min_uploads=1)
    clock.now = 1005.0  # the timeout runs from the first key, not from the setup
    _poll(driven, CLIENTS[:3])
    assert coordinator.step(0) is None
    clock.now = 1064.999  # enough keys (t = 3), but not yet the timeout
    assert coordinator.step(0) is None and coordinator.attempt.server.step == "keys"
    clock.now = 1065.0
    assert coordinator.step(0) is None
    attempt = coordinator.attempt
    assert (attempt.server.step, attempt.reason) == ("shares", "timeout")
    assert attempt.rejected == {} and record_key(0, "keys") in _records(fed)


def test_a_later_step_closes_step_timeout_after_it_began_then_fails_below_t(clock) -> None:
    fed, driven, coordinator = _setup(step_timeout=10.0, round_timeout=None)
    _poll(driven, CLIENTS)
    assert coordinator.step(0) is None  # every key at 1000: the key step closes complete
    assert (coordinator.attempt.server.step, coordinator.attempt.reason) == ("shares", "complete")
    _poll(driven, CLIENTS[:3])
    clock.now = 1009.999
    assert coordinator.step(0) is None and coordinator.attempt.server.step == "shares"
    clock.now = 1010.0  # step_timeout after the shares step began: c3 counts as dropped
    assert coordinator.step(0) is None and coordinator.attempt.server.step == "masked"
    clock.now = 1019.999  # nobody sends a masked input
    assert coordinator.step(0) is None and coordinator.attempt.server.step == "masked"
    clock.now = 1020.0
    outcome = coordinator.step(0)
    assert outcome is not None and outcome.result is None
    assert (outcome.round, outcome.attempt, outcome.reason, outcome.rejected) == (
        0,
        0,
        "complete",
        (),
    )
    assert "failed at step 'masked'" in outcome.failed
    assert coordinator.attempt is None and record_key(0, "failed") in _records(fed)


def test_force_never_closes_a_key_step_without_keys_and_skips_a_refused_one(clock) -> None:
    fed, driven, coordinator = _setup(round_timeout=None)
    assert coordinator.step(0, force=True) is None  # no key yet: as a round without uploads
    assert coordinator.attempt.server.step == "keys"
    assert record_key(0, "keys") not in _records(fed)
    # c0's message is refused; the others' keys are read in the same pass and forced through.
    Relay(fed.store).write(0, message_key(0, "keys", "c0"), "not a sealed message")
    _poll(driven, CLIENTS[1:])
    assert coordinator.step(0, force=True) is None
    attempt = coordinator.attempt
    assert (attempt.server.step, attempt.reason) == ("shares", "forced")
    assert set(attempt.server.expected()) == {"c1", "c2", "c3"}
    outcome = coordinator.step(0, force=True)  # no shares at all: fewer than t, fails at once
    assert outcome is not None and outcome.result is None
    assert (outcome.round, outcome.attempt, outcome.reason) == (0, 0, "forced")
    assert [client for client, _ in outcome.rejected] == ["c0"]
    assert "failed at step 'shares'" in outcome.failed


def test_an_unmasked_attempt_reports_its_attempt_and_why_its_key_step_closed(clock) -> None:
    fed, driven, coordinator = _setup(round_timeout=None)
    outcome = None
    for _ in range(8):
        _poll(driven, CLIENTS)
        outcome = coordinator.step(0)
        if outcome is not None:
            break
    assert outcome is not None and outcome.result is not None and outcome.failed is None
    assert (outcome.round, outcome.attempt, outcome.reason, outcome.rejected) == (
        0,
        0,
        "complete",
        (),
    )
    assert outcome.result.survivors == tuple(CLIENTS)


def test_waiting_for_enrolled_participants_is_said_once(caplog) -> None:
    fed = Federation.create(
        "few-said-once",
        search_space=base.SPACE,
        n_clients=4,
        storage=optuna.storages.InMemoryStorage(),
        protocol=FTSConfig(n_features=base.M, n_init=2),
        secure_aggregation=fb.SecureAggregation(),
    )
    for client in ("c0", "c1"):
        fed.join(client)
    coordinator = _coordinator(FederationServer(fed))
    with caplog.at_level(logging.INFO, logger="optuna_fedbo"):
        assert coordinator.step(0) is None and coordinator.step(0, force=True) is None
    assert caplog.text.count("round 0 waits for 3 enrolled participants") == 1


def test_over_sqlite_the_server_reads_each_masked_input_once_however_often_it_polls(
    tmp_path, clock, monkeypatch
) -> None:
    fed = _federation(storage=f"sqlite:///{tmp_path / 'fed.db'}", step_timeout=10.0)
    server = FederationServer(fed, round_timeout=None)
    driven = _Round(fed, server)
    driven.upload(CLIENTS)
    coordinator = _coordinator(server)
    assert coordinator.step(0) is None  # the setup
    for _ in range(2):  # keys, then shares: every step closes complete
        _poll(driven, CLIENTS)
        assert coordinator.step(0) is None
    assert coordinator.attempt.server.step == "masked"
    backend = type(fed.store.storage._backend)  # Optuna's cache in front of the RDB storage
    read: list[str] = []
    original = backend._get_trials

    def counting(self, study_id, *args, **kwargs):
        trials = original(self, study_id, *args, **kwargs)
        read.extend(key for t in trials for key in t.system_attrs if ":msg:masked:" in key)
        return trials

    monkeypatch.setattr(backend, "_get_trials", counting)
    _poll(driven, CLIENTS[:2])
    for _ in range(3):  # three polls while c2 and c3 have not answered
        assert coordinator.step(0) is None and coordinator.attempt.server.step == "masked"
    _poll(driven, CLIENTS[2:])
    assert coordinator.step(0) is None and coordinator.attempt.server.step == "consistency"
    assert sorted(read) == sorted(message_key(0, "masked", c) for c in CLIENTS)
    assert coordinator.attempt.rejected == {}
