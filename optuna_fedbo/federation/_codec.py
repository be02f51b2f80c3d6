"""Exact, compact JSON encodings of the federation's records (numbers, vectors, hashes)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import numpy as np


def canonical_json(value: Any) -> str:
    """Serialize ``value`` to JSON with sorted keys and no whitespace (stable across runs)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def digest(text: str) -> str:
    """The SHA-256 hex digest of a string."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def encode_array(array: np.ndarray) -> dict[str, Any]:
    """Encode a float array exactly: little-endian float64 bytes in base64 plus the shape."""
    values = np.ascontiguousarray(np.asarray(array, dtype="<f8"))
    return {
        "shape": list(values.shape),
        "f8": base64.b64encode(values.tobytes()).decode("ascii"),
    }


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
    return hashlib.sha256(values.tobytes()).hexdigest()[:32]
