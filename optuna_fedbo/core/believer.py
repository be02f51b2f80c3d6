"""Running trials in a GP's acquisition: the Kriging believer.

Parallel workers of one study each choose a point while the others' trials run. Optuna's
``GPSampler`` conditions its acquisition on the running trials' points (``qLogEI`` with their
values drawn from the posterior, and the Kriging believer for constraints: the running points
enter as observations at their posterior mean). :func:`believe` does the latter: the GP conditioned
on the running points at the values it predicts there, without observation noise (the values
are the model's own, not measured: with the fitted noise, expected improvement at a running point
stayed near ``0.4 sigma_n`` and could still be the largest, at a bound corner). Its mean is
unchanged, its variance at the running points vanishes and near them collapses, so expected
improvement there drops to nothing and a parallel worker looks elsewhere. This module knows
nothing of Optuna.
"""

from __future__ import annotations

import numpy as np

from optuna_fedbo.core.gp import GaussianProcess


def believe(
    gp: GaussianProcess, running: np.ndarray, prior_at_running: np.ndarray | None = None
) -> GaussianProcess:
    """``gp`` conditioned on ``running`` points at its own predicted values (same params).

    Args:
        gp: The fitted GP.
        running: Encoded points of the running trials, shape ``(m, D)`` (``m`` may be 0).
        prior_at_running: The prior mean at ``running``, exactly when ``gp`` has one.

    Returns:
        ``gp`` itself when there is no running point, else the conditioned GP.
    """
    running = np.asarray(running, dtype=float).reshape(-1, gp.X.shape[1])
    if len(running) == 0:
        return gp
    believed, _ = gp.predict(running, prior_at_running, return_std=False)
    prior = None
    if gp.has_prior_mean:
        assert prior_at_running is not None
        residual = gp.offset + gp.scale * gp._targets
        prior = np.concatenate([gp.y - residual, np.asarray(prior_at_running, dtype=float)])
    return GaussianProcess(
        np.vstack([gp.X, running]),
        np.concatenate([gp.y, believed]),
        gp.params,
        prior_mean=prior,
        constant_mean=gp.constant_mean,
        noiseless_last=len(running),
    )


__all__ = ["believe"]
