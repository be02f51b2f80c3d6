"""The Kriging believer (core/believer.py): running points leave no expected improvement."""

from __future__ import annotations

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
import pytest

from optuna_fedbo import FedSampler
from optuna_fedbo.core.believer import believe
from optuna_fedbo.core.gp import GaussianProcess
from optuna_fedbo.core.gp import KernelParams
from optuna_fedbo.core.gp_acquisition import LogExpectedImprovement
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.samplers._running_points import POINT_ATTR
from optuna_fedbo.samplers._site_state import WORKER_ATTR


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


# ----------------------------------------------------------- in FedSampler (FTS default)
SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
#: Encoded distance under which two suggestions count as the same point.
TIE = 0.05


def _site_with_data(seed: int) -> tuple[Federation, optuna.Study]:
    fed = Federation.create(
        f"believer-{seed}",
        search_space=SPACE,
        n_clients=2,
        protocol=FTSConfig(n_features=20, n_init=4, min_contributors=2),
        seed=5,
    )
    study = optuna.create_study(direction="maximize")
    rng = np.random.default_rng(seed)
    for _ in range(8):  # past the initial design: the GP chooses (its best is a bound: y = 0)
        x, y = rng.uniform(size=2)
        value = -((x - 0.3) ** 2) - y
        study.add_trial(optuna.trial.create_trial(params={"x": x, "y": y}, distributions=SPACE,
                                                  value=value))  # fmt: skip
    return fed, study


def _suggest(fed: Federation, study: optuna.Study, monkeypatch, worker: str) -> optuna.Trial:
    """A worker (its own process identity, seed 0) asks for the next point."""
    monkeypatch.setattr("optuna_fedbo.federation.lease_record._SECRET", worker.encode())
    study.sampler = FedSampler(fed, client_id="site-0", seed=0)
    return study.ask(SPACE)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fed_sampler_never_suggests_a_point_another_worker_is_running(seed, monkeypatch) -> None:
    fed, study = _site_with_data(seed)
    other = _suggest(fed, study, monkeypatch, "worker-a")  # another worker's trial at x ...
    x = np.array([other.params["x"], other.params["y"]])
    assert study.trials[-1].system_attrs[POINT_ATTR] == pytest.approx(list(x))
    assert study.trials[-1].state == TrialState.RUNNING  # ... running (never told)
    mine = _suggest(fed, study, monkeypatch, "worker-b")
    assert study.trials[-1].system_attrs[WORKER_ATTR] != study.trials[-2].system_attrs[WORKER_ATTR]
    chosen = np.array([mine.params["x"], mine.params["y"]])
    assert np.linalg.norm(chosen - x) > TIE, (chosen, x)
    # The control: with no trial running, the same worker (same seed, same data) chooses x
    # (to 1e-3: the failed trials shift the fit's start a little).
    study.tell(other, state=TrialState.FAIL)
    study.tell(mine, state=TrialState.FAIL)
    alone = _suggest(fed, study, monkeypatch, "worker-c")
    assert np.linalg.norm([alone.params["x"] - x[0], alone.params["y"] - x[1]]) < 1e-3
