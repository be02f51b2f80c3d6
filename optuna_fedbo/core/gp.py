"""Exact Gaussian-process regression on the unit cube with marginal-likelihood hyperparameters.

The model of :class:`GaussianProcess` (one participant's own trials, encoded into ``[0, 1]^D``)::

    y_i = m(x_i) + c + s_y g(x_i) + e_i,    g ~ GP(0, k),    e_i ~ N(0, s_y^2 sigma_n^2)
    k(x, x') = sigma_f^2 Matern52(r),       r^2 = sum_d (x_d - x'_d)^2 / l_d^2

``m`` is an optional prior mean supplied by the caller (e.g. a federation's broadcast prediction),
``s_y`` is the standard deviation of the residuals ``y - m(X)`` and ``c`` their mean or, with
``constant_mean="worst"``, their minimum (the standardization; see :data:`CONSTANT_MEANS`), and
``l`` (one lengthscale per column: ARD), ``sigma_f^2`` and ``sigma_n^2`` are chosen by
maximizing the marginal likelihood of the standardized residuals plus a log prior (MAP), in log
space with L-BFGS-B and analytic gradients (:mod:`optuna_fedbo.core.gp_fit`).

Priors (on standardized values, unit-cube inputs) keep tiny data sets from overfitting:

* ``log l_d ~ N(log m, 1.5^2)`` with ``m = 0.5 sqrt(D)``, times ``exp(-0.1 (l_d / m)^2)``: the
  centre grows with ``sqrt(D)`` as distances do. Short lengthscales are only log-normally
  penalized: unlike a prior that penalizes ``1 / l^2`` linearly (GPSampler's), it leaves rough
  functions (``l = 0.02``) reachable. Long ones are penalized as GPSampler's prior penalizes
  them (``0.1 l^2`` at ``D = 4``, where ``m = 1``): with the log-normal factor alone a fit to
  the few points of an early study often declared a dimension irrelevant (``l_d`` of 5 to 10
  where the function turns within the cube), and the search then ignored it. On 4-D rotated
  Styblinski-Tang instances (``benchmarks/fts_value_tuning.py --family rotated --seeds 12``,
  72 site-runs) it lowered a one-site federation's regret at 20 / 30 trials by 0.022 +- 0.010
  and 0.022 +- 0.010 (paired), from 1.23x / 1.30x GPSampler's to 1.08x / 1.06x.
* ``log sigma_f^2 ~ N(0, 1)``: standardized values have unit variance.
* ``sigma_n^2 ~ Gamma(1.1, 30)`` above a floor of :data:`MINIMUM_NOISE_VARIANCE` (mode 0.0033),
  the prior Optuna's ``GPSampler`` uses.

Costs: one fit is a few L-BFGS-B runs of ``O(n^3)`` steps; a prediction at ``m`` points is
``O(m n^2)``. All linear algebra runs on one BLAS thread (:mod:`optuna_fedbo.core.threads`).
This module knows nothing of Optuna.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
import math

import numpy as np

from optuna_fedbo.core.threads import one_blas_thread

#: Floor of the noise variance of standardized values (Optuna's ``GPSampler`` uses the same).
MINIMUM_NOISE_VARIANCE = 1e-6
#: Standard deviation of the log-normal lengthscale prior.
LENGTHSCALE_PRIOR_STD = 1.5
#: Weight ``a`` of the lengthscale prior's long tail ``exp(-a (l / m)^2)`` (``m``: the median of
#: the log-normal factor), GPSampler's ``0.1`` at ``m = 1``.
LENGTHSCALE_TAIL_WEIGHT = 0.1
#: Standard deviation of the log-normal signal-variance prior.
SIGNAL_PRIOR_STD = 1.0
#: Shape and rate of the Gamma prior on the noise variance.
NOISE_PRIOR_SHAPE = 1.1
NOISE_PRIOR_RATE = 30.0

_SQRT5 = math.sqrt(5.0)
LOG_2PI = math.log(2.0 * math.pi)


def lengthscale_prior_median(n_columns: int) -> float:
    """Median of the lengthscale prior in ``n_columns`` dimensions: ``0.5 sqrt(D)``."""
    return 0.5 * math.sqrt(n_columns)


def cholesky_lower(a: np.ndarray) -> np.ndarray:
    """``scipy.linalg.cholesky(a, lower=True, check_finite=False)``, the same numbers.

    LAPACK's ``dpotrf`` directly: SciPy's argument handling around it took about 0.07 ms,
    most of a factorization of a few dozen points (a hyperparameter fit makes twenty or more).

    Raises:
        numpy.linalg.LinAlgError: ``a`` is not positive definite.
    """
    from scipy.linalg.lapack import dpotrf

    factor, info = dpotrf(a, lower=1, clean=1)
    if info > 0:
        raise np.linalg.LinAlgError(f"{info}-th leading minor is not positive definite")
    if info < 0:
        raise ValueError(f"Illegal value in argument {-info} of dpotrf.")
    return factor


def cholesky_solve(factor: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``scipy.linalg.cho_solve((factor, True), b, check_finite=False)``, the same numbers
    (LAPACK's ``dpotrs`` directly, as :func:`cholesky_lower`)."""
    from scipy.linalg.lapack import dpotrs

    x, info = dpotrs(factor, b, lower=1)
    if info != 0:
        raise ValueError(f"Illegal value in argument {-info} of dpotrs.")
    return x


