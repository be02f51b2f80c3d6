"""Keys and identities of a federation: the server's key pairs and the participants' signing keys.

The server has two key pairs (``cryptography``'s Ed25519 for signatures, X25519 for HPKE
sealing); its *identity* (the two public keys and the federation's random id) is part of the
federation's hashed configuration, and its *fingerprint* (SHA-256 of the identity) is what an
operator gives out of band. Each participant has its own Ed25519 signing key, enrolled by the
operator (the server signs the enrollment).

Private keys live in key files that only their owner can read (mode 0600), in a per-user key
directory: ``$OPTUNA_FEDBO_HOME``, else ``$XDG_CONFIG_HOME/optuna-fedbo``, else
``~/.config/optuna-fedbo``. Layout::

    servers/<federation id>.json                      the server's private keys (the operator's)
    participants/<federation id>/<id digest>.json     a participant's credential
    joined/<storage and name digest>.json             the configuration joined (see .pinning)

Every other file of a federation sits beside these, named by its id (``servers/<federation
id>.*``, ``participants/<federation id>/``), so that ``optuna-fedbo list`` and ``delete`` find
it (:mod:`.key_folder`). Folders are made for their owner only (0700); a key folder others can
write is refused.

A federation in an in-memory storage lives in one process: its keys are kept in memory only and
the key folder is never written (:func:`~optuna_fedbo.federation.location.persists_keys`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
import hashlib
import json
import os
from pathlib import Path
import stat
import threading
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

HOME_ENV = "OPTUNA_FEDBO_HOME"
SERVER_KEY_TYPE = "optuna-fedbo-server-key"
PARTICIPANT_KEY_TYPE = "optuna-fedbo-participant-key"
KEY_FILE_VERSION = 1

_RAW = serialization.Encoding.Raw
_memory_lock = threading.Lock()
#: Keys of federations in in-memory storages (one process): never written to disk.
_MEMORY: dict[tuple[str, str | None], Any] = {}


class KeyFileError(ValueError):
    """A key file that cannot be used (missing, corrupt, readable by others): says the fix."""


def key_home(key_dir: str | os.PathLike[str] | None = None) -> Path:
    """The key directory: ``key_dir`` if given, else the per-user default."""
    if key_dir is not None:
        return Path(key_dir).expanduser()
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join("~", ".config")
    return Path(config).expanduser() / "optuna-fedbo"


def b64(data: bytes) -> str:
    """Standard base64 text of ``data``."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: Any, what: str, length: int | None = None) -> bytes:
    """Decode base64 ``text`` (of ``length`` bytes); ``ValueError`` naming ``what`` if not."""
    try:
        data = base64.b64decode(text, validate=True)
    except (TypeError, ValueError):
        raise ValueError(f"{what} is not valid base64") from None
    if length is not None and len(data) != length:
        raise ValueError(f"{what} has {len(data)} bytes, expected {length}")
    return data


def check_fingerprint(text: Any) -> str:
    """Normalize a server fingerprint (64 hex digits; colons, spaces and case are ignored).

    Raises:
        ValueError: If it is not a fingerprint.
    """
    if not isinstance(text, str):
        raise ValueError(f"A server fingerprint must be a string, got {text!r}.")
    value = text.strip().lower().removeprefix("sha256:").replace(":", "").replace(" ", "")
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(
            f"{text!r} is not a server fingerprint (64 hexadecimal digits, as printed by "
            "`optuna-fedbo fingerprint`)."
        )
    return value


def _message(federation_id: str, purpose: str, message: bytes) -> bytes:
    """What is signed: a domain-separated message bound to the federation and its purpose."""
    header = f"optuna-fedbo/1\n{federation_id}\n{purpose}\n".encode()
    return header + message


