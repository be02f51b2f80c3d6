"""A participant's bounded waits: for a round's broadcast (FTS, synchronous) or the next phase
(Fed-PNE). One implementation for every protocol's sampler.

A wait ends, at the latest, at the first of:

* the sampler's own limit (``sync_timeout``, ``phase_timeout``);
* the deadline of the running ``study.optimize(timeout=...)`` (read from Optuna's optimize loop
  on this thread's stack; no deadline under ask-and-tell);
* at once, when the federation has finished or its server has stopped serving (nothing will be
  published until someone starts it again);
* after ``patience`` seconds while no server is seen or the server is not seen recently, and at
  once in later waits while that lasts: a site alone waits once, not at every trial. Too few
  participants running is no reason to stop early (a participant may be restarting, and the
  paper's lock-step waits for it): the wait's limit bounds it, and its warning names the
  problem; later waits then end at once while it lasts.

The sampler then continues with its documented local policy (FTS: its local model; Fed-PNE: the
current best node). Each reason is logged once per sampler as a warning (later ones at debug).
"""

from __future__ import annotations

import datetime
import sys
import time
from typing import Any
from typing import TYPE_CHECKING

import optuna

if TYPE_CHECKING:
    from optuna_fedbo.samplers._fed import FedSampler

_logger = optuna.logging.get_logger(__name__)

#: Problems after which a wait ends at once (nothing is published until someone acts).
_DEFINITIVE = ("finished", "server-stopped")
#: Problems after which a wait ends once they have lasted ``patience`` seconds.
_PATIENT = ("no-server", "server-down")
#: Longest interval between a wait's reads of the federation's problems.
_CHECK_INTERVAL = 1.0

try:  # Optuna's sequential optimize loop (also each thread's loop with n_jobs > 1).
    from optuna.study._optimize import _optimize_sequential

    _OPTIMIZE_CODE: Any = _optimize_sequential.__code__
except (ImportError, AttributeError):  # pragma: no cover - another Optuna layout
    _OPTIMIZE_CODE = None


