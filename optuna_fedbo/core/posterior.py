"""Bayesian linear regression over random features: the RFF-GP posterior of the FTS paper.

With prior ``omega ~ N(0, I)``, features ``Phi`` (``t x M``) and noise variance ``lambda``
(``sigma^2`` in the paper, eq. 2-3)::

    Sigma_t = Phi^T Phi + lambda I,    nu_t = Sigma_t^{-1} Phi^T y,
    omega | data ~ N(nu_t, lambda Sigma_t^{-1})

Everything is computed from sufficient statistics (``Phi^T Phi``, ``Phi^T y``, ...), which grow by
``O(M^2)`` per observation, and a Cholesky factor of ``Sigma_t``; no matrix is ever inverted.
These matrices are small, so all linear algebra runs on one BLAS thread
(:func:`~optuna_fedbo.core.threads.one_blas_thread`).
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
import math

import numpy as np

from optuna_fedbo.core.threads import one_blas_thread


@dataclass
class SufficientStatistics:
    """Running sums over observations ``(phi(x_i), y_i)``, enough to standardize ``y`` later.

    Attributes:
        gram: ``Phi^T Phi``.
        feature_sum: ``Phi^T 1``.
        feature_target: ``Phi^T y``.
        target_sum: ``sum y``.
        target_square_sum: ``sum y^2``.
        count: Number of observations.
    """

    n_features: int
    gram: np.ndarray = field(init=False)
    feature_sum: np.ndarray = field(init=False)
    feature_target: np.ndarray = field(init=False)
    target_sum: float = 0.0
    target_square_sum: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.gram = np.zeros((self.n_features, self.n_features))
        self.feature_sum = np.zeros(self.n_features)
        self.feature_target = np.zeros(self.n_features)

    def add(self, features: np.ndarray, targets: np.ndarray) -> None:
        """Add observations: ``features`` of shape ``(n, M)``, ``targets`` of shape ``(n,)``."""
        features = np.atleast_2d(features)
        targets = np.asarray(targets, dtype=float).reshape(-1)
        if features.shape != (len(targets), self.n_features):
            raise ValueError("features must have shape (len(targets), n_features).")
        if not np.all(np.isfinite(targets)):
            raise ValueError("Targets must be finite.")
        with one_blas_thread():
            if len(targets) == 1:
                # One observation (every trial): the outer product, twice as fast as the
                # matrix product here, and the same numbers.
                self.gram += np.outer(features[0], features[0])
            else:
                self.gram += features.T @ features
            self.feature_sum += features.sum(axis=0)
            self.feature_target += features.T @ targets
        self.target_sum += float(targets.sum())
        self.target_square_sum += float(targets @ targets)
        self.count += len(targets)

    def standardization(self) -> tuple[float, float]:
        """Mean and standard deviation of the targets (std 1 when it is zero or undefined)."""
        if self.count == 0:
            return 0.0, 1.0
        mean = self.target_sum / self.count
        variance = max(self.target_square_sum / self.count - mean * mean, 0.0)
        std = math.sqrt(variance)
        if std <= 1e-12 * max(1.0, abs(mean)):
            std = 1.0
        return mean, std

    def posterior(
        self,
        noise_variance: float,
        *,
        standardize: bool | tuple[float, float] = True,
        prior_scales: np.ndarray | None = None,
    ) -> LinearPosterior:
        """The posterior over ``omega`` given these observations.

        Args:
            noise_variance: ``lambda``, the observation noise variance (relative to a unit
                signal variance of the features).
            standardize: Fit standardized targets ``(y - mean) / std`` (``True``: this data's
                mean and standard deviation; a pair: that fixed ``(mean, std)``) instead of raw
                ones (``False``).
            prior_scales: Prior standard deviations ``s`` of ``omega`` (``omega ~ N(0,
                diag(s^2))``); ``None`` is the papers' ``N(0, I)``.
        """
        if standardize is True:
            mean, std = self.standardization()
        elif standardize is False:
            mean, std = 0.0, 1.0
        else:
            mean, std = (float(v) for v in standardize)
        feature_target, target_square_sum = self.targets(mean, std)
        return LinearPosterior(
            self.gram,
            feature_target,
            noise_variance,
            target_square_sum,
            self.count,
            prior_scales=prior_scales,
        )

    def targets(self, mean: float, std: float) -> tuple[np.ndarray, float]:
        """``Phi^T y~`` and ``y~^T y~`` of the transformed targets ``y~ = (y - mean) / std``."""
        feature_target = (self.feature_target - mean * self.feature_sum) / std
        target_square_sum = (
            self.target_square_sum - 2.0 * mean * self.target_sum + self.count * mean * mean
        ) / (std * std)
        return feature_target, target_square_sum


class LinearPosterior:
    """The Gaussian posterior ``N(nu, lambda Sigma^{-1})`` of Bayesian linear regression.

    With prior scales ``s`` (prior ``omega ~ N(0, diag(s^2))``) the model is the same regression
    on the scaled features ``phi_i s_i`` with weights ``w = omega / s ~ N(0, I)``; everything
    this class returns (mean, draws, predictions) is in terms of ``omega`` and ``phi``.

    Args:
        gram: ``Phi^T Phi`` of shape ``(M, M)``.
        feature_target: ``Phi^T y`` of shape ``(M,)``.
        noise_variance: ``lambda`` (> 0).
        target_square_sum: ``y^T y`` (only needed for the marginal likelihood).
        count: Number of observations (only needed for the marginal likelihood).
        prior_scales: Prior standard deviations ``s`` of shape ``(M,)``; ``None``: all ones.
    """

    def __init__(
        self,
        gram: np.ndarray,
        feature_target: np.ndarray,
        noise_variance: float,
        target_square_sum: float = 0.0,
        count: int = 0,
        *,
        prior_scales: np.ndarray | None = None,
    ) -> None:
        import scipy.linalg

        if not noise_variance > 0:
            raise ValueError(f"The noise variance must be positive, got {noise_variance}.")
        n_features = len(feature_target)
        self.noise_variance = float(noise_variance)
        if prior_scales is None:
            self.prior_scales = None
            precision = gram.copy()
            scaled_target = feature_target
        else:
            self.prior_scales = np.asarray(prior_scales, dtype=float)
            if self.prior_scales.shape != (n_features,) or not np.all(self.prior_scales > 0):
                raise ValueError("prior_scales must be positive, one per feature.")
            precision = gram * np.outer(self.prior_scales, self.prior_scales)
            scaled_target = feature_target * self.prior_scales
        precision[np.diag_indices(n_features)] += self.noise_variance
        # Inputs are finite by construction (SufficientStatistics rejects non-finite targets).
        with one_blas_thread():
            self.cholesky = scipy.linalg.cholesky(precision, lower=True, check_finite=False)
            self.scaled_mean = scipy.linalg.cho_solve(
                (self.cholesky, True), scaled_target, check_finite=False
            )
        self.mean: np.ndarray = self.scale(self.scaled_mean)
        self.feature_target = np.asarray(feature_target, dtype=float)
        self._scaled_target = scaled_target
        self._target_square_sum = float(target_square_sum)
        self.count = count

    def scale(self, w: np.ndarray) -> np.ndarray:
        """``S w``: ``omega`` from weights ``w`` of the scaled features (``S`` acts on axis 0)."""
        if self.prior_scales is None:
            return w
        return w * self.prior_scales.reshape((-1,) + (1,) * (w.ndim - 1))

    @property
    def n_features(self) -> int:
        """Number of features ``M``."""
        return len(self.mean)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        """Draw ``omega ~ N(nu, lambda Sigma^{-1})``.

        Args:
            rng: Source of randomness.
            size: Number of draws; ``None`` for a single vector of shape ``(M,)``.

        Returns:
            Array of shape ``(M,)`` or ``(size, M)``.
        """
        import scipy.linalg

        n = 1 if size is None else size
        normal = rng.standard_normal((self.n_features, n))
        # Sigma = L L^T, so L^{-T} z has covariance Sigma^{-1}.
        with one_blas_thread():
            deviation = scipy.linalg.solve_triangular(
                self.cholesky, normal, lower=True, trans="T", check_finite=False
            )
        draws = self.scale(self.scaled_mean[:, None] + math.sqrt(self.noise_variance) * deviation)
        return draws[:, 0] if size is None else draws.T

    def solve(self, features: np.ndarray) -> np.ndarray:
        """``S Sigma^{-1} S phi`` for each row ``phi`` of ``features`` (shape ``(n, M)``).

        ``Sigma`` is the precision of the scaled weights and ``S = diag(s)`` (the identity
        without prior scales): ``lambda phi^T`` of this is the posterior variance.
        """
        import scipy.linalg

        with one_blas_thread():
            solved = scipy.linalg.cho_solve(
                (self.cholesky, True), self.scale(features.T), check_finite=False
            )
        return self.scale(solved).T

    def predict(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean ``phi^T nu`` and variance ``lambda phi^T Sigma^{-1} phi`` at features.

        Args:
            features: Feature matrix of shape ``(n, M)``.

        Returns:
            ``(mean, variance)``, each of shape ``(n,)``.
        """
        import scipy.linalg

        with one_blas_thread():
            half = scipy.linalg.solve_triangular(
                self.cholesky, self.scale(features.T), lower=True, check_finite=False
            )
        return features @ self.mean, self.noise_variance * np.sum(half * half, axis=0)

    def log_determinant(self) -> float:
        """``log det K`` of the prior covariance ``K = Phi S^2 Phi^T + lambda I`` of ``y``."""
        n, m, lam = self.count, self.n_features, self.noise_variance
        return (n - m) * math.log(lam) + 2.0 * float(np.sum(np.log(np.diag(self.cholesky))))

    def quadratic_form(self) -> float:
        """``y^T K^{-1} y``, computed in feature space (Woodbury)."""
        return (
            self._target_square_sum - float(self._scaled_target @ self.scaled_mean)
        ) / self.noise_variance

    def log_marginal_likelihood(self) -> float:
        """``log p(y)`` under ``y ~ N(0, Phi S^2 Phi^T + lambda I)``, computed in feature space."""
        return -0.5 * (
            self.quadratic_form() + self.log_determinant() + self.count * math.log(2.0 * math.pi)
        )
