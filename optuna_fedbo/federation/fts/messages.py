"""The two messages of the FTS protocol: a participant's upload and the server's broadcast.

An upload is a binary frame (:func:`~optuna_fedbo.federation._codec.binary_frame`, as secure
aggregation's messages): a canonical JSON header, a newline, then the vector's raw float64 bytes,
little-endian (no base64 or JSON scan of the vector inside the envelope's own base64). A
broadcast is a JSON object stored as a string, its vectors exact float64 in base64. Parsing
checks every field, so that a malformed, non-finite, wrong-length or foreign upload is rejected
with a reason instead of reaching the aggregation.

An upload whose vector is one the participant already sent in an earlier round (a pooled
participant's statistics between refreshes, :mod:`optuna_fedbo.samplers`) carries, as
``same_as``, the receipt of the upload that sent it in full
(:func:`~optuna_fedbo.federation.trust.upload_receipt`), and no vector bytes: the server resolves
it against the vector it holds from that participant.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
import math
import time
from typing import Any

import numpy as np

from optuna_fedbo.federation._codec import binary_frame
from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation._codec import decode_array
from optuna_fedbo.federation._codec import encode_array
from optuna_fedbo.federation._codec import split_frame
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.records import loads_object

#: The format of broadcasts.
MESSAGE_FORMAT = 1
#: The format of uploads: 2, a binary frame (1 was a JSON text with the vector in base64).
UPLOAD_FORMAT = 2

#: An upload with a coordinate beyond this is refused as absurd (a posterior draw of the
#: feature weights is of the order of the values' scale; 1e12 leaves room for any real one).
MAX_ABS_VALUE = 1e12


@dataclass(frozen=True)
class Upload:
    """One participant's vector for one round.

    Attributes:
        client_id: The participant.
        round: The round it was sent for.
        omega: The vector ``omega_{n,t}`` of shape ``(M,)`` (read-only); with
            ``aggregation="pooled"``, the participant's statistics packed by
            :func:`optuna_fedbo.core.pooling.pack_blocks`.
        n_observations: Number of the participant's observations behind the draw.
        iteration: The participant's BO iteration ``t`` (``<= 0`` during the initial design).
        sent_at: Participant's clock at sending (informative only).
    """

    client_id: str
    round: int
    omega: np.ndarray
    n_observations: int
    iteration: int
    sent_at: float


def encode_upload(
    *,
    config_hash: str,
    round_index: int,
    client_id: str,
    omega: np.ndarray,
    n_observations: int,
    iteration: int,
    same_as: str | None = None,
) -> bytes:
    """Serialize an upload: a binary frame, its header declaring the vector's length and its
    tail the vector's little-endian float64 bytes.

    Args:
        same_as: The receipt of the upload that sent ``omega`` in full to an earlier round
            (:func:`~optuna_fedbo.federation.trust.upload_receipt`), to send instead of
            ``omega`` (the server holds it): the frame then has no tail.
    """
    record: dict[str, Any] = {
        "format": UPLOAD_FORMAT,
        "config": config_hash,
        "round": int(round_index),
        "client": client_id,
        "n_observations": int(n_observations),
        "iteration": int(iteration),
        "sent_at": time.time(),
    }
    if same_as is not None:
        record["same_as"] = same_as
        return binary_frame(record)
    values = np.ascontiguousarray(np.asarray(omega, dtype="<f8"))
    if values.ndim != 1:
        raise ValueError(f"an upload's vector must be 1-D, got shape {values.shape}.")
    record["length"] = int(values.shape[0])
    return binary_frame(record, values.tobytes())


def _format_mismatch(found: Any) -> UploadRejected:
    return UploadRejected(
        f"upload format {found!r}, this server reads format {UPLOAD_FORMAT} (format 1 was "
        f"JSON text, format {UPLOAD_FORMAT} a binary frame): the participant runs another "
        "release than the server (participants and server of one federation run one release)"
    )


def _unframed(plaintext: Any, error: ValueError) -> UploadRejected:
    """Why a plaintext that is no frame is refused: an upload of another format, if it names
    one (format 1 was a JSON text), else malformed."""
    try:
        record = json.loads(plaintext) if isinstance(plaintext, (bytes, str)) else None
    except ValueError:
        record = None
    if isinstance(record, dict) and "format" in record:
        return _format_mismatch(record["format"])
    return UploadRejected(f"malformed upload ({error})")


def _int_field(record: dict[str, Any], key: str) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UploadRejected(f"field {key!r} must be an integer, got {value!r}")
    return value


def _vector(
    record: dict[str, Any], tail: bytes, held: tuple[str, np.ndarray] | None
) -> np.ndarray:
    """The upload's vector: its own (the frame's tail, of the declared length), or the
    ``held`` one that its ``same_as`` names."""
    if "same_as" not in record:
        declared = _int_field(record, "length")
        if declared < 0 or len(tail) != 8 * declared:
            raise UploadRejected(
                f"malformed vector (declares {declared} values, carries {len(tail)} bytes)"
            )
        # Read-only, over the frame's bytes (a copy only where float64 is not little-endian).
        return np.frombuffer(tail, dtype="<f8").astype(float, copy=False)
    if "length" in record or tail:
        raise UploadRejected("an upload has either a vector or 'same_as', not both")
    if held is None or record["same_as"] != held[0]:
        raise UploadRejected(
            "it names, with 'same_as', a vector the server does not hold (the server restarted "
            "or the vector was refused); the participant re-sends it"
        )
    return held[1]


def parse_upload(
    plaintext: Any,
    *,
    client_id: str,
    round_index: int,
    config_hash: str,
    length: int,
    held: tuple[str, np.ndarray] | None = None,
) -> Upload:
    """Parse and check an upload found under ``client_id``'s key of round ``round_index``.

    Args:
        plaintext: The opened upload (a frame of :func:`encode_upload`).
        client_id: The participant whose key it was found under.
        round_index: The round it was found in.
        config_hash: The federation's configuration hash.
        length: The vectors' length.
        held: ``(receipt, vector)`` of the newest vector the server holds from ``client_id``
            and of the upload that carried it, which an upload may name by that receipt
            (``same_as``); ``None``: none. The vector must be one this function returned (its
            values are not checked again).

    Raises:
        UploadRejected: With the reason, if the upload must not be aggregated.
    """
    try:
        record, tail = split_frame(plaintext)
    except ValueError as error:
        raise _unframed(plaintext, error) from None
    if not isinstance(record, dict):
        raise UploadRejected("malformed upload (its header is not a JSON object)")
    if record.get("format") != UPLOAD_FORMAT:
        raise _format_mismatch(record.get("format"))
    if record.get("config") != config_hash:
        raise UploadRejected(
            f"federation configuration mismatch (upload for {str(record.get('config'))[:12]}, "
            f"federation is {config_hash[:12]})"
        )
    if record.get("client") != client_id:
        raise UploadRejected(
            f"written under participant {client_id!r} but signed {record.get('client')!r}"
        )
    if _int_field(record, "round") != round_index:
        raise UploadRejected(f"written in round {round_index} for round {record.get('round')!r}")
    omega = _vector(record, tail, held)
    if omega.shape != (length,):
        raise UploadRejected(f"vector of shape {omega.shape}, expected ({length},)")
    if held is None or omega is not held[1]:  # the held vector passed these when it came
        # One pass: the largest magnitude is NaN or infinite if any value is.
        largest = float(np.max(np.abs(omega), initial=0.0))
        if not math.isfinite(largest):
            raise UploadRejected("vector contains NaN or infinity")
        if largest > MAX_ABS_VALUE:
            raise UploadRejected(
                f"vector has an absurd value (|value| up to {largest:.3g} > {MAX_ABS_VALUE:g})"
            )
    sent_at = record.get("sent_at")
    if isinstance(sent_at, bool) or not isinstance(sent_at, (int, float)):
        raise UploadRejected(f"field 'sent_at' must be a number, got {sent_at!r}")
    n_observations = _int_field(record, "n_observations")
    if n_observations < 0:
        raise UploadRejected(f"negative n_observations {n_observations}")
    return Upload(
        client_id=client_id,
        round=round_index,
        omega=omega,
        n_observations=n_observations,
        iteration=_int_field(record, "iteration"),
        sent_at=float(sent_at),
    )


@dataclass(frozen=True, eq=False)
class Broadcast:
    """A published round.

    Attributes:
        round: The round index ``t``.
        aggregation: ``"weighted"``: ``vectors[i]`` is ``omega_t^(i)`` of sub-region ``i``;
            ``"sample"``: ``vectors`` holds the vectors of the agents that uploaded, in an
            order secret to the server, to draw from; ``"pooled"``: ``vectors[0]`` is the
            posterior mean given all participants' statistics, on feature block
            ``feature_block``.
        vectors: Array of shape ``(P, M)`` or ``(K, M)`` (read-only).
        n_contributors: Number of participants whose vectors entered the round; -1 (withheld)
            under differential privacy, where the count would reveal participation.
        config_hash: Hash of the federation configuration.
        published_at: Server clock at publication.
        feature_block: The features ``vectors`` are on: 0 for the shared features, ``k`` for
            block ``k`` of :func:`optuna_fedbo.core.pooling.pooling_feature_maps`.
    """

    round: int
    aggregation: str
    vectors: np.ndarray
    n_contributors: int
    config_hash: str
    published_at: float
    feature_block: int = 0


def encode_broadcast(
    *,
    round_index: int,
    aggregation: str,
    vectors: np.ndarray,
    n_contributors: int,
    config_hash: str,
    feature_block: int = 0,
) -> str:
    """Serialize a broadcast."""
    record = {
        "format": MESSAGE_FORMAT,
        "round": int(round_index),
        "aggregation": aggregation,
        "vectors": encode_array(vectors),
        "n_contributors": int(n_contributors),
        "config": config_hash,
        "published_at": time.time(),
    }
    if feature_block:
        record["feature_block"] = int(feature_block)
    return canonical_json(record)


def parse_broadcast(text: Any) -> Broadcast:
    """Parse a broadcast written by :func:`encode_broadcast`.

    Raises:
        ValueError: If it is malformed.
    """
    record = loads_object(text)
    vectors = decode_array(record["vectors"])
    if vectors.ndim != 2 or not np.all(np.isfinite(vectors)):
        raise ValueError("a broadcast must hold a finite 2-D array of vectors.")
    vectors.flags.writeable = False
    published_at = float(record["published_at"])
    if not math.isfinite(published_at):
        raise ValueError("invalid publication time.")
    return Broadcast(
        round=int(record["round"]),
        aggregation=str(record["aggregation"]),
        vectors=vectors,
        n_contributors=int(record["n_contributors"]),
        config_hash=str(record["config"]),
        published_at=published_at,
        feature_block=int(record.get("feature_block", 0)),
    )
