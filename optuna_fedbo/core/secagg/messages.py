"""The protocol's messages: plain dataclasses bound to one round, with ``to_dict``/``from_dict``.

Every message names its federation, round and setup digest (and its sender or recipient), and
:meth:`Message.check_bound` refuses one made for another round, federation, participant set or
sender. Carried over the federation's storage relay, a participant's message is an upload (sealed
to the server and signed by its enrolled key, as uploads are today) and a server message is a
signed record; :class:`AdvertiseKeys` and :class:`ConsistencySignature` are in addition signed by
the participant for its *peers* (the server relays them and must not be able to forge them).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
import hashlib
from typing import Any
from typing import ClassVar

import numpy as np

from optuna_fedbo.core.secagg.setup import canonical_bytes
from optuna_fedbo.core.secagg.setup import RoundSetup


class MessageRejected(ValueError):
    """A protocol message that is malformed, forged, out of order or bound to another round."""


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise MessageRejected(f"{what} is not base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise MessageRejected(f"{what} is not valid base64") from None


def _ids(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MessageRejected(f"{what} is not a list of participant ids")
    if len(set(value)) != len(value):
        raise MessageRejected(f"{what} repeats a participant")
    return tuple(value)


def _bytes_map(value: Any, what: str) -> dict[str, bytes]:
    if not isinstance(value, dict):
        raise MessageRejected(f"{what} is not a map")
    return {str(k): _unb64(v, f"{what}[{k}]") for k, v in value.items()}


def _array(value: Any, what: str) -> np.ndarray:
    raw = _unb64(value, what)
    if len(raw) % 8:
        raise MessageRejected(f"{what} is not a vector of 64-bit ring elements")
    return _elements(raw)


def _elements(raw: bytes | memoryview) -> np.ndarray:
    """Little-endian 64-bit ring elements (a copy: the message owns its vector)."""
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64)


_ENCODE = {
    "str": lambda v: v,
    "int": lambda v: int(v),
    "bytes": _b64,
    "ids": list,
    "bytes_map": lambda m: {k: _b64(v) for k, v in sorted(m.items())},
    "array": lambda a: _b64(np.ascontiguousarray(a, dtype="<u8").tobytes()),
    "adverts": lambda xs: [x.to_dict() for x in xs],
}


def _decode(kind: str, value: Any, what: str) -> Any:
    if kind == "str":
        if not isinstance(value, str):
            raise MessageRejected(f"{what} is not a string")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise MessageRejected(f"{what} is not an integer")
        return value
    if kind == "bytes":
        return _unb64(value, what)
    if kind == "ids":
        return _ids(value, what)
    if kind == "bytes_map":
        return _bytes_map(value, what)
    if kind == "array":
        return _array(value, what)
    if not isinstance(value, list):
        raise MessageRejected(f"{what} is not a list")
    return tuple(AdvertiseKeys.from_dict(v) for v in value)


@dataclass(frozen=True)
class Message:
    """Fields common to every message: the round it belongs to."""

    kind: ClassVar[str] = ""
    _fields: ClassVar[dict[str, str]] = {}

    federation: str
    round_index: int
    setup_digest: str

    def to_dict(self) -> dict[str, Any]:
        return self._record(arrays=True)

    @classmethod
    def from_dict(cls, record: Any) -> Any:
        """Parse a record of this kind.

        Raises:
            MessageRejected: If it is of another kind or malformed.
        """
        return cls._parse(record, None)

    def to_header(self) -> tuple[dict[str, Any], list[bytes]]:
        """:meth:`to_dict` for a binary frame: each ring-element vector is replaced by the
        length of its raw little-endian bytes, which are returned in field order (a frame
        carries them after the header, without base64)."""
        record = self._record(arrays=False)
        blobs = []
        for name, codec in self._fields.items():
            if codec == "array":
                raw = np.ascontiguousarray(getattr(self, name), dtype="<u8").tobytes()
                record[name] = len(raw)
                blobs.append(raw)
        return record, blobs

    def _record(self, *, arrays: bool) -> dict[str, Any]:
        record: dict[str, Any] = {
            "kind": self.kind,
            "federation": self.federation,
            "round": self.round_index,
            "setup": self.setup_digest,
        }
        for name, codec in self._fields.items():
            if arrays or codec != "array":
                record[name] = _ENCODE[codec](getattr(self, name))
        return record

    @classmethod
    def from_header(cls, record: Any, tail: bytes) -> Any:
        """Parse a record of :meth:`to_header` whose vectors are the raw bytes ``tail``.

        Raises:
            MessageRejected: If it is of another kind or malformed, or ``tail`` is not
                exactly its vectors.
        """
        return cls._parse(record, memoryview(tail))

    @classmethod
    def _parse(cls, record: Any, tail: memoryview | None) -> Any:
        if not isinstance(record, dict) or record.get("kind") != cls.kind:
            raise MessageRejected(f"not a {cls.kind} message")
        expected = {"kind", "federation", "round", "setup", *cls._fields}
        if set(record) != expected:
            raise MessageRejected(f"a {cls.kind} message must have exactly {sorted(expected)}")
        values = {
            "federation": _decode("str", record["federation"], "federation"),
            "round_index": _decode("int", record["round"], "round"),
            "setup_digest": _decode("str", record["setup"], "setup"),
        }
        offset = 0
        for name, codec in cls._fields.items():
            what = f"{cls.kind}.{name}"
            if codec == "array" and tail is not None:
                size = _decode("int", record[name], what)
                if size < 0 or size % 8 or offset + size > len(tail):
                    raise MessageRejected(f"{what} is not a vector of 64-bit ring elements")
                values[name] = _elements(tail[offset : offset + size])
                offset += size
            else:
                values[name] = _decode(codec, record[name], what)
        if tail is not None and offset != len(tail):
            raise MessageRejected(f"a {cls.kind} message carries {len(tail) - offset} stray bytes")
        return cls(**values)

    def check_bound(self, setup: RoundSetup, party: str | None = None) -> None:
        """Refuse a message of another federation, round or setup, or from/to another party.

        Raises:
            MessageRejected: Naming the mismatch.
        """
        if self.federation != setup.federation_id:
            raise MessageRejected(f"{self.kind} made for another federation")
        if self.round_index != setup.round_index:
            raise MessageRejected(
                f"{self.kind} made for round {self.round_index}, not {setup.round_index}"
            )
        if self.setup_digest != setup.digest:
            raise MessageRejected(f"{self.kind} made for another setup of this round")
        if not ("sender" in self._fields or "recipient" in self._fields):
            return
        named = getattr(self, "sender", None) or getattr(self, "recipient", None)
        if named not in setup.participants:
            raise MessageRejected(f"{self.kind} names {named!r}, not a participant of the round")
        if party is not None and named != party:
            raise MessageRejected(f"{self.kind} names {named!r}, expected {party!r}")

    def signed_payload(self) -> bytes:
        """What a participant signs for its peers: the message without its signature."""
        record = self.to_dict()
        record.pop("signature", None)
        return canonical_bytes({"secagg": self.kind, **record})

    @staticmethod
    def base_of(setup: RoundSetup) -> dict[str, Any]:
        return {
            "federation": setup.federation_id,
            "round_index": setup.round_index,
            "setup_digest": setup.digest,
        }


@dataclass(frozen=True)
class AdvertiseKeys(Message):
    """Step 1, participant -> all: its fresh channel and mask public keys, signed for peers."""

    kind: ClassVar[str] = "secagg-advertise"
    _fields: ClassVar[dict[str, str]] = {
        "sender": "str",
        "channel_key": "bytes",
        "mask_key": "bytes",
        "signature": "bytes",
    }
    sender: str
    channel_key: bytes
    mask_key: bytes
    signature: bytes


@dataclass(frozen=True)
class KeyDirectory(Message):
    """Step 1, server -> all: the advertised keys it received (``U1``)."""

    kind: ClassVar[str] = "secagg-keys"
    _fields: ClassVar[dict[str, str]] = {"adverts": "adverts"}
    adverts: tuple[AdvertiseKeys, ...]

    def digest(self) -> bytes:
        """SHA-256 of the directory: it names one run of the setup (every run advertises fresh
        keys), so that survivor signatures of one run are worthless in a replay of it."""
        return hashlib.sha256(canonical_bytes(self.to_dict())).digest()


@dataclass(frozen=True)
class ShareKeys(Message):
    """Step 2, participant -> server: its shares, encrypted per holder, and a commitment
    ``SHA-256(setup, sender, self-mask seed)`` the server checks the rebuilt seed against."""

    kind: ClassVar[str] = "secagg-shares"
    _fields: ClassVar[dict[str, str]] = {
        "sender": "str",
        "sealed": "bytes_map",
        "commitment": "bytes",
    }
    sender: str
    sealed: dict[str, bytes]
    commitment: bytes


@dataclass(frozen=True)
class ShareBundle(Message):
    """Step 2, server -> one holder: the shares sealed for it, by owner (``U2`` of its graph)."""

    kind: ClassVar[str] = "secagg-bundle"
    _fields: ClassVar[dict[str, str]] = {"recipient": "str", "sealed": "bytes_map"}
    recipient: str
    sealed: dict[str, bytes]


@dataclass(frozen=True)
class MaskedInput(Message):
    """Step 3, participant -> server: its encoded input plus its self and pairwise masks."""

    kind: ClassVar[str] = "secagg-masked"
    _fields: ClassVar[dict[str, str]] = {"sender": "str", "masked": "array"}
    sender: str
    masked: np.ndarray


@dataclass(frozen=True)
class SurvivorList(Message):
    """Step 4, server -> all: whose masked inputs it will sum (``U3``)."""

    kind: ClassVar[str] = "secagg-survivors"
    _fields: ClassVar[dict[str, str]] = {"survivors": "ids"}
    survivors: tuple[str, ...]


@dataclass(frozen=True)
class ConsistencySignature(Message):
    """Step 4, participant -> all: its signature of the survivor list it was sent."""

    kind: ClassVar[str] = "secagg-consistency"
    _fields: ClassVar[dict[str, str]] = {
        "sender": "str",
        "survivors": "ids",
        "signature": "bytes",
    }
    sender: str
    survivors: tuple[str, ...]
    signature: bytes


@dataclass(frozen=True)
class UnmaskRequest(Message):
    """Step 5, server -> all: survivors (self-mask shares wanted), dropped (mask-key shares
    wanted) and at least ``t`` survivors' signatures of the survivor list."""

    kind: ClassVar[str] = "secagg-unmask"
    _fields: ClassVar[dict[str, str]] = {
        "survivors": "ids",
        "dropped": "ids",
        "signatures": "bytes_map",
    }
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]
    signatures: dict[str, bytes]


