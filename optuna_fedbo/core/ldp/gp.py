"""The exact GP posterior of the paper's eq. (2)-(3), with repeated points aggregated.

With a zero-mean prior, kernel ``k`` and a Gaussian surrogate likelihood of variance ``lambda``::

    mu_t(x)      = k_t(x)^T (K_t + lambda I)^{-1} y_{1:t}
    sigma_t^2(x) = k(x, x) - k_t(x)^T (K_t + lambda I)^{-1} k_t(x)

Bandit algorithms play the same point many times (MoMA by design, the others on finite
domains). Writing ``K_t = A K_u A^T`` with ``A`` the ``t x u`` indicator of the ``u`` distinct
points and ``N = A^T A = diag(n_i)`` the play counts, the push-through identity gives the same
posterior from ``u``-sized quantities only::

    M = N^(1/2) K_u N^(1/2) + lambda I,   w(x) = N^(1/2) k_u(x)
    mu_t(x) = w(x)^T M^{-1} N^(-1/2) s,   sigma_t^2(x) = k(x, x) - w(x)^T M^{-1} w(x)

where ``s = A^T y`` holds the per-point sums. This is exact, not an approximation: the cost is
``O(u^3)`` whatever ``t``. The information gain ``1/2 ln det(I_t + K_t / lambda)`` equals
``1/2 (ln det M - u ln lambda)`` by Sylvester's determinant identity.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from optuna_fedbo.core.ldp.kernels import Kernel


class PosteriorModel(Protocol):
    """A model predicting a mean and a variance (and their gradients) at encoded points."""

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance, each of shape ``(n,)``."""
        ...

    def predict_with_grads(
        self, x: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Mean ``(n,)``, variance ``(n,)`` and their gradients ``(n, D)``."""
        ...


def aggregate(
    points: np.ndarray, targets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group observations by identical points.

    Args:
        points: Array of shape ``(t, D)``.
        targets: Array of shape ``(t,)``.

    Returns:
        ``(unique_points, counts, sums)`` of shapes ``(u, D)``, ``(u,)`` and ``(u,)``.
    """
    points = np.atleast_2d(np.asarray(points, dtype=float))
    targets = np.asarray(targets, dtype=float).reshape(-1)
    if len(points) != len(targets):
        raise ValueError("points and targets must have the same length.")
    if len(points) == 0:
        return points.reshape(0, points.shape[1]), np.zeros(0), np.zeros(0)
    unique, inverse = np.unique(points, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    counts = np.bincount(inverse, minlength=len(unique)).astype(float)
    sums = np.bincount(inverse, weights=targets, minlength=len(unique))
    return unique, counts, sums


class ExactGPPosterior:
    """``GP(0, k)`` conditioned on observations with noise variance ``lambda``.

    The observations are given aggregated (see the module docstring); use
    :meth:`from_observations` for raw ``(x_i, y_i)`` pairs.

    Args:
        kernel: The prior covariance ``k``.
        unique_points: Distinct observed points, shape ``(u, D)`` (``u`` may be 0).
        counts: Positive play counts of the points, shape ``(u,)``.
        sums: Sums of the targets observed at each point, shape ``(u,)``.
        regularization: ``lambda > 0``.
    """

    def __init__(
        self,
        kernel: Kernel,
        unique_points: np.ndarray,
        counts: np.ndarray,
        sums: np.ndarray,
        regularization: float,
    ) -> None:
        import scipy.linalg

        if not regularization > 0:
            raise ValueError(f"regularization must be positive, got {regularization}.")
        counts = np.asarray(counts, dtype=float).reshape(-1)
        sums = np.asarray(sums, dtype=float).reshape(-1)
        unique_points = np.asarray(unique_points, dtype=float)
        if unique_points.ndim != 2 or unique_points.shape[0] != len(counts):
            raise ValueError("unique_points must have shape (len(counts), D).")
        if np.any(counts <= 0) or sums.shape != counts.shape:
            raise ValueError("counts must be positive and match sums in length.")
        self.kernel = kernel
        self.regularization = float(regularization)
        self.unique_points, self.counts = unique_points, counts
        self.n_observations = int(counts.sum())
        root = np.sqrt(counts)
        self._root = root
        if len(counts) == 0:
            self._cholesky = np.zeros((0, 0))
            self._weights = np.zeros(0)
            return
        gram = kernel(unique_points, unique_points)
        matrix = root[:, None] * gram * root[None, :]
        matrix[np.diag_indices_from(matrix)] += self.regularization
        self._cholesky = scipy.linalg.cholesky(matrix, lower=True)
        # mu(x) = w(x)^T M^{-1} N^{-1/2} s = k_u(x)^T [N^{1/2} M^{-1} N^{-1/2} s].
        self._weights = root * scipy.linalg.cho_solve((self._cholesky, True), sums / root)

    @classmethod
    def from_observations(
        cls,
        kernel: Kernel,
        points: np.ndarray,
        targets: np.ndarray,
        regularization: float,
    ) -> ExactGPPosterior:
        """The posterior of raw observations ``(x_i, y_i)``, repeated points aggregated.

        Args:
            kernel: The prior covariance ``k``.
            points: Observed points, shape ``(t, D)``.
            targets: Observed values, shape ``(t,)``.
            regularization: ``lambda > 0``.
        """
        unique, counts, sums = aggregate(points, targets)
        return cls(kernel, unique, counts, sums, regularization)

    @property
    def information_gain(self) -> float:
        """``1/2 ln det(I_t + K_t / lambda)`` of the observed points."""
        if len(self.unique_points) == 0:
            return 0.0
        log_det = 2.0 * float(np.sum(np.log(np.diag(self._cholesky))))
        return 0.5 * (log_det - len(self.unique_points) * np.log(self.regularization))

    def _whitened(self, cross: np.ndarray) -> np.ndarray:
        """``L^{-1} N^{1/2} k_u(x)`` for each column of ``cross = k_u(x)^T`` (shape ``(u, n)``)."""
        import scipy.linalg

        return scipy.linalg.solve_triangular(
            self._cholesky, self._root[:, None] * cross, lower=True
        )

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance at points ``x`` of shape ``(n, D)``."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        prior = self.kernel.diag(x)
        if len(self.unique_points) == 0:
            return np.zeros(len(x)), prior
        cross = self.kernel(self.unique_points, x)
        whitened = self._whitened(cross)
        mean = cross.T @ self._weights
        variance = prior - np.sum(whitened * whitened, axis=0)
        return mean, np.maximum(variance, 0.0)

    def predict_with_grads(
        self, x: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Mean, variance and their gradients with respect to ``x`` (shape ``(n, D)``)."""
        import scipy.linalg

        x = np.atleast_2d(np.asarray(x, dtype=float))
        prior = self.kernel.diag(x)
        if len(self.unique_points) == 0:
            zeros = np.zeros_like(x)
            return np.zeros(len(x)), prior, zeros, zeros.copy()
        cross = self.kernel(self.unique_points, x)  # (u, n)
        jacobian = self.kernel.gradient(x, self.unique_points)  # (n, u, D)
        whitened = self._whitened(cross)
        mean = cross.T @ self._weights
        variance = np.maximum(prior - np.sum(whitened * whitened, axis=0), 0.0)
        # d var / dx = -2 (d k_u / dx)^T N^{1/2} M^{-1} N^{1/2} k_u(x).
        solved = self._root[:, None] * scipy.linalg.solve_triangular(
            self._cholesky, whitened, lower=True, trans="T"
        )
        grad_mean = np.einsum("nud,u->nd", jacobian, self._weights)
        grad_variance = -2.0 * np.einsum("nud,un->nd", jacobian, solved)
        return mean, variance, grad_mean, grad_variance
