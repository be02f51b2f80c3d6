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
Cauchy-Schwarz bounds). :func:`pooled_posterior` is the posterior given everyone's values,
standardized together, no participant weighing more observations or a wider value spread than
the heaviest other participant (:func:`robust_weights`), so that no single participant can
outweigh everyone else; optionally each participant has an offset of its own.

Which features, and how much noise? The federation's shared features mix lengthscales, and
their posterior given a few dozen points places a broad optimum poorly. Participants therefore
also keep statistics on blocks of single-scale features (:data:`POOLING_LENGTHSCALES`), and
:func:`select_posterior` picks the block, the noise variance and the scale of the
participants' offsets of largest marginal likelihood of everyone's values: with all
participants' observations together, the choice is as reliable as a GP's fitted
hyperparameters, where one participant's five initial points are not. Offsets matter when
sites measure on different baselines; where they do not, the evidence leaves them out and
keeps the differences in level between sites, which locate good regions.
"""

from __future__ import annotations

from collections.abc import Iterable
import functools
import math
from typing import NamedTuple

import numpy as np

from optuna_fedbo.core.gp_fit import REFIT_GROWTH
from optuna_fedbo.core.influence import capped_by_others
from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.threads import one_blas_thread

#: Lengthscales of the single-scale feature blocks that pooled statistics are also kept on.
POOLING_LENGTHSCALES = (0.05, 0.1, 0.2, 0.5)
#: Features per single-scale block.
POOLING_BLOCK_FEATURES = 100
#: Noise variances (of standardized values) that :func:`select_posterior` chooses from.
POOLING_NOISE_VARIANCES = (1e-3, 1e-2, 1e-1, 1.0)
#: Prior standard deviations of each participant's own offset (in units of the pooled values'
#: spread) that :func:`select_posterior` chooses from; 0: no offsets.
POOLING_OFFSET_SCALES = (0.0, 0.3, 1.0)

#: How many times the widest other participant's value spread a participant's may reach at full
#: weight (:func:`robust_weights`).
POOL_SPREAD_FACTOR = 1.0

#: Relative tolerance of the consistency checks of unpacked statistics (rounding of sums).
_TOLERANCE = 1e-6


def pooling_feature_maps(shared: RandomFourierFeatures) -> list[RandomFourierFeatures]:
    """The feature blocks pooled statistics are kept on: ``shared`` first, then one block per
    :data:`POOLING_LENGTHSCALES` (drawn from the next public seed, so equal everywhere)."""
    blocks = [
        RandomFourierFeatures(
            shared.n_dims,
            POOLING_BLOCK_FEATURES,
            lengthscale,
            seed=shared.seed + 1,
            column_scales=shared.column_scales,
        )
        for lengthscale in POOLING_LENGTHSCALES
    ]
    return [shared, *blocks]


def packed_blocks_length(n_features: int) -> int:
    """Length of an upload of pooled statistics with ``n_features`` shared features."""
    return sum(packed_length(size) for size in block_sizes(n_features))


def block_sizes(n_features: int) -> list[int]:
    """Features per block of :func:`pooling_feature_maps` with ``n_features`` shared ones."""
    return [n_features] + [POOLING_BLOCK_FEATURES] * len(POOLING_LENGTHSCALES)


def packed_length(n_features: int) -> int:
    """Length of a packed statistics vector: 3 sums, 2 ``M``-vectors, the upper triangle."""
    return 3 + 2 * n_features + n_features * (n_features + 1) // 2


@functools.lru_cache(maxsize=8)
def _upper_mask(n_features: int) -> np.ndarray:
    """The upper triangle of an ``n x n`` matrix as a boolean mask (read-only): indexing with
    it picks the entries of ``np.triu_indices(n)`` in the same (row-major) order, about four
    times faster than with the index pairs."""
    mask = np.triu(np.ones((n_features, n_features), dtype=bool))
    mask.flags.writeable = False
    return mask


def pack(statistics: SufficientStatistics) -> np.ndarray:
    """``statistics`` as one flat vector (read back with :func:`unpack`)."""
    return np.concatenate(
        [
            [float(statistics.count), statistics.target_sum, statistics.target_square_sum],
            statistics.feature_sum,
            statistics.feature_target,
            statistics.gram[_upper_mask(statistics.n_features)],
        ]
    )


def unpack(vector: np.ndarray, n_features: int, *, strict: bool = True) -> SufficientStatistics:
    """The statistics packed in ``vector`` by :func:`pack`.

    ``strict=False`` skips the consistency checks and keeps a fractional count (a sum of
    weighted, fixed-point rounded statistics: secure aggregation's, which nobody can check).

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
    if strict and (count < 1 or count != round(count)):
        raise ValueError(f"the observation count must be a positive integer, got {count!r}")
    statistics = SufficientStatistics(n_features)
    statistics.count = int(count) if strict else max(float(count), 1.0)  # type: ignore[assignment]
    statistics.target_sum = float(vector[1])
    statistics.target_square_sum = float(vector[2])
    statistics.feature_sum[:] = vector[3 : 3 + n_features]  # into its own arrays, no copies
    statistics.feature_target[:] = vector[3 + n_features : 3 + 2 * n_features]
    triangle, upper = vector[3 + 2 * n_features :], _upper_mask(n_features)
    statistics.gram[upper] = triangle
    statistics.gram.T[upper] = triangle  # the lower triangle (the diagonal twice, the same)
    if strict:
        _check_consistent(statistics)
    return statistics


def _check_consistent(statistics: SufficientStatistics) -> None:
    """Raise ``ValueError`` unless observations on unit-norm features can give ``statistics``."""
    count = statistics.count
    slack = _TOLERANCE * count
    diagonal = statistics.gram.diagonal()
    if diagonal.min() < -slack or abs(float(diagonal.sum()) - count) > slack:
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
        if (np.abs(sums) > reach * bound * (1 + _TOLERANCE) + slack).any():
            raise ValueError(f"the {name} exceed what observations on these features can give")


def pack_blocks(statistics: list[SufficientStatistics]) -> np.ndarray:
    """One upload vector from the statistics of every block, in block order."""
    return np.concatenate([pack(part) for part in statistics])


def unpack_blocks(
    vector: np.ndarray, n_features: int, *, strict: bool = True
) -> list[SufficientStatistics]:
    """The blocks' statistics packed by :func:`pack_blocks` (checked as :func:`unpack`, unless
    ``strict`` is false).

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
        blocks.append(unpack(vector[start:end], size, strict=strict))
        start = end
    if not strict:
        return blocks
    first = blocks[0]
    for block in blocks[1:]:
        # np.allclose's test (|a - b| <= atol + rtol |b|), on two numbers.
        same = block.count == first.count and all(
            abs(value - reference) <= _TOLERANCE * (1.0 + abs(reference))
            for value, reference in (
                (block.target_sum, first.target_sum),
                (block.target_square_sum, first.target_square_sum),
            )
        )
        if not same:
            raise ValueError("the feature blocks' statistics are not of the same values")
    return blocks


def robust_weights(statistics: list[SufficientStatistics]) -> np.ndarray:
    """Each participant's weight in the pool: one, unless it outweighs every other participant.

    A participant whose observation count exceeds the largest count of the others, or whose
    values spread (standard deviation) more widely than the widest of the others', enters
    scaled down, as if its values were noisier: it counts for at most as many observations,
    and its squared deviations for at most as much, as the heaviest other participant's
    (:func:`optuna_fedbo.core.influence.capped_by_others`). The rule needs no honest peers: one
    participant, whatever it sends and whatever the others send, can neither claim more
    observations nor, with values of another scale, more spread than someone else brings; a
    lone participant keeps weight one (the server publishes nothing of it alone).
    """
    counts = np.array([s.count for s in statistics], dtype=float)
    spreads = np.array([s.standardization()[1] for s in statistics])
    weights = capped_by_others(counts) / counts
    return weights * (capped_by_others(spreads, POOL_SPREAD_FACTOR) / spreads) ** 2


def pooled_posterior(
    statistics: list[SufficientStatistics],
    weights: np.ndarray,
    noise_variance: float,
    offset_scale: float,
) -> tuple[np.ndarray, float]:
    """The posterior mean of ``omega`` given everyone's values, and the log evidence.

    The values are standardized together (their pooled mean and spread). The model is
    ``y = phi(x)^T omega + b_n + eps`` for participant ``n``, with an offset of its own,
    ``b_n ~ N(0, offset_scale^2)`` (none for ``offset_scale = 0``): sites whose values differ
    by a constant then pool into one shape, at the price of the differences in level between
    sites that are real. The offsets enter as one indicator feature per participant, so the
    posterior and its evidence are exact
    (:class:`~optuna_fedbo.core.posterior.LinearPosterior`).

    Args:
        statistics: One participant's statistics each, on the same features.
        weights: Each participant's weight (:func:`robust_weights`).
        noise_variance: ``lambda`` of the standardized values.
        offset_scale: Prior standard deviation of each participant's offset (standardized).

    Returns:
        ``(mean, log evidence)``; ``mean`` has the features' length.
    """
    return _PooledSums(statistics, weights).posterior(noise_variance, offset_scale)


def _weighted_sum(weights: np.ndarray, arrays: list[np.ndarray]) -> np.ndarray:
    """``sum(w * a for w, a in zip(weights, arrays))``, the same numbers, in one buffer."""
    total = np.multiply(weights[0], arrays[0], dtype=float)
    total += 0.0  # as 0 + w a (a zero's sign as there): the first term in place of zeros
    scratch = np.empty_like(total) if len(arrays) > 1 else total
    for weight, array in zip(weights[1:], arrays[1:]):
        total += np.multiply(weight, array, out=scratch)
    return total


class _PooledSums:
    """Everyone's weighted statistics, summed and standardized together (once per block)."""

    def __init__(self, statistics: list[SufficientStatistics], weights: np.ndarray) -> None:
        self.gram = _weighted_sum(weights, [s.gram for s in statistics])
        feature_sums = np.stack([w * s.feature_sum for w, s in zip(weights, statistics)], axis=1)
        feature_target = sum(w * s.feature_target for w, s in zip(weights, statistics))
        counts = np.array([w * s.count for w, s in zip(weights, statistics)])
        target_sums = np.array([w * s.target_sum for w, s in zip(weights, statistics)])
        square_sum = float(sum(w * s.target_square_sum for w, s in zip(weights, statistics)))
        total = float(counts.sum())
        mean = float(target_sums.sum()) / total
        std = math.sqrt(max(square_sum / total - mean * mean, 0.0))
        if std <= 1e-12 * max(1.0, abs(mean)):
            std = 1.0
        # The standardized values' sums: (y - mean) / std.
        self.square_sum = max((square_sum - total * mean * mean) / (std * std), 0.0)
        self.feature_target = (feature_target - mean * feature_sums.sum(axis=1)) / std
        self.target_sums = (target_sums - mean * counts) / std
        self.feature_sums, self.counts = feature_sums, counts
        self.count = max(int(round(total)), 1)

    def system(self, offset_scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(Phi^T Phi, Phi^T y, prior scales)`` of the regression, the participants' offsets
        as one indicator feature each (none for ``offset_scale <= 0``)."""
        if offset_scale <= 0:
            return self.gram, self.feature_target, None
        n_features, n_sites = self.feature_sums.shape
        augmented = np.zeros((n_features + n_sites, n_features + n_sites))
        augmented[:n_features, :n_features] = self.gram
        augmented[:n_features, n_features:] = self.feature_sums
        augmented[n_features:, :n_features] = self.feature_sums.T
        augmented[n_features:, n_features:] = np.diag(self.counts)
        target = np.concatenate([self.feature_target, self.target_sums])
        scales = np.concatenate([np.ones(n_features), np.full(n_sites, offset_scale)])
        return augmented, target, scales

    def posterior(self, noise_variance: float, offset_scale: float) -> tuple[np.ndarray, float]:
        """:func:`pooled_posterior`'s ``(mean, log evidence)`` for these sums."""
        gram, target, scales = self.system(offset_scale)
        posterior = LinearPosterior(
            gram, target, noise_variance, self.square_sum, self.count, prior_scales=scales
        )
        return posterior.mean[: len(self.feature_target)], posterior.log_marginal_likelihood()

    def evidences(
        self, noise_variances: tuple[float, ...], offset_scale: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`posterior` for every noise variance: ``(log evidences (K,), means (K, M))``.

        The same quantities as :class:`~optuna_fedbo.core.posterior.LinearPosterior`'s, computed
        straight from LAPACK: at these sizes (``M`` about 100) its per-call overhead took most
        of a server round (5 blocks x 12 choices), not the factorizations themselves.
        """
        from scipy.linalg import lapack

        n_features, n_sites = self.feature_sums.shape
        size = n_features if offset_scale <= 0 else n_features + n_sites
        # system()'s matrix and values times the prior scales, in one Fortran-order buffer: the
        # features' scale is 1, so only the offsets' rows change (the same numbers).
        scaled = np.empty((size, size), order="F")
        scaled[:n_features, :n_features] = self.gram
        target = self.feature_target
        if size > n_features:
            scaled[:n_features, n_features:] = self.feature_sums * offset_scale
            scaled[n_features:, :n_features] = scaled[:n_features, n_features:].T
            scaled[n_features:, n_features:] = np.diag(self.counts * (offset_scale * offset_scale))
            target = np.concatenate([target, self.target_sums * offset_scale])
        precision = scaled if len(noise_variances) == 1 else np.empty_like(scaled, order="F")
        diagonal = precision.T.reshape(-1)[:: size + 1]  # a view (Fortran order)
        evidences, means = [], []
        for noise_variance in noise_variances:
            if not noise_variance > 0:
                raise ValueError(f"The noise variance must be positive, got {noise_variance}.")
            if precision is not scaled:
                np.copyto(precision, scaled)
            diagonal += noise_variance
            cholesky, info = lapack.dpotrf(precision, lower=1, clean=0, overwrite_a=1)
            if info != 0:
                raise np.linalg.LinAlgError(f"not positive definite (LAPACK info {info})")
            scaled_mean, info = lapack.dpotrs(cholesky, target, lower=1)
            # log det K in feature space, and y^T K^{-1} y by Woodbury (as LinearPosterior).
            log_det = (self.count - size) * math.log(noise_variance) + 2.0 * float(
                np.sum(np.log(np.diagonal(cholesky)))
            )
            quadratic = (self.square_sum - float(scaled_mean @ target)) / noise_variance
            evidences.append(-0.5 * (quadratic + log_det + self.count * math.log(2.0 * math.pi)))
            means.append(scaled_mean[:n_features])  # the features' scale is 1
        return np.array(evidences), np.array(means)

    def evidence_grid(
        self, noise_variances: tuple[float, ...], offset_scales: tuple[float, ...]
    ) -> np.ndarray:
        """The log evidences of :meth:`evidences` for every offset scale (rows) and noise
        variance (columns), without the means.

        The offsets' indicator features enter through a Schur complement: with ``G`` the
        features' Gram matrix, ``L`` the Cholesky factor of ``G + lambda I`` and ``S`` the
        participants' offsets, ``W = L^{-1} [Phi^T y, Phi^T E]`` gives, for every offset scale
        ``s``, the ``S x S`` complement ``s^2 (diag(counts) - W_E^T W_E) + lambda I``: one
        factorization of the features' block per noise variance serves all offset scales (12
        systems of ``M + S`` unknowns per block became 4 of ``M``). With more participants
        than half the features, where the complements cost more than the systems, the offsets'
        rows are :meth:`evidences`' own. Equal to :meth:`evidences`' values up to rounding.
        """
        from scipy.linalg import lapack

        n_features, n_sites = self.feature_sums.shape
        noises, log_noises, scales, positive = _grid_axes(
            tuple(noise_variances), tuple(offset_scales)
        )
        schur_sites = n_sites if n_sites <= n_features // 2 else 0
        # L^{-1} of the values' and the offsets' columns at once (Fortran order for LAPACK).
        columns = np.empty((n_features, 1 + schur_sites), order="F")
        columns[:, 0] = self.feature_target
        columns[:, 1:] = self.feature_sums[:, :schur_sites]
        # The Gram matrix is symmetric: its transpose is the same matrix in Fortran order.
        gram = self.gram.T
        diagonals = np.empty((len(noises), n_features))
        solved = np.empty((len(noises), n_features, 1 + schur_sites))
        precision = np.empty_like(gram, order="F")  # one buffer, factorized in place
        diagonal = precision.T.reshape(-1)[:: n_features + 1]  # a view
        for k, noise_variance in enumerate(noise_variances):
            np.copyto(precision, gram)
            diagonal += noise_variance
            cholesky, info = lapack.dpotrf(precision, lower=1, clean=0, overwrite_a=1)
            if info != 0:
                raise np.linalg.LinAlgError(f"not positive definite (LAPACK info {info})")
            solved[k], _ = lapack.dtrtrs(cholesky, columns, lower=1)
            diagonals[k] = cholesky.diagonal()
        # Per noise variance: W^T W holds y^T K^{-1} y, the offsets' cross terms and their block.
        products = np.swapaxes(solved, 1, 2) @ solved
        total_quadratics = np.repeat(products[None, :, 0, 0], len(scales), axis=0)
        total_log_dets = np.repeat((2.0 * np.log(diagonals).sum(axis=1))[None], len(scales), 0)
        sizes = np.full((len(scales), 1), n_features)
        if len(positive) and schur_sites:
            # The offsets' Schur complements, every positive scale and noise variance at once.
            sizes[positive] += n_sites
            with_offsets = scales[positive, None]
            squared = with_offsets**2
            cross = with_offsets[..., None] * (self.target_sums - products[:, 1:, 0])
            if n_sites == 1:  # a number each
                schur = squared * (self.counts[0] - products[:, 1, 1]) + noises
                if not (schur > 0).all():
                    raise np.linalg.LinAlgError("not positive definite (offsets' complement)")
                total_quadratics[positive] += cross[..., 0] ** 2 / schur
                total_log_dets[positive] += np.log(schur)
            else:
                complements = np.diag(self.counts) - products[:, 1:, 1:]
                schur = squared[..., None, None] * complements
                schur += noises[:, None, None] * np.eye(n_sites)
                factors = np.linalg.cholesky(schur)
                reduced = np.linalg.solve(factors, cross[..., None])[..., 0]
                total_quadratics[positive] += np.einsum("skn,skn->sk", reduced, reduced)
                diagonal = np.diagonal(factors, axis1=-2, axis2=-1)
                total_log_dets[positive] += 2.0 * np.log(diagonal).sum(axis=-1)
        quadratic = (self.square_sum - total_quadratics) / noises
        log_det = (self.count - sizes) * log_noises + total_log_dets
        grid = -0.5 * (quadratic + log_det + self.count * math.log(2.0 * math.pi))
        if not schur_sites:
            for i in positive:
                grid[i] = self.evidences(noise_variances, float(scales[i]))[0]
        return grid


@functools.lru_cache(maxsize=8)
def _grid_axes(noises: tuple[float, ...], scales: tuple[float, ...]) -> tuple[np.ndarray, ...]:
    """The grid's noises, their logs, its scales and the positive ones' indices (read-only)."""
    noise_array, scale_array = np.array(noises, dtype=float), np.array(scales, dtype=float)
    if not np.all(noise_array > 0):
        raise ValueError(f"The noise variances must be positive, got {noises}.")
    axes = (noise_array, np.log(noise_array), scale_array, np.flatnonzero(scale_array > 0))
    for array in axes:
        array.flags.writeable = False
    return axes


class PoolingChoice(NamedTuple):
    """What :func:`choose_posterior` chose: feature block, noise variance, offset scale."""

    block: int
    noise_variance: float
    offset_scale: float


def choose_posterior(
    participants: list[list[SufficientStatistics]],
    *,
    noise_variances: tuple[float, ...] = POOLING_NOISE_VARIANCES,
    offset_scales: tuple[float, ...] = POOLING_OFFSET_SCALES,
    keep: PoolingChoice | None = None,
) -> tuple[PoolingChoice, np.ndarray]:
    """The pooled posterior mean on the feature block, noise variance and offset scale of
    largest evidence (or on those of ``keep``, without comparing).

    Args:
        participants: Each participant's statistics, one per feature block (all blocks of
            the same values).
        noise_variances: The noise variances to choose from.
        offset_scales: The participants' offset scales to choose from
            (:func:`pooled_posterior`).
        keep: An earlier choice to use again (its posterior alone, instead of the grid).

    Returns:
        ``(choice, posterior mean)``.
    """
    if not participants:
        raise ValueError("Nothing to pool.")

    def pooled(index: int) -> _PooledSums:
        block = [statistics[index] for statistics in participants]
        return _PooledSums(block, robust_weights(block))

    # One BLAS limit for all the posteriors.
    with one_blas_thread():
        if keep is not None:
            return keep, _exact(pooled(keep.block), keep)[1]
        # The evidence of every choice, from one factorization per block and noise variance
        # (:meth:`_PooledSums.evidence_grid`); the first choice of largest evidence in the order
        # (block, offset scale, noise variance) wins.
        sums = [pooled(index) for index in range(len(participants[0]))]
        grids = np.stack([block.evidence_grid(noise_variances, offset_scales) for block in sums])
        # Choices within rounding of the best are compared on their evidences as computed
        # one system at a time, which also give the posterior mean.
        top = float(grids.max())
        near = np.argwhere(grids >= top - _TIE_TOLERANCE * max(1.0, abs(top)))
        if not len(near):  # not a number: every choice compared on its own system
            near = np.argwhere(np.ones(grids.shape, dtype=bool))
        best: tuple[float, PoolingChoice, np.ndarray] | None = None
        for index, i, k in near:  # in the order (block, offset scale, noise variance)
            choice = PoolingChoice(int(index), float(noise_variances[k]), float(offset_scales[i]))
            exact, mean = _exact(sums[choice.block], choice)
            if best is None or exact > best[0]:
                best = (exact, choice, mean)
    assert best is not None
    return best[1], best[2]


#: Relative distance to the largest evidence within which :func:`choose_posterior` compares
#: choices on their exactly computed evidences (the grid's rounding is far below it).
_TIE_TOLERANCE = 1e-9


def _exact(sums: _PooledSums, choice: PoolingChoice) -> tuple[float, np.ndarray]:
    """``(log evidence, posterior mean)`` of ``choice``: one system, as
    :meth:`_PooledSums.evidences` computes it."""
    evidences, means = sums.evidences((choice.noise_variance,), choice.offset_scale)
    return float(evidences[0]), means[0]


class KeptChoice:
    """A server's pooling choice, kept while the same contributors' observations grow by less
    than :data:`~optuna_fedbo.core.gp_fit.REFIT_GROWTH` (10%) since it was made: block, noise
    and offsets chosen again (60 evidences, most of a round) only then, as a participant
    refits its GP's hyperparameters. The plain server and the secure one (which knows who
    contributed to the sum and its count) follow the same rule.

    Args:
        growth: The growth that calls for a new choice (``math.inf``: none, while the
            contributors stay the same).
    """

    def __init__(self, growth: float = REFIT_GROWTH) -> None:
        self._growth = growth
        self._held: tuple[tuple[str, ...], float, PoolingChoice] | None = None

    def keep(self, contributors: Iterable[str], count: float) -> PoolingChoice | None:
        """The held choice, if made for the same ``contributors`` at more than
        ``count / growth`` observations; else ``None`` (choose again)."""
        if self._held is None:
            return None
        chosen_by, chosen_at, choice = self._held
        same = chosen_by == tuple(sorted(contributors))
        return choice if same and count < self._growth * chosen_at else None

    def choose(
        self,
        participants: list[list[SufficientStatistics]],
        contributors: Iterable[str],
        count: float,
        **options: tuple[float, ...],
    ) -> tuple[PoolingChoice, np.ndarray]:
        """:func:`choose_posterior` of ``participants`` (``options``: its grids), on the held
        choice while :meth:`keep` gives one, else on a new choice, then held.

        Args:
            participants: As :func:`choose_posterior`'s.
            contributors: Who contributed (the names the rule compares).
            count: Their observations (as pooled: a secure sum's weighed count).
        """
        contributors = tuple(sorted(contributors))
        kept = self.keep(contributors, count)
        choice, mean = choose_posterior(participants, keep=kept, **options)
        if kept is None:
            self._held = (contributors, count, choice)
        return choice, mean


def select_posterior(
    participants: list[list[SufficientStatistics]],
    *,
    noise_variances: tuple[float, ...] = POOLING_NOISE_VARIANCES,
    offset_scales: tuple[float, ...] = POOLING_OFFSET_SCALES,
) -> tuple[int, np.ndarray]:
    """``(block index, posterior mean)`` of :func:`choose_posterior`'s choice."""
    choice, mean = choose_posterior(
        participants, noise_variances=noise_variances, offset_scales=offset_scales
    )
    return choice.block, mean


__all__ = [
    "POOLING_LENGTHSCALES",
    "PoolingChoice",
    "choose_posterior",
    "block_sizes",
    "KeptChoice",
    "pack",
    "pack_blocks",
    "packed_blocks_length",
    "packed_length",
    "pooled_posterior",
    "robust_weights",
    "pooling_feature_maps",
    "select_posterior",
    "unpack",
    "unpack_blocks",
]
