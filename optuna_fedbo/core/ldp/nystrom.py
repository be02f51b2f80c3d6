"""Adaptive Nystrom embedding and the feature-space posterior of ATA- and MoMA-GP-UCB.

``NystromEmbed({(x_i, sigma_i)}, q)`` (Calandriello et al. 2019; Chowdhury and Gopalan 2019, as
called in Algorithm 1 and Algorithm 3, line 7) keeps each past point ``x_i`` in a dictionary
``D`` independently with probability ``p_i = min(q sigma_i^2, 1)`` (points the current model is
uncertain about are kept) and returns the embedding::

    phi(x) = (K_D^(1/2))^+ k_D(x),        phi(x)^T phi(x') = k_D(x)^T K_D^+ k_D(x')

Choices the paper leaves open, fixed here:

* A point played several times enters the dictionary once: repeated copies add no direction to
  the span, and counting them would inflate ``m_t`` (and with it ``beta`` and ``b_t``). Drawing
  one Bernoulli per play and then removing duplicates is the same as keeping a point played
  ``n`` times with probability ``1 - (1 - p)^n``, which is what is drawn.
* ``m_t``, "the dimension of phi_t", is the number of distinct dictionary points. The symmetric
  square root keeps ``phi`` in the dictionary's own coordinates, which matters for the
  coordinate-wise truncation of ATA (Algorithm 1, lines 8-9 are not rotation invariant).
  Eigenvalues of ``K_D`` below ``1e-10`` times the largest are dropped (the ``+`` of the
  pseudo-inverse).
"""

from __future__ import annotations

import numpy as np

from optuna_fedbo.core.ldp.kernels import Kernel

#: Relative eigenvalue threshold of the pseudo-inverse square root.
PSEUDO_INVERSE_TOLERANCE = 1e-10


class NystromEmbedding:
    """The embedding ``phi(x) = (K_D^(1/2))^+ k_D(x)`` of a dictionary ``D``.

    Args:
        kernel: The kernel ``k``.
        dictionary: Dictionary points, shape ``(m, D)``; duplicates are removed.
    """

    def __init__(self, kernel: Kernel, dictionary: np.ndarray) -> None:
        import scipy.linalg

        dictionary = np.atleast_2d(np.asarray(dictionary, dtype=float))
        self.kernel = kernel
        if dictionary.shape[0] == 0:
            self.dictionary = dictionary
            self._transform = np.zeros((0, 0))
            return
        self.dictionary = np.unique(dictionary, axis=0)
        gram = kernel(self.dictionary, self.dictionary)
        eigenvalues, eigenvectors = scipy.linalg.eigh(gram)
        keep = eigenvalues > PSEUDO_INVERSE_TOLERANCE * eigenvalues.max()
        vectors = eigenvectors[:, keep]
        # (K_D^(1/2))^+ = U diag(e^(-1/2)) U^T, symmetric.
        self._transform = (vectors / np.sqrt(eigenvalues[keep])) @ vectors.T

    @property
    def dimension(self) -> int:
        """``m``: the number of distinct dictionary points."""
        return int(self.dictionary.shape[0])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """``phi(x)`` for points of shape ``(n, D)``: an array of shape ``(n, m)``."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        if self.dimension == 0:
            return np.zeros((x.shape[0], 0))
        return self.kernel(x, self.dictionary) @ self._transform

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        """``d phi_j(x_n) / d x_n``, shape ``(n, m, D)``."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        if self.dimension == 0:
            return np.zeros((x.shape[0], 0, x.shape[1]))
        grad = self.kernel.gradient(x, self.dictionary)  # (n, m, D)
        return np.einsum("nid,ij->njd", grad, self._transform)


def inclusion_probabilities(variances: np.ndarray, q: float, counts: np.ndarray | None = None):
    """``p = min(q sigma^2, 1)``, or ``1 - (1 - p)^n`` for a point played ``n`` times."""
    variances = np.maximum(np.asarray(variances, dtype=float), 0.0)
    p = np.minimum(q * variances, 1.0)
    if counts is None:
        return p
    return 1.0 - (1.0 - p) ** np.asarray(counts, dtype=float)


