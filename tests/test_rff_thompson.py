from __future__ import annotations

import math
import threading

import numpy as np
import optuna
from optuna.testing.pytest_samplers import BasicSamplerTestCase
from optuna.testing.pytest_samplers import RelativeSamplerTestCase
from optuna.testing.pytest_samplers import SingleOnlySamplerTestCase
from optuna.trial import TrialState
import pytest

from optuna_fedbo import RFFThompsonSampler
from optuna_fedbo.core.posterior import SufficientStatistics

optuna.logging.set_verbosity(optuna.logging.WARNING)


class TestRFFThompsonSamplerConformance(
    BasicSamplerTestCase, RelativeSamplerTestCase, SingleOnlySamplerTestCase
):
    @pytest.fixture
    def sampler(self):
        return lambda: RFFThompsonSampler(n_startup_trials=0, n_candidates=128, seed=0)


def _branin(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", -5.0, 10.0)
    y = trial.suggest_float("y", 0.0, 15.0)
    a, b, c, r, s, t = 1.0, 5.1 / (4 * math.pi**2), 5 / math.pi, 6.0, 10.0, 1 / (8 * math.pi)
    return a * (y - b * x**2 + c * x - r) ** 2 + s * (1 - t) * math.cos(x) + s


def _best(sampler: optuna.samplers.BaseSampler, objective, n_trials: int, direction="minimize"):
    study = optuna.create_study(sampler=sampler, direction=direction)
    study.optimize(objective, n_trials=n_trials)
    return study.best_value


def test_beats_random_search_on_branin() -> None:
    ts = [_best(RFFThompsonSampler(seed=s), _branin, 40) for s in range(4)]
    rs = [_best(optuna.samplers.RandomSampler(seed=s), _branin, 40) for s in range(4)]
    assert np.median(ts) < np.median(rs)
    assert np.median(ts) < 1.0  # the minimum is 0.398


def test_maximize_is_minimize_mirrored() -> None:
    def negated(trial: optuna.Trial) -> float:
        return -_branin(trial)

    best = _best(RFFThompsonSampler(seed=0), negated, 30, direction="maximize")
    mirrored = _best(RFFThompsonSampler(seed=0), _branin, 30)
    assert best == pytest.approx(-mirrored)


def test_mixed_space_with_categorical_and_integers() -> None:
    def objective(trial: optuna.Trial) -> float:
        kind = trial.suggest_categorical("kind", ["bad", "good", "ugly"])
        n = trial.suggest_int("n", 1, 64, log=True)
        x = trial.suggest_float("x", -1.0, 1.0, step=0.05)
        return (x - 0.3) ** 2 + (math.log2(n) - 3) ** 2 / 10 + (0.0 if kind == "good" else 1.0)

    study = optuna.create_study(sampler=RFFThompsonSampler(seed=1))
    study.optimize(objective, n_trials=40)
    assert study.best_params["kind"] == "good"
    assert study.best_value < 0.2


def test_failed_pruned_and_non_finite_trials_are_ignored() -> None:
    sampler = RFFThompsonSampler(n_startup_trials=3, seed=0)
    study = optuna.create_study(sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0, 1)
        if trial.number % 5 == 1:
            raise optuna.TrialPruned()
        if trial.number % 5 == 2:
            return float("nan")
        if trial.number % 5 == 3:
            return float("inf")
        if trial.number % 5 == 4:
            raise RuntimeError("boom")
        return (x - 0.5) ** 2

    study.optimize(objective, n_trials=30, catch=(RuntimeError,))
    states = {t.state for t in study.trials}
    assert {TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED} <= states
    observations = sampler._observations
    assert observations is not None
    finite = [t for t in study.trials if t.state == TrialState.COMPLETE and math.isfinite(t.value)]
    assert observations.count == len(finite)


def test_enqueued_trials_are_respected_and_out_of_space_ones_not_modelled() -> None:
    sampler = RFFThompsonSampler(n_startup_trials=1, seed=0)
    study = optuna.create_study(sampler=sampler)
    study.enqueue_trial({"x": 0.123})
    study.enqueue_trial({"x": 7.0})  # outside [0, 1]: Optuna keeps it, the model skips it
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=4)
    assert study.trials[0].params["x"] == 0.123
    assert study.trials[1].params["x"] == 7.0
    assert sampler._observations is not None
    sampler._observations.update(study)
    assert sampler._observations.count == 3  # trials 0, 2 and 3


