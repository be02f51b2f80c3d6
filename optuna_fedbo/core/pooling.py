"""Pooling participants' sufficient statistics: the posterior given everyone's observations.

Bayesian linear regression on shared features needs only ``Phi^T Phi``, ``Phi^T y`` and a few
sums (:class:`~optuna_fedbo.core.posterior.SufficientStatistics`), and these add up over
participants: the posterior given their summed statistics is exactly the posterior given all
their observations together, without any observation leaving its participant. Averaging the
participants' posterior means instead (DP-FTS-DE's aggregation) shrinks each one towards zero
away from its own few points and blurs the average.

An upload carries one participant's statistics packed into a flat vector (:func:`pack`);
:func:`unpack` checks that a vector is statistics that real observations can produce (features
have unit norm, so ``trace(Phi^T Phi)`` is the number of observations, and the sums obey the
Cauchy-Schwarz bounds). :func:`pool` adds them up with each participant's own offset profiled
out (sites whose values differ by a constant still pool into one shape), each participant
counting for at most ``robust_factor`` times the median participant's observations and value
spread, so that no single participant can outweigh everyone else.

Which features, and how much noise? The federation's shared features mix lengthscales, and
their posterior given a few dozen points places a broad optimum poorly. Participants therefore
also keep statistics on blocks of single-scale features (:data:`POOLING_LENGTHSCALES`), and
:func:`select_posterior` picks the block and noise variance of largest marginal likelihood of
everyone's values: with all participants' observations together, the choice is as reliable
as a GP's fitted lengthscale, where one participant's five initial points are not.
"""

from __future__ import annotations

import math

import numpy as np

from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures

#: Lengthscales of the single-scale feature blocks that pooled statistics are also kept on.
POOLING_LENGTHSCALES = (0.05, 0.1, 0.2, 0.5)
#: Features per single-scale block.
POOLING_BLOCK_FEATURES = 100
#: Noise variances (of standardized values) that :func:`select_posterior` chooses from.
POOLING_NOISE_VARIANCES = (1e-3, 1e-2, 1e-1, 1.0)

#: Relative tolerance of the consistency checks of unpacked statistics (rounding of sums).
_TOLERANCE = 1e-6


def pooling_feature_maps(shared: RandomFourierFeatures) -> list[RandomFourierFeatures]:
    """The feature blocks pooled statistics are kept on: ``shared`` first, then one block per
    :data:`POOLING_LENGTHSCALES` (drawn from the next public seed, so equal everywhere)."""
    blocks = [
        RandomFourierFeatures(
            shared.n_dims, POOLING_BLOCK_FEATURES, lengthscale, seed=shared.seed + 1
        )
        for lengthscale in POOLING_LENGTHSCALES
    ]
    return [shared, *blocks]


def packed_blocks_length(n_features: int) -> int:
    """Length of an upload of pooled statistics with ``n_features`` shared features."""
    return packed_length(n_features) + len(POOLING_LENGTHSCALES) * packed_length(
        POOLING_BLOCK_FEATURES
    )


def block_sizes(n_features: int) -> list[int]:
    """Features per block of :func:`pooling_feature_maps` with ``n_features`` shared ones."""
    return [n_features] + [POOLING_BLOCK_FEATURES] * len(POOLING_LENGTHSCALES)


def packed_length(n_features: int) -> int:
    """Length of a packed statistics vector: 3 sums, 2 ``M``-vectors, the upper triangle."""
    return 3 + 2 * n_features + n_features * (n_features + 1) // 2


def pack(statistics: SufficientStatistics) -> np.ndarray:
    """``statistics`` as one flat vector (read back with :func:`unpack`)."""
    rows, columns = np.triu_indices(statistics.n_features)
    return np.concatenate(
        [
            [float(statistics.count), statistics.target_sum, statistics.target_square_sum],
            statistics.feature_sum,
            statistics.feature_target,
            statistics.gram[rows, columns],
        ]
    )


