"""The Laplace mechanism CTL(epsilon) of the LDP-BO paper (Curator 1)."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from optuna_fedbo.privacy._laplace import LaplaceMechanism
from optuna_fedbo.privacy._laplace import privatize_objective

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_scale_is_curator_1() -> None:
    mechanism = LaplaceMechanism(0.5, value_bound=2.0, noise_bound=1.0)
    assert mechanism.scale == pytest.approx(2 * (2.0 + 1.0) / 0.5)
    assert mechanism.bound == 3.0 and mechanism.sensitivity == 6.0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"value_bound": 0.0}, "value_bound"),
        ({"value_bound": -2.0}, "value_bound"),
        ({"noise_bound": -0.5}, "noise_bound"),
        ({"noise_bound": math.nan}, "noise_bound"),
    ],
)
def test_bad_parameters(kwargs: dict, match: str) -> None:
    arguments = {"epsilon": 1.0, "value_bound": 1.0, "noise_bound": 1.0} | kwargs
    epsilon = arguments.pop("epsilon")
    with pytest.raises(ValueError, match=match):
        LaplaceMechanism(epsilon, **arguments)


def test_noise_is_laplace_of_scale_l() -> None:
    mechanism = LaplaceMechanism(
        1.0, value_bound=1.0, noise_bound=0.5, rng=np.random.default_rng(0)
    )
    noise = np.array([mechanism.privatize(0.25) for _ in range(40_000)]) - 0.25
    # Laplace(L): mean 0, variance 2 L^2, E|X| = L (L = 3).
    assert abs(noise.mean()) < 0.05
    assert noise.var() == pytest.approx(2 * 9.0, rel=0.03)
    assert np.abs(noise).mean() == pytest.approx(3.0, rel=0.02)
    assert mechanism.n_privatized == 40_000 and mechanism.n_clipped == 0


def test_values_are_clipped_first_and_counted() -> None:
    zero_noise = LaplaceMechanism(
        1.0, value_bound=1.0, noise_bound=0.5, rng=np.random.default_rng(1)
    )
    reference = np.random.default_rng(1)
    # The clipped value plus the same noise draw: 5 -> 1.5 and -7 -> -1.5.
    assert zero_noise.privatize(5.0) == pytest.approx(1.5 + reference.laplace(0.0, 3.0))
    assert zero_noise.privatize(-7.0) == pytest.approx(-1.5 + reference.laplace(0.0, 3.0))
    assert zero_noise.privatize(1.5) == pytest.approx(1.5 + reference.laplace(0.0, 3.0))
    assert zero_noise.n_clipped == 2 and zero_noise.n_privatized == 3


def test_epsilon_ldp_likelihood_ratio() -> None:
    # Lemma 1: the densities of the outputs for any two inputs differ by at most e^epsilon.
    epsilon = 0.7
    mechanism = LaplaceMechanism(epsilon, value_bound=1.0, noise_bound=1.0)
    z = np.linspace(-30, 30, 2001)
    for y1, y2 in [(-2.0, 2.0), (-5.0, 9.0), (0.3, -1.0)]:
        c1, c2 = np.clip([y1, y2], -mechanism.bound, mechanism.bound)
        log_ratio = (np.abs(z - c2) - np.abs(z - c1)) / mechanism.scale
        assert np.max(np.abs(log_ratio)) <= epsilon + 1e-12


def test_default_noise_is_not_reproducible() -> None:
    first = LaplaceMechanism(1.0, value_bound=1.0, noise_bound=0.0)
    second = LaplaceMechanism(1.0, value_bound=1.0, noise_bound=0.0)
    assert first.privatize(0.0) != second.privatize(0.0)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "1.0", None, True])
def test_privatize_rejects_non_values(value) -> None:
    mechanism = LaplaceMechanism(1.0, value_bound=1.0, noise_bound=0.0)
    with pytest.raises(ValueError):
        mechanism.privatize(value)
    assert mechanism.n_privatized == 0


def test_wrapped_objective_in_a_study() -> None:
    mechanism = LaplaceMechanism(
        1.0, value_bound=1.0, noise_bound=0.0, rng=np.random.default_rng(2)
    )
    truths = []

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -1, 1)
        truths.append(x)
        if x > 0.9:
            return math.nan
        return x

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(mechanism.wrap(objective), n_trials=40)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(complete) + len(failed) == 40
    assert all(t.params["x"] > 0.9 for t in failed)  # NaN raw values fail, never released
    assert mechanism.n_privatized == len(complete)
    # The study holds privatized values, not the truth.
    assert all(t.value != t.params["x"] for t in complete)


def test_wrapper_passes_exceptions_and_rejects_sequences() -> None:
    mechanism = LaplaceMechanism(1.0, value_bound=1.0, noise_bound=0.0)

    def pruned(trial: object) -> float:
        raise optuna.TrialPruned()

    with pytest.raises(optuna.TrialPruned):
        mechanism.wrap(pruned)(None)
    with pytest.raises(ValueError, match="one real number"):
        mechanism.wrap(lambda: (1.0, 2.0))()
    assert math.isnan(mechanism.wrap(lambda: math.inf)())
    assert mechanism.n_privatized == 0


def test_privatize_objective_convenience() -> None:
    wrapped = privatize_objective(lambda x: x, epsilon=2.0, value_bound=1.0, noise_bound=1.0)
    assert wrapped.mechanism.scale == pytest.approx(2.0)
    assert math.isfinite(wrapped(0.5)) and wrapped.mechanism.n_privatized == 1
