"""A secure-aggregation participant (``federation/secagg/participant.py``), in process: the
counter of its sealed messages strictly grows even when the clock stands still or goes back, so
the server never takes one for a replay of another; it masks its input as offered (ring elements
of any unsigned type, or numbers encoded at the masking); it joins only attempts it is in, and
under distributed DP only after the newest one it masked into (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import json
import logging

import numpy as np
from optuna.distributions import FloatDistribution
import pytest
from test_secagg_dp import _federation as _dp_federation

import optuna_fedbo as fb
from optuna_fedbo.core.secagg.messages import Message
from optuna_fedbo.core.secagg.messages import ShareBundle
from optuna_fedbo.core.secagg.messages import SurvivorList
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.secagg import participant as participant_module
from optuna_fedbo.federation.secagg.participant import SecAggParticipant
from optuna_fedbo.federation.secagg.relay import message_key
from optuna_fedbo.federation.secagg.relay import record_key
from optuna_fedbo.federation.secagg.relay import round_setup
from optuna_fedbo.federation.secagg.spending import ReplayedAttemptError


def _federation(name: str) -> Federation:
    fed = Federation.create(
        name,
        search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=4,
        protocol=FTSConfig(n_features=4, n_init=2),
        secure_aggregation=fb.SecureAggregation(),
    )
    for i in range(4):
        fed.join(f"c{i}")
    return fed


def test_the_message_counter_grows_when_the_clock_stands_still_or_goes_back(monkeypatch) -> None:
    fed = _federation("participant-kills-counter")
    participant = SecAggParticipant(fed, "c0")
    written: list[str] = []
    monkeypatch.setattr(participant._relay, "write", lambda r, k, sealed: written.append(sealed))
    clock = iter([5_000, 5_000, 4_000])
    monkeypatch.setattr(participant_module.time, "time_ns", lambda: next(clock))
    setup = round_setup(fed, 1, 0, ("c0", "c1", "c2", "c3"))
    message = SurvivorList(**Message.base_of(setup), survivors=("c0", "c1", "c2"))
    for _ in range(3):
        participant._send(1, 0, "consistency", message)
    counters = [json.loads(sealed.partition("\n")[0])["counter"] for sealed in written]
    assert counters[0] == 5_000
    assert all(earlier < later for earlier, later in zip(counters, counters[1:])), counters


def test_a_sealed_message_may_reach_the_upload_bound_but_not_pass_it(monkeypatch) -> None:
    fed = _federation("participant-kills-bound")
    participant = SecAggParticipant(fed, "c0")
    written: list[str] = []
    monkeypatch.setattr(participant._relay, "write", lambda r, k, sealed: written.append(sealed))
    setup = round_setup(fed, 1, 0, ("c0", "c1", "c2", "c3"))
    message = SurvivorList(**Message.base_of(setup), survivors=("c0", "c1", "c2"))
    participant._send(1, 0, "consistency", message)
    size = len(written[0])  # the same for every send (same counter digits, same plaintext)
    monkeypatch.setattr(participant_module, "MAX_UPLOAD_CHARS", size)
    participant._send(1, 0, "consistency", message)
    assert len(written) == 2 and len(written[1]) == size
    monkeypatch.setattr(participant_module, "MAX_UPLOAD_CHARS", size - 1)
    with pytest.raises(ValueError, match=f"over the bound of {size - 1:,}"):
        participant._send(1, 0, "consistency", message)
    assert len(written) == 2


def test_a_round_closed_under_a_participant_leaves_it_idle_and_polling(monkeypatch) -> None:
    fed = _federation("participant-kills-closed")
    participant = SecAggParticipant(fed, "c0")

    def closed() -> None:
        raise KeyError("the round's uploads study is gone")

    monkeypatch.setattr(participant, "_advance", closed)
    assert participant.poll() is False
    assert participant.busy is False
    assert participant.poll() is False


def _at_round_one(monkeypatch, participant: SecAggParticipant, entries: dict) -> list[int]:
    """Round 1 open with ``entries``; returns the attempts ``_join`` is asked to start."""
    joined: list[int] = []
    monkeypatch.setattr(participant_module, "open_round_and_opening", lambda store: (1, ""))
    monkeypatch.setattr(participant._relay, "entries", lambda round_index: dict(entries))
    monkeypatch.setattr(
        participant, "_join", lambda round_index, attempt, found: joined.append(attempt) and False
    )
    return joined


def test_only_a_setup_record_starts_an_attempt(monkeypatch) -> None:
    # Anyone can write the storage: a message key of a later attempt is not a new attempt.
    participant = SecAggParticipant(_federation("participant-kills-setup"), "c0")
    entries = {record_key(0, "setup"): "signed", message_key(5, "keys", "c1"): "forged"}
    joined = _at_round_one(monkeypatch, participant, {**entries, "other": "entry"})
    participant._advance()
    assert joined == [0]


@pytest.mark.parametrize("revealed", [False, True])
def test_an_input_goes_to_the_next_attempt_of_its_round_unless_its_sum_was_unmasked(
    monkeypatch, revealed: bool
) -> None:
    participant = SecAggParticipant(_federation("participant-kills-restart"), "c0")
    participant.offer(np.zeros(3))
    participant._fresh, participant._revealed = False, revealed  # masked in attempt 0
    participant._attempt = (1, 0)
    joined = _at_round_one(monkeypatch, participant, {record_key(1, "setup"): "signed"})
    participant._advance()
    assert joined == [1]
    assert participant._fresh is not revealed


class _Client:
    """Stands for the protocol state at the masked-input step: records what it is asked to mask."""

    step = "mask_input"

    def __init__(self, setup) -> None:
        self.setup = setup
        self.masked: list[np.ndarray] = []

    def mask_input(self, bundle: ShareBundle, encoded: np.ndarray) -> SurvivorList:
        self.masked.append(encoded)
        self.step = "sign_survivors"
        return SurvivorList(**Message.base_of(self.setup), survivors=("c0",))


def _at_masked_step(monkeypatch, name: str, bundle: str | None):
    fed = _federation(name)
    participant = SecAggParticipant(fed, "c0")
    setup = round_setup(fed, 1, 0, ("c0", "c1", "c2", "c3"))
    client = _Client(setup)
    participant._client, participant._attempt = client, (1, 0)  # type: ignore[assignment]
    entries = {record_key(0, "setup"): "signed", record_key(0, "bundles"): "index"}
    _at_round_one(monkeypatch, participant, entries)
    monkeypatch.setattr(participant, "_bundle", lambda round_index, attempt, index: bundle)
    message = ShareBundle(**Message.base_of(setup), recipient="c0", sealed={}).to_dict()
    monkeypatch.setattr(participant_module, "verify_record", lambda *a: {"message": message})
    monkeypatch.setattr(participant, "_send", lambda *a: None)
    return participant, client, setup


def test_a_participant_left_out_of_the_bundles_waits_for_the_next_attempt(
    monkeypatch, caplog, propagate
) -> None:
    participant, client, _ = _at_masked_step(monkeypatch, "participant-kills-left-out", None)
    participant._fresh = True
    with caplog.at_level(logging.INFO):
        participant._advance()
    assert participant._client is None and client.masked == []
    assert participant._fresh and participant.busy  # its input goes to the next attempt
    assert "went on without its shares (too slow)" in caplog.text


def test_an_encoded_input_is_masked_as_it_was_offered(monkeypatch) -> None:
    participant, client, setup = _at_masked_step(monkeypatch, "participant-kills-encoded", "b")
    ring = setup.ring
    elements = np.array([int(ring.mask), 5] + [0] * (ring.dimension - 2), dtype=np.uint64)
    participant.offer(elements, encoded=True)
    participant._advance()
    assert len(client.masked) == 1
    assert client.masked[0].dtype == np.uint64
    assert client.masked[0].tolist() == elements.tolist()
    assert participant.masked_rounds == [(1, 0)] and not participant._fresh


class _Counts:
    """Stands for the participant's own ledger under distributed DP: every masking counted."""

    def record(self, round_index: int, attempt: int) -> bool:
        return True


