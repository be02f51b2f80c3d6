"""Who takes part: enrollment (the operator), joining, participants' keys and the roster.

The roster is the first ``N`` enrolled ids, each enrollment signed by the server; a
participant's index is its place in it and never changes. A participant signs with a key that
only its machine holds, verified against its enrollment before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
import os
import threading
from typing import Any

from optuna_fedbo.federation.keys import find_participant_key
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.keys import remember
from optuna_fedbo.federation.location import persists_keys
from optuna_fedbo.federation.pinning import pin_joined
from optuna_fedbo.federation.records import check_client_id
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import Trust


@dataclass(frozen=True)
class Participant:
    """A participant's place in the federation.

    Attributes:
        client_id: Its id.
        index: Its index ``n`` in ``[0, N)`` (order of first join; never changes).
        subregion: The sub-region it explores at initialization (``n mod P``).
    """

    client_id: str
    index: int
    subregion: int


class Membership:
    """Enrollment, joining and the roster of :class:`~optuna_fedbo.federation.Federation` (a
    base class of it, whose state and properties it uses)."""

    _store: FederationStore
    _trust: Trust
    _lock: threading.Lock
    _key_dir: str | os.PathLike[str] | None
    _keys: dict[str, ParticipantKey]
    _public_keys: dict[str, bytes]
    _indices: dict[str, int]
    name: str
    n_clients: int
    is_operator: bool
    federation_id: str
    fingerprint: str
    channel: Any

    def participants(self) -> list[str]:
        """Ids of the enrolled participants, by index (at most ``N``)."""
        return list(self._enrolled())

    def _enrolled(self) -> dict[str, bytes]:
        """The first ``N`` enrolled participants (id -> public key), read once; caches keys."""
        enrolled = dict(list(self._store.roster().items())[: self.n_clients])
        with self._lock:
            self._public_keys.update(enrolled)
            # Indices never change once assigned: cache them.
            self._indices.update((c, i) for i, c in enumerate(enrolled))
        return enrolled

    def public_key_of(self, client_id: str) -> bytes | None:
        """The enrolled public signing key of a participant, or ``None``.

        Enrollments are append-only and never change: known keys are cached, and the roster
        is read again only for an id not seen yet.
        """
        with self._lock:
            if client_id in self._public_keys:
                return self._public_keys[client_id]
        return self._enrolled().get(client_id)

    def index_of(self, client_id: str) -> int | None:
        """The index of a participant, or ``None`` if it is not enrolled."""
        with self._lock:
            if client_id in self._indices:
                return self._indices[client_id]
        roster = self.participants()
        return roster.index(client_id) if client_id in roster else None

    def enroll(self, client_id: str, public_key: bytes | None = None) -> ParticipantKey:
        """Enroll a participant (the operator only: the server signs the enrollment).

        Args:
            client_id: The participant's id.
            public_key: Its raw Ed25519 public key (from ``optuna-fedbo keygen`` on its
                machine); ``None`` makes a new key pair, returned as a credential to hand over
                (``ParticipantKey.save(name, path)``).

        Returns:
            The participant's credential (without a private key if ``public_key`` was given).

        Raises:
            ValueError: If this process does not hold the server's keys, the id is invalid or
                already enrolled with another key, or the federation is full.
        """
        check_client_id(client_id)
        if not self.is_operator:
            raise ValueError(
                f"Only the operator of federation {self.name!r} can enroll participants (its "
                "server keys are not on this machine)."
            )
        if public_key is None:
            key = ParticipantKey.generate(self.federation_id, client_id, self.fingerprint)
        else:
            key = ParticipantKey(
                self.federation_id, client_id, None, self.fingerprint, public_key=public_key
            )
        roster = self._store.roster()
        if client_id in roster:
            if public_key is not None and roster[client_id] == public_key:
                return key
            raise ValueError(
                f"{client_id!r} is already enrolled in federation {self.name!r} with another "
                "key; enroll the participant under a new id."
            )
        if len(roster) >= self.n_clients:
            raise ValueError(self._full_message(client_id))
        self._store.register(client_id, self._trust.enrollment(client_id, key.public_key))
        if client_id not in self._enrolled():
            raise ValueError(self._full_message(client_id))
        return key

    def _participant_key(self, client_id: str) -> ParticipantKey:
        """This process's signing key of ``client_id`` (verified against the enrollment).

        Raises:
            ValueError: If the participant is not enrolled, or this machine has no (valid) key
                of it; nothing is written.
        """
        with self._lock:
            if client_id in self._keys:
                return self._keys[client_id]
        enrolled = self.public_key_of(client_id)
        key = find_participant_key(self.federation_id, client_id, self._key_dir)
        if enrolled is None:
            raise ValueError(
                f"{client_id!r} is not enrolled in federation {self.name!r}: the operator enrolls "
                f"it with `optuna-fedbo enroll --storage URL --name {self.name} --client-id "
                f"{client_id} --out {client_id}.cred`, and you install the file with "
                f"`optuna-fedbo import-credential {client_id}.cred`."
            )
        where = ParticipantKey.path(self.federation_id, client_id, self._key_dir)
        if key is None or not key.has_private_key:
            raise ValueError(
                f"{client_id!r} is enrolled in federation {self.name!r} but its private key is "
                f"not on this machine ({where}): install the credential the operator gave you "
                "with `optuna-fedbo import-credential FILE`."
            )
        if key.public_key != enrolled:
            raise ValueError(
                f"The key of {client_id!r} in {where} is not the one enrolled in federation "
                f"{self.name!r}: install the credential the operator gave you for it."
            )
        with self._lock:
            self._keys[client_id] = key
        return key

    def join(self, client_id: str) -> Participant:
        """Take part as ``client_id`` (idempotent: rejoining returns the same index).

        The participant must be enrolled and this machine must hold its key. On the operator's
        machine (this process holds the server's keys, e.g. one machine, or an in-memory
        storage) a participant that is not enrolled yet is enrolled here, with a key made in
        the key directory. The key directory pins the configuration joined (per storage and
        name), so that another federation under this name is refused later.

        Raises:
            ValueError: If the id is invalid, not enrolled (and this is not the operator), its
                key is missing or does not match, or ``N`` others are enrolled. Nothing is
                written to the storage then.
        """
        check_client_id(client_id)
        enrolled = self._enrolled()
        if client_id not in enrolled and self.is_operator:
            if len(enrolled) >= self.n_clients:
                raise ValueError(self._full_message(client_id))
            key = find_participant_key(self.federation_id, client_id, self._key_dir)
            if key is None:
                key = ParticipantKey.generate(self.federation_id, client_id, self.fingerprint)
                if not persists_keys(self._store.storage):
                    remember(self.federation_id, client_id, key)
                else:
                    try:
                        key.save(self.name, key_dir=self._key_dir)
                    except FileExistsError:  # another process of this id made it first
                        key = ParticipantKey.load(
                            ParticipantKey.path(self.federation_id, client_id, self._key_dir)
                        )
            self.enroll(client_id, key.public_key)
            enrolled = self._enrolled()
        self._participant_key(client_id)
        pin_joined(self._store, self._trust, self._key_dir)
        index = list(enrolled).index(client_id)
        subregion_of = getattr(self.channel, "subregion_of", None)
        subregion = 0 if subregion_of is None else subregion_of(index)
        return Participant(client_id=client_id, index=index, subregion=subregion)

    def _full_message(self, client_id: str) -> str:
        return (
            f"Federation {self.name!r} is full: its {self.n_clients} participants are enrolled "
            f"and {client_id!r} is not one of them."
        )


__all__ = ["Membership", "Participant"]
