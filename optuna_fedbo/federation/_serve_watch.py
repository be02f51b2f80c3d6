"""What ``serve`` watches between rounds: whom it waits for, and when serving is over.

``serve`` (both protocols) ends by itself:

* once every registered participant has finished its study or is lost, after publishing any
  round their last uploads completed; when every one of them *finished* (none lost), the
  federation is marked finished (:mod:`~optuna_fedbo.federation.finished`), so that running it
  again says so instead of waiting;
* after ``idle_timeout`` seconds in which no participant ran, once every participant that joined
  has finished or is lost, or none joined: a declared site that never starts does not keep the
  server waiting for ever (``idle_timeout=None`` waits for it).

Every ``log_interval`` seconds ``serve`` logs whom it waits for: the open round, who uploaded to
it, who runs, and the declared participants that have not joined; as a warning while no
participant runs (then also when serving will end).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
import time
from typing import TYPE_CHECKING

import optuna

if TYPE_CHECKING:
    from optuna_fedbo.federation.federation import Federation
    from optuna_fedbo.federation.lifecycle import Lifecycle

_logger = optuna.logging.get_logger(__name__)

#: Default seconds ``serve`` waits, with no participant running, before it ends by itself.
DEFAULT_IDLE_TIMEOUT = 300.0
#: Default seconds between ``serve``'s lines saying whom it waits for.
DEFAULT_LOG_INTERVAL = 60.0
#: Longest interval between reads of the participants' states.
_REFRESH = 2.0


def check_idle_timeout(idle_timeout: float | None) -> None:
    """Raise ``ValueError`` unless ``idle_timeout`` is ``None`` or a number ``>= 0``."""
    if idle_timeout is not None and (
        isinstance(idle_timeout, bool)
        or not isinstance(idle_timeout, (int, float))
        or not idle_timeout >= 0
    ):
        raise ValueError(f"idle_timeout must be None or >= 0 seconds, got {idle_timeout!r}.")


@dataclass(frozen=True)
class ServeEnd:
    """Why ``serve`` ends by itself.

    Attributes:
        text: The reason, for the log.
        finished: Whether every registered participant finished (the federation is over).
    """

    text: str
    finished: bool


class ServeWatch:
    """Says whom ``serve`` waits for and decides when it ends (see the module docstring).

    Args:
        federation: The federation served.
        open_round: The server's open round (FTS round or Fed-PNE phase round).
        departed: Whether the given participants have departed beyond doubt (verified lease
            records that cannot be old copies: ``LeaseBook.departed``).
        idle_timeout: Seconds with no participant running after which serving ends.
        log_interval: Seconds between the lines saying whom the server waits for.
        poll_interval: The server's poll interval (the states are read at least this often).
    """

    def __init__(
        self,
        federation: Federation,
        open_round: Callable[[], int],
        departed: Callable[[Iterable[str]], bool],
        *,
        idle_timeout: float | None,
        log_interval: float,
        poll_interval: float,
    ) -> None:
        check_idle_timeout(idle_timeout)
        self._federation = federation
        self._open_round = open_round
        self._departed = departed
        self._idle_timeout = idle_timeout
        self._log_interval = log_interval
        refresh = _REFRESH if idle_timeout is None else min(_REFRESH, idle_timeout / 4)
        self._refresh = max(refresh, min(poll_interval, _REFRESH))
        now = time.monotonic()
        self._read_at = -float("inf")
        self._lifecycle: Lifecycle | None = None
        self._idle_since: float | None = None
        self._logged_at = now

    def _read(self, now: float) -> Lifecycle:
        if self._lifecycle is None or now - self._read_at >= self._refresh:
            self._lifecycle = self._federation.lifecycle()
            self._read_at = now
        return self._lifecycle

    def check(self) -> ServeEnd | None:
        """After a poll that closed nothing: log whom the server waits for (periodically) and
        return why serving ends, or ``None`` to go on."""
        now = time.monotonic()
        lifecycle = self._read(now)
        if lifecycle.ended and self._departed(lifecycle.roster):
            finished = all(lifecycle.states[c].status == "finished" for c in lifecycle.roster)
            return ServeEnd("every participant has finished: serving ends", finished)
        running = [c for c in lifecycle.roster if lifecycle.status_of(c) == "active"]
        if running or not self._departed([c for c in lifecycle.roster if c in lifecycle.states]):
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        idle = None if self._idle_since is None else now - self._idle_since
        if idle is not None and self._idle_timeout is not None and idle >= self._idle_timeout:
            return ServeEnd(
                f"serve of {self._federation.name!r} ends: no participant has run for "
                f"{idle:.0f} s (idle_timeout {self._idle_timeout:g} s); "
                + self.waiting_for(lifecycle),
                False,
            )
        if now - self._logged_at >= self._log_interval:
            self._logged_at = now
            text = f"serve of {self._federation.name!r}: " + self.waiting_for(lifecycle)
            if idle is None:
                _logger.info(text)
            else:
                left = (
                    "it waits until stopped (idle_timeout None)"
                    if self._idle_timeout is None
                    else f"serving ends in {max(self._idle_timeout - idle, 0.0):.0f} s "
                    "unless one starts (idle_timeout)"
                )
                _logger.warning(f"{text}; no participant runs: {left}")
        return None

    def waiting_for(self, lifecycle: Lifecycle) -> str:
        """Whom the server waits for: the open round's uploads, who runs, who never joined."""
        round_index = self._open_round()
        try:
            uploaded = self._federation.store.upload_keys(round_index)
        except Exception:
            uploaded = []
        by_status: dict[str, list[str]] = {}
        for client_id in lifecycle.roster:
            by_status.setdefault(lifecycle.status_of(client_id), []).append(client_id)
        parts = [f"round {round_index} open with uploads from {len(uploaded)}"]
        parts.append(f"{lifecycle.n_clients} declared")
        labels = {"joined": "joined but never started", "lost": "lost"}
        for status in ("active", "joined", "finished", "lost"):
            ids = by_status.get(status)
            if ids:
                parts.append(f"{labels.get(status, status)}: {', '.join(ids)}")
        not_joined = lifecycle.n_clients - len(lifecycle.roster)
        if not_joined > 0:
            parts.append(f"{not_joined} never joined")
        return "; ".join(parts)


__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_LOG_INTERVAL",
    "ServeEnd",
    "ServeWatch",
    "check_idle_timeout",
]
