"""Signed lease records (``federation/lease_record.py``): sequence numbers grow even when the clock
stands still or goes back, and a process's token is a short digest per id (written to kill
mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from optuna_fedbo.federation import lease_record
from optuna_fedbo.federation.lease_record import next_seq
from optuna_fedbo.federation.lease_record import process_token


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