@pytest.mark.parametrize("redrawn", [False, True], ids=["offered", "redrawn"])
def test_ring_elements_of_any_unsigned_type_are_masked_as_offered(monkeypatch, redrawn) -> None:
    """Ring elements offered (or redrawn with fresh noise for a second masking) as ``uint32``
    are masked as the same elements (a narrower type read as 64-bit integers would not be)."""
    name = f"participant-kills-uint32-{redrawn}"
    participant, client, setup = _at_masked_step(monkeypatch, name, "b")
    rng = np.random.default_rng(1)
    first, second = (
        rng.integers(0, 2**32, setup.ring.dimension, dtype=np.uint64) & setup.ring.mask
        for _ in range(2)
    )
    if redrawn:
        participant.own_ledger = _Counts()  # type: ignore[assignment]
        participant.offer(first, encoded=True, redraw=lambda: second.astype(np.uint32))
        participant._masked = True  # masked before: noised afresh now
    else:
        participant.offer(first.astype(np.uint32), encoded=True)
    participant._advance()
    assert len(client.masked) == 1
    assert client.masked[0].tolist() == (second if redrawn else first).tolist()


def test_an_input_offered_as_numbers_is_encoded_into_the_ring_when_masked(monkeypatch) -> None:
    participant, client, setup = _at_masked_step(monkeypatch, "participant-kills-plain", "b")
    ring = setup.ring
    values = np.random.default_rng(0).uniform(-ring.bound / 2, ring.bound / 2, ring.dimension)
    participant.offer(values)  # not encoded: clipped, rounded and reduced at the masking
    participant._advance()
    assert len(client.masked) == 1
    assert client.masked[0].tolist() == encode(values, ring).tolist()
    assert participant.masked_rounds == [(1, 0)]


