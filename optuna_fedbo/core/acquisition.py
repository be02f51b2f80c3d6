"""Maximize an acquisition function over the encoded search space.

The recipe: score many random candidates in one vectorised pass, then refine the best few with
one batched L-BFGS-B run (the starts are independent, so the sum of their objectives is separable
and a single optimizer call moves them all), and snap the results onto the admissible grid.
Categorical one-hot columns are held at their candidate's value during refinement; integer and
stepped columns are refined as continuous and then rounded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple
from typing import Protocol

import numpy as np

from optuna_fedbo.core.gp_fit import MAX_GP_POINTS
from optuna_fedbo.core.lbfgsb import minimize_in_box
from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.space import Box
from optuna_fedbo.core.space import UnitCubeEncoding
from optuna_fedbo.core.threads import one_blas_thread


class AcquisitionFunction(Protocol):
    """A batch function to maximize over encoded points of shape ``(n, D)``."""

    def values(self, x: np.ndarray) -> np.ndarray:
        """Values of shape ``(n,)``."""
        ...

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values ``(n,)`` and gradients ``(n, D)``."""
        ...


class LinearAcquisition:
    """``phi(x)^T w``: a Thompson sample (``w = omega``) or a posterior mean (``w = nu``).

    Args:
        features: The random features ``phi``.
        weights: The vector ``w`` of shape ``(M,)``.
    """

    def __init__(self, features: RandomFourierFeatures, weights: np.ndarray) -> None:
        weights = np.asarray(weights, dtype=float)
        if weights.shape != (features.n_features,):
            raise ValueError(
                f"Expected a weight vector of length {features.n_features}, got {weights.shape}."
            )
        self._features = features
        self._weights = weights

    @property
    def feature_map(self) -> RandomFourierFeatures:
        """The features ``phi`` (what a ``features`` argument of :meth:`values` must be of)."""
        return self._features

    def values(self, x: np.ndarray, *, features: np.ndarray | None = None) -> np.ndarray:
        """Values at ``x``; ``features``: ``phi(x)`` if already computed.

        Without ``features`` the values are the fast ones (single precision, to about
        ``1e-7 |w|``: :meth:`~optuna_fedbo.core.rff.RandomFourierFeatures.weighted_sum`): this
        scores candidates. Gradients (:meth:`values_and_grads`) use exact features.
        """
        if features is None:
            return self._features.weighted_sum(x, self._weights, fast=True)
        return features @ self._weights

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._features.value_and_grad(x, self._weights)


class UpperConfidenceBound:
    """GP-UCB on the RFF posterior: ``mu(x) + sqrt(beta) sigma(x)``.

    Args:
        features: The random features ``phi``.
        posterior: The Bayesian linear regression posterior over ``phi``.
        beta: The exploration weight ``beta`` (the bound uses its square root).
    """

    def __init__(
        self, features: RandomFourierFeatures, posterior: LinearPosterior, beta: float
    ) -> None:
        if beta < 0:
            raise ValueError(f"beta must be non-negative, got {beta}.")
        self._features = features
        self._posterior = posterior
        self._sqrt_beta = float(np.sqrt(beta))

    def values(self, x: np.ndarray) -> np.ndarray:
        """Values at ``x``, on fast features (as :meth:`LinearAcquisition.values`)."""
        mean, variance = self._posterior.predict(self._features(x, fast=True))
        return mean + self._sqrt_beta * np.sqrt(np.maximum(variance, 0.0))

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        phi = self._features(x)
        jacobian = self._features.jacobian(x)
        mean, variance = self._posterior.predict(phi)
        std = np.sqrt(np.maximum(variance, 1e-300))
        # d var / dx = 2 lambda J^T Sigma^{-1} phi.
        precision_phi = self._posterior.solve(phi)
        grad_variance = (
            2.0 * self._posterior.noise_variance * np.einsum("nmd,nm->nd", jacobian, precision_phi)
        )
        grad_mean = np.einsum("nmd,m->nd", jacobian, self._posterior.mean)
        grads = grad_mean + self._sqrt_beta * grad_variance / (2.0 * std[:, None])
        return mean + self._sqrt_beta * std, grads


