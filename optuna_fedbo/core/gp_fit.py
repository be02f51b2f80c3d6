"""Fitting :class:`~optuna_fedbo.core.gp.GaussianProcess` hyperparameters, and when to refit.

:func:`fit_gp` chooses the lengthscales, signal and noise variances by maximizing the marginal
likelihood of the standardized residuals plus the log priors described in
:mod:`optuna_fedbo.core.gp` (MAP), in log space with L-BFGS-B and analytic gradients
(:func:`log_posterior_and_grad`). :func:`update_gp` is the fit policy of the samplers: at most
:data:`MAX_GP_POINTS` points, hyperparameters refitted only as the observations grow, the GP
conditioned on new data with the last hyperparameters in between. This module knows nothing of
Optuna.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import math

import numpy as np

from optuna_fedbo.core.gp import check_constant_mean
from optuna_fedbo.core.gp import cholesky_lower
from optuna_fedbo.core.gp import cholesky_solve
from optuna_fedbo.core.gp import GaussianProcess
from optuna_fedbo.core.gp import KernelParams
from optuna_fedbo.core.gp import lengthscale_prior_median
from optuna_fedbo.core.gp import LENGTHSCALE_PRIOR_STD
from optuna_fedbo.core.gp import LENGTHSCALE_TAIL_WEIGHT
from optuna_fedbo.core.gp import LOG_2PI
from optuna_fedbo.core.gp import matern52
from optuna_fedbo.core.gp import matern52_with_derivative
from optuna_fedbo.core.gp import MINIMUM_NOISE_VARIANCE
from optuna_fedbo.core.gp import NOISE_PRIOR_RATE
from optuna_fedbo.core.gp import NOISE_PRIOR_SHAPE
from optuna_fedbo.core.gp import SIGNAL_PRIOR_STD
from optuna_fedbo.core.gp import squared_differences
from optuna_fedbo.core.gp import standardization
from optuna_fedbo.core.gp import validate_data
from optuna_fedbo.core.lbfgsb import minimize_in_box
from optuna_fedbo.core.threads import one_blas_thread


def _log_prior_and_grad(raw: np.ndarray, minimum_noise: float) -> tuple[float, np.ndarray]:
    n_columns = len(raw) - 2
    centre = math.log(lengthscale_prior_median(n_columns))
    grad = np.empty_like(raw)
    deviation = raw[:n_columns] - centre
    dev = deviation / LENGTHSCALE_PRIOR_STD
    # The long tail: -a (l / m)^2, whose derivative in log l is -2 a (l / m)^2.
    deviation *= 2.0
    tail = np.exp(deviation, out=deviation)
    tail *= LENGTHSCALE_TAIL_WEIGHT
    value = -0.5 * float(dev @ dev) - float(tail.sum())
    dev /= -LENGTHSCALE_PRIOR_STD
    tail *= 2.0
    grad[:n_columns] = np.subtract(dev, tail, out=dev)
    value -= 0.5 * (raw[-2] / SIGNAL_PRIOR_STD) ** 2
    grad[-2] = -raw[-2] / SIGNAL_PRIOR_STD**2
    excess = math.exp(raw[-1])
    noise = minimum_noise + excess
    value += (NOISE_PRIOR_SHAPE - 1.0) * math.log(noise) - NOISE_PRIOR_RATE * noise
    grad[-1] = ((NOISE_PRIOR_SHAPE - 1.0) / noise - NOISE_PRIOR_RATE) * excess
    return value, grad


def log_posterior_and_grad(
    raw: np.ndarray,
    sq_diff: np.ndarray,
    targets: np.ndarray,
    minimum_noise: float = MINIMUM_NOISE_VARIANCE,
    *,
    with_grad: bool = True,
) -> tuple[float, np.ndarray | None]:
    """Log marginal likelihood plus log prior of raw hyperparameters, and its gradient.

    Args:
        raw: ``[log l (D), log sigma_f^2, log(sigma_n^2 - floor)]``.
        sq_diff: Squared differences of the inputs, shape ``(n, n, D)``.
        targets: Standardized targets of shape ``(n,)``.
        minimum_noise: The noise variance floor.
        with_grad: Compute the gradient (the dominant ``O(n^3)`` inverse otherwise skipped).

    Returns:
        ``(value, gradient)``; ``(-inf, zeros)`` where the kernel matrix is not positive
        definite.
    """
    # The numbers of KernelParams.from_raw, without its checks (a fit evaluates this a few
    # dozen times per trial, on a few dozen points, where array overheads are the cost).
    n, _, n_columns = sq_diff.shape
    lengthscales = np.exp(raw[:-2])
    signal_variance = math.exp(raw[-2])
    noise_variance = minimum_noise + math.exp(raw[-1])
    if not (lengthscales.min() > 0.0 and lengthscales.max() < math.inf and signal_variance > 0):
        raise ValueError("Lengthscales and the signal variance must be positive and finite.")
    inv_l2 = lengthscales**-2
    sq = sq_diff @ inv_l2
    if with_grad:
        gram, derivative = matern52_with_derivative(sq)
    else:
        gram, derivative = matern52(sq, overwrite_input=True), None
    gram *= signal_variance
    diagonal = gram.reshape(-1)[:: n + 1]  # a view of the diagonal
    diagonal += noise_variance
    try:
        cholesky = cholesky_lower(gram)
    except np.linalg.LinAlgError:
        return -math.inf, np.zeros_like(raw)
    alpha = cholesky_solve(cholesky, targets)
    lml = (
        -0.5 * float(targets @ alpha)
        - float(np.log(cholesky.diagonal()).sum())
        - 0.5 * n * LOG_2PI
    )
    prior, prior_grad = _log_prior_and_grad(raw, minimum_noise)
    if derivative is None:
        return lml + prior, None
    inverse = cholesky_solve(cholesky, np.eye(n))
    # d lml / d theta = 0.5 tr((alpha alpha^T - K^-1) dK/d theta).
    w = np.multiply.outer(alpha, alpha)
    w -= inverse
    grad = np.empty_like(raw)
    # dK/d log l_d = sigma_f^2 Matern52'(r^2) (-2 (x_d - x'_d)^2 / l_d^2).
    derivative *= signal_variance
    derivative *= w
    grad[:n_columns] = -(derivative.reshape(-1) @ sq_diff.reshape(n * n, n_columns)) * inv_l2
    trace = float(w.trace())
    gram *= w
    grad[-2] = 0.5 * float(gram.sum()) - 0.5 * noise_variance * trace
    grad[-1] = 0.5 * trace * (noise_variance - minimum_noise)
    grad += prior_grad
    return lml + prior, grad


def fit_gp(
    X: np.ndarray,
    y: np.ndarray,
    *,
    prior_mean: np.ndarray | None = None,
    constant_mean: str = "mean",
    warm_start: GaussianProcess | KernelParams | None = None,
    rng: np.random.Generator | None = None,
    n_restarts: int = 1,
    n_start_candidates: int = 6,
    minimum_noise: float = MINIMUM_NOISE_VARIANCE,
    max_iterations: int = 100,
) -> GaussianProcess:
    """Fit a GP by maximizing marginal likelihood plus log prior over its hyperparameters.

    Start points are scored without gradients (one Cholesky each): the warm start, the prior's
    centre, and random draws from the prior. L-BFGS-B (log space, analytic gradient) then runs
    from the best of them and from ``n_restarts`` more; the best result wins.

    Args:
        X: Encoded inputs of shape ``(n, D)``.
        y: Values of shape ``(n,)``.
        prior_mean: The prior mean at ``X`` (same scale as ``y``), or ``None``.
        constant_mean: The constant added to the prior mean
            (:data:`~optuna_fedbo.core.gp.CONSTANT_MEANS`).
        warm_start: A previous fit (or its parameters) to start from; ignored if its dimension
            differs.
        rng: Source of randomness for the random start points.
        n_restarts: Number of extra L-BFGS-B runs from the next best start points.
        n_start_candidates: Number of random prior draws scored as start points.
        minimum_noise: The noise variance floor on standardized values.
        max_iterations: L-BFGS-B iteration limit per run.

    Returns:
        The fitted :class:`GaussianProcess`.
    """
    X, y, prior = validate_data(X, y, prior_mean)
    check_constant_mean(constant_mean)
    rng = rng if rng is not None else np.random.default_rng()
    n_columns = X.shape[1]
    residual = y - prior
    offset, scale = standardization(residual, y, constant_mean)
    targets = (residual - offset) / scale
    sq_diff = squared_differences(X, X)

    starts = [KernelParams.default(n_columns).to_raw(minimum_noise)]
    if isinstance(warm_start, GaussianProcess):
        warm_start = warm_start.params
    if warm_start is not None and warm_start.lengthscales.shape == (n_columns,):
        starts.insert(0, warm_start.to_raw(minimum_noise))
    centre = math.log(lengthscale_prior_median(n_columns))
    for _ in range(n_start_candidates):
        draw = starts[-1].copy()
        draw[:n_columns] = centre + LENGTHSCALE_PRIOR_STD * rng.standard_normal(n_columns)
        draw[-2:] = 0.0, math.log(1e-3)
        starts.append(draw)

    with one_blas_thread():
        scores = [
            log_posterior_and_grad(s, sq_diff, targets, minimum_noise, with_grad=False)[0]
            for s in starts
        ]
        order = np.argsort(-np.asarray(scores), kind="stable")
        best_raw, best_value = starts[int(order[0])], scores[int(order[0])]
        for index in order[: 1 + n_restarts]:
            raw, value = _maximize(
                lambda r: log_posterior_and_grad(r, sq_diff, targets, minimum_noise),
                starts[int(index)],
                max_iterations,
            )
            if value > best_value:
                best_raw, best_value = raw, value
    params = KernelParams.from_raw(best_raw, minimum_noise)
    return GaussianProcess(X, y, params, prior_mean=prior_mean, constant_mean=constant_mean)


def _maximize(
    objective: Callable[[np.ndarray], tuple[float, np.ndarray | None]],
    start: np.ndarray,
    max_iterations: int,
) -> tuple[np.ndarray, float]:
    def negative(raw: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = objective(raw)
        if not math.isfinite(value):
            return 1e300, np.zeros_like(raw)
        assert grad is not None
        return -value, -grad

    # Bounds keep the search away from overflow: lengthscales in [1e-3, 1e3], variances in
    # [1e-4, 1e4] (signal) and up to 1e2 (noise). gtol 1e-2 as GPSampler's: half the steps of
    # 1e-4 from a warm start (11 against 20 at 50 points, 4-D), the same optimum to 1e-3.
    n_columns = len(start) - 2
    bounds = [(math.log(1e-3), math.log(1e3))] * n_columns + [
        (math.log(1e-4), math.log(1e4)),
        (math.log(1e-9), math.log(1e2)),
    ]
    low, high = np.array(bounds).T
    x, value = minimize_in_box(
        negative, np.clip(start, low, high), low, high, max_iterations=max_iterations, gtol=1e-2
    )
    return x, -value


#: Most observations a sampler's GP is fitted to, so that the cost per trial stays bounded
#: (a few milliseconds at 1,000 trials): beyond it the GP models a subset (:func:`subset_indices`).
MAX_GP_POINTS = 128
#: From this many observations on, hyperparameters are refitted only after the data has grown
#: by ``refit_growth`` since the last fit (:func:`update_gp`). The fit was a third of a
#: participant's trial at 20-60 trials (4-D); refitted only every 10% from 20 observations on,
#: the hyperparameters warm-started from the last fit move little in between.
REFIT_FROM = 20
#: The default ``refit_growth`` of :func:`update_gp`: refits after 10% more observations.
REFIT_GROWTH = 1.1


@dataclass(frozen=True)
class GPFitState:
    """The last hyperparameter fit of a sampler's GP: its parameters and observation count."""

    params: KernelParams
    n_observations: int