def test_a_participant_left_out_of_an_attempts_setup_waits_for_the_next(
    monkeypatch, caplog, propagate
) -> None:
    fed = _federation("participant-kills-not-listed")
    participant = SecAggParticipant(fed, "c0")
    participant.offer(np.zeros(3))
    setup = round_setup(fed, 1, 0, ("c1", "c2", "c3"))  # c0 enrolled after it started
    monkeypatch.setattr(participant_module, "verify_record", lambda *a: {})
    monkeypatch.setattr(participant_module, "checked_setup", lambda federation, body: setup)
    monkeypatch.setattr(participant, "_send", lambda *a: pytest.fail("it advertised keys"))
    with caplog.at_level(logging.INFO):
        assert participant._join(1, 0, {record_key(0, "setup"): "signed"}) is False
    assert participant._client is None and participant._fresh  # its input goes to the next
    assert (
        "c0: not among the participants of round 1 attempt 0 (it enrolled after the attempt "
        "started); it takes part in the next."
    ) in caplog.messages


@pytest.mark.parametrize("attempt", [0, 1])
def test_under_distributed_dp_it_joins_only_after_the_newest_attempt_it_masked_into(
    monkeypatch, attempt: int
) -> None:
    """Its claim of round 1 attempt 0 is gone (a rolled-back storage): its own count still
    refuses that attempt before any key is advertised, and lets the next one through."""
    fed = _dp_federation(name=f"participant-kills-replay-{attempt}")
    participant = SecAggParticipant(fed, "c0")
    own = participant.own_ledger
    assert own is not None and own.record(1, 0)
    participant.offer(np.zeros(3, dtype=np.uint64), encoded=True)
    setup = round_setup(fed, 1, attempt, ("c0", "c1", "c2", "c3"))
    monkeypatch.setattr(participant_module, "verify_record", lambda *a: {})
    monkeypatch.setattr(participant_module, "checked_setup", lambda federation, body: setup)
    monkeypatch.setattr(participant_module, "claim", lambda *a: True)  # no claim is left
    sent: list[str] = []
    monkeypatch.setattr(participant, "_send", lambda r, a, step, message: sent.append(step))
    entries = {record_key(attempt, "setup"): "signed"}
    if attempt == 0:
        with pytest.raises(ReplayedAttemptError, match="is not after round 1 attempt 0"):
            participant._join(1, attempt, entries)
        assert participant._client is None and sent == []
    else:
        assert participant._join(1, attempt, entries) is True
        assert participant._client is not None and sent == ["keys"]
    assert own.releases() == 1  # joining counts nothing: the masking does


@pytest.mark.parametrize(
    ("states", "busy"),
    [((), False), ((True, False), True), ((False, True), True), ((False, False), False)],
)
def test_the_driver_is_busy_while_any_participant_is(monkeypatch, states, busy) -> None:
    fed = _federation(f"participant-kills-driver-{len(states)}-{busy}-{states[:1]}")
    driver = participant_module.Driver(background=False)
    polled: list[str] = []
    for i, state in enumerate(states):
        participant = driver.participant(fed, f"c{i}")
        monkeypatch.setattr(participant, "poll", lambda c=f"c{i}", s=state: polled.append(c) or s)
    assert driver.poll() is busy
    assert polled == [f"c{i}" for i in range(len(states))]  # every one, even after a busy one


def test_nothing_goes_into_an_attempt_the_server_signed_as_failed() -> None:
    """c2 and c3 stop after sharing keys, so the attempt fails at the masked step; c2 polls
    again before the next attempt's setup is out: it sees the signed failure and does not mask
    into the failed attempt (its input goes to the next one)."""
    from test_secagg_federation import _federation as secure_federation
    from test_secagg_federation import _Round

    from optuna_fedbo.federation import FederationServer
    from optuna_fedbo.federation.secagg.relay import parse_key
    from optuna_fedbo.federation.secagg.relay import Relay

    fed = secure_federation()
    driven = _Round(fed, FederationServer(fed))
    driven.upload([f"c{i}" for i in range(4)])
    report = driven.run(drop_after={"c2": 2, "c3": 2})
    assert report is not None and report.reason == "secagg-failed"
    late = driven.driver._participants["c2"]
    assert late._client is not None and late._client.step == "mask_input"
    late.poll()
    masked = {
        parsed[2]
        for parsed in map(parse_key, Relay(fed.store).entries(0, inputs=True))
        if parsed is not None and parsed[:2] == (0, "msg:masked")
    }
    assert masked == {"c0", "c1"}
    assert late._client is None and late.busy  # its input waits for the next attempt