#: Beyond this many observations (where a sampler's GP starts to model a subset) the
#: acquisition search shrinks (:func:`search_budget`).
LARGE_STUDY = MAX_GP_POINTS
#: Tolerance of the L-BFGS-B refinement on the projected gradient (:func:`maximize`).
REFINE_GTOL = 1e-2
#: Most function evaluations of one L-BFGS-B line search in the refinement (SciPy's default
#: is 20). With a broadcast as prior mean, a start at an observed point (the incumbent is a
#: candidate) can sit where the posterior standard deviation is about 1e-4 and its rounding
#: error as large as itself: there the line search failed twice, about 20 evaluations each,
#: before L-BFGS-B gave up, in 16 of 86 searches at 15-100 trials (4-D, four sites, 2,742
#: evaluations in all). With 8, those searches made 21% fewer evaluations and chose the same
#: points in 73 of 86 (the others' log EI 0.0025 lower on average, 0.13 at most); a one-site
#: federation's 86 searches chose the same points.
REFINE_MAX_LINE_SEARCH = 8
#: Spreads of the zoom rounds (:func:`maximize`), in units of the function's column scales.
ZOOM_SPREADS = (0.1, 0.01)


class SearchBudget(NamedTuple):
    """How hard :func:`maximize` searches: random candidates, L-BFGS-B starts, zoom candidates."""

    n_candidates: int
    n_refinements: int
    n_zoom: int = 0


