"""The secure-aggregation driver thread's retries are bounded (issue 29): polls that keep
failing (a storage gone) stop the background thread after ``FAILURE_PATIENCE`` seconds with one
warning naming the error; a poll that succeeds in between starts the count again."""

from __future__ import annotations

import logging

import pytest

from optuna_fedbo.federation.secagg import participant as participant_module
from optuna_fedbo.federation.secagg.participant import Driver


class _Failing:
    """A participant whose n-th poll raises when ``pattern[n]`` is true (the last repeats)."""

    def __init__(self, pattern: list[bool]) -> None:
        self.pattern = pattern
        self.polls = 0

    def poll(self) -> bool:
        self.polls += 1
        fails = self.pattern[min(self.polls, len(self.pattern)) - 1]
        if fails:
            raise OSError("database is locked")
        return True


def _run(driver: Driver, monkeypatch, limit: int = 10_000) -> None:
    clock = {"now": 0.0, "sleeps": 0}

    def sleep(seconds: float) -> None:
        clock["now"] += seconds
        clock["sleeps"] += 1
        if clock["sleeps"] > limit:
            raise AssertionError("the driver thread did not stop")

    monkeypatch.setattr(participant_module.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(participant_module.time, "sleep", sleep)
    driver._run()


def test_a_driver_whose_polls_keep_failing_stops_with_the_error(monkeypatch, caplog) -> None:
    driver = Driver(interval=0.2)
    failing = _Failing([True])
    driver._participants["a"] = failing  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="optuna_fedbo"):
        _run(driver, monkeypatch)
    patience = participant_module.FAILURE_PATIENCE
    assert failing.polls == pytest.approx(patience / 0.2 + 1, abs=1)  # bounded
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"failed for {patience:.0f} s" in warning and "OSError: database is locked" in warning
    assert "\n" not in warning and driver._thread is None


def test_a_poll_that_succeeds_starts_the_count_again(monkeypatch) -> None:
    driver = Driver(interval=0.2)
    steps = int(participant_module.FAILURE_PATIENCE / 0.2)
    # Failing for most of the patience, one success, then failing for good.
    failing = _Failing([True] * (steps - 10) + [False] + [True])
    driver._participants["a"] = failing  # type: ignore[assignment]
    _run(driver, monkeypatch)
    assert failing.polls > 2 * steps - 20  # the success reset the bound
