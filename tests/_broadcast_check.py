"""How far a federated trial's point is from the maximum of the broadcast it used.

Shared by the behaviour tests and the participant worker processes: a federated FTS trial must
land at (numerically near) the maximizer of ``phi(x)^T omega^(i[x])`` over the federation's space
for the vectors of the broadcast it used. A sampler that replaced federated suggestions with
uniformly random points fails this check.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation.fts.messages import parse_broadcast


def broadcast_vectors(federation: Federation, round_index: int) -> tuple[str, np.ndarray]:
    """``(aggregation, vectors)`` of the published broadcast of ``round_index``."""
    for stored in federation.store.broadcasts():  # verified against the server's key
        if stored.round == round_index:
            broadcast = parse_broadcast(stored.payload)
            return broadcast.aggregation, np.asarray(broadcast.vectors)
    raise KeyError(f"no broadcast for round {round_index}")


def broadcast_gap(
    federation: Federation, params: dict[str, Any], round_index: int, grid: int = 4001
) -> tuple[float, float]:
    """``(max f - f(params), max f - min f)`` of the broadcast function ``f`` of a round.

    ``f`` is evaluated on ``grid`` random points of the encoded space plus the trial's point
    (weighted aggregation: the sub-region's vector at each point).
    """
    aggregation, vectors = broadcast_vectors(federation, round_index)
    assert aggregation == "weighted"
    encoder = federation.encoder
    features = federation.features()
    partition = federation.partition()
    rng = np.random.default_rng(0)
    points = encoder.encoding.sample(grid, rng, None)
    mine = encoder.encode([params])
    points = np.vstack([points, mine])
    regions = partition.index_of(points)
    values = np.einsum("nm,nm->n", features(points), vectors[regions])
    top = max(float(values.max()), float(values[-1]))
    return top - float(values[-1]), top - float(values.min())