def nystrom_embed(
    kernel: Kernel,
    points: np.ndarray,
    variances: np.ndarray,
    q: float,
    rng: np.random.Generator,
    *,
    counts: np.ndarray | None = None,
) -> NystromEmbedding:
    """``NystromEmbed({(x_i, sigma_i)}, q)``: sample a dictionary and build its embedding.

    Args:
        kernel: The kernel.
        points: The played points, shape ``(t, D)`` (or the distinct ones, with ``counts``).
        variances: ``sigma_{t-1}^2(x_i)`` under the current model, shape ``(t,)``.
        q: The oversampling parameter ``q`` (see :func:`~.parameters.nystrom_q`).
        rng: Source of the (algorithmic, not privacy) randomness of the dictionary.
        counts: Play counts of distinct ``points``; ``None`` means each was played once.

    Returns:
        The embedding of the sampled dictionary.
    """
    points = np.atleast_2d(np.asarray(points, dtype=float))
    keep = rng.random(points.shape[0]) < inclusion_probabilities(variances, q, counts)
    return NystromEmbedding(kernel, points[keep])


class FeaturePosterior:
    """The approximate posterior of Algorithm 1 (lines 11-12) and Algorithm 3 (lines 13-14)::

        mu(x)      = phi(x)^T theta
        sigma^2(x) = k(x, x) - phi(x)^T phi(x) + lambda phi(x)^T V^{-1} phi(x)

    Args:
        embedding: The embedding ``phi``.
        theta: The estimate ``theta`` of shape ``(m,)``.
        gram: ``V = Phi^T Phi + lambda I`` of shape ``(m, m)``.
        regularization: ``lambda``.
    """

    def __init__(
        self,
        embedding: NystromEmbedding,
        theta: np.ndarray,
        gram: np.ndarray,
        regularization: float,
    ) -> None:
        import scipy.linalg

        self.embedding = embedding
        self.theta = np.asarray(theta, dtype=float)
        self.regularization = float(regularization)
        m = embedding.dimension
        if self.theta.shape != (m,) or gram.shape != (m, m):
            raise ValueError("theta and gram must match the embedding dimension.")
        self._factor = scipy.linalg.cho_factor(gram, lower=True) if m > 0 else None

    @classmethod
    def prior(cls, kernel: Kernel, regularization: float) -> FeaturePosterior:
        """``mu_0 = 0`` and ``sigma_0^2 = k(x, x)`` (Algorithms 1 and 3, line 2)."""
        return cls(
            NystromEmbedding(kernel, np.zeros((0, 1))),
            np.zeros(0),
            np.zeros((0, 0)),
            regularization,
        )

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance at points of shape ``(n, D)``."""
        import scipy.linalg

        x = np.atleast_2d(np.asarray(x, dtype=float))
        prior = self.embedding.kernel.diag(x)
        if self._factor is None:
            return np.zeros(x.shape[0]), prior
        phi = self.embedding(x)
        solved = scipy.linalg.cho_solve(self._factor, phi.T).T
        variance = (
            prior - np.sum(phi * phi, axis=1) + self.regularization * np.sum(phi * solved, axis=1)
        )
        return phi @ self.theta, np.maximum(variance, 0.0)

    def predict_with_grads(
        self, x: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Mean, variance and their gradients (shape ``(n, D)``)."""
        import scipy.linalg

        x = np.atleast_2d(np.asarray(x, dtype=float))
        prior = self.embedding.kernel.diag(x)
        if self._factor is None:
            zeros = np.zeros_like(x)
            return np.zeros(x.shape[0]), prior, zeros, zeros.copy()
        phi = self.embedding(x)
        jacobian = self.embedding.jacobian(x)  # (n, m, D)
        solved = scipy.linalg.cho_solve(self._factor, phi.T).T
        variance = (
            prior - np.sum(phi * phi, axis=1) + self.regularization * np.sum(phi * solved, axis=1)
        )
        grad_mean = np.einsum("nmd,m->nd", jacobian, self.theta)
        grad_variance = 2.0 * np.einsum("nmd,nm->nd", jacobian, self.regularization * solved - phi)
        return phi @ self.theta, np.maximum(variance, 0.0), grad_mean, grad_variance
