"""Exact, compact JSON encodings of the federation's records (numbers, vectors, hashes)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import numpy as np

#: Base64 texts at least this long are written into JSON unscanned (:class:`Base64Text`).
_VERBATIM_FROM = 4096


class Base64Text(str):
    """Text of :func:`base64_text`: its alphabet needs no JSON escapes, so
    :func:`canonical_json` writes it as is instead of scanning it (a pooled upload's envelope
    carries one of about 0.45 million characters in 4-D, a broadcast's vectors another)."""

    __slots__ = ()


def base64_text(data: bytes) -> str:
    """Standard base64 text of ``data`` (a :class:`Base64Text` when long)."""
    text = base64.b64encode(data).decode("ascii")
    return Base64Text(text) if len(text) >= _VERBATIM_FROM else text


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _holds_verbatim(value: Any) -> bool:
    """Whether a dict holds a :class:`Base64Text`, directly or in nested dicts."""
    return any(
        isinstance(v, Base64Text) or (isinstance(v, dict) and _holds_verbatim(v))
        for v in value.values()
    )


def _pieces(value: Any, out: list[str]) -> None:
    """Append the pieces of ``value``'s canonical JSON to ``out`` (as :func:`_dumps` writes
    it, :class:`Base64Text` unscanned)."""
    if isinstance(value, Base64Text):
        out.extend(('"', value, '"'))
    elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
        out.append("{")
        for i, key in enumerate(sorted(value)):
            out.extend(("," if i else "", _dumps(key), ":"))
            _pieces(value[key], out)
        out.append("}")
    else:
        out.append(_dumps(value))


def canonical_json(value: Any) -> str:
    """Serialize ``value`` to JSON with sorted keys and no whitespace (stable across runs)."""
    if isinstance(value, dict) and _holds_verbatim(value):
        out: list[str] = []
        _pieces(value, out)
        return "".join(out)
    return _dumps(value)


def binary_frame(header: Any, *blobs: bytes) -> bytes:
    """A binary frame: ``header``'s canonical JSON (which holds no newline), a newline, then
    ``blobs``' raw bytes (the plaintext of an upload that carries vectors: no base64 inside
    the envelope's own)."""
    return b"".join((canonical_json(header).encode(), b"\n", *blobs))


def split_frame(frame: Any) -> tuple[Any, bytes]:
    """``(header, tail)`` of a :func:`binary_frame`: the parsed JSON header and the raw bytes.

    Raises:
        ValueError: If ``frame`` is not bytes, has no newline or its header is not JSON.
    """
    if not isinstance(frame, bytes):
        raise ValueError("a frame must be bytes")
    head, newline, tail = frame.partition(b"\n")
    if not newline:
        raise ValueError("no frame header")
    return json.loads(head), tail


def digest(text: str) -> str:
    """The SHA-256 hex digest of a string."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def encode_array(array: np.ndarray) -> dict[str, Any]:
    """Encode a float array exactly: little-endian float64 bytes in base64 plus the shape."""
    values = np.ascontiguousarray(np.asarray(array, dtype="<f8"))
    return {"shape": list(values.shape), "f8": base64_text(values.tobytes())}


def decode_array(record: Any) -> np.ndarray:
    """Decode :func:`encode_array`'s output.

    Raises:
        ValueError: If the record is malformed (wrong keys, bad base64, size mismatch).
    """
    if not isinstance(record, dict) or set(record) != {"shape", "f8"}:
        raise ValueError("an array record must be an object with exactly 'shape' and 'f8'.")
    shape = record["shape"]
    if not isinstance(shape, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape
    ):
        raise ValueError(f"invalid array shape {shape!r}.")
    try:
        raw = base64.b64decode(record["f8"], validate=True)
    except (TypeError, ValueError) as error:
        raise ValueError(f"invalid base64 array payload: {error}.") from None
    expected = 8 * int(np.prod(shape, dtype=np.int64))
    if len(raw) != expected:
        raise ValueError(f"array payload has {len(raw)} bytes, expected {expected}.")
    return np.frombuffer(raw, dtype="<f8").reshape(shape).astype(float)


def vector_digest(vector: np.ndarray) -> str:
    """A short fingerprint of a float vector (to recognise one's own upload in a broadcast)."""
    values = np.ascontiguousarray(np.asarray(vector, dtype="<f8"))
    return hashlib.sha256(values.data).hexdigest()[:32]  # its bytes, hashed in place
