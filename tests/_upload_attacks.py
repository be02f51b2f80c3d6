"""What a spy holding only the storage URL tries on a stored upload (shared by the upload tests).

:func:`recover` applies every decoding an attacker would try, recursively: JSON, base64 (standard
and URL-safe), hex, zlib / gzip / raw deflate / bz2 / lzma decompression, and reading the bytes as
little- and big-endian float64 and float32 at every alignment; it returns what it found of the
secret (a vector value or statistic, or a field name of the plaintext message). :func:`randomness`
measures how far the ciphertext bytes are from uniform random bytes.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import hashlib
import json
import lzma
from typing import Any
import zlib

import numpy as np
from scipy import stats

#: Field names of the plaintext messages (FTS and Fed-PNE uploads) that must never show.
PLAINTEXT_FIELDS = ('"omega"', '"f8"', '"means"', '"n_observations"', '"iteration"', '"sent_at"')
_MAX_DEPTH = 4


def secrets_of(vector: np.ndarray) -> np.ndarray:
    """The values a spy must not learn: the vector's entries and its summary statistics."""
    v = np.asarray(vector, dtype=float).ravel()
    stats_ = [v.sum(), v.mean(), np.linalg.norm(v), v.min(), v.max()]
    values = np.concatenate([v, stats_])
    # Small integers (round, counter, format) occur anywhere by chance: only distinctive values
    # identify the vector.
    return np.unique(values[np.abs(values - np.round(values)) > 1e-6])


def _decodings(blob: bytes) -> list[tuple[str, bytes]]:
    """Every transformation of ``blob`` that succeeds, with its name."""
    out: list[tuple[str, bytes]] = []
    text = blob.strip()
    if b"\n" in text:  # each line on its own (a stored upload: a header, then base64)
        out += [(f"line[{k}]", line) for k, line in enumerate(text.split(b"\n"))]
    for name, decode in (
        ("base64", lambda b: base64.b64decode(b, validate=True)),
        ("urlsafe-b64", lambda b: base64.urlsafe_b64decode(b + b"=" * (-len(b) % 4))),
        ("hex", binascii.unhexlify),
    ):
        try:
            decoded = decode(text)
        except (ValueError, binascii.Error):
            continue
        if decoded and decoded != blob:
            out.append((name, decoded))
    for name, decompress in (
        ("zlib", zlib.decompress),
        ("gzip", lambda b: zlib.decompress(b, wbits=31)),
        ("deflate", lambda b: zlib.decompress(b, wbits=-15)),
        ("bz2", bz2.decompress),
        ("lzma", lzma.decompress),
    ):
        try:
            out.append((name, decompress(blob)))
        except (zlib.error, OSError, ValueError, EOFError, lzma.LZMAError):
            continue
    return out


def _json_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_json_strings(k), *_json_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _json_strings(v)]
    return []


def _json_numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _json_numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _json_numbers(v)]
    return []


def _float_matches(blob: bytes, secrets: np.ndarray) -> int:
    """How many secrets the bytes hold as float64 (any alignment, either byte order), or as
    float32 when at least two do (one float32 coincidence in random bytes is chance)."""
    found64, found32 = np.zeros(secrets.size, bool), np.zeros(secrets.size, bool)
    secrets32 = secrets.astype(np.float32)
    for dtype, size in (("<f8", 8), (">f8", 8), ("<f4", 4), (">f4", 4)):
        for offset in range(size):
            usable = (len(blob) - offset) // size * size
            if usable <= 0:
                continue
            values = np.frombuffer(blob[offset : offset + usable], dtype=dtype)
            if size == 8:
                found64 |= np.isin(secrets, values.astype(float))
            else:
                found32 |= np.isin(secrets32, values.astype(np.float32))
    n32 = int(found32.sum())
    return int(found64.sum()) + (n32 if n32 >= 2 else 0)


