"""Acquisition functions on an exact GP: log expected improvement, UCB and Thompson sampling.

All three take an optional prior-mean *function* (any object with ``values(x)`` and
``values_and_grads(x)``, e.g. :class:`~optuna_fedbo.core.acquisition.LinearAcquisition` over a
federation's broadcast) that must be given exactly when the GP was fitted with a prior mean.
Maximize the first two with :func:`optuna_fedbo.core.acquisition.maximize`; Thompson sampling
scores a finite candidate set with one joint posterior draw (:func:`thompson_candidate`).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from optuna_fedbo.core.acquisition import AcquisitionFunction
from optuna_fedbo.core.acquisition import maximize
from optuna_fedbo.core.acquisition import search_budget
from optuna_fedbo.core.acquisition import SearchBudget
from optuna_fedbo.core.acquisition import ZOOM_SPREADS
from optuna_fedbo.core.gp import GaussianProcess
from optuna_fedbo.core.space import Box
from optuna_fedbo.core.space import UnitCubeEncoding

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_HALF_PI = math.sqrt(0.5 * math.pi)
# Variance floor (standardized units) so that sigma and its gradient stay finite.
_MIN_VARIANCE = 1e-12


def log_h(z: np.ndarray) -> np.ndarray:
    """``log(phi(z) + z Phi(z))``, the log of the expected improvement of ``N(z, 1)`` over 0.

    Accurate for very negative ``z`` (via ``erfcx``), where the direct formula cancels.
    """
    z = np.asarray(z, dtype=float)
    direct = z > -1.0
    if direct.all():  # one formula for all: no masked copies (the same numbers)
        return _log_h_direct(z)
    if not direct.any():
        return _log_h_tail(z)
    # Each formula on all points, the others clamped to -1 where it is finite and accurate,
    # then the right one per point: the same numbers as on the two subsets (elementwise), with
    # fewer array operations than masked copies and assignments.
    return np.where(direct, _log_h_direct(np.maximum(z, -1.0)), _log_h_tail(np.minimum(z, -1.0)))


def _log_h_direct(z: np.ndarray) -> np.ndarray:
    import scipy.special

    return np.log(np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) + z * scipy.special.ndtr(z))


def _log_h_tail(z: np.ndarray) -> np.ndarray:
    """:func:`log_h` for ``z <= -1``: ``phi(z) + z Phi(z) = phi(z) (1 + z sqrt(pi/2)
    erfcx(-z / sqrt(2)))``."""
    import scipy.special

    return (
        -0.5 * z * z
        - _LOG_SQRT_2PI
        + np.log1p(z * _SQRT_HALF_PI * scipy.special.erfcx(-z / math.sqrt(2.0)))
    )


def _log_h_derivative(z: np.ndarray, log_h_z: np.ndarray) -> np.ndarray:
    """``d log h / dz = Phi(z) / h(z)``."""
    import scipy.special

    return np.exp(scipy.special.log_ndtr(z) - log_h_z)


class _GPAcquisition:
    """Shared: the posterior in units of the GP's scale, prior mean included."""

    def __init__(self, gp: GaussianProcess, prior_mean: AcquisitionFunction | None) -> None:
        if gp.has_prior_mean != (prior_mean is not None):
            raise ValueError(
                "prior_mean must be given exactly when the GP was fitted with a prior mean."
            )
        self._gp = gp
        self._prior_mean = prior_mean

    def _posterior(
        self, x: np.ndarray, with_grads: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Mean and std of ``f / scale`` and their gradients."""
        mean, variance, mean_grad, variance_grad = self._gp.standardized_posterior(
            x, with_grads=with_grads
        )
        mean = mean + self._gp.offset / self._gp.scale
        if self._prior_mean is not None:
            if with_grads:
                prior, prior_grad = self._prior_mean.values_and_grads(x)
                assert mean_grad is not None
                mean_grad = mean_grad + prior_grad / self._gp.scale
            else:
                prior = self._prior_mean.values(x)
            mean = mean + prior / self._gp.scale
        std = np.sqrt(np.maximum(variance, _MIN_VARIANCE))
        std_grad = None
        if with_grads:
            assert variance_grad is not None
            if not (variance.size and variance.min() > _MIN_VARIANCE):  # (not with a NaN)
                variance_grad = np.where((variance > _MIN_VARIANCE)[:, None], variance_grad, 0.0)
            std_grad = variance_grad / (2.0 * std[:, None])
        return mean, std, mean_grad, std_grad


class LogExpectedImprovement(_GPAcquisition):
    """``log E[max(f(x) - best, 0)]`` (up to the constant ``log scale``), maximizing ``f``.

    Args:
        gp: The fitted GP (values oriented for maximization).
        best: The incumbent value ``best`` in the units of ``y`` (e.g. ``max(y)``).
        prior_mean: The prior-mean function, if the GP was fitted with one.
    """

    def __init__(
        self,
        gp: GaussianProcess,
        best: float,
        prior_mean: AcquisitionFunction | None = None,
    ) -> None:
        super().__init__(gp, prior_mean)
        self._best = float(best) / gp.scale

    def values(self, x: np.ndarray) -> np.ndarray:
        mean, std, _, _ = self._posterior(x, with_grads=False)
        return np.log(std) + log_h((mean - self._best) / std)

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, std, mean_grad, std_grad = self._posterior(x, with_grads=True)
        assert mean_grad is not None and std_grad is not None
        z = (mean - self._best) / std
        lh = log_h(z)
        ratio = _log_h_derivative(z, lh)[:, None]
        grads = (
            std_grad / std[:, None] + ratio * (mean_grad - z[:, None] * std_grad) / std[:, None]
        )
        return np.log(std) + lh, grads


class GPUpperConfidenceBound(_GPAcquisition):
    """``mu(x) + sqrt(beta) sigma(x)`` (in units of the GP's scale).

    Args:
        gp: The fitted GP.
        beta: Exploration weight (non-negative).
        prior_mean: The prior-mean function, if the GP was fitted with one.
    """

    def __init__(
        self,
        gp: GaussianProcess,
        beta: float,
        prior_mean: AcquisitionFunction | None = None,
    ) -> None:
        if beta < 0:
            raise ValueError(f"beta must be non-negative, got {beta}.")
        super().__init__(gp, prior_mean)
        self._sqrt_beta = math.sqrt(beta)

    def values(self, x: np.ndarray) -> np.ndarray:
        mean, std, _, _ = self._posterior(x, with_grads=False)
        return mean + self._sqrt_beta * std

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, std, mean_grad, std_grad = self._posterior(x, with_grads=True)
        assert mean_grad is not None and std_grad is not None
        return mean + self._sqrt_beta * std, mean_grad + self._sqrt_beta * std_grad


#: L-BFGS-B iteration limit of the acquisition refinement, which runs in lengthscale-scaled
#: coordinates (as GPSampler preconditions). Unscaled with 30 iterations, LogEI stopped short of
#: its maximum and lost to GPSampler on 6-D hartmann (median regret 0.25 against 0.011 at 40
#: trials, 10 seeds); scaled, 30 and 200 iterations gave 0.046 and 0.16 (seed noise). With a
#: broadcast as prior mean (wiggly random features) 50 iterations were always used (55-60
#: evaluations, most of a participant's trial at 20-40 trials, 4-D); 20 reached the same log EI
#: within 0.01 on average, about 1% of the expected improvement (4-D, 54 maximizations).
ACQUISITION_MAX_ITERATIONS = 20
#: Spreads of :func:`maximize_on_gp`'s zoom search (``local_search="zoom"``), in lengthscales.
ZOOM_SEARCH_SPREADS = (0.3, 0.1, 0.1, 0.03, 0.03, 0.01)
#: Points each start's zoom round draws (``local_search="zoom"``).
ZOOM_SEARCH_POINTS = 32


def maximize_on_gp(
    acquisition: AcquisitionFunction,
    gp: GaussianProcess,
    encoding: UnitCubeEncoding,
    rng: np.random.Generator,
    incumbents: np.ndarray,
    *,
    n_observations: int,
    n_candidates: int = 1024,
    n_refinements: int = 8,
    max_iterations: int = ACQUISITION_MAX_ITERATIONS,
    local_search: Literal["lbfgsb", "zoom"] = "lbfgsb",
    zoom_scales: np.ndarray | None = None,
) -> np.ndarray:
    """Maximize an acquisition of a GP: random candidates, candidates near the incumbents,
    then a local search from the best ones (a zoom around the best one in large studies).

    Args:
        acquisition: The acquisition (LogEI, UCB) of ``gp``.
        gp: The fitted GP; its lengthscales set the local candidates' spread and the scaling.
        encoding: The unit-cube encoding of the search space.
        rng: Source of randomness for the candidates.
        incumbents: The best encoded points so far, best first, shape ``(k, D)`` with ``k >= 1``.
        n_observations: The study's number of observations (the search shrinks in large
            studies: :func:`~optuna_fedbo.core.acquisition.search_budget`).
        n_candidates: Random candidates scored (an eighth more are drawn near the incumbents).
        n_refinements: Best candidates the local search starts from.
        max_iterations: L-BFGS-B iteration limit of the refinement.
        local_search: ``"lbfgsb"``: L-BFGS-B in lengthscale-scaled coordinates from all starts
            at once. ``"zoom"``: rounds of :data:`ZOOM_SEARCH_POINTS` Gaussian points around
            each start's best point so far, with :data:`ZOOM_SEARCH_SPREADS` times the
            lengthscales as standard deviations (no gradients: each round is one evaluation of
            all the clouds).
        zoom_scales: Per-column scales of the zoom rounds (``local_search="zoom"``) in place
            of the GP's lengthscales, e.g. shorter ones where a prior-mean function varies
            faster than the GP; ``None``: the lengthscales.

    Returns:
        The chosen encoded point, shape ``(D,)``.
    """
    budget = search_budget(n_observations, n_candidates, n_refinements)
    # Local candidates around the best trials, where an improvement most likely is.
    centres = incumbents[rng.integers(len(incumbents), size=max(budget.n_candidates // 8, 1))]
    local = centres + rng.standard_normal(centres.shape) * gp.params.lengthscales
    zoom = local_search == "zoom" and budget.n_refinements > 0  # not in large studies
    if zoom:
        budget = SearchBudget(budget.n_candidates, 0, ZOOM_SEARCH_POINTS)
    point, _ = maximize(
        acquisition,
        encoding,
        rng,
        n_candidates=budget.n_candidates,
        n_refinements=budget.n_refinements,
        n_zoom=budget.n_zoom,
        zoom_starts=n_refinements if zoom else 1,
        zoom_spreads=ZOOM_SEARCH_SPREADS if zoom else ZOOM_SPREADS,
        extra_candidates=np.clip(np.vstack([incumbents[:1], local]), 0.0, 1.0),
        max_iterations=max_iterations,
        scales=zoom_scales if zoom and zoom_scales is not None else gp.params.lengthscales,
    )
    return point


def thompson_candidate(
    gp: GaussianProcess,
    encoding: UnitCubeEncoding,
    rng: np.random.Generator,
    *,
    n_candidates: int = 512,
    incumbents: np.ndarray | None = None,
    prior_mean: AcquisitionFunction | None = None,
    box: Box | None = None,
) -> np.ndarray:
    """The maximizer of one joint posterior draw over a candidate set (Thompson sampling).

    Half the candidates are uniform in the box; the other half are Gaussian perturbations of the
    incumbents with the GP's lengthscales as standard deviations (where a maximizer of the draw
    most likely is). All are snapped onto the admissible grid.

    Args:
        gp: The fitted GP (values oriented for maximization).
        encoding: The unit-cube encoding of the search space.
        rng: Source of randomness (candidates and the draw).
        n_candidates: Size of the candidate set; the draw costs ``O(n_candidates^3)``.
        incumbents: Encoded points to perturb, shape ``(k, D)`` (e.g. the best few trials).
        prior_mean: The prior-mean function, if the GP was fitted with one.
        box: Sub-box of the unit cube to search; the whole cube if ``None``.

    Returns:
        The chosen encoded point, shape ``(D,)``.
    """
    box = box or Box.unit(encoding.n_columns)
    n_local = n_candidates // 2 if incumbents is not None and len(incumbents) > 0 else 0
    candidates = [encoding.sample(n_candidates - n_local, rng, box)]
    if n_local > 0:
        assert incumbents is not None
        centres = incumbents[rng.integers(len(incumbents), size=n_local)]
        local = centres + rng.standard_normal(centres.shape) * gp.params.lengthscales
        candidates.append(np.clip(local, box.low, box.high))
    points = np.unique(encoding.snap(np.vstack(candidates)), axis=0)
    prior = None if prior_mean is None else prior_mean.values(points)
    draw = gp.sample_paths(points, 1, rng, prior_mean=prior)[0]
    return points[int(np.argmax(draw))]