def update_gp(
    X: np.ndarray,
    y: np.ndarray,
    last_fit: GPFitState | None,
    rng: np.random.Generator,
    *,
    prior_mean: np.ndarray | None = None,
    constant_mean: str = "mean",
    max_points: int = MAX_GP_POINTS,
    refit_growth: float = REFIT_GROWTH,
    refit_from: int = REFIT_FROM,
) -> tuple[GaussianProcess, GPFitState]:
    """The GP of a growing set of observations, refitted as often as it pays.

    At most ``max_points`` observations are modelled (:func:`subset_indices`). Hyperparameters
    are warm-started from ``last_fit``; from ``refit_from`` observations on they are kept (the
    GP only conditioned on the new data) until the data has grown by ``refit_growth``.

    Args:
        X: Encoded inputs of shape ``(n, D)``.
        y: Values of shape ``(n,)``.
        last_fit: The previous fit, or ``None`` (it is ignored if its dimension differs).
        rng: Source of randomness for the subset and the fit's start points.
        prior_mean: The prior mean at ``X``, or ``None``.
        constant_mean: The constant added to the prior mean
            (:data:`~optuna_fedbo.core.gp.CONSTANT_MEANS`).
        max_points: Cap on the number of observations modelled.
        refit_growth: Growth factor of the data that triggers a refit.
        refit_from: Observations from which the fit is kept between refits (every fit before).

    Returns:
        ``(gp, fit)``: the GP and the fit it used (``last_fit`` when not refitted).
    """
    n = len(y)
    kept = subset_indices(y, max_points, rng)
    X, y = X[kept], y[kept]
    prior = None if prior_mean is None else prior_mean[kept]
    warm = None
    if last_fit is not None and last_fit.params.lengthscales.shape == (X.shape[1],):
        warm = last_fit.params
    if warm is not None and last_fit is not None:
        if refit_from <= n < refit_growth * last_fit.n_observations:
            return (
                GaussianProcess(X, y, warm, prior_mean=prior, constant_mean=constant_mean),
                last_fit,
            )
    gp = fit_gp(
        X,
        y,
        prior_mean=prior,
        constant_mean=constant_mean,
        warm_start=warm,
        rng=rng,
        n_restarts=0 if warm is not None else 1,
        n_start_candidates=2 if warm is not None else 6,
    )
    return gp, GPFitState(gp.params, n)


def subset_indices(y: np.ndarray, max_points: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of at most ``max_points`` observations to model (subset of data beyond a cap).

    Half are the best values (largest ``y``), the rest drawn uniformly from the others, so the
    model stays accurate where the optimum is and still sees the whole space.
    """
    n = len(y)
    if n <= max_points:
        return np.arange(n)
    n_best = max_points // 2
    order = np.argsort(-np.asarray(y), kind="stable")
    rest = rng.choice(order[n_best:], size=max_points - n_best, replace=False)
    return np.sort(np.concatenate([order[:n_best], rest]))


__all__ = [
    "GPFitState",
    "MAX_GP_POINTS",
    "REFIT_FROM",
    "REFIT_GROWTH",
    "fit_gp",
    "log_posterior_and_grad",
    "subset_indices",
    "update_gp",
]
