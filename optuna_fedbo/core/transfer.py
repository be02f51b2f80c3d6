"""Transfer that cannot hurt much: a broadcast function as a prior-mean component of learned weight.

A participant's own model is Bayesian linear regression on the shared features, and the
federation's broadcast ``b`` defines a function ``g(x) = phi(x)^T b``. The participant models its
values as::

    y = c g(x) + phi(x)^T omega + eps,    c ~ N(c0, tau^2),  omega ~ N(0, diag(s^2)),
    eps ~ N(0, lambda),

that is a GP with mean ``c0 g`` and kernel ``k_local + tau^2 g g^T``. The weight ``c`` of the
broadcast has a Gaussian posterior (a generalized least-squares fit of ``c`` shrunk towards
``c0``): where ``g`` predicts the participant's own values ``c`` stays near one and the broadcast
guides the search; where it does not, the data pull ``c`` to zero and the model falls back to the
local one. The broadcast enters only as a fixed function, so using a differentially private
release this way is post-processing and costs no privacy.

Everything is computed from the sufficient statistics of
:class:`~optuna_fedbo.core.posterior.SufficientStatistics` in ``O(M^2)`` after one Cholesky
factorization, whatever the number of observations.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg

from optuna_fedbo.core.posterior import LinearPosterior


class TransferPosterior:
    """Posterior of ``(c, omega)`` in the model of the module docstring.

    Args:
        local: The participant's own posterior (prior scales, noise variance, ``Phi^T y``).
        gram: ``Phi^T Phi`` of the participant's observations.
        broadcast: The broadcast vector ``b`` of shape ``(M,)``.
        prior_mean: ``c0``, the prior mean of the broadcast's weight.
        prior_variance: ``tau^2`` (> 0), the prior variance of the weight.
    """

    def __init__(
        self,
        local: LinearPosterior,
        gram: np.ndarray,
        broadcast: np.ndarray,
        *,
        prior_mean: float = 1.0,
        prior_variance: float = 1.0,
    ) -> None:
        broadcast = np.asarray(broadcast, dtype=float)
        if broadcast.shape != (local.n_features,):
            raise ValueError(
                f"Expected a broadcast of length {local.n_features}, got {broadcast.shape}."
            )
        if not prior_variance > 0:
            raise ValueError(f"prior_variance must be positive, got {prior_variance}.")
        self.local = local
        self.broadcast = broadcast
        lam = local.noise_variance
        gram_b = gram @ broadcast
        # In the scaled coordinates of the local posterior: u = S G b, A = S G S + lambda I.
        u = local.scale(gram_b)
        self._solved_u = scipy.linalg.cho_solve((local.cholesky, True), u, check_finite=False)
        # g^T K^{-1} y and g^T K^{-1} g through Woodbury, K = Phi S^2 Phi^T + lambda I.
        self._g_k_y = (float(broadcast @ local.feature_target) - float(u @ local.scaled_mean)) / lam
        self._g_k_g = (float(broadcast @ gram_b) - float(u @ self._solved_u)) / lam
        precision = 1.0 / prior_variance + self._g_k_g
        self.weight_mean = (prior_mean / prior_variance + self._g_k_y) / precision
        self.weight_variance = 1.0 / precision
        self._prior_mean = float(prior_mean)
        self._prior_variance = float(prior_variance)

    @property
    def mean(self) -> np.ndarray:
        """The posterior mean of the combined vector ``c b + omega``."""
        return self._combined(self.weight_mean, self.local.scaled_mean)

    def _combined(self, weight: float, scaled: np.ndarray) -> np.ndarray:
        return weight * self.broadcast + self.local.scale(scaled - weight * self._solved_u)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """A joint draw of ``(c, omega)``, returned as the vector ``c b + omega`` of shape ``(M,)``.

        ``phi(x)^T`` of it is a sample of the participant's function: maximize it for Thompson
        sampling.
        """
        weight = self.weight_mean + math.sqrt(self.weight_variance) * rng.standard_normal()
        deviation = scipy.linalg.solve_triangular(
            self.local.cholesky,
            rng.standard_normal(self.local.n_features),
            lower=True,
            trans="T",
            check_finite=False,
        )
        scaled = self.local.scaled_mean + math.sqrt(self.local.noise_variance) * deviation
        return self._combined(weight, scaled)

    def log_marginal_likelihood(self) -> float:
        """``log p(y)`` under ``y ~ N(c0 g, K + tau^2 g g^T)``."""
        local = self.local
        y_k_y = local.quadratic_form()
        c0, tau2 = self._prior_mean, self._prior_variance
        r_k_r = y_k_y - 2.0 * c0 * self._g_k_y + c0 * c0 * self._g_k_g
        g_k_r = self._g_k_y - c0 * self._g_k_g
        quadratic = r_k_r - tau2 * g_k_r * g_k_r / (1.0 + tau2 * self._g_k_g)
        log_det = local.log_determinant() + math.log1p(tau2 * self._g_k_g)
        return -0.5 * (quadratic + log_det + local.count * math.log(2.0 * math.pi))
