"""A finished federation: the server's mark, and how to start over.

``serve`` ends by itself once every registered participant has finished its study; the server then
marks the federation *finished* in its signed heartbeat record. A finished federation is over:

* a new server on it is refused with :class:`FederationFinishedError` (``optuna-fedbo serve``:
  exit status 2), instead of exiting at once with the old summary;
* a participant that starts on it runs locally at once, with one warning (it neither waits for
  a broadcast nor uploads), instead of waiting for a server that will not come.

Both say how to start over: a federation under a new name, or the old one deleted (its storage
and the pin this key folder keeps of it, see :mod:`optuna_fedbo.federation.pinning`).
"""

from __future__ import annotations

import time
from typing import Any
from typing import TYPE_CHECKING

from optuna_fedbo.federation.pinning import pin_path
from optuna_fedbo.federation.pinning import storage_location

if TYPE_CHECKING:
    from optuna_fedbo.federation.federation import Federation

#: Field of the server's heartbeat record that marks the federation finished.
FINISHED_KEY = "finished"


class FederationFinishedError(ValueError):
    """The federation has finished: every participant ended its study and serving ended."""


def finished_record(federation: Federation) -> dict[str, Any] | None:
    """The finished mark of the federation (``{"at": time, "rounds": n}``), or ``None``."""
    server = federation.store.server_status()
    record = None if server is None else server.get(FINISHED_KEY)
    return record if isinstance(record, dict) else None


def start_over(federation: Federation) -> str:
    """How to start a federation again after this one finished (one sentence, no period)."""
    location = storage_location(federation.storage)
    name = federation.name
    if location is None:
        return f"to start over, create the federation under a new name ({name!r} is in memory)"
    pin = pin_path(federation.store, getattr(federation, "_key_dir", None))
    kind, _, path = location.partition(":")
    where = path if kind in ("sqlite", "journal") else f"its studies ({name!r}, {name}:fedbo:*)"
    return (
        f"to start over, create the federation under a new name, or delete {where}"
        + ("" if pin is None else f" and the pin {pin}")
        + " to reuse the name"
    )


def finished_message(federation: Federation, record: dict[str, Any]) -> str:
    """What a finished federation tells a server or participant that starts on it (one line)."""
    at = record.get("at")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(at)))
        if isinstance(at, (int, float))
        else "an unknown time"
    )
    rounds = record.get("rounds")
    published = f"{rounds} rounds published, " if isinstance(rounds, int) else ""
    return (
        f"federation {federation.name!r} finished at {when} ({published}every participant "
        f"finished its study): {start_over(federation)}"
    )


__all__ = [
    "FINISHED_KEY",
    "FederationFinishedError",
    "finished_message",
    "finished_record",
    "start_over",
]