@dataclass(frozen=True)
class UnmaskResponse(Message):
    """Step 5, participant -> server: one kind of share per peer, never both."""

    kind: ClassVar[str] = "secagg-reveal"
    _fields: ClassVar[dict[str, str]] = {
        "sender": "str",
        "self_mask_shares": "bytes_map",
        "mask_key_shares": "bytes_map",
    }
    sender: str
    self_mask_shares: dict[str, bytes]
    mask_key_shares: dict[str, bytes]


MESSAGE_KINDS: dict[str, type[Message]] = {
    cls.kind: cls
    for cls in (
        AdvertiseKeys,
        KeyDirectory,
        ShareKeys,
        ShareBundle,
        MaskedInput,
        SurvivorList,
        ConsistencySignature,
        UnmaskRequest,
        UnmaskResponse,
    )
}


def message_from_header(record: Any, tail: bytes) -> Message:
    """Parse any protocol message of a binary frame (:meth:`Message.to_header`) by its
    ``kind``.

    Raises:
        MessageRejected: For an unknown kind, a malformed record or stray bytes.
    """
    kind = record.get("kind") if isinstance(record, dict) else None
    if kind not in MESSAGE_KINDS:
        raise MessageRejected(f"unknown secure-aggregation message kind {kind!r}")
    return MESSAGE_KINDS[kind].from_header(record, tail)


def message_from_dict(record: Any) -> Message:
    """Parse any protocol message by its ``kind``.

    Raises:
        MessageRejected: For an unknown kind or a malformed record.
    """
    kind = record.get("kind") if isinstance(record, dict) else None
    if kind not in MESSAGE_KINDS:
        raise MessageRejected(f"unknown secure-aggregation message kind {kind!r}")
    return MESSAGE_KINDS[kind].from_dict(record)
