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

    def posterior(self, noise_variance: float, *, standardize: bool = True) -> LinearPosterior:
        """The posterior over ``omega`` given these observations.

        Args:
            noise_variance: ``lambda``, the observation noise variance (relative to a unit
                signal variance of the features).
            standardize: Fit standardized targets ``(y - mean) / std`` instead of raw ones.
        """
        mean, std = self.standardization() if standardize else (0.0, 1.0)
        feature_target = (self.feature_target - mean * self.feature_sum) / std
        target_square_sum = (
            self.target_square_sum - 2.0 * mean * self.target_sum + self.count * mean * mean
        ) / (std * std)
        return LinearPosterior(
            self.gram, feature_target, noise_variance, target_square_sum, self.count
        )


class LinearPosterior:
    """The Gaussian posterior ``N(nu, lambda Sigma^{-1})`` of Bayesian linear regression.

    Args:
        gram: ``Phi^T Phi`` of shape ``(M, M)``.
        feature_target: ``Phi^T y`` of shape ``(M,)``.
        noise_variance: ``lambda`` (> 0).
        target_square_sum: ``y^T y`` (only needed for the marginal likelihood).
        count: Number of observations (only needed for the marginal likelihood).
    """

    def __init__(
        self,
        gram: np.ndarray,
        feature_target: np.ndarray,
        noise_variance: float,
        target_square_sum: float = 0.0,
        count: int = 0,
    ) -> None:
        import scipy.linalg

        if not noise_variance > 0:
            raise ValueError(f"The noise variance must be positive, got {noise_variance}.")
        n_features = len(feature_target)
        self.noise_variance = float(noise_variance)
        precision = gram.copy()
        precision[np.diag_indices(n_features)] += self.noise_variance
        # Inputs are finite by construction (SufficientStatistics rejects non-finite targets).
        with one_blas_thread():
            self._cholesky = scipy.linalg.cholesky(precision, lower=True, check_finite=False)
            self.mean: np.ndarray = scipy.linalg.cho_solve(
                (self._cholesky, True), feature_target, check_finite=False
            )
        self._feature_target = feature_target
        self._target_square_sum = float(target_square_sum)
        self._count = count

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
                self._cholesky, normal, lower=True, trans="T", check_finite=False
            )
        draws = self.mean[:, None] + math.sqrt(self.noise_variance) * deviation
        return draws[:, 0] if size is None else draws.T

    def solve(self, features: np.ndarray) -> np.ndarray:
        """``Sigma^{-1} phi`` for each row ``phi`` of ``features`` (shape ``(n, M)``)."""
        import scipy.linalg

        with one_blas_thread():
            return scipy.linalg.cho_solve((self._cholesky, True), features.T, check_finite=False).T

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
                self._cholesky, features.T, lower=True, check_finite=False
            )
            return features @ self.mean, self.noise_variance * np.sum(half * half, axis=0)

    def log_marginal_likelihood(self) -> float:
        """``log p(y)`` under ``y ~ N(0, Phi Phi^T + lambda I)``, computed in feature space."""
        n, m, lam = self._count, self.n_features, self.noise_variance
        log_det = (n - m) * math.log(lam) + 2.0 * float(np.sum(np.log(np.diag(self._cholesky))))
        quadratic = (self._target_square_sum - float(self._feature_target @ self.mean)) / lam
        return -0.5 * (quadratic + log_det + n * math.log(2.0 * math.pi))
