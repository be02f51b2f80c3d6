"""The poll loop both servers (FTS rounds, Fed-PNE phases) run in ``serve()``."""

from __future__ import annotations

from collections.abc import Callable
import threading
import time
from typing import TypeVar

import optuna

from optuna_fedbo.federation._damage import FederationDamagedError
from optuna_fedbo.federation._serve_watch import ServeEnd
from optuna_fedbo.federation._serve_watch import ServeWatch
from optuna_fedbo.federation.store import ServerSupersededError
from optuna_fedbo.federation.trust import UntrustedRecordError

_logger = optuna.logging.get_logger(__name__)

Report = TypeVar("Report")


def poll_rounds(
    step: Callable[[], Report | None],
    recover: Callable[[], None],
    *,
    done: Callable[[], bool],
    poll_interval: float,
    timeout: float | None,
    stop: threading.Event | None,
    callback: Callable[[Report], None] | None,
    max_consecutive_errors: int,
    watch: ServeWatch | None = None,
    on_end: Callable[[ServeEnd], None] | None = None,
    intact: Callable[[], None] | None = None,
) -> list[Report]:
    """Call ``step`` until ``done()``, the timeout, ``stop`` or Ctrl-C; collect its reports.

    Args:
        step: Closes the open round if it can; returns its report, or ``None`` if not yet.
        recover: Reloads the server's state from storage after a failed step.
        done: Whether serving is over (checked before every step).
        poll_interval: Seconds between polls when nothing happened.
        timeout: Stop after this many seconds (``None``: no limit).
        stop: Stop when this event is set.
        callback: Called with each report.
        max_consecutive_errors: Failed steps in a row tolerated (each logged, then ``recover``)
            before the error is raised.
        watch: Consulted after every poll that closed nothing (so that a round completed by
            the participants' last uploads is still published before serving stops): logs
            whom the server waits for and says when serving ends by itself.
        on_end: Called with the reason when ``watch`` ends serving.
        intact: Raises :class:`~._damage.FederationDamagedError` if the federation's main study
            or configuration was deleted; called when a step fails.

    Returns:
        The reports, in order.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    reports: list[Report] = []
    errors = 0
    ending: ServeEnd | None = None  # the watch's verdict, confirmed by one more step
    try:
        while not done():
            if stop is not None and stop.is_set():
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            try:
                report = step()
                errors = 0
            except (ServerSupersededError, UntrustedRecordError, FederationDamagedError):
                # Not a storage hiccup: another server now owns the federation, or its records
                # do not verify or were deleted (the server fails closed rather than retry).
                raise
            except Exception:
                if intact is not None:
                    intact()  # a deleted main study: one line naming it, not retried
                errors += 1
                if errors >= max_consecutive_errors:
                    raise
                _logger.warning("Server step failed; reloading state.", exc_info=True)
                time.sleep(poll_interval)
                recover()
                continue
            if report is not None:
                ending = None
                reports.append(report)
                if callback is not None:
                    callback(report)
                continue
            if ending is not None:
                _logger.info(ending.text)
                if on_end is not None:
                    on_end(ending)
                break
            ending = None if watch is None else watch.check()
            if ending is not None:
                # The watch read the participants' states after the step read the uploads: a
                # participant may have uploaded its last round and finished in between. One
                # more step reads every upload written before those states, and publishes the
                # round they complete before serving ends.
                continue
            if stop is not None:
                stop.wait(poll_interval)
            else:
                time.sleep(poll_interval)
    except KeyboardInterrupt:
        _logger.info("Server interrupted.")
    return reports