def test_dynamic_search_space_falls_back_with_warning(caplog: pytest.LogCaptureFixture) -> None:
    sampler = RFFThompsonSampler(n_startup_trials=2, seed=0)
    study = optuna.create_study(sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0, 1)
        if trial.number >= 3:
            trial.suggest_float(f"extra{trial.number}", 0, 1)
        return x

    optuna.logging.enable_propagation()
    try:
        with caplog.at_level("WARNING"):
            study.optimize(objective, n_trials=6)
    finally:
        optuna.logging.disable_propagation()
    assert any("sampled independently" in r.message for r in caplog.records)


def test_n_jobs_two_shares_one_sampler_safely() -> None:
    sampler = RFFThompsonSampler(n_startup_trials=4, seed=0)
    study = optuna.create_study(sampler=sampler)
    study.optimize(_branin, n_trials=24, n_jobs=2)
    assert len([t for t in study.trials if t.state == TrialState.COMPLETE]) == 24
    assert sampler._observations is not None
    sampler._observations.update(study)
    assert sampler._observations.count == 24


def test_a_posterior_is_never_built_while_the_statistics_are_updated(monkeypatch) -> None:
    """Regression (n_jobs=2): a thread built its posterior from another's in-place update.

    Each update waits (up to 50 ms) for a posterior to be built meanwhile; any posterior built
    during an update is recorded. Without the sampler's model lock the other thread, busy
    selecting hyperparameters, builds some (and Cholesky failed on the half-updated Gram matrix
    in about 1% of the plain n_jobs=2 runs); with it, none.
    """
    updating = threading.Event()
    built = threading.Event()
    overlaps: list[int] = []
    add, posterior = SufficientStatistics.add, SufficientStatistics.posterior

    def slow_add(self, features, targets):  # noqa: ANN001, ANN202
        built.clear()
        updating.set()
        built.wait(timeout=0.05)
        updating.clear()
        add(self, features, targets)

    def watched_posterior(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if updating.is_set():
            overlaps.append(self.count)
        built.set()
        return posterior(self, *args, **kwargs)

    monkeypatch.setattr(SufficientStatistics, "add", slow_add)
    monkeypatch.setattr(SufficientStatistics, "posterior", watched_posterior)
    for _ in range(2):
        study = optuna.create_study(sampler=RFFThompsonSampler(n_startup_trials=4, seed=0))
        study.optimize(_branin, n_trials=16, n_jobs=2)
        assert all(t.state == TrialState.COMPLETE for t in study.trials)
    assert overlaps == []


def test_auto_hyperparameters_prefer_a_lengthscale_that_fits() -> None:
    # A wiggly function should select a short lengthscale, a linear one a long one.
    def wiggly(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0, 1)
        return math.sin(40 * x)

    def smooth(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0, 1)
        return x

    chosen = {}
    for name, objective in (("wiggly", wiggly), ("smooth", smooth)):
        sampler = RFFThompsonSampler(lengthscale="auto", noise_variance="auto", seed=0)
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        study.optimize(objective, n_trials=40)
        study.sampler = sampler
        trial = study.ask()
        trial.suggest_float("x", 0, 1)
        assert sampler._observations is not None
        features, _ = sampler._select_model(sampler._observations)
        chosen[name] = features.lengthscale
    assert chosen["wiggly"] <= 0.1 < chosen["smooth"]


def test_sampler_can_move_to_another_study() -> None:
    sampler = RFFThompsonSampler(n_startup_trials=2, seed=0)
    first = optuna.create_study(sampler=sampler)
    first.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=5)
    second = optuna.create_study(sampler=sampler)
    second.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    assert sampler._observations is not None and sampler._observations.count == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_features": 0},
        {"lengthscale": 0.0},
        {"lengthscale": "long"},
        {"noise_variance": -1.0},
        {"n_startup_trials": -1},
    ],
)
def test_invalid_arguments(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        RFFThompsonSampler(**kwargs)


def test_seed_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        RFFThompsonSampler(100)  # type: ignore[misc]
