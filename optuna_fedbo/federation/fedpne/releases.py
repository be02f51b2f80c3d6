"""What a DP-Fed-PNE participant released, kept so that a restart never noises it again.

Under DP-Fed-PNE each participant adds Gaussian noise to its rewards before it uploads a phase's
node means (Algorithm 3): the guarantee holds because each reward enters *one* noisy release. A
participant whose upload was erased from the storage (or that restarts without knowing whether
it was sent) must therefore send the *same* release again, never draw new noise for the same
rewards: a curious server holding two noisy copies would average the noise away.

So the node means of a phase are kept in the participant's key folder before they are sent
(``participants/<federation id>/<id digest>.releases/<phase>``, mode 0600, outside the storage
that anyone with the URL can erase), sealed to the participant itself: ChaCha20-Poly1305 under a
key derived with HKDF from the participant's private key
(:meth:`~optuna_fedbo.federation.keys.ParticipantKey.derive_secret`), bound to the federation,
the participant, the configuration and the phase. A kept release is re-sent as is; one that does
not open, or that belongs to other nodes than the phase's, stops the upload (nothing is noised
again). A federation in an in-memory storage (one process) keeps its releases in memory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import threading
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from optuna_fedbo.core.fedpne import Phase
from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation.keys import b64
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.keys import unb64
from optuna_fedbo.federation.location import persists_keys

RELEASE_FORMAT = 1
_PURPOSE = "fedpne-release"

_memory_lock = threading.Lock()
_MEMORY: dict[tuple[str, str, int], dict[str, float]] = {}


class ReleaseError(ValueError):
    """A kept release that cannot be re-sent: nothing is noised again (the message says why)."""


class ReleaseBook:
    """The node means one participant released, by phase.

    Args:
        federation: The federation (Fed-PNE).
        client_id: The participant (joined, with its key on this machine).
    """

    def __init__(self, federation: Any, client_id: str) -> None:
        self._federation_id = federation.federation_id
        self._client_id = client_id
        self._config_hash = federation.config_hash
        self._folder: Path | None = None
        self._cipher: ChaCha20Poly1305 | None = None
        if persists_keys(federation.storage):
            key: ParticipantKey = federation._participant_key(client_id)
            where = ParticipantKey.path(self._federation_id, client_id, federation._key_dir)
            self._folder = where.with_name(where.stem + ".releases")
            self._cipher = ChaCha20Poly1305(key.derive_secret(_PURPOSE))

    def _path(self, phase: Phase) -> Path:
        assert self._folder is not None
        return self._folder / f"{phase.index:06d}"

    def _context(self, phase: Phase) -> bytes:
        return canonical_json(
            {
                "federation": self._federation_id,
                "client": self._client_id,
                "config": self._config_hash,
                "phase": phase.index,
            }
        ).encode()

    def recall(self, phase: Phase) -> dict[str, float] | None:
        """The node means released for ``phase``, bit for bit, or ``None`` if none was.

        Raises:
            ReleaseError: If the kept release cannot be opened or covers other nodes.
        """
        if self._folder is None:
            with _memory_lock:
                means = _MEMORY.get((self._federation_id, self._client_id, phase.index))
            return None if means is None else self._checked(phase, dict(means), "memory")
        path = self._path(phase)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            nonce = unb64(record["nonce"], "nonce", 12)
            sealed = unb64(record["ct"], "ciphertext")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise self._unusable(path, f"corrupt ({type(error).__name__})") from None
        assert self._cipher is not None
        try:
            text = self._cipher.decrypt(nonce, sealed, self._context(phase))
        except InvalidTag:
            raise self._unusable(path, "it does not open with this participant's key") from None
        return self._checked(phase, json.loads(text), str(path))

    def keep(self, phase: Phase, means: dict[str, float]) -> dict[str, float]:
        """Keep the node means of ``phase`` before they are sent (never overwrites one).

        Returns:
            The release kept for ``phase``: ``means``, or the one another worker of the
            participant kept first (sharing this key folder), which is then the one to send.
        """
        if self._folder is None:
            with _memory_lock:
                key = (self._federation_id, self._client_id, phase.index)
                return dict(_MEMORY.setdefault(key, means))
        assert self._cipher is not None
        nonce = os.urandom(12)
        sealed = self._cipher.encrypt(nonce, canonical_json(means).encode(), self._context(phase))
        record = {"v": RELEASE_FORMAT, "nonce": b64(nonce), "ct": b64(sealed)}
        self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._path(phase)
        staged = path.with_suffix(f".{os.getpid()}.tmp")
        descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(staged, path)  # atomic, and fails if a release of this phase is kept
        except FileExistsError:
            kept = self.recall(phase)
            assert kept is not None
            return kept
        finally:
            staged.unlink()
        return means

    def _checked(self, phase: Phase, means: Any, where: str) -> dict[str, float]:
        nodes = {node.key for node in phase.nodes}
        if not isinstance(means, dict) or set(means) != nodes:
            raise ReleaseError(
                f"{self._client_id}: the release kept for phase {phase.index} ({where}) covers "
                "other nodes than the published phase: the federation's history changed "
                "(restored or tampered with). Its rewards are not noised and sent again."
            )
        return {key: float(value) for key, value in means.items()}

    def _unusable(self, path: Path, why: str) -> ReleaseError:
        return ReleaseError(
            f"{self._client_id}: the release kept for this phase in {path} is unusable ({why}); "
            "its rewards are not noised and sent again. Restore the file from your backup."
        )


__all__ = ["ReleaseBook", "ReleaseError"]
