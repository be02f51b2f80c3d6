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

The participant then uses ``c g`` as the prior mean of its own GP (the default
``FTSConfig.transfer="prior"``). ``g`` may be any function known at the participant's points
(e.g. FTS-DE's piecewise broadcast); everything is computed from ``Phi^T g``, ``g^T g``,
``g^T y`` and the local posterior's Cholesky factor, in ``O(M^2)`` whatever the number of
observations.
"""

from __future__ import annotations

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