def verify_signature(
    public_key: bytes, federation_id: str, purpose: str, message: bytes, signature: bytes
) -> bool:
    """Whether ``signature`` is ``public_key``'s signature of ``message`` for ``purpose``."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(
            signature, _message(federation_id, purpose, message)
        )
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True)
class ServerIdentity:
    """The public side of a federation's server (part of the hashed configuration).

    Attributes:
        federation_id: Random id of the federation (names its key files; binds signatures).
        signing_key: Raw Ed25519 public key (32 bytes).
        sealing_key: Raw X25519 public key (32 bytes): uploads are sealed to it (HPKE).
    """

    federation_id: str
    signing_key: bytes
    sealing_key: bytes

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the identity, 64 hex digits: what an operator gives out of band."""
        record = f"{self.federation_id}\n{b64(self.signing_key)}\n{b64(self.sealing_key)}"
        return hashlib.sha256(b"optuna-fedbo-server/1\n" + record.encode()).hexdigest()

    def to_dict(self) -> dict[str, str]:
        return {
            "id": self.federation_id,
            "sign": b64(self.signing_key),
            "seal": b64(self.sealing_key),
        }

    @classmethod
    def from_dict(cls, record: Any) -> ServerIdentity:
        if not isinstance(record, dict) or set(record) != {"id", "sign", "seal"}:
            raise ValueError("The stored server identity is malformed.")
        federation_id = record["id"]
        if not isinstance(federation_id, str) or not 8 <= len(federation_id) <= 64:
            raise ValueError("The stored federation id is malformed.")
        return cls(
            federation_id=federation_id,
            signing_key=unb64(record["sign"], "the server's signing key", 32),
            sealing_key=unb64(record["seal"], "the server's sealing key", 32),
        )

    def verify(self, purpose: str, message: bytes, signature: bytes) -> bool:
        """Whether the server signed ``message`` for ``purpose``."""
        return verify_signature(self.signing_key, self.federation_id, purpose, message, signature)

    def sealing_public_key(self) -> X25519PublicKey:
        return X25519PublicKey.from_public_bytes(self.sealing_key)


def check_key_folders(folder: Path, home: Path) -> None:
    """Refuse the key directory ``home``, or a folder in it down to ``folder``, that other users
    can write.

    Whoever can write a folder can replace or plant the key files in it (another server's key,
    another credential, another pinned configuration).

    Raises:
        KeyFileError: Naming the folder and the ``chmod`` that fixes it.
    """
    if os.name != "posix":
        return
    folders = [home]
    if home in folder.parents:
        folders += [home / part for part in reversed(folder.relative_to(home).parents[:-1])]
        folders.append(folder)
    for each in folders:
        try:
            mode = each.stat().st_mode
        except FileNotFoundError:
            return
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise KeyFileError(
                f"Key folder {each} can be written by other users (mode "
                f"{stat.S_IMODE(mode):04o}): run `chmod go-w {each}` (and check that the key "
                "files in it are yours)."
            )