def optimize_deadline() -> float | None:
    """``time.monotonic()`` at which the ``study.optimize(timeout=...)`` running on this thread
    stops starting trials, or ``None`` (no timeout, or not inside ``study.optimize``)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not _OPTIMIZE_CODE:
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return None
    timeout = frame.f_locals.get("timeout")
    start = frame.f_locals.get("time_start")
    if not isinstance(timeout, (int, float)) or not isinstance(start, datetime.datetime):
        return None
    remaining = timeout - (datetime.datetime.now() - start).total_seconds()
    return time.monotonic() + remaining


def check_wait_limit(name: str, value: float | None) -> None:
    """Raise ``ValueError`` unless ``value`` is ``None`` or a number ``>= 0``."""
    if value is not None and (isinstance(value, bool) or not value >= 0):
        raise ValueError(f"{name} must be None or >= 0 seconds, got {value!r}.")


class Waits:
    """The bounded waits of one participant (see the module docstring).

    Args:
        sampler: The participant (its id, federation and once-only warnings).
        limit: ``(argument name, seconds or None)``: the sampler's own limit per wait.
        patience: Seconds a wait goes on while a problem keeps rounds from closing.
        fallback: What the participant does when a wait ends empty (for the warning).
    """

    def __init__(
        self,
        sampler: FedSampler,
        *,
        limit: tuple[str, float | None],
        patience: float,
        fallback: str,
    ) -> None:
        check_wait_limit(limit[0], limit[1])
        check_wait_limit("patience", patience)
        self._sampler = sampler
        self._limit = limit
        self._patience = patience
        self._fallback = fallback
        self._given_up: set[str] = set()

    def begin(self, what: str) -> Wait:
        """Start waiting for ``what`` (e.g. "the broadcast of round 3")."""
        return Wait(self, what)


class Wait:
    """One wait: poll :meth:`over`, then call :meth:`end`."""

    def __init__(self, waits: Waits, what: str) -> None:
        self._waits = waits
        self.what = what
        self.started = time.monotonic()
        name, seconds = waits._limit
        ends = [] if seconds is None else [(self.started + seconds, "limit")]
        deadline = optimize_deadline()
        if deadline is not None:
            ends.append((deadline, "deadline"))
        self._end = min(ends) if ends else None
        self._checked = -float("inf")
        self._first_seen: dict[str, float] = {}
        self._problems: dict[str, str] = {}
        self._key: str | None = None  # the problem a warning is given once for
        #: Why the wait ended without what it waited for: ``(kind, text)``.
        self.reason: tuple[str, str] | None = None

    def left(self) -> float | None:
        """Seconds until the wait's limit or the optimize deadline (``None``: neither)."""
        return None if self._end is None else max(self._end[0] - time.monotonic(), 0.0)

    def over(self) -> bool:
        """Whether the wait must end now (then :attr:`reason` says why)."""
        if self.reason is None:
            self.reason = self._problem() or self._expired()
        return self.reason is not None

    def _problem(self) -> tuple[str, str] | None:
        """A problem that ends the wait now (the federation's problems, read now and then)."""
        now = time.monotonic()
        waits = self._waits
        if now - self._checked < min(_CHECK_INTERVAL, max(waits._patience / 4, 0.01)):
            return None
        self._checked = now
        try:
            problems = {p.kind: p.text for p in waits._sampler.federation.lifecycle().problems}
        except Exception:
            _logger.debug("Could not read the federation's lifecycle.", exc_info=True)
            return None
        self._problems = problems
        waits._given_up &= set(problems)  # a problem that went away is waited for again
        for kind, text in problems.items():
            first = self._first_seen.setdefault(kind, now)
            if (
                kind in _DEFINITIVE
                or kind in waits._given_up
                or (kind in _PATIENT and now - first >= waits._patience)
            ):
                waits._given_up.add(kind)
                return kind, text
        return None

    def _expired(self) -> tuple[str, str] | None:
        """The limit or the optimize deadline, if it has passed."""
        if self._end is None or time.monotonic() < self._end[0]:
            return None
        if self._end[1] == "deadline":
            return "deadline", "the timeout of study.optimize is reached"
        name, seconds = self._waits._limit
        text = f"its limit ({name}={seconds:g} s) has passed"
        roster = self._problems.get("roster")
        if roster is None:
            return "limit", text
        self._waits._given_up.add("roster")  # later waits: at once while it lasts
        self._key = "roster"
        return "limit", f"{text} and {roster}"

    def end(self, arrived: bool) -> None:
        """Log why the wait ended empty (once per reason and participant)."""
        if arrived or not self.over():  # (a wait that timed out elsewhere learns why here)
            return
        kind, text = self.reason
        sampler = self._waits._sampler
        message = (
            f"{sampler.client_id}: stopped waiting for {self.what} after "
            f"{time.monotonic() - self.started:.0f} s: {text}; continuing with "
            f"{self._waits._fallback}"
            + ("" if kind in ("limit", "deadline") else " while that lasts")
            + "."
        )
        if sampler._first(f"wait:{self._key or kind}"):
            _logger.warning(message)
        else:
            _logger.debug(message)


def sync_round(federation: Any, client_id: str, last_round: int | None) -> int | None:
    """The round whose broadcast a synchronous FTS trial waits for, or ``None`` (no wait).

    The open round, when it holds the site's own signed upload (sent by any of its workers,
    before a restart too: read from the federation, not remembered) or this worker's
    ``last_round`` is that round (an upload that took another path, e.g. secure aggregation);
    otherwise the site's last upload went to a round already published, whose broadcast is
    the one to use at once (waiting for it again, or not waiting for the round just uploaded
    to, would be remembering the wrong thing).
    """
    round_index = int(federation.open_round())
    if last_round == round_index or federation.has_sent(client_id, round_index):
        return round_index
    return None


__all__ = ["Wait", "Waits", "check_wait_limit", "optimize_deadline", "sync_round"]
