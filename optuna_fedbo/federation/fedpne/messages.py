"""The two messages of Fed-PNE: a participant's node means and the server's phase broadcast.

Rounds and phases: round ``r`` (0-based, the federation's round counter) collects the uploads of
phase ``p = r + 1`` (1-based, the paper's counter). Phase 1 is public knowledge (it follows from
the configuration alone), so every participant starts pulling without waiting for the server;
the broadcast of round ``r`` closes phase ``r + 1`` and defines phase ``r + 2``.

* Upload (Algorithm 1, line 10): ``{node key -> local mean}`` for exactly the nodes of ``K^p``.
  Under DP-Fed-PNE the means are already noisy when they leave the participant.
* Broadcast (Algorithm 2, line 9): the next phase (``K^{p+1}``, ``t``, its budget, whether it
  is final) and the best node ``(h^p, i^p)`` of the closed phase (the recommendation), plus
  the eliminated nodes and communication counters. Global means are *not* broadcast: the paper's
  server sends only nodes and pull counts, and the means stay in the server's private state.

Both are JSON objects stored as strings; parsing checks every field so that a malformed, foreign
or stale upload is rejected with a reason instead of reaching the elimination.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
import math
import time
from typing import Any

from optuna_fedbo.core.fedpne import Node
from optuna_fedbo.core.fedpne import Phase
from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.records import loads_object

MESSAGE_FORMAT = 1
PROTOCOL = "fedpne"


def encode_means_upload(
    *,
    config_hash: str,
    round_index: int,
    phase_index: int,
    client_id: str,
    means: Mapping[str, float],
) -> str:
    """Serialize a participant's node means for phase ``phase_index`` (round ``round_index``)."""
    values = {str(key): float(value) for key, value in means.items()}
    if not all(math.isfinite(v) for v in values.values()):
        raise ValueError("Node means must be finite.")
    return canonical_json(
        {
            "format": MESSAGE_FORMAT,
            "protocol": PROTOCOL,
            "config": config_hash,
            "round": int(round_index),
            "phase": int(phase_index),
            "client": client_id,
            "means": values,
            "sent_at": time.time(),
        }
    )


def parse_means_upload(
    text: Any,
    *,
    client_id: str,
    round_index: int,
    config_hash: str,
    phase: Phase,
) -> dict[str, float]:
    """Parse and check an upload found under ``client_id``'s key of round ``round_index``.

    Args:
        text: The stored upload.
        client_id: The participant whose key held it.
        round_index: The open round.
        config_hash: The federation's configuration hash.
        phase: The open phase (``phase.index == round_index + 1``).

    Returns:
        ``node key -> mean`` for exactly the nodes of the phase.

    Raises:
        UploadRejected: With the reason, if the upload must not be used.
    """
    try:
        record = loads_object(text)
    except ValueError as error:
        raise UploadRejected(f"malformed upload ({error})") from None
    if record.get("format") != MESSAGE_FORMAT or record.get("protocol") != PROTOCOL:
        raise UploadRejected(
            f"not a Fed-PNE upload (format {record.get('format')!r}, protocol "
            f"{record.get('protocol')!r})"
        )
    if record.get("config") != config_hash:
        raise UploadRejected(
            f"federation configuration mismatch (upload for {str(record.get('config'))[:12]}, "
            f"federation is {config_hash[:12]})"
        )
    if record.get("client") != client_id:
        raise UploadRejected(
            f"written under participant {client_id!r} but signed {record.get('client')!r}"
        )
    if record.get("round") != round_index or record.get("phase") != phase.index:
        raise UploadRejected(
            f"written in round {round_index} (phase {phase.index}) for round "
            f"{record.get('round')!r} (phase {record.get('phase')!r})"
        )
    means = record.get("means")
    if not isinstance(means, dict):
        raise UploadRejected("field 'means' must be an object node -> mean")
    expected = {node.key for node in phase.nodes}
    if set(means) != expected:
        extra = sorted(set(means) - expected)[:5]
        absent = sorted(expected - set(means))[:5]
        raise UploadRejected(
            f"its nodes differ from phase {phase.index}'s (unexpected: {extra}, missing: {absent})"
        )
    out: dict[str, float] = {}
    for key, value in means.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UploadRejected(f"node {key}: the mean must be a number, got {value!r}")
        if not math.isfinite(value):
            raise UploadRejected(f"node {key}: the mean is not finite")
        out[key] = float(value)
    return out


@dataclass(frozen=True)
class PhaseBroadcast:
    """A published Fed-PNE round: the closed phase's outcome and the next phase.

    Attributes:
        round: The round index ``r`` (the closed phase is ``r + 1``).
        closed_phase: The index of the closed phase.
        best: ``(h^p, i^p)``, the best node of the closed phase (the recommendation).
        eliminated: ``E^p``.
        n_contributors: Participants whose means were averaged.
        forced: Whether the phase was closed without every participant.
        next_phase: The phase participants work on now.
        communication: The server's communication counters after the close.
        config_hash: Hash of the federation configuration.
        published_at: Server clock at publication.
    """

    round: int
    closed_phase: int
    best: Node
    eliminated: tuple[Node, ...]
    n_contributors: int
    forced: bool
    next_phase: Phase
    communication: dict[str, int]
    config_hash: str
    published_at: float


def encode_phase_broadcast(
    *,
    round_index: int,
    closed_phase: int,
    best: Node,
    eliminated: tuple[Node, ...],
    n_contributors: int,
    forced: bool,
    next_phase: Phase,
    communication: Mapping[str, int],
    config_hash: str,
) -> str:
    """Serialize a Fed-PNE broadcast."""
    return canonical_json(
        {
            "format": MESSAGE_FORMAT,
            "protocol": PROTOCOL,
            "round": int(round_index),
            "closed_phase": int(closed_phase),
            "best": best.key,
            "eliminated": [node.key for node in eliminated],
            "n_contributors": int(n_contributors),
            "forced": bool(forced),
            "next_phase": next_phase.to_dict(),
            "communication": {str(k): int(v) for k, v in communication.items()},
            "config": config_hash,
            "published_at": time.time(),
        }
    )


def parse_phase_broadcast(text: Any) -> PhaseBroadcast:
    """Parse a broadcast written by :func:`encode_phase_broadcast`.

    Raises:
        ValueError: If it is malformed or not a Fed-PNE broadcast.
    """
    record = loads_object(text)
    if record.get("format") != MESSAGE_FORMAT or record.get("protocol") != PROTOCOL:
        raise ValueError("not a Fed-PNE broadcast.")
    try:
        next_phase = Phase.from_dict(record["next_phase"])
        broadcast = PhaseBroadcast(
            round=int(record["round"]),
            closed_phase=int(record["closed_phase"]),
            best=Node.from_key(record["best"]),
            eliminated=tuple(Node.from_key(k) for k in record["eliminated"]),
            n_contributors=int(record["n_contributors"]),
            forced=bool(record["forced"]),
            next_phase=next_phase,
            communication={str(k): int(v) for k, v in record["communication"].items()},
            config_hash=str(record["config"]),
            published_at=float(record["published_at"]),
        )
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"malformed Fed-PNE broadcast ({error!r}).") from None
    if broadcast.closed_phase != broadcast.round + 1 or next_phase.index != broadcast.round + 2:
        raise ValueError(
            f"inconsistent Fed-PNE broadcast: round {broadcast.round} closes phase "
            f"{broadcast.closed_phase} and opens phase {next_phase.index}."
        )
    return broadcast