def _write_private(
    path: Path, record: dict[str, Any], *, exclusive: bool, home: Path | None = None
) -> None:
    """Write a key file readable by its owner only (mode 0600, created so, never widened).

    Inside the key directory ``home``, every folder is made for its owner only (0700) and
    refused if others can write it.
    """
    if home is None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    else:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        for folder in reversed(path.relative_to(home).parents[:-1]):
            (home / folder).mkdir(exist_ok=True, mode=0o700)
        check_key_folders(path.parent, home)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    descriptor = os.open(path, flags, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
    os.chmod(path, 0o600)


def _read_private(path: Path, kind: str) -> dict[str, Any]:
    """Read a key file, refusing one that others can read or that is not a ``kind`` key file."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise KeyFileError(f"Key file {path} does not exist.") from None
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"Key file {path} is accessible by other users (mode {stat.S_IMODE(mode):04o}): "
            f"run `chmod 600 {path}` (and check who could have read it)."
        )
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise KeyFileError(
            f"Key file {path} is corrupt ({type(error).__name__}); restore it from your backup "
            "or, for a participant, ask the operator for a new credential."
        ) from None
    if not isinstance(record, dict) or record.get("type") != kind:
        raise KeyFileError(
            f"Key file {path} is not a {kind} file; restore it from your backup or, for a "
            "participant, ask the operator for a new credential."
        )
    if record.get("version") != KEY_FILE_VERSION:
        raise KeyFileError(f"Key file {path} has unsupported version {record.get('version')!r}.")
    return record


class ServerKeys:
    """The server's private keys (the operator keeps them; they never enter the storage).

    Args:
        federation_id: The federation's random id.
        signing: Ed25519 private key.
        sealing: X25519 private key.
    """

    def __init__(
        self, federation_id: str, signing: Ed25519PrivateKey, sealing: X25519PrivateKey
    ) -> None:
        self._signing = signing
        self._sealing = sealing
        self.identity = ServerIdentity(
            federation_id=federation_id,
            signing_key=signing.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw),
            sealing_key=sealing.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw),
        )
        #: ``(federation name, configuration hash)`` these keys serve (see :meth:`bind`).
        self.made_for: tuple[str, str] | None = None

    def bind(self, name: str, config_hash: str) -> None:
        """Record the one federation these keys serve: its name and configuration hash."""
        self.made_for = (name, config_hash)

    @classmethod
    def generate(cls) -> ServerKeys:
        """New key pairs for a new federation (with a new random federation id)."""
        return cls(os.urandom(16).hex(), Ed25519PrivateKey.generate(), X25519PrivateKey.generate())

    def sign(self, purpose: str, message: bytes) -> bytes:
        """The server's signature of ``message`` for ``purpose``."""
        return self._signing.sign(_message(self.identity.federation_id, purpose, message))

    @property
    def sealing_private_key(self) -> X25519PrivateKey:
        return self._sealing

    @staticmethod
    def path(federation_id: str, key_dir: str | os.PathLike[str] | None = None) -> Path:
        """Where the server key file of a federation lives."""
        return key_home(key_dir) / "servers" / f"{federation_id}.json"

    def save(self, key_dir: str | os.PathLike[str] | None = None) -> Path:
        """Write the key file (mode 0600; refuses to overwrite one), after :meth:`bind`."""
        if self.made_for is None:
            raise ValueError("Server keys are saved only once bound to their configuration.")
        name, config_hash = self.made_for
        path = self.path(self.identity.federation_id, key_dir)
        private = serialization.PrivateFormat.Raw
        none = serialization.NoEncryption()
        _write_private(
            path,
            {
                "type": SERVER_KEY_TYPE,
                "version": KEY_FILE_VERSION,
                "federation": name,
                "config": config_hash,
                "federation_id": self.identity.federation_id,
                "fingerprint": self.identity.fingerprint,
                "signing_key": b64(self._signing.private_bytes(_RAW, private, none)),
                "sealing_key": b64(self._sealing.private_bytes(_RAW, private, none)),
            },
            exclusive=True,
            home=key_home(key_dir),
        )
        return path

    @classmethod
    def load(cls, path: Path) -> ServerKeys:
        """Read a server key file.

        Raises:
            KeyFileError: If it is missing, corrupt or readable by others.
        """
        record = _read_private(path, SERVER_KEY_TYPE)
        try:
            keys = cls(
                str(record["federation_id"]),
                Ed25519PrivateKey.from_private_bytes(
                    unb64(record["signing_key"], "signing key", 32)
                ),
                X25519PrivateKey.from_private_bytes(
                    unb64(record["sealing_key"], "sealing key", 32)
                ),
            )
        except (KeyError, ValueError) as error:
            raise KeyFileError(
                f"Key file {path} is corrupt ({error}); restore it from your backup."
            ) from None
        if keys.identity.fingerprint != record.get("fingerprint"):
            raise KeyFileError(
                f"Key file {path} is corrupt (its keys do not match its fingerprint); restore it "
                "from your backup."
            )
        name, config_hash = record.get("federation"), record.get("config")
        if isinstance(name, str) and isinstance(config_hash, str):
            keys.bind(name, config_hash)
        return keys


class ParticipantKey:
    """A participant's credential: its private signing key and the server it trusts.

    Args:
        federation_id: The federation's random id.
        client_id: The participant's id.
        signing: Its Ed25519 private key.
        server_fingerprint: The pinned fingerprint of the federation's server.
    """

    def __init__(
        self,
        federation_id: str,
        client_id: str,
        signing: Ed25519PrivateKey | None,
        server_fingerprint: str,
        public_key: bytes | None = None,
    ) -> None:
        self.federation_id = federation_id
        self.client_id = client_id
        self._signing = signing
        self.server_fingerprint = check_fingerprint(server_fingerprint)
        if signing is not None:
            public_key = signing.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw)
        if public_key is None:
            raise ValueError("A participant key needs a private or a public key.")
        #: Raw Ed25519 public key (what the operator enrolls).
        self.public_key: bytes = public_key

    @classmethod
    def generate(
        cls, federation_id: str, client_id: str, server_fingerprint: str
    ) -> ParticipantKey:
        return cls(federation_id, client_id, Ed25519PrivateKey.generate(), server_fingerprint)

    @property
    def has_private_key(self) -> bool:
        return self._signing is not None

    def sign(self, purpose: str, message: bytes) -> bytes:
        """The participant's signature of ``message`` for ``purpose``."""
        if self._signing is None:
            raise ValueError(
                f"This credential of {self.client_id!r} holds no private key; it cannot sign."
            )
        return self._signing.sign(_message(self.federation_id, purpose, message))

    def derive_secret(self, purpose: str) -> bytes:
        """A 32-byte secret only this participant can derive (HKDF-SHA256 of its private key,
        bound to the federation, the participant and ``purpose``): e.g. to seal records to
        itself."""
        if self._signing is None:
            raise ValueError(f"This credential of {self.client_id!r} holds no private key.")
        raw = self._signing.private_bytes(
            _RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        info = _message(self.federation_id, purpose, self.client_id.encode())
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(raw)

    @staticmethod
    def path(
        federation_id: str, client_id: str, key_dir: str | os.PathLike[str] | None = None
    ) -> Path:
        """Where a participant's credential lives in the key directory."""
        name = hashlib.sha256(client_id.encode()).hexdigest()[:24]
        return key_home(key_dir) / "participants" / federation_id / f"{name}.json"

    def to_record(self, name: str) -> dict[str, Any]:
        record: dict[str, Any] = {
            "type": PARTICIPANT_KEY_TYPE,
            "version": KEY_FILE_VERSION,
            "federation": name,
            "federation_id": self.federation_id,
            "client_id": self.client_id,
            "server_fingerprint": self.server_fingerprint,
            "public_key": b64(self.public_key),
        }
        if self._signing is not None:
            record["signing_key"] = b64(
                self._signing.private_bytes(
                    _RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption()
                )
            )
        return record

    def save(
        self, name: str, path: Path | None = None, *, key_dir: str | os.PathLike[str] | None = None
    ) -> Path:
        """Write the credential (mode 0600) to ``path`` or into the key directory."""
        target = self.path(self.federation_id, self.client_id, key_dir) if path is None else path
        home = key_home(key_dir) if path is None else None
        _write_private(Path(target), self.to_record(name), exclusive=path is None, home=home)
        return Path(target)

    @classmethod
    def load(cls, path: Path) -> ParticipantKey:
        """Read a credential.

        Raises:
            KeyFileError: If it is missing, corrupt or readable by others.
        """
        record = _read_private(Path(path), PARTICIPANT_KEY_TYPE)
        try:
            signing = (
                Ed25519PrivateKey.from_private_bytes(
                    unb64(record["signing_key"], "signing key", 32)
                )
                if "signing_key" in record
                else None
            )
            key = cls(
                str(record["federation_id"]),
                str(record["client_id"]),
                signing,
                record["server_fingerprint"],
                unb64(record["public_key"], "public key", 32),
            )
        except (KeyError, ValueError) as error:
            raise KeyFileError(
                f"Key file {path} is corrupt ({error}); ask the operator for a new credential."
            ) from None
        if b64(key.public_key) != record["public_key"]:
            raise KeyFileError(f"Key file {path} is corrupt (private and public key differ).")
        return key


# ------------------------------------------------------------------------ finding keys
def remember(federation_id: str, client_id: str | None, key: Any) -> None:
    """Keep a key of an in-memory federation in this process (never on disk)."""
    with _memory_lock:
        _MEMORY[(federation_id, client_id)] = key


def forget(federation_id: str) -> None:
    """Drop every key of an in-memory federation from this process (it was deleted)."""
    with _memory_lock:
        for key in [k for k in _MEMORY if k[0] == federation_id]:
            del _MEMORY[key]


def find_server_keys(
    federation_id: str, key_dir: str | os.PathLike[str] | None = None
) -> ServerKeys | None:
    """The server keys of a federation held by this process or this user, or ``None``.

    Raises:
        KeyFileError: If the key file exists but cannot be used.
    """
    with _memory_lock:
        if (federation_id, None) in _MEMORY:
            return _MEMORY[(federation_id, None)]
    path = ServerKeys.path(federation_id, key_dir)
    check_key_folders(path.parent, key_home(key_dir))
    if not path.exists():
        return None
    keys = ServerKeys.load(path)
    if keys.identity.federation_id != federation_id:
        raise KeyFileError(f"Key file {path} belongs to another federation.")
    return keys


def find_participant_key(
    federation_id: str, client_id: str, key_dir: str | os.PathLike[str] | None = None
) -> ParticipantKey | None:
    """A participant's credential held by this process or this user, or ``None``.

    Raises:
        KeyFileError: If the credential exists but cannot be used.
    """
    with _memory_lock:
        if (federation_id, client_id) in _MEMORY:
            return _MEMORY[(federation_id, client_id)]
    path = ParticipantKey.path(federation_id, client_id, key_dir)
    check_key_folders(path.parent, key_home(key_dir))
    if not path.exists():
        return None
    key = ParticipantKey.load(path)
    if key.federation_id != federation_id or key.client_id != client_id:
        raise KeyFileError(f"Key file {path} belongs to another federation or participant.")
    return key


def pinned_fingerprint(
    federation_id: str, key_dir: str | os.PathLike[str] | None = None
) -> str | None:
    """The server fingerprint this user pinned for a federation (its server key file or any of
    its participant credentials), or ``None``.

    Raises:
        KeyFileError: If a key file exists but cannot be used.
    """
    keys = find_server_keys(federation_id, key_dir)
    if keys is not None:
        return keys.identity.fingerprint
    with _memory_lock:
        for (fid, client), key in _MEMORY.items():
            if fid == federation_id and client is not None:
                return key.server_fingerprint
    folder = key_home(key_dir) / "participants" / federation_id
    check_key_folders(folder, key_home(key_dir))
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        return ParticipantKey.load(path).server_fingerprint
    return None


def import_credential(
    path: str | os.PathLike[str], key_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Install a participant credential (from ``optuna-fedbo enroll``) into the key directory.

    Returns:
        Where it was installed.

    Raises:
        KeyFileError: If the file is not a usable credential or another one is installed.
    """
    key = ParticipantKey.load(Path(path))
    record = _read_private(Path(path), PARTICIPANT_KEY_TYPE)  # what was just read and checked
    target = ParticipantKey.path(key.federation_id, key.client_id, key_dir)
    check_key_folders(target.parent, key_home(key_dir))
    if target.exists():
        existing = ParticipantKey.load(target)
        if existing.public_key == key.public_key and (
            existing.has_private_key or not key.has_private_key
        ):
            return target
        if existing.public_key != key.public_key:
            raise KeyFileError(
                f"Another key of {key.client_id!r} is installed at {target}; remove it first if "
                "the operator re-enrolled you."
            )
    _write_private(target, record, exclusive=False, home=key_home(key_dir))
    return target


__all__ = [
    "HOME_ENV",
    "KeyFileError",
    "ParticipantKey",
    "ServerIdentity",
    "ServerKeys",
    "check_fingerprint",
    "find_participant_key",
    "find_server_keys",
    "import_credential",
    "key_home",
    "pinned_fingerprint",
]
