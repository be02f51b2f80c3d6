"""What one participant's upload can do to an FTS broadcast without differential privacy.

Without differential privacy nothing hides a contribution in the broadcast, so the server
bounds every participant's weight (:mod:`optuna_fedbo.core.influence`: vectors clipped to the
norm the protocol's model allows, pooled statistics weighing no more than the heaviest other
participant's) and publishes only aggregates of at least ``FTSConfig.min_contributors``
distinct participants (default 2): a round that closes with fewer publishes nothing and stays
open (:func:`withheld_message`).

Two aggregations publish more than an aggregate, and warn when the federation is created
without differential privacy (:func:`check_without_privacy`): ``"sample"`` (the original FTS)
relays every vector as it is, so its order is drawn secretly (:func:`secret_order`: receipts,
which say who uploaded, then say nothing about which vector is whose); ``"weighted"`` with
sub-regions publishes public mixtures, with public weights, of the vectors, one per sub-region,
which while there are at least as many sub-regions as contributors determine each one's vector.
"""

from __future__ import annotations

from typing import Any
import warnings

import numpy as np
import optuna

from optuna_fedbo.core.influence import bound_vectors
from optuna_fedbo.core.influence import vector_norm_bound
from optuna_fedbo.privacy._rng import secure_rng

_logger = optuna.logging.get_logger(__name__)


def check_without_privacy(config: Any, n_clients: int) -> None:
    """Refuse a federation that could never publish, warn about one that exposes uploads.

    Args:
        config: The resolved ``FTSConfig`` of a federation without differential privacy.
        n_clients: Its number of participants.

    Raises:
        ValueError: If ``n_clients`` is below ``config.min_contributors``.
    """
    minimum = config.min_contributors
    if n_clients < minimum:
        raise ValueError(
            f"Without differential privacy a round publishes only an aggregate of at least "
            f"min_contributors={minimum} participants, so a federation of n_clients={n_clients} "
            f"could never publish; register at least {minimum} participants, or set "
            "FTSConfig(min_contributors=1) to publish a lone participant's model (anyone with "
            "the storage URL can read it)."
        )
    exposures = []
    if minimum == 1:
        exposures.append(
            "min_contributors=1 publishes a round of one contributor: its upload's model, "
            "readable by anyone with the storage URL"
        )
    if config.aggregation == "sample":
        exposures.append(
            "aggregation='sample' (the original FTS) publishes every participant's vector as "
            "it is (in an order secret to the server)"
        )
    if config.aggregation == "weighted" and config.n_subregions > 1:
        exposures.append(
            f"aggregation='weighted' with {config.n_subregions} sub-regions publishes one "
            "public mixture of the vectors per sub-region, with public weights, which give "
            "each contributor's vector while there are no more contributors than sub-regions"
        )
    for exposure in exposures:
        warnings.warn(
            f"Without differential privacy, {exposure}; use privacy=DPConfig(...) to protect "
            "the uploads, or the default aggregation='pooled'.",
            UserWarning,
            stacklevel=4,
        )


def bounded(vectors: np.ndarray, n_features: int, round_index: int) -> np.ndarray:
    """``vectors`` clipped to :func:`~optuna_fedbo.core.influence.vector_norm_bound` of their
    ``n_features`` (no honest vector on the model's scale is longer, with probability
    ``1 - 1e-6``); a clipped vector is logged (server-side)."""
    clipped, n_clipped = bound_vectors(vectors, vector_norm_bound(n_features))
    if n_clipped:
        _logger.info(f"Round {round_index}: {n_clipped} vector(s) clipped to the norm bound.")
    return clipped


def secret_order(n_vectors: int, rng: np.random.Generator | None) -> np.ndarray:
    """The order in which ``aggregation="sample"`` relays the round's vectors.

    Drawn from the operating system's entropy (``rng`` is ``None``), never from the public
    seed: the broadcast's receipts say who uploaded, and an order anyone could recompute would
    say whose each vector is. A research simulation may pass its seeded generator
    (``simulate(..., insecure_noise_seed=...)``) to rerun exactly.
    """
    return (secure_rng() if rng is None else rng).permutation(n_vectors)


def withheld_message(name: str, round_index: int, n_contributors: int, minimum: int) -> str:
    """The log line of a round not published for want of contributors."""
    return (
        f"Round {round_index} of {name!r} is not published: {n_contributors} distinct "
        f"contributor(s), fewer than min_contributors={minimum} (without differential privacy "
        "a broadcast is never one participant's upload alone). The round stays open and the "
        "previous broadcast stays current."
    )


__all__ = ["bounded", "check_without_privacy", "secret_order", "withheld_message"]
