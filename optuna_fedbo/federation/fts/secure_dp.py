"""DP-FTS / DP-FTS-DE under secure aggregation: participants clip, weigh and noise; the server
accounts the unmasked sum before it publishes it.

The participant's part (:func:`private_input`): its omega clipped to ``S / sqrt(P)`` (the
protocol's clip), weighed by its DP-FTS-DE weight ``phi_n^(i)`` for every sub-region ``i`` (the
weights are public: the schedule and the assignment), the ``P M`` vector divided by the round's
largest weight ``phi_max`` (so that its norm is at most ``S`` every round and the mechanism is
the same in every round), then rounded and given its share of Skellam noise
(:meth:`~optuna_fedbo.core.secagg.distributed_dp.DistributedSkellam.participant_input`, OS
entropy). The noise is drawn once per masking: an input that goes to a later attempt of the
round after it was masked goes with fresh noise (no noise share is ever in two sums), and every
masking is counted in the participant's own ledger before it is sent
(:mod:`optuna_fedbo.federation.secagg.spending`).

The server's part (:func:`publish_private`): it checks the budget before a round's protocol
starts (it must not unmask a sum it could not account), and once the sum of the survivors ``U``
is unmasked it multiplies sub-region ``i`` by ``phi_max / sum_{n in U} phi_n^(i)`` (the weighted
mean over the survivors: post-processing of the sum and of who survived, which the server sees
anyway), accounts the payload in the ledger (mechanism ``"distributed_skellam"``, accountant
``"skellam-rdp"``, no subsampling), and only then stages and publishes it. A round that fewer
than ``t`` survive is never unmasked: it publishes nothing and spends nothing (there is no sum to
release; the next attempt's sum is the one accounted). See
:mod:`optuna_fedbo.federation.secagg.distributed_dp` for the threat model.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from optuna_fedbo.core.weights import subregion_weights
from optuna_fedbo.core.weights import WeightSchedule
from optuna_fedbo.federation.fts.messages import encode_broadcast
from optuna_fedbo.federation.server import RoundReport
from optuna_fedbo.privacy._gaussian import clip_to_norm


def round_weights(federation: Any, round_index: int) -> np.ndarray:
    """DP-FTS-DE's weights ``phi_n^(i)`` of a round, shape ``(P, N)`` (public)."""
    fts = federation.fts
    schedule = WeightSchedule(
        a=fts.weight_a, hold_rounds=fts.weight_hold_rounds, decay_rounds=fts.weight_decay_rounds
    )
    return subregion_weights(
        federation.assignment(), fts.n_subregions, round_index=round_index, schedule=schedule
    )


def weighted_input(
    omega: np.ndarray, weights: np.ndarray, index: int, clip_norm: float
) -> np.ndarray:
    """A participant's ``P M`` input before noise: ``phi_n^(i) clip(omega) / phi_max`` for
    every sub-region ``i`` (norm at most ``clip_norm``).

    Args:
        omega: The participant's vector, shape ``(M,)``.
        weights: The round's weights, shape ``(P, N)``.
        index: The participant's index ``n``.
        clip_norm: ``S``.
    """
    n_subregions = weights.shape[0]
    clipped = clip_to_norm(np.asarray(omega, dtype=float), clip_norm / math.sqrt(n_subregions))
    return (weights[:, index, None] * clipped[None, :]).ravel() / float(weights.max())


def private_input(
    federation: Any,
    client_id: str,
    omega: np.ndarray,
    round_index: int,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """The ring elements a participant masks: its weighted, clipped, rounded input plus its
    share of the Skellam noise.

    Args:
        rng: Tests only (an explicitly seeded generator); by default OS entropy.
    """
    mechanism = federation.privacy.mechanism()
    weights = round_weights(federation, round_index)
    index = federation.index_of(client_id)
    joint = weighted_input(omega, weights, index, mechanism.clip_norm)
    return mechanism.participant_input(joint, mechanism.ring(), rng)


def release(
    federation: Any, values: np.ndarray, survivors: tuple[str, ...], round_index: int
) -> tuple[np.ndarray, float, float]:
    """The sub-region vectors published from the unmasked sum, and their noise standard
    deviation (the largest over sub-regions, at least).

    Returns:
        ``(vectors of shape (P, M), noise_std, phi_max)``.
    """
    fts = federation.fts
    mechanism = federation.privacy.mechanism()
    weights = round_weights(federation, round_index)
    phi_max = float(weights.max())
    indices = [federation.index_of(c) for c in survivors]
    mass = weights[:, indices].sum(axis=1)  # > 0: softmax weights are positive
    vectors = np.asarray(values, dtype=float).reshape(fts.n_subregions, -1)
    vectors = vectors * (phi_max / mass)[:, None]
    unit_std = math.sqrt(mechanism.central_variance) * mechanism.step
    return vectors, float(unit_std * phi_max / mass.min()), phi_max


def publish_private(rounds: Any, outcome: Any) -> RoundReport:
    """Account and publish the unmasked noisy sum of a round (``SecureRounds`` under DP)."""
    server = rounds.server
    federation = server.federation
    round_index = outcome.round
    survivors = outcome.result.survivors
    vectors, noise_std, phi_max = release(
        federation, outcome.result.values, survivors, round_index
    )
    payload = encode_broadcast(
        round_index=round_index,
        aggregation="weighted",
        vectors=vectors,
        n_contributors=-1,
        config_hash=federation.config_hash,
        feature_block=0,
    )
    server._ensure_current()  # a superseded server must not pay for a payload never shown
    entry = server._ledger.account(
        round_index, payload, epoch=server._epoch, noise_std=noise_std, phi_max=phi_max
    )
    return rounds.stage_and_publish(outcome, payload, entry)


__all__ = ["private_input", "publish_private", "release", "round_weights", "weighted_input"]