def matern52(squared_distance: np.ndarray, *, overwrite_input: bool = False) -> np.ndarray:
    """Matern-5/2 correlation as a function of the squared scaled distance ``r^2``.

    ``overwrite_input``: ``squared_distance`` may be overwritten (the same numbers, one array
    fewer: see :meth:`GaussianProcess.standardized_posterior`).
    """
    # In place, three arrays instead of eight: at 300 x 128 points the temporaries, not the
    # arithmetic, took most of the time (0.5 against 0.1 ms).
    r = np.multiply(squared_distance, 5.0)
    np.sqrt(r, out=r)
    decay = np.negative(r)
    np.exp(decay, out=decay)
    r += 1.0
    if overwrite_input:
        squared_distance *= 5.0 / 3.0
        r += squared_distance
    else:
        r += (5.0 / 3.0) * squared_distance
    r *= decay
    return r


def matern52_with_derivative(squared_distance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`matern52` and its derivative ``d Matern52 / d(r^2) = -5/6 (1 + r) exp(-r)``
    (finite at ``r = 0``: ``-5/6``) at once: one square root and one exponential (an
    acquisition gradient needs both, and on its few points the array operations' overhead, not
    their arithmetic, is the cost)."""
    r = np.multiply(squared_distance, 5.0)
    np.sqrt(r, out=r)
    decay = np.negative(r)
    np.exp(decay, out=decay)
    derivative = np.add(r, 1.0)
    derivative *= -5.0 / 6.0
    derivative *= decay
    r += 1.0
    r += (5.0 / 3.0) * squared_distance
    r *= decay
    return r, derivative


def squared_distances(
    a: np.ndarray, b: np.ndarray, b_norms: np.ndarray | None = None
) -> np.ndarray:
    """Squared Euclidean distances, shape ``(len(a), len(b))``, without an ``(n, m, D)`` tensor.

    ``|a - b|^2 = |a|^2 + |b|^2 - 2 a.b`` (clipped at zero against rounding); ``b_norms``:
    ``|b|^2`` if already computed.
    """
    # ndarray.sum: the same reduction as np.sum without its dispatch (an acquisition gradient
    # calls this on a few points, where the overhead is the cost).
    b_norms = (b * b).sum(axis=1) if b_norms is None else b_norms
    sq = a @ b.T
    sq *= -2.0
    sq += (a * a).sum(axis=1)[:, None]
    sq += b_norms[None, :]
    return np.maximum(sq, 0.0, out=sq)


def squared_differences(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-column squared differences, shape ``(len(a), len(b), D)``."""
    diff = a[:, None, :] - b[None, :, :]
    return diff * diff


@dataclass(frozen=True)
class KernelParams:
    """Hyperparameters of the GP on standardized values.

    Attributes:
        lengthscales: ARD lengthscales ``l``, one per unit-cube column, shape ``(D,)``.
        signal_variance: ``sigma_f^2``.
        noise_variance: ``sigma_n^2`` (at least :data:`MINIMUM_NOISE_VARIANCE`).
    """

    lengthscales: np.ndarray
    signal_variance: float
    noise_variance: float

    def __post_init__(self) -> None:
        lengthscales = np.asarray(self.lengthscales, dtype=float).reshape(-1)
        if not np.all(lengthscales > 0) or not np.all(np.isfinite(lengthscales)):
            raise ValueError("Lengthscales must be positive and finite.")
        if not self.signal_variance > 0 or not self.noise_variance > 0:
            raise ValueError("Signal and noise variances must be positive.")
        object.__setattr__(self, "lengthscales", lengthscales)
        object.__setattr__(self, "signal_variance", float(self.signal_variance))
        object.__setattr__(self, "noise_variance", float(self.noise_variance))

    @classmethod
    def default(cls, n_columns: int) -> KernelParams:
        """The prior's centre: lengthscales at the prior median, unit signal, noise 1e-2."""
        return cls(np.full(n_columns, lengthscale_prior_median(n_columns)), 1.0, 1e-2)

    def to_raw(self, minimum_noise: float) -> np.ndarray:
        """Log-space vector ``[log l, log sigma_f^2, log(sigma_n^2 - floor)]``."""
        excess = max(self.noise_variance - minimum_noise, 1e-3 * minimum_noise)
        return np.concatenate(
            [np.log(self.lengthscales), [math.log(self.signal_variance), math.log(excess)]]
        )

    @classmethod
    def from_raw(cls, raw: np.ndarray, minimum_noise: float) -> KernelParams:
        """Inverse of :meth:`to_raw`."""
        return cls(np.exp(raw[:-2]), math.exp(raw[-2]), minimum_noise + math.exp(raw[-1]))


class GaussianProcess:
    """The posterior of the GP given data and fixed hyperparameters (the result of a fit).

    Use :func:`~optuna_fedbo.core.gp_fit.fit_gp` to choose the hyperparameters by marginal
    likelihood; constructing this class directly conditions on the hyperparameters given.

    Args:
        X: Encoded inputs of shape ``(n, D)``.
        y: Values of shape ``(n,)``, oriented however the caller likes (the model is symmetric).
        params: Kernel hyperparameters on standardized values.
        prior_mean: The prior mean at ``X`` (same scale as ``y``), or ``None`` for a constant
            prior mean (the residuals' mean).
        constant_mean: The constant added to the prior mean, one of :data:`CONSTANT_MEANS`.
        noiseless_last: How many of the last rows are conditioned on without observation noise
            (only :data:`MINIMUM_NOISE_VARIANCE` as jitter): values the model believes rather
            than measured (:func:`~optuna_fedbo.core.believer.believe`).
    """

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        params: KernelParams,
        *,
        prior_mean: np.ndarray | None = None,
        constant_mean: str = "mean",
        noiseless_last: int = 0,
    ) -> None:
        X, y, prior = validate_data(X, y, prior_mean)
        check_constant_mean(constant_mean)
        if params.lengthscales.shape != (X.shape[1],):
            raise ValueError(
                f"Expected {X.shape[1]} lengthscales, got {params.lengthscales.shape[0]}."
            )
        self.X = X
        self.y = y
        self.params = params
        self.constant_mean = constant_mean
        self._scaled_X = X / params.lengthscales
        self._inv_l2 = params.lengthscales**-2
        self._scaled_norms = np.sum(self._scaled_X**2, axis=1)
        with one_blas_thread():
            gram = self._kernel(X, X)
            diagonal = np.full(len(X), params.noise_variance)
            if noiseless_last > 0:
                diagonal[-noiseless_last:] = MINIMUM_NOISE_VARIANCE
            gram[np.diag_indices_from(gram)] += diagonal
            self._cholesky = cholesky_lower(gram)
        # (L^-1, K^-1) once computed (_inverse_factors); shared with the GPs of other prior
        # means (with_prior_mean), whose kernel matrix is this one.
        self._inverses: list[tuple[np.ndarray, np.ndarray]] = []
        self._condition(prior, prior_mean is not None)

    def _condition(self, prior: np.ndarray, has_prior_mean: bool) -> None:
        """The targets and ``K^-1`` times them for the prior mean ``prior`` at ``X``."""
        self.has_prior_mean = has_prior_mean
        residual = self.y - prior
        self.offset, self.scale = standardization(residual, self.y, self.constant_mean)
        self._targets = (residual - self.offset) / self.scale
        with one_blas_thread():
            self._alpha = cholesky_solve(self._cholesky, self._targets)

    def with_prior_mean(self, prior_mean: np.ndarray | None) -> GaussianProcess:
        """The GP of the same points, values and hyperparameters with another prior mean.

        The same as constructing it, bit for bit, without computing the kernel matrix and its
        factorizations again: a prior mean moves only the targets (a participant conditions
        its own GP's hyperparameters on the broadcast as prior mean at every trial).

        Args:
            prior_mean: The prior mean at ``X`` (same scale as ``y``), or ``None``.
        """
        _, _, prior = validate_data(self.X, self.y, prior_mean)
        gp = copy.copy(self)
        gp._condition(prior, prior_mean is not None)
        return gp

    @property
    def n_observations(self) -> int:
        """Number of observations ``n``."""
        return len(self.y)

    def _kernel(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        scaled = 1.0 / self.params.lengthscales
        correlation = matern52(squared_distances(a * scaled, b * scaled), overwrite_input=True)
        correlation *= self.params.signal_variance
        return correlation

    def _cross_distances(self, X: np.ndarray) -> np.ndarray:
        """Squared scaled distances from ``X`` to the observations, shape ``(m, n)``."""
        return squared_distances(X / self.params.lengthscales, self._scaled_X, self._scaled_norms)

    def _cross_kernel(self, X: np.ndarray) -> np.ndarray:
        """``k(X, observations)``, shape ``(m, n)``."""
        k = matern52(self._cross_distances(X), overwrite_input=True)
        k *= self.params.signal_variance
        return k

    def kernel(self, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """The kernel matrix ``k(a, b)`` on standardized values (``b = a`` if omitted)."""
        a = np.atleast_2d(np.asarray(a, dtype=float))
        return self._kernel(a, a if b is None else np.atleast_2d(np.asarray(b, dtype=float)))

    def _inverse_factors(self) -> tuple[np.ndarray, np.ndarray]:
        """``(L^-1, K^-1)`` of the Cholesky factor ``L`` of the kernel matrix ``K``, computed
        once: each posterior at many points is then a matrix product, which a BLAS runs about
        twice as fast as a triangular solve with as many right-hand sides (an acquisition
        search scores about a thousand candidates and refines a few with ~20 gradients)."""
        import scipy.linalg

        if not self._inverses:
            with one_blas_thread():
                factor = scipy.linalg.solve_triangular(
                    self._cholesky, np.eye(len(self.X)), lower=True, check_finite=False
                )
                self._inverses.append((factor, factor.T @ factor))
        return self._inverses[0]

    def standardized_posterior(
        self, X: np.ndarray, *, with_grads: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Posterior of ``g`` (the standardized residual) at ``X``.

        Args:
            X: Encoded points of shape ``(m, D)``.
            with_grads: Also return the gradients with respect to ``X``.

        Returns:
            ``(mean, variance, mean_grad, variance_grad)``: arrays of shape ``(m,)``, and
            ``(m, D)`` for the gradients (``None`` unless ``with_grads``).
        """
        if not (type(X) is np.ndarray and X.ndim == 2 and X.dtype == np.float64):
            X = np.atleast_2d(np.asarray(X, dtype=float))
        signal = self.params.signal_variance
        with one_blas_thread():
            sq = self._cross_distances(X)
            if not with_grads:
                # Three (m, n) arrays instead of five, the same numbers: ``L^-1 k`` is written
                # over the distances. Where the allocator hands memory back to the system, a
                # fresh array of a few hundred kilobytes (577 candidates, 94 observations:
                # 430 kB) comes back page by page: at 577 x 94 the posterior took 4.0 ms
                # with five, 2.5-3.0 with three and 1.6 with none of those page faults.
                k = matern52(sq, overwrite_input=True)
                k *= signal
                mean = k @ self._alpha
                half = np.matmul(k, self._inverse_factors()[0].T, out=sq)
                variance = np.maximum(signal - np.einsum("mn,mn->m", half, half), 0.0)
                return mean, variance, None, None
            k, dk = matern52_with_derivative(sq)
            k *= signal
            mean = k @ self._alpha
            solved = k @ self._inverse_factors()[1]
            variance = np.maximum(signal - np.einsum("mn,mn->m", k, solved), 0.0)
            # d k(x, x_i) / dx = sigma_f^2 Matern52'(r^2) 2 (x - x_i) / l^2, and
            # sum_i a_i (x - x_i) = x sum_i a_i - a^T X: no (m, n, D) tensor.
            dk *= 2.0 * signal
            inv_l2 = self._inv_l2
            mean_weights = dk * self._alpha
            mean_grad = (X * mean_weights.sum(axis=1)[:, None] - mean_weights @ self.X) * inv_l2
            dk *= solved
            variance_grad = (dk @ self.X - X * dk.sum(axis=1)[:, None]) * (2.0 * inv_l2)
        return mean, variance, mean_grad, variance_grad

    def predict(
        self,
        X: np.ndarray,
        prior_mean: np.ndarray | None = None,
        *,
        return_std: bool = True,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Posterior mean and standard deviation of the latent function at ``X``.

        Args:
            X: Encoded points of shape ``(m, D)``.
            prior_mean: The prior mean at ``X`` (required exactly when the fit used one).
            return_std: Compute the standard deviation (else ``None`` is returned for it).

        Returns:
            ``(mean, std)`` in the units of ``y``, each of shape ``(m,)``; ``std`` excludes the
            observation noise.
        """
        X = np.atleast_2d(np.asarray(X, dtype=float))
        prior = self._prior_at(X, prior_mean)
        if return_std:
            mean, variance, _, _ = self.standardized_posterior(X)
            std = self.scale * np.sqrt(variance)
        else:  # the mean alone needs no triangular solve
            with one_blas_thread():
                mean, std = self._cross_kernel(X) @ self._alpha, None
        return prior + self.offset + self.scale * mean, std

    def _prior_at(self, X: np.ndarray, prior_mean: np.ndarray | None) -> np.ndarray:
        if X.shape[1] != self.X.shape[1]:
            raise ValueError(f"Expected points with {self.X.shape[1]} columns, got {X.shape[1]}.")
        if self.has_prior_mean != (prior_mean is not None):
            raise ValueError(
                "prior_mean must be given exactly when the GP was fitted with a prior mean."
            )
        if prior_mean is None:
            return np.zeros(len(X))
        prior = np.asarray(prior_mean, dtype=float).reshape(-1)
        if prior.shape != (len(X),) or not np.all(np.isfinite(prior)):
            raise ValueError(f"prior_mean must be {len(X)} finite values.")
        return prior

    def leave_one_out(self) -> tuple[np.ndarray, np.ndarray]:
        """Leave-one-out predictions of the observations, in closed form.

        ``y_i`` predicted from the other observations (same hyperparameters):
        ``mean_i = y_i - [K^-1 r]_i / [K^-1]_ii`` and ``var_i = 1 / [K^-1]_ii`` on the
        standardized residuals ``r``, mapped back to the units of ``y``.

        Returns:
            ``(mean, std)`` of shape ``(n,)`` each; ``std`` includes the observation noise.
        """
        inverse = self._inverse_factors()[1]
        precision = np.maximum(np.diag(inverse), 1e-300)
        mean = self.y - self.scale * self._alpha / precision
        return mean, self.scale / np.sqrt(precision)

    def log_marginal_likelihood(self) -> float:
        """``log p(y | X, params)`` of the residuals ``y - m(X)`` in the units of ``y``."""
        n = self.n_observations
        standardized = (
            -0.5 * float(self._targets @ self._alpha)
            - float(np.sum(np.log(np.diag(self._cholesky))))
            - 0.5 * n * LOG_2PI
        )
        return standardized - n * math.log(self.scale)

    def sample_paths(
        self,
        X: np.ndarray,
        n_samples: int,
        rng: np.random.Generator,
        prior_mean: np.ndarray | None = None,
    ) -> np.ndarray:
        """Joint posterior draws of the latent function at ``X`` (for Thompson sampling).

        Args:
            X: Encoded points of shape ``(m, D)``; cost ``O(m^3 + m^2 n)``.
            n_samples: Number of joint draws.
            rng: Source of randomness.
            prior_mean: The prior mean at ``X`` (required exactly when the fit used one).

        Returns:
            Array of shape ``(n_samples, m)`` in the units of ``y``.
        """
        import scipy.linalg

        X = np.atleast_2d(np.asarray(X, dtype=float))
        prior = self._prior_at(X, prior_mean)
        with one_blas_thread():
            k = self._kernel(X, self.X)
            mean = k @ self._alpha
            half = scipy.linalg.solve_triangular(self._cholesky, k.T, lower=True)
            cov = self._kernel(X, X) - half.T @ half
            factor = _psd_factor(cov, self.params.signal_variance)
            normal = rng.standard_normal((len(X), n_samples))
            draws = mean[:, None] + factor @ normal
        return (prior + self.offset)[None, :] + self.scale * draws.T


def _psd_factor(cov: np.ndarray, signal_variance: float) -> np.ndarray:
    """A matrix ``F`` with ``F F^T ~= cov`` for a (numerically) PSD ``cov``."""
    import scipy.linalg

    jitter = 1e-10 * signal_variance
    for _ in range(4):
        try:
            return scipy.linalg.cholesky(
                cov + jitter * np.eye(len(cov)), lower=True, check_finite=False
            )
        except np.linalg.LinAlgError:
            jitter *= 100.0
    values, vectors = np.linalg.eigh(cov)
    return vectors * np.sqrt(np.maximum(values, 0.0))


def validate_data(
    X: np.ndarray, y: np.ndarray, prior_mean: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float).reshape(-1)
    if X.ndim != 2 or X.shape[0] != len(y) or X.shape[1] < 1:
        raise ValueError(f"X must have shape (len(y), D), got {X.shape} for {len(y)} values.")
    if len(y) == 0:
        raise ValueError("A GP needs at least one observation.")
    if not np.all(np.isfinite(X)) or not np.all(np.isfinite(y)):
        raise ValueError("X and y must be finite.")
    if prior_mean is None:
        return X, y, np.zeros(len(y))
    prior = np.asarray(prior_mean, dtype=float).reshape(-1)
    if prior.shape != y.shape or not np.all(np.isfinite(prior)):
        raise ValueError(f"prior_mean must be {len(y)} finite values (one per observation).")
    return X, y, prior


#: The constants a :class:`GaussianProcess` adds to its prior mean: ``"mean"``, the residuals'
#: mean (the usual choice, symmetric in the values' sign); ``"worst"``, their minimum, for values
#: where larger is better (De Ath, Fieldsend and Everson, "What do you mean? The role of the mean
#: function in Bayesian optimisation", GECCO 2020: far from the data the model expects the worst
#: value seen, not an average one, so that expected improvement stops favouring the unexplored
#: corners of the box over the region around the best points).
CONSTANT_MEANS = ("mean", "worst")


def check_constant_mean(constant_mean: str) -> None:
    """Raise ``ValueError`` unless ``constant_mean`` is one of :data:`CONSTANT_MEANS`."""
    if constant_mean not in CONSTANT_MEANS:
        raise ValueError(f"constant_mean must be one of {CONSTANT_MEANS}, got {constant_mean!r}.")


def standardization(
    residual: np.ndarray, y: np.ndarray, constant_mean: str = "mean"
) -> tuple[float, float]:
    """The constant (:data:`CONSTANT_MEANS`) and the scale of the residuals (the scale of ``y``,
    else 1, when they are constant)."""
    offset = float(np.mean(residual) if constant_mean == "mean" else np.min(residual))
    floor = 1e-12 * max(1.0, float(np.max(np.abs(y))))
    scale = float(np.std(residual))
    if scale > floor:
        return offset, scale
    scale = float(np.std(y))  # only when needed: a GP is conditioned once or twice per trial
    return offset, scale if scale > floor else 1.0
