"""What a participant of secure aggregation keeps outside the storage: which attempts it joined.

A participant's protocol state (its channel and mask keys, its self-mask seed, the shares it
holds, the survivor list it signed) lives in its process's memory only, and is never written
anywhere: kept on disk it would outlive the attempt, and a state restored from a copy taken before
an answer could answer twice. A participant that restarts mid-attempt has therefore lost it, and
**it must not take part again in that attempt**: its keys are in the server's key directory, the
peers sealed their shares to them, and new keys would only make the peers and the server refuse
its messages (the directory never carries them). What it already sent stays valid: if it dropped
after sharing keys, the survivors' shares remove its masks; after its masked input, its input is
in the sum (its self-mask seed rebuilt from its holders' shares); and it holds no share any
more, so it cannot reveal one, let alone both kinds for one peer.

So before advertising keys in an attempt a participant *claims* it: it creates
``participants/<federation id>/<id digest>.secagg/<round>-<attempt>`` in its key folder
exclusively (``O_EXCL``: one process wins). A process that finds the claim made (its own earlier
incarnation, or another worker of the same site on this host) stays out of that attempt and
takes part from the next one. The two workers of a site on different hosts (different key
folders) are kept apart by the protocol itself: the server keeps one key advertisement per
participant, and a worker whose own keys are not in the directory refuses it and stays out.
Claims of rounds more than :data:`KEEP_ROUNDS` before the newest are deleted, so a storage rolled
back further could lead a participant into an attempt it took part in before; under distributed
DP its own count refuses any attempt at or below the newest it masked into
(:meth:`~optuna_fedbo.federation.secagg.spending.OwnLedger.check_newer`), and survivor
signatures name the attempt's key directory, so none of one run vouches for another run of it.

Under distributed DP the same folder keeps the participant's own count of releases
(:mod:`~optuna_fedbo.federation.secagg.spending`). Federations in in-memory storages keep claims
and counts in memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
import weakref

from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.location import persists_keys

#: Claims of rounds older than this many before the one claimed are deleted.
KEEP_ROUNDS = 2


def _folder(federation: Any, client_id: str) -> Path | None:
    if not persists_keys(federation.storage):
        return None
    where = ParticipantKey.path(federation.federation_id, client_id, federation._key_dir)
    return where.with_name(where.stem + ".secagg")


#: Claims and release counts of federations in in-memory storages, by storage (shared by every
#: handle of the federation in this process, as the storage is).
_MEMORY: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _memory(federation: Any, kind: str) -> dict[str, Any]:
    """The federation's in-memory ``kind`` (``"claims"`` or ``"releases"``),
    by participant."""
    kept = _MEMORY.setdefault(federation.storage, {}).setdefault(federation.federation_id, {})
    return kept.setdefault(kind, {})


def claim(federation: Any, client_id: str, round_index: int, attempt: int) -> bool:
    """Claim taking part in an attempt for this participant; ``False`` if it was claimed before
    (by this participant's earlier process, or another worker of it on this host)."""
    name = f"{round_index:06d}-{attempt:06d}"
    folder = _folder(federation, client_id)
    if folder is None:
        claims = _memory(federation, "claims").setdefault(client_id, set())
        if name in claims:
            return False
        claims.add(name)
        return True
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.close(os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    for old in folder.glob("*-*"):
        stem = old.name.split("-", 1)[0]
        if stem.isdigit() and int(stem) < round_index - KEEP_ROUNDS:
            old.unlink(missing_ok=True)
    return True


__all__ = ["claim"]
