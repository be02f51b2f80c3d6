"""Signed lease records (``federation/lease_record.py``): sequence numbers grow even when the clock
stands still or goes back, and a process's token is a short digest per id (written to kill
mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
import uuid

from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import lease_record
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.lease_record import next_seq
from optuna_fedbo.federation.lease_record import open_private
from optuna_fedbo.federation.lease_record import process_token
from optuna_fedbo.federation.lease_record import sign_lease
from optuna_fedbo.federation.lease_record import verify_lease
from optuna_fedbo.federation.trust import UntrustedRecordError


def test_sequence_numbers_grow_when_the_clock_stands_still_or_goes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lease_record, "_last_seq", lease_record._last_seq)  # restored after
    clock = [lease_record._last_seq + 1000]  # ahead of every number handed out before
    monkeypatch.setattr(lease_record, "time", SimpleNamespace(time_ns=lambda: clock[0]))
    first = next_seq()
    assert first == clock[0]
    assert next_seq() == first + 1  # the clock stood still
    clock[0] = 5
    assert next_seq() == first + 2  # the clock went back


def test_a_process_token_is_a_32_digit_digest_per_participant() -> None:
    a, b = process_token("a"), process_token("b")
    assert len(a) == len(b) == 32 and int(a, 16) >= 0
    assert a != b and process_token("a") == a


def _federation_and_key() -> tuple[Federation, ParticipantKey, bytes]:
    fed = Federation.create(
        f"lease-record-{uuid.uuid4().hex[:8]}",
        search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=2,
        protocol=FTSConfig(n_features=4, n_init=1),
        seed=1,
    )
    fed.join("a")
    return fed, fed._participant_key("a"), fed.public_key_of("a")


def test_a_lease_is_live_until_time_plus_ttl_exactly() -> None:
    fed, key, public = _federation_and_key()
    text = sign_lease(fed.trust, key, epoch=1, state="active", ttl=30.0, private={})
    record = verify_lease(fed.trust, "a", public, text)
    assert record.status(record.time + 29.9) == "active"
    assert record.status(record.time + 30.0) == "lost"  # expired: an old copy locks nobody out
    finished = replace(record, state="finished")
    assert finished.status(record.time) == "finished"


_BODY = {"client": "a", "epoch": 0, "seq": 1, "time": 1.0, "ttl": 30.0, "state": "active",
         "token": "t", "sealed": "s"}  # fmt: skip


@pytest.mark.parametrize(
    "field",
    [
        {"epoch": True}, {"epoch": -1}, {"epoch": 1.5}, {"seq": "3"}, {"time": None},
        {"time": True}, {"time": "1"}, {"ttl": 0.0}, {"token": 5}, {"sealed": 5},
        {"state": "zombie"},
    ],
)  # fmt: skip
def test_a_malformed_lease_record_is_refused(field: dict) -> None:
    fed, key, public = _federation_and_key()
    good = fed.trust.sign_as(key, "lease", {**_BODY, "ttl": 0.5})  # epoch 0 and a short ttl
    assert verify_lease(fed.trust, "a", public, good).ttl == 0.5
    text = fed.trust.sign_as(key, "lease", {**_BODY, **field})
    with pytest.raises(UntrustedRecordError, match="malformed"):
        verify_lease(fed.trust, "a", public, text)


def test_sealed_fields_are_padded_and_bound_to_their_record() -> None:
    fed, key, public = _federation_and_key()
    short, longer = (
        verify_lease(
            fed.trust,
            "a",
            public,
            sign_lease(fed.trust, key, epoch=1, state="active", ttl=30.0, private=private),
        )
        for private in ({}, {"host": "h" * 40, "pid": 12345})
    )
    assert len(short.sealed) == len(longer.sealed)  # the length tells nothing
    assert open_private(fed.trust, longer)["pid"] == 12345
    with pytest.raises(UntrustedRecordError):
        open_private(fed.trust, replace(longer, epoch=2))  # sealed for epoch 1, not 2


def test_a_lease_carries_the_token_given_else_this_processs() -> None:
    fed, key, public = _federation_and_key()
    own = verify_lease(
        fed.trust,
        "a",
        public,
        sign_lease(fed.trust, key, epoch=1, state="active", ttl=30.0, private={}),
    )
    assert own.token == process_token("a")
    dead = "0123456789abcdef" * 2  # a dead worker's token: its lease is marked lost under it
    taken = sign_lease(fed.trust, key, epoch=1, state="lost", ttl=30.0, private={}, token=dead)
    assert verify_lease(fed.trust, "a", public, taken).token == dead
