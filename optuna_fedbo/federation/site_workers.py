"""This host's workers of a participant: which process holds which lease epoch.

Each worker process of a participant (a *site*) claims its own lease epoch (:mod:`.lease`). Host
and pid go into the lease sealed to the server, so the other workers cannot read them from the
storage; a worker therefore also notes its epoch, pid and token in the participant's key folder
(``participants/<federation id>/<id digest>.workers/<epoch>.json``, mode 0600, outside the
storage). A worker that starts on the same host reads these notes: a worker whose process is gone
(SIGKILL, SIGTERM, a power cut of the process) is taken over at once -- its lease marked lost, its
running trials failed -- instead of after the lease's ``ttl``; a named worker that is still alive
here, or live in the storage without a note here (on another host), is refused.

Federations in in-memory storages keep no notes (one process; the key folder is not touched).
"""

from __future__ import annotations

from dataclasses import dataclass
import json
import os
from pathlib import Path
from typing import Any

import optuna

from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.location import persists_keys

_logger = optuna.logging.get_logger(__name__)


@dataclass(frozen=True)
class WorkerNote:
    """A worker of this host: the lease epoch it claimed, its process id and token, its name."""

    epoch: int
    pid: int
    token: str
    worker: str | None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (signal 0: nothing is sent)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    except OSError:
        return False
    return True


class WorkerNotes:
    """The notes of a participant's workers on this host (none for in-memory storages).

    Args:
        federation: The federation.
        client_id: The participant.
    """

    def __init__(self, federation: Any, client_id: str) -> None:
        self._folder: Path | None = None
        if persists_keys(federation.storage):
            where = ParticipantKey.path(federation.federation_id, client_id, federation._key_dir)
            self._folder = where.with_name(where.stem + ".workers")

    def _path(self, epoch: int) -> Path:
        assert self._folder is not None
        return self._folder / f"{epoch:06d}.json"

    def add(self, epoch: int, token: str, worker: str | None) -> None:
        """Note that this process holds ``epoch``."""
        if self._folder is None:
            return
        self._folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self._path(epoch)
        text = json.dumps({"epoch": epoch, "pid": os.getpid(), "token": token, "worker": worker})
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(temporary, path)

    def remove(self, epoch: int) -> None:
        """Forget ``epoch`` (its worker ended or was taken over)."""
        if self._folder is None:
            return
        try:
            self._path(epoch).unlink()
        except FileNotFoundError:
            pass

    def notes(self) -> list[WorkerNote]:
        """Every worker noted on this host (unreadable notes are skipped)."""
        if self._folder is None or not self._folder.is_dir():
            return []
        notes = []
        for path in sorted(self._folder.glob("*.json")):
            try:
                fields = json.loads(path.read_text())
                notes.append(
                    WorkerNote(
                        epoch=int(fields["epoch"]),
                        pid=int(fields["pid"]),
                        token=str(fields["token"]),
                        worker=None if fields.get("worker") is None else str(fields["worker"]),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError):
                _logger.debug(f"Skipping an unreadable worker note {path}.", exc_info=True)
        return notes


__all__ = ["WorkerNote", "WorkerNotes", "pid_alive"]
