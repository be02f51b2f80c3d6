"""Never backwards: a process's newest ``latest`` pointer and server heartbeat.

Both records are signed by the server, but a signed record can be *replayed*: anyone with the
storage URL can write back an older pointer (round 4 when round 5 is open) or an older heartbeat
(an earlier "stopped"). So a process keeps the newest of each it verified and refuses older
ones, with a warning; a freshly started process starts from the newest verified published
broadcast in the storage, so it never goes back to an older pointer either.
"""

from __future__ import annotations

import threading
from typing import Any
from typing import TYPE_CHECKING

from optuna.trial import TrialState

from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.federation.trust import UntrustedRecordError

if TYPE_CHECKING:
    from optuna_fedbo.federation.store import FederationStore


class Freshness:
    """The newest pointer and heartbeat one process has verified (thread-safe).

    Args:
        store: The federation's store.
    """

    def __init__(self, store: FederationStore) -> None:
        self._store = store
        # Reads of the pointer are serialized, so a pointer older than the newest is never a
        # benign race between threads of this process: it is a rollback or a replay.
        self._lock = threading.Lock()
        self._pointer: dict[str, Any] | None = None
        self._record: str | None = None  # the signed record the pointer was verified from
        self._started = False
        self._heartbeat: dict[str, Any] | None = None

    def _newest_published(self) -> dict[str, Any] | None:
        """A pointer to the newest verified published broadcast (``"scanned"``: not the
        stored pointer, which a server re-writes), or ``None``."""
        store = self._store
        for trial in reversed(store.broadcast_trials()):
            if trial.state != TrialState.COMPLETE:
                continue
            broadcast = store._verified(trial)
            if broadcast is not None:
                record = str(trial.system_attrs.get("fedbo:broadcast"))
                return {
                    "round": broadcast.round,
                    "trial_id": broadcast.trial_id,
                    "digest": text_digest(record),
                    "scanned": True,
                }
        return None

    def latest(self, value: Any) -> dict[str, Any] | None:
        """The newest pointer given the stored record ``value`` (see ``FederationStore``)."""
        store = self._store
        with self._lock:
            if not self._started:
                self._started = True
                self._pointer = self._newest_published()
            if value is None or value == self._record:  # the same bytes verify again
                return self._pointer
            try:
                pointer = store._trust().verify("latest", value)
                round_index, trial_id = int(pointer["round"]), int(pointer["trial_id"])
                if not isinstance(pointer.get("digest"), str):
                    raise UntrustedRecordError("the latest record is malformed")
            except (UntrustedRecordError, KeyError, TypeError, ValueError) as error:
                store.warn_once(
                    f"latest:{text_digest(str(value))}",
                    f"Ignoring the 'latest' pointer of federation {store.name!r}: {error}.",
                )
                return self._pointer
            newest = self._pointer
            if newest is not None and round_index < int(newest["round"]):
                store.warn_once(
                    f"latest-old:{text_digest(str(value))}",
                    f"Ignoring an older 'latest' pointer of federation {store.name!r} (round "
                    f"{round_index}; round {newest['round']} is published): the storage was "
                    "rolled back or the record replayed.",
                )
                return newest
            self._pointer = {**pointer, "round": round_index, "trial_id": trial_id}
            self._record = value
            return self._pointer

    def heartbeat(self, status: dict[str, Any]) -> dict[str, Any] | None:
        """``status`` (a verified heartbeat) unless it is older than one already seen, than the
        published rounds, or a superseded server's "stopped": then the newest seen, warned."""
        store = self._store
        newest = self._heartbeat
        latest = store.latest()
        problem = None
        epoch, beat = int(status.get("epoch", 0)), float(status.get("heartbeat", 0.0))
        if newest is not None and (epoch, beat) < (newest["epoch"], newest["heartbeat"]):
            problem = "older than one already seen"
        elif latest is not None and int(status.get("open_round", -1)) < int(latest["round"]):
            problem = f"for round {status.get('open_round')}, before round {latest['round']}"
        elif status.get("stopped") and store.superseded(epoch) is not None:
            problem = f"a 'stopped' record of server epoch {epoch}, which a newer server replaced"
        if problem is not None:
            store.warn_once(
                f"heartbeat-old:{epoch}:{beat}",
                f"Ignoring an older server heartbeat of federation {store.name!r} ({problem}): "
                "the storage was rolled back or the record replayed.",
            )
            return newest
        self._heartbeat = {**status, "epoch": epoch, "heartbeat": beat}
        return status


__all__ = ["Freshness"]