def unpack(vector: np.ndarray, n_features: int) -> SufficientStatistics:
    """The statistics packed in ``vector`` by :func:`pack`.

    Raises:
        ValueError: If ``vector`` has the wrong length, is not finite, or is not the statistics
            of any set of observations on unit-norm features.
    """
    vector = np.asarray(vector, dtype=float)
    if vector.shape != (packed_length(n_features),):
        raise ValueError(
            f"packed statistics must have length {packed_length(n_features)} for "
            f"{n_features} features, got shape {vector.shape}"
        )
    if not np.all(np.isfinite(vector)):
        raise ValueError("packed statistics contain NaN or infinity")
    count = vector[0]
    if count < 1 or count != round(count):
        raise ValueError(f"the observation count must be a positive integer, got {count!r}")
    statistics = SufficientStatistics(n_features)
    statistics.count = int(count)
    statistics.target_sum = float(vector[1])
    statistics.target_square_sum = float(vector[2])
    statistics.feature_sum = vector[3 : 3 + n_features].copy()
    statistics.feature_target = vector[3 + n_features : 3 + 2 * n_features].copy()
    rows, columns = np.triu_indices(n_features)
    gram = np.zeros((n_features, n_features))
    gram[rows, columns] = vector[3 + 2 * n_features :]
    gram[columns, rows] = gram[rows, columns]
    statistics.gram = gram
    _check_consistent(statistics)
    return statistics


def _check_consistent(statistics: SufficientStatistics) -> None:
    """Raise ``ValueError`` unless observations on unit-norm features can give ``statistics``."""
    count = statistics.count
    slack = _TOLERANCE * count
    diagonal = np.diag(statistics.gram)
    if np.any(diagonal < -slack) or abs(float(diagonal.sum()) - count) > slack:
        raise ValueError(
            "the feature Gram matrix is not that of unit-norm features (its trace must equal "
            "the observation count)"
        )
    squares = statistics.target_square_sum
    if squares < statistics.target_sum**2 / count - _TOLERANCE * max(squares, 1.0):
        raise ValueError("the sum of squared values is below what the values' sum implies")
    # Cauchy-Schwarz, feature by feature: |sum_i phi_ij a_i| <= sqrt(sum_i phi_ij^2 sum_i a_i^2).
    reach = np.sqrt(np.maximum(diagonal, 0.0))
    for name, sums, bound in (
        ("feature sums", statistics.feature_sum, math.sqrt(count)),
        ("feature-value sums", statistics.feature_target, math.sqrt(max(squares, 0.0))),
    ):
        if np.any(np.abs(sums) > reach * bound * (1 + _TOLERANCE) + slack):
            raise ValueError(f"the {name} exceed what observations on these features can give")


def pack_blocks(statistics: list[SufficientStatistics]) -> np.ndarray:
    """One upload vector from the statistics of every block, in block order."""
    return np.concatenate([pack(part) for part in statistics])


def unpack_blocks(vector: np.ndarray, n_features: int) -> list[SufficientStatistics]:
    """The blocks' statistics packed by :func:`pack_blocks` (checked as :func:`unpack`).

    Raises:
        ValueError: If the vector has the wrong length or a block is not consistent, or if the
            blocks disagree on the values (their counts and value sums must be equal).
    """
    vector = np.asarray(vector, dtype=float)
    if vector.shape != (packed_blocks_length(n_features),):
        raise ValueError(
            f"pooled statistics must have length {packed_blocks_length(n_features)} for "
            f"{n_features} shared features, got shape {vector.shape}"
        )
    blocks, start = [], 0
    for size in block_sizes(n_features):
        end = start + packed_length(size)
        blocks.append(unpack(vector[start:end], size))
        start = end
    first = blocks[0]
    for block in blocks[1:]:
        same = block.count == first.count and np.allclose(
            [block.target_sum, block.target_square_sum],
            [first.target_sum, first.target_square_sum],
            rtol=_TOLERANCE,
            atol=_TOLERANCE,
        )
        if not same:
            raise ValueError("the feature blocks' statistics are not of the same values")
    return blocks


