"""Transfer that cannot hurt much: the broadcast as a prior-mean component of learned weight.

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

from optuna_fedbo.core.posterior import LinearPosterior


def prior_weight(
    local: LinearPosterior,
    feature_prior: np.ndarray,
    prior_square_sum: float,
    prior_target: float,
    *,
    prior_mean: float = 1.0,
    prior_variance: float = 1.0,
) -> tuple[float, float, np.ndarray]:
    """Posterior mean and variance of the weight ``c`` of a prior-mean function ``g``.

    ``g`` enters through its values at the participant's own points, summarized as
    ``Phi^T g``, ``g^T g`` and ``g^T y`` (``y``: the targets ``local`` was fitted to). With
    ``K = Phi S^2 Phi^T + lambda I`` the local model's covariance of ``y``::

        Var[c | y] = 1 / (1 / tau^2 + g^T K^{-1} g),
        E[c | y] = Var[c | y] (c0 / tau^2 + g^T K^{-1} y),

    where ``K^{-1}`` is applied in feature space (Woodbury).

    Args:
        local: The participant's own posterior.
        feature_prior: ``Phi^T g`` of shape ``(M,)``.
        prior_square_sum: ``g^T g``.
        prior_target: ``g^T y``.
        prior_mean: ``c0``.
        prior_variance: ``tau^2`` (> 0).

    Returns:
        ``(mean, variance, A^{-1} S Phi^T g)``; the last term, in the local posterior's scaled
        coordinates, is what conditioning ``omega`` on ``c`` subtracts per unit of ``c``.
    """
    import scipy.linalg

    if not prior_variance > 0:
        raise ValueError(f"prior_variance must be positive, got {prior_variance}.")
    lam = local.noise_variance
    u = local.scale(np.asarray(feature_prior, dtype=float))
    solved_u = scipy.linalg.cho_solve((local.cholesky, True), u, check_finite=False)
    g_k_y = (float(prior_target) - float(u @ local.scaled_mean)) / lam
    g_k_g = max((float(prior_square_sum) - float(u @ solved_u)) / lam, 0.0)
    precision = 1.0 / prior_variance + g_k_g
    return (prior_mean / prior_variance + g_k_y) / precision, 1.0 / precision, solved_u


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
        self.local = local
        self.broadcast = broadcast
        gram_b = gram @ broadcast
        # g = Phi b at the participant's points: Phi^T g = G b, g^T g = b^T G b,
        # g^T y = b^T Phi^T y.
        self.weight_mean, self.weight_variance, self._solved_u = prior_weight(
            local,
            gram_b,
            float(broadcast @ gram_b),
            float(broadcast @ local.feature_target),
            prior_mean=prior_mean,
            prior_variance=prior_variance,
        )
        precision = 1.0 / self.weight_variance
        self._g_k_g = precision - 1.0 / prior_variance
        self._g_k_y = (self.weight_mean * precision) - prior_mean / prior_variance
        self._prior_mean = float(prior_mean)
        self._prior_variance = float(prior_variance)

    @property
    def mean(self) -> np.ndarray:
        """The posterior mean of the combined vector ``c b + omega``."""
        return self._combined(self.weight_mean, self.local.scaled_mean)

    def _combined(self, weight: float, scaled: np.ndarray) -> np.ndarray:
        return weight * self.broadcast + self.local.scale(scaled - weight * self._solved_u)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """A joint draw of ``(c, omega)``, returned as the vector ``c b + omega`` (shape ``(M,)``).

        ``phi(x)^T`` of it is a sample of the participant's function: maximize it for Thompson
        sampling.
        """
        import scipy.linalg

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
