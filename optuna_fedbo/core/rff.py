"""Shared random Fourier features for the squared-exponential kernel.

Following the FTS paper (Appendix A): frequencies ``s_i ~ N(0, I / l^2)`` and phases
``b_i ~ U(0, 2 pi)``, ``phi(x) = sqrt(2 / M) cos(s_i^T x + b_i)``, and every ``phi(x)`` rescaled to
unit norm so that the approximate kernel has ``k(x, x) = 1`` exactly. Every participant of a
federation draws identical features from the same public seed, which is all they need to share.
"""

from __future__ import annotations

import numpy as np


class RandomFourierFeatures:
    """Random Fourier features ``phi: [0, 1]^D -> R^M`` of an SE kernel.

    Frequencies are stored for lengthscale 1 and divided by the lengthscale on use, so features
    of different lengthscales drawn from the same seed share their random numbers.

    Args:
        n_dims: Input dimension ``D``.
        n_features: Number of features ``M``.
        lengthscale: SE kernel lengthscale ``l`` in unit-cube coordinates.
        seed: Public seed of the features; equal seeds give identical features everywhere.
    """

    def __init__(self, n_dims: int, n_features: int, lengthscale: float, *, seed: int) -> None:
        if n_dims < 1 or n_features < 1:
            raise ValueError("n_dims and n_features must be positive.")
        if not lengthscale > 0:
            raise ValueError(f"The lengthscale must be positive, got {lengthscale}.")
        rng = np.random.default_rng(seed)
        self.unit_frequencies = rng.standard_normal((n_dims, n_features))
        self.phases = rng.uniform(0.0, 2.0 * np.pi, size=n_features)
        self.lengthscale = float(lengthscale)
        self.seed = seed
        self._frequencies = self.unit_frequencies / self.lengthscale

    @property
    def n_dims(self) -> int:
        """Input dimension ``D``."""
        return self.unit_frequencies.shape[0]

    @property
    def n_features(self) -> int:
        """Number of features ``M``."""
        return self.unit_frequencies.shape[1]

    def with_lengthscale(self, lengthscale: float) -> RandomFourierFeatures:
        """The same random draws at another lengthscale."""
        return RandomFourierFeatures(self.n_dims, self.n_features, lengthscale, seed=self.seed)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Feature matrix ``Phi`` of shape ``(n, M)`` for points ``x`` of shape ``(n, D)``."""
        cosines = self._check(x) @ self._frequencies
        cosines += self.phases
        np.cos(cosines, out=cosines)
        cosines /= np.sqrt(np.einsum("nm,nm->n", cosines, cosines))[:, None]
        return cosines

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        """The Jacobian ``d phi_j / d x_k``, shape ``(n, M, D)``, at points of shape ``(n, D)``."""
        z = self._check(x) @ self._frequencies + self.phases
        cosines = np.cos(z)
        norm = np.linalg.norm(cosines, axis=1)
        features = cosines / norm[:, None]
        # Unnormalized: d cos(z_j) / dx = -sin(z_j) s_j; then the quotient rule for c / ||c||.
        raw = -np.sin(z)[:, :, None] * self._frequencies.T[None, :, :]
        norm_grad = np.einsum("nm,nmd->nd", features, raw)
        return (raw - features[:, :, None] * norm_grad[:, None, :]) / norm[:, None, None]

    def value_and_grad(self, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values of ``phi(x)^T w`` and their gradients with respect to ``x``.

        Args:
            x: Points of shape ``(n, D)``.
            w: Weight vector of shape ``(M,)``.

        Returns:
            ``(values, grads)`` of shapes ``(n,)`` and ``(n, D)``.
        """
        return self(x) @ w, np.einsum("nmd,m->nd", self.jacobian(x), w)

    def _check(self, x: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(np.asarray(x, dtype=float))
        if x.shape[1] != self.n_dims:
            raise ValueError(f"Expected points with {self.n_dims} columns, got {x.shape[1]}.")
        return x
