"""Lamport's bakery over an Optuna storage: which of a site's workers keeps a contested choice.

An Optuna storage offers no compare-and-set on attributes, so two workers of a site (threads,
processes, hosts) that pick the same thing at once (a Fed-PNE slot, a point) settle it as
Lamport's bakery does. Each writes its intent on its running trial, then draws a ticket from the
storage (:func:`~optuna_fedbo.federation.site_counter.next_counter`: ids handed out atomically
and increasing, to every process alike), writes it, and reads its rivals' tickets (``None``:
intent written, ticket not yet): it waits while a rival has none (at most :data:`CHOOSING_WAIT`
seconds: a worker that died there is no rival) and keeps its choice only if no rival holds a
smaller ticket. A rival whose intent it did not see wrote that intent after this read, so drew a
larger ticket, and backs off itself: one of them keeps the choice, and the smallest ticket
always does.
"""

from __future__ import annotations

from collections.abc import Callable
import time

#: Longest wait (seconds) for a rival's ticket (drawn milliseconds after its intent).
CHOOSING_WAIT = 10.0


def keeps_choice(
    rival_tickets: Callable[[], list[int | None] | None],
    ticket: int,
    poll_interval: float,
) -> bool:
    """Whether the worker holding ``ticket`` keeps its choice.

    Args:
        rival_tickets: Reads the tickets of the rivals' claims on the same choice (``None`` for
            a claim without its ticket yet); ``None`` if the choice is gone anyway.
        ticket: The worker's own ticket, drawn after its intent was written.
        poll_interval: Seconds between reads while a rival's ticket is missing.
    """
    deadline = time.monotonic() + CHOOSING_WAIT
    while True:
        tickets = rival_tickets()
        if tickets is None or any(t is not None and t < ticket for t in tickets):
            return False
        if None not in tickets or time.monotonic() >= deadline:
            return True
        time.sleep(poll_interval)


__all__ = ["CHOOSING_WAIT", "keeps_choice"]
