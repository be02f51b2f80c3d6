"""The Kriging believer (core/believer.py): running points leave no expected improvement."""

from __future__ import annotations

import numpy as np

from optuna_fedbo.core.believer import believe
from optuna_fedbo.core.gp import GaussianProcess
from optuna_fedbo.core.gp import KernelParams
from optuna_fedbo.core.gp_acquisition import LogExpectedImprovement


def _gp() -> GaussianProcess:
    rng = np.random.default_rng(0)
    X = rng.uniform(0.2, 0.8, size=(8, 2))
    y = -np.sum((X - 0.3) ** 2, axis=1)
    params = KernelParams(np.array([0.3, 0.3]), 1.0, 0.01)  # noisy enough to matter
    return GaussianProcess(X, y, params)


def test_no_running_point_leaves_the_gp_as_it_is() -> None:
    gp = _gp()
    assert believe(gp, np.empty((0, 2))) is gp


def test_a_running_point_keeps_the_mean_and_loses_its_variance() -> None:
    gp = _gp()
    corner = np.array([[0.0, 0.0]])  # outside the data: large variance before
    mean, std = gp.predict(corner)
    believed = believe(gp, corner)
    mean_after, std_after = believed.predict(corner)
    assert np.allclose(mean_after, mean, atol=1e-6)
    assert std_after[0] < 0.02 * std[0]  # conditioned without the fitted noise
    # Expected improvement there is gone (log EI far below that of the same point before).
    best = float(gp.y.max())
    before = LogExpectedImprovement(gp, best, None).values(corner)[0]
    after = LogExpectedImprovement(believed, max(best, float(believed.y.max())), None)
    assert after.values(corner)[0] < before - 5.0