def select_posterior(
    statistics: list[SufficientStatistics],
    noise_variances: tuple[float, ...] = POOLING_NOISE_VARIANCES,
) -> tuple[int, LinearPosterior]:
    """The block and noise variance of largest marginal likelihood, and that posterior.

    Args:
        statistics: Pooled statistics, one per feature block, all of the same values.
        noise_variances: The noise variances to choose from.

    Returns:
        ``(block index, posterior)``, fitted to the values standardized by their own mean
        and standard deviation.
    """
    best: tuple[float, int, LinearPosterior] | None = None
    for index, block in enumerate(statistics):
        for noise_variance in noise_variances:
            posterior = block.posterior(noise_variance, standardize=True)
            evidence = posterior.log_marginal_likelihood()
            if best is None or evidence > best[0]:
                best = (evidence, index, posterior)
    if best is None:
        raise ValueError("Nothing to select from.")
    return best[1], best[2]


def without_offset(statistics: SufficientStatistics) -> SufficientStatistics:
    """The statistics with the participant's own offset profiled out.

    The model ``y = phi(x)^T omega + b + eps`` with an offset ``b`` of its own per participant
    under a flat prior: integrating ``b`` out centres the values and the features on their
    means, ``Phi^T Phi - s s^T / n`` and ``Phi^T y - s sum(y) / n`` with ``s = Phi^T 1``. Sites
    whose values differ by a constant (another baseline, another offset) then pool into one
    shape; the price is one value's worth of information per participant.
    """
    count = statistics.count
    result = SufficientStatistics(statistics.n_features)
    if count == 0:
        return result
    mean_features = statistics.feature_sum / count
    result.gram = statistics.gram - np.outer(statistics.feature_sum, mean_features)
    result.feature_target = statistics.feature_target - mean_features * statistics.target_sum
    result.target_square_sum = max(
        statistics.target_square_sum - statistics.target_sum**2 / count, 0.0
    )
    result.count = count
    return result


def pool(
    statistics: list[SufficientStatistics], *, robust_factor: float = 10.0
) -> SufficientStatistics:
    """The participants' statistics summed, each with its own offset profiled out
    (:func:`without_offset`), robust to a few outlying participants.

    From three participants on, a participant whose observation count exceeds
    ``robust_factor`` times the median participant's, or whose values spread more than
    ``robust_factor`` times as widely (standard deviation), enters scaled down, as if its
    values were noisier: its observations weigh at most as much as ``robust_factor`` median
    participants', and its squared deviations at most ``robust_factor^2`` times theirs. One
    participant can then neither claim a huge number of observations nor, with values of
    another scale, decide the pooled model alone.
    """
    if not statistics:
        raise ValueError("Nothing to pool.")
    counts = np.array([s.count for s in statistics], dtype=float)
    weights = np.ones(len(statistics))
    if len(statistics) >= 3:
        cap = robust_factor * float(np.median(counts))
        weights = np.minimum(1.0, cap / counts)
        spreads = np.array([s.standardization()[1] for s in statistics])
        bound = robust_factor * float(np.median(spreads))
        weights *= np.minimum(1.0, bound / spreads) ** 2
    total = SufficientStatistics(statistics[0].n_features)
    for weight, part in zip(weights, map(without_offset, statistics)):
        total.gram += weight * part.gram
        total.feature_sum += weight * part.feature_sum
        total.feature_target += weight * part.feature_target
        total.target_sum += weight * part.target_sum
        total.target_square_sum += weight * part.target_square_sum
    # The count enters only the marginal likelihood's constant; keep the effective number.
    total.count = int(round(float(weights @ counts)))
    return total


__all__ = [
    "POOLING_LENGTHSCALES",
    "block_sizes",
    "pack",
    "pack_blocks",
    "packed_blocks_length",
    "packed_length",
    "pool",
    "pooling_feature_maps",
    "select_posterior",
    "unpack",
    "unpack_blocks",
    "without_offset",
]
