"""Server epochs that deletions cannot make two servers share.

Each server start claims a new *epoch* (:meth:`~optuna_fedbo.federation.store.FederationStore.
claim_server_epoch`: creating a study, which one writer wins), and a server stops as soon as a
newer one exists. The storage alone cannot keep that promise: whoever deletes the epoch studies
makes the next server claim an epoch again that a running server holds, and neither stops. So
the epochs are also pinned *outside* the storage, beside the server's key file (which every
server of the federation needs): ``servers/<federation id>.epochs/<epoch>``, one file per claimed
epoch, created exclusively (``O_EXCL``: one process wins each number). A server

* claims an epoch above every one pinned there and above every epoch in the server-signed
  records still in the storage (heartbeat, broadcasts), and pins it before it serves;
* is superseded when a newer epoch is pinned there, holds a signed claim in the storage, or
  signed the heartbeat.

Servers sharing a key directory (the operator's machine) therefore never share an epoch,
whatever is deleted from the storage; servers run from copies of the key file on other machines
share only the storage's signed records. A federation in an in-memory storage (one process)
pins its epochs in memory.
"""

from __future__ import annotations

import os
from pathlib import Path
import threading
from typing import Any

from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.location import persists_keys
from optuna_fedbo.federation.store import FederationStore

_memory_lock = threading.Lock()
_MEMORY: dict[str, set[int]] = {}


class EpochPin:
    """The epochs claimed by the servers of one federation with one key directory.

    Args:
        federation_id: The federation's random id.
        folder: The pin folder beside the server's key file, or ``None`` (in memory).
    """

    def __init__(self, federation_id: str, folder: Path | None) -> None:
        self.federation_id = federation_id
        self.folder = folder

    @classmethod
    def of(cls, federation: Any) -> EpochPin:
        """The pin of a federation's servers (beside its server key file)."""
        federation_id = federation.federation_id
        if not persists_keys(federation.storage):
            return cls(federation_id, None)
        key_file = ServerKeys.path(federation_id, federation._key_dir)
        return cls(federation_id, key_file.with_name(f"{federation_id}.epochs"))

    def epochs(self) -> list[int]:
        """The pinned epochs."""
        if self.folder is None:
            with _memory_lock:
                return sorted(_MEMORY.get(self.federation_id, ()))
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def newer_than(self, epoch: int) -> int | None:
        """The newest pinned epoch if it is above ``epoch``, else ``None``."""
        epochs = self.epochs()
        return epochs[-1] if epochs and epochs[-1] > epoch else None

    def reserve(self, epoch: int) -> bool:
        """Pin ``epoch`` if no server pinned it before (atomic across processes).

        Raises:
            ValueError: If the pin cannot be written (one line naming the folder).
        """
        if self.folder is None:
            with _memory_lock:
                pinned = _MEMORY.setdefault(self.federation_id, set())
                if epoch in pinned:
                    return False
                pinned.add(epoch)
                return True
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(
                self.folder / f"{epoch:06d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600
            )
        except FileExistsError:
            return False
        except OSError as error:
            raise ValueError(
                f"Cannot pin the server epoch in {self.folder} ({error.strerror}): the server "
                "keeps its epochs beside its key file; make that folder writable by you."
            ) from None
        os.close(descriptor)
        for older in self.epochs():  # only newer epochs matter to anyone
            if older < epoch:
                (self.folder / f"{older:06d}").unlink(missing_ok=True)
        return True


def signed_epoch_floor(store: FederationStore) -> int:
    """The newest epoch named by a server-signed record still in the storage (0 if none)."""
    heartbeat = store.server_status() or {}
    epochs = [int(heartbeat.get("epoch", 0))]
    epochs += [b.epoch for b in store.broadcasts()]
    return max(epochs)


def claim_epoch(store: FederationStore, pin: EpochPin) -> int:
    """Claim a new epoch: above every pinned and every signed one, pinned, then claimed in the
    storage."""
    start = max([signed_epoch_floor(store), *pin.epochs()]) + 1
    return store.claim_server_epoch(start, reserve=pin.reserve)


def newer_epoch(
    store: FederationStore, pin: EpochPin, epoch: int, *, heartbeat: bool = True
) -> int | None:
    """A newer server's epoch (pinned, claimed and signed in the storage, or, with
    ``heartbeat``, named by the signed heartbeat), or ``None``."""
    newer = pin.newer_than(epoch) or store.superseded(epoch)
    if newer is not None or not heartbeat:
        return newer
    beat = int((store.server_status() or {}).get("epoch", 0))
    return beat if beat > epoch else None


__all__ = ["EpochPin", "claim_epoch", "newer_epoch", "signed_epoch_floor"]