def _matches(values: np.ndarray, secrets: np.ndarray) -> int:
    """How many secrets occur among ``values`` (JSON numbers, to float32 precision)."""
    if values.size == 0 or secrets.size == 0:
        return 0
    close = np.isclose(values[:, None], secrets[None, :], rtol=1e-6, atol=0.0)
    return int(close.any(axis=0).sum())


def recover(stored: str, secrets: np.ndarray) -> list[str]:
    """What an attacker without the server's key recovers from one stored upload.

    Args:
        stored: The upload's text as stored.
        secrets: The values that must stay hidden (:func:`secrets_of`).

    Returns:
        One line per leak (empty: nothing recovered).
    """
    leaks: list[str] = []
    seen: set[bytes] = set()
    queue: list[tuple[str, bytes, int]] = [("stored", stored.encode("utf-8"), 0)]
    while queue:
        path, blob, depth = queue.pop()
        if blob in seen or depth > _MAX_DEPTH:
            continue
        seen.add(blob)
        text = blob.decode("utf-8", errors="replace")
        leaks += [f"{path}: field {f}" for f in PLAINTEXT_FIELDS if f in text]
        found = _float_matches(blob, secrets)
        if found:
            leaks.append(f"{path}: {found} secret value(s) as raw floats")
        try:
            parsed = json.loads(blob)
        except (ValueError, UnicodeDecodeError):
            parsed = None
        if parsed is not None:
            found = _matches(np.asarray(_json_numbers(parsed), dtype=float), secrets)
            if found:
                leaks.append(f"{path}: {found} secret value(s) as JSON numbers")
            strings = _json_strings(parsed) if isinstance(parsed, (dict, list)) else []
            for k, string in enumerate(strings):
                queue.append((f"{path}>json[{k}]", string.encode("utf-8"), depth + 1))
        for name, decoded in _decodings(blob):
            # (Random bytes may "decompress" to garbage by chance: what counts is what the
            # output reveals, examined in turn.)
            queue.append((f"{path}>{name}", decoded, depth + 1))
    return leaks


def envelope(stored: str) -> tuple[dict[str, Any], str]:
    """``(header, base64 ciphertext)`` of a stored upload (a JSON header line, then the
    ciphertext)."""
    header, _, ciphertext = stored.partition("\n")
    return json.loads(header), ciphertext


def stored_upload(header: Any, ciphertext: str, **dumps: Any) -> str:
    """An upload as stored, from its (perhaps rewritten) header and ciphertext."""
    return f"{json.dumps(header, **dumps)}\n{ciphertext}"


def receipt(trust: Any, stored: str) -> str:
    """A stored upload's receipt, recomputed from its envelope as its participant computed it
    when sealing: a digest prefix of what it signed (the binding context and the ciphertext's
    SHA-256), not of the stored text."""
    envelope = json.loads(stored.partition("\n")[0])
    context = trust._upload_context(
        envelope["round"], envelope["client"], envelope["counter"], envelope["after"]
    )
    signed = context + b"\n" + hashlib.sha256(ciphertext(stored)).digest()
    return hashlib.sha256(signed).hexdigest()[:32]


def ciphertext(stored: str) -> bytes:
    """The sealed bytes of a stored upload (the base64 after its header line, decoded)."""
    return base64.b64decode(stored.partition("\n")[2], validate=True)


def randomness(payloads: list[bytes]) -> tuple[float, float]:
    """``(chi-square p-value of the byte frequencies, zlib compression ratio of them all)``.

    Uniform random bytes give a p-value that is uniform on [0, 1] and a ratio above 1 (random
    data does not compress); encoded or merely obfuscated plaintext gives a p-value near 0 and
    a ratio well below 1.
    """
    joined = b"".join(payloads)
    counts = np.bincount(np.frombuffer(joined, dtype=np.uint8), minlength=256)
    p_value = float(stats.chisquare(counts).pvalue)
    ratio = len(zlib.compress(joined, 9)) / len(joined)
    return p_value, ratio