def search_budget(n_observations: int, n_candidates: int, n_refinements: int) -> SearchBudget:
    """The acquisition search per suggestion in a study of this size.

    The budget as given up to :data:`LARGE_STUDY` observations. Beyond, an eighth of the
    candidates (at least 64), and instead of L-BFGS-B two zoom rounds of 64 candidates around
    the best one (none if refinement is off). By then the sampler knows where the good region
    is (its candidates include points around the best trials), and each L-BFGS-B step costs a
    GP prediction with gradients: at 1,000 trials (3-D) the refinement made 9-27 evaluations
    and took 2-4 ms of a participant's 9 ms trial. With the local GP on GP draws (3-D l=0.1 and
    4-D l=0.2, 250 trials, 10 seed functions) the median regret at 190 and 250 trials was the
    same with either search.
    """
    if n_observations <= LARGE_STUDY:
        return SearchBudget(n_candidates, n_refinements)
    return SearchBudget(
        max(n_candidates // 8, min(n_candidates, 64)), 0, 64 if n_refinements > 0 else 0
    )


def maximize(
    acquisition: AcquisitionFunction,
    encoding: UnitCubeEncoding,
    rng: np.random.Generator,
    *,
    box: Box | None = None,
    n_candidates: int = 1024,
    n_refinements: int = 4,
    n_zoom: int = 0,
    zoom_starts: int = 1,
    zoom_spreads: tuple[float, ...] = ZOOM_SPREADS,
    max_iterations: int = 30,
    extra_candidates: np.ndarray | None = None,
    scales: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """Find an encoded point that (approximately) maximizes an acquisition function.

    Args:
        acquisition: The function to maximize.
        encoding: The unit-cube encoding of the search space.
        rng: Source of randomness for the candidates.
        box: Sub-box of the unit cube to search; the whole cube if ``None``.
        n_candidates: Number of random candidates scored in one pass.
        n_refinements: Number of best candidates refined with L-BFGS-B (0 disables refinement).
        n_zoom: Candidates per zoom round and start (0: none). Each round draws them around
            each start's best point so far, Gaussian with the round's spread times ``scales``
            as standard deviations: a local search without gradients, where L-BFGS-B's many
            evaluations cost too much.
        zoom_starts: How many of the best candidates the zoom starts from when there is no
            L-BFGS-B refinement (after one, it starts from the best point).
        zoom_spreads: The zoom rounds' spreads, one round each.
        max_iterations: L-BFGS-B iteration limit.
        extra_candidates: Further encoded points to score (e.g. the incumbent), shape
            ``(k, D)``; they are used as given, even outside ``box``.
        scales: Per-column scales of the function (e.g. a GP's lengthscales): refinement runs
            in ``x / scales``, where the function is about equally steep along every column,
            which L-BFGS-B needs far fewer iterations for. ``None`` for no rescaling.

    Returns:
        ``(point, value)``: the best encoded point, snapped onto the admissible grid, and
        its value.

    BLAS runs on one thread meanwhile (:func:`~optuna_fedbo.core.threads.one_blas_thread`).
    """
    with one_blas_thread():
        return _maximize(
            acquisition,
            encoding,
            rng,
            box or Box.unit(encoding.n_columns),
            n_candidates,
            n_refinements,
            n_zoom,
            zoom_starts,
            zoom_spreads,
            max_iterations,
            extra_candidates,
            scales,
        )


def _maximize(
    acquisition: AcquisitionFunction,
    encoding: UnitCubeEncoding,
    rng: np.random.Generator,
    box: Box,
    n_candidates: int,
    n_refinements: int,
    n_zoom: int,
    zoom_starts: int,
    zoom_spreads: tuple[float, ...],
    max_iterations: int,
    extra_candidates: np.ndarray | None,
    scales: np.ndarray | None,
) -> tuple[np.ndarray, float]:
    candidates = encoding.snap(encoding.sample(n_candidates, rng, box))
    if extra_candidates is not None and len(extra_candidates) > 0:
        candidates = np.vstack([candidates, encoding.snap(extra_candidates)])
    scores = acquisition.values(candidates)
    order = np.argsort(-scores)
    best_index = int(order[0])
    best_point, best_value = candidates[best_index], float(scores[best_index])

    free = ~encoding.categorical_columns
    if not np.any(free):
        return best_point, best_value
    column_scales = np.ones(encoding.n_columns) if scales is None else np.asarray(scales, float)
    if n_refinements > 0:
        starts = candidates[order[:n_refinements]]
        refined = _refine(acquisition, starts, free, box, max_iterations, column_scales[free])
        best_point, best_value = _best_of(
            acquisition, encoding.snap(refined), best_point, best_value
        )
    if n_zoom > 0:
        if zoom_starts > 1 and n_refinements == 0:
            starts, values = candidates[order[:zoom_starts]], scores[order[:zoom_starts]]
        else:
            starts, values = best_point[None, :], np.array([best_value])
        best_point, best_value = _zoom(
            acquisition,
            encoding,
            rng,
            box,
            starts,
            values,
            n_zoom,
            zoom_spreads,
            free * column_scales,
        )
    return best_point, best_value


def _zoom(
    acquisition: AcquisitionFunction,
    encoding: UnitCubeEncoding,
    rng: np.random.Generator,
    box: Box,
    starts: np.ndarray,
    values: np.ndarray,
    n_zoom: int,
    spreads: tuple[float, ...],
    scales: np.ndarray,
) -> tuple[np.ndarray, float]:
    """Zoom rounds around each start at once (one evaluation of all clouds per round); each
    start moves to its cloud's best point where that is better. ``scales`` is zero on the
    columns that stay (categorical ones). Returns the best point and its value."""
    points, values = starts.copy(), values.astype(float)
    n_starts, n_columns = points.shape
    rows = np.arange(n_starts)
    for spread in spreads:
        steps = rng.standard_normal((n_starts * n_zoom, n_columns)) * (spread * scales)
        cloud = np.clip(np.repeat(points, n_zoom, axis=0) + steps, box.low, box.high)
        cloud = encoding.snap(cloud).reshape(n_starts, n_zoom, n_columns)
        scores = acquisition.values(cloud.reshape(-1, n_columns)).reshape(n_starts, n_zoom)
        best = np.argmax(scores, axis=1)
        better = scores[rows, best] > values
        points[better] = cloud[rows, best][better]
        values[better] = scores[rows, best][better]
    k = int(np.argmax(values))
    return points[k], float(values[k])


def _best_of(
    acquisition: AcquisitionFunction,
    points: np.ndarray,
    best_point: np.ndarray,
    best_value: float,
) -> tuple[np.ndarray, float]:
    """The best of ``points`` if it beats ``best_value``, else the best so far."""
    scores = acquisition.values(points)
    k = int(np.argmax(scores))
    if scores[k] > best_value:
        return points[k], float(scores[k])
    return best_point, best_value


def _refine(
    acquisition: AcquisitionFunction,
    starts: np.ndarray,
    free: np.ndarray,
    box: Box,
    max_iterations: int,
    scales: np.ndarray,
) -> np.ndarray:
    """One L-BFGS-B run over the free columns of all starts at once, in ``x / scales``."""
    n_starts = len(starts)
    fixed = starts.copy()
    all_free, negative_scales = bool(np.all(free)), -scales

    def negative_total(flat: np.ndarray) -> tuple[float, np.ndarray]:
        if all_free:  # the same numbers without the copies (no categorical column)
            values, grads = acquisition.values_and_grads(flat.reshape(n_starts, -1) * scales)
            return -float(values.sum()), (grads * negative_scales).ravel()
        points = fixed.copy()
        points[:, free] = flat.reshape(n_starts, -1) * scales
        values, grads = acquisition.values_and_grads(points)
        return -float(values.sum()), -(grads[:, free] * scales).ravel()

    low, high = box.low[free] / scales, box.high[free] / scales
    # Each start's projected gradient below 1e-2 (GPSampler's tolerance): at 50 observations
    # (4-D, LogEI, 4 starts) 10 evaluations instead of 17, the same maximum to 1e-5.
    x, _ = minimize_in_box(
        negative_total,
        (starts[:, free] / scales).ravel(),
        np.tile(low, n_starts),
        np.tile(high, n_starts),
        max_iterations=max_iterations,
        gtol=REFINE_GTOL,
        max_line_search=REFINE_MAX_LINE_SEARCH,
    )
    points = fixed.copy()
    points[:, free] = np.clip(x.reshape(n_starts, -1) * scales, box.low[free], box.high[free])
    return points


class ScaledFunction:
    """``c f(x) + d`` for an acquisition-like function ``f`` (e.g. a weighted broadcast)."""

    def __init__(self, function: AcquisitionFunction, weight: float, offset: float = 0.0) -> None:
        self._function = function
        self._weight = float(weight)
        self._offset = float(offset)

    def values(self, x: np.ndarray) -> np.ndarray:
        return self._weight * self._function.values(x) + self._offset

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values, grads = self._function.values_and_grads(x)
        return self._weight * values + self._offset, self._weight * grads


class RegionwiseLinear:
    """``phi(x)^T w_{i[x]}``: one weight vector per sub-region (FTS-DE's broadcast function).

    Args:
        features: The random features ``phi``.
        weights: One vector per sub-region, shape ``(P, M)``.
        region_of: Maps encoded points ``(n, D)`` to their sub-region indices ``(n,)``.
    """

    def __init__(
        self,
        features: RandomFourierFeatures,
        weights: np.ndarray,
        region_of: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        weights = np.asarray(weights, dtype=float)
        if weights.ndim != 2 or weights.shape[1] != features.n_features:
            raise ValueError(f"Expected weights of shape (P, {features.n_features}).")
        self._features = features
        self._weights = weights
        self._region_of = region_of

    @property
    def feature_map(self) -> RandomFourierFeatures:
        """The features ``phi`` (what a ``features`` argument of :meth:`values` must be of)."""
        return self._features

    def values(self, x: np.ndarray, *, features: np.ndarray | None = None) -> np.ndarray:
        """Values at ``x``; ``features``: ``phi(x)`` if already computed (else fast ones, as
        :meth:`LinearAcquisition.values`)."""
        phi = self._features(x, fast=True) if features is None else features
        return np.einsum("nm,nm->n", phi, self._weights[self._region_of(x)])

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._features.value_and_grad(x, self._weights[self._region_of(x)])
