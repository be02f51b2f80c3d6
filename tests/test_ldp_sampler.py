"""LDPUCBSampler: Optuna conformance, MoMA epoch bookkeeping, directions and bad input."""

from __future__ import annotations

import math
from pathlib import Path
import warnings

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution
from optuna.testing.pytest_samplers import BasicSamplerTestCase
from optuna.testing.pytest_samplers import RelativeSamplerTestCase
from optuna.testing.pytest_samplers import SingleOnlySamplerTestCase
from optuna.trial import TrialState
import pytest

from optuna_fedbo.core.ldp import SquaredExponential
from optuna_fedbo.privacy._laplace import LaplaceMechanism
from optuna_fedbo.samplers._ldp_ucb import DIRECTION_KEY
from optuna_fedbo.samplers._ldp_ucb import LDPUCBSampler
from optuna_fedbo.samplers._ldp_ucb import PLAY_KEY

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {"x": IntDistribution(0, 19)}


def _sampler(algorithm: str, **kwargs) -> LDPUCBSampler:
    options = {
        "epsilon": 1.0,
        "value_bound": 1.0,
        "noise_bound": 1.0,
        "horizon": 200,
        "n_candidates": 64,
        "n_refinements": 1,
        "seed": 0,
    }
    if algorithm == "moma":
        options["epoch_length"] = 3
    options.update(kwargs)
    return LDPUCBSampler(algorithm, **options)


class TestLDPUCBSamplerConformance(
    BasicSamplerTestCase, RelativeSamplerTestCase, SingleOnlySamplerTestCase
):
    @pytest.fixture(params=["tgp", "ata", "moma"])
    def sampler(self, request):
        return lambda: _sampler(request.param)


def _tag(study: optuna.Study, trial: optuna.Trial) -> dict | None:
    return study._storage.get_trial(trial._trial_id).system_attrs.get(PLAY_KEY)


# --- MoMA bookkeeping --------------------------------------------------------------------------


def test_moma_suggests_each_epoch_point_k_times_in_a_row() -> None:
    study = optuna.create_study(sampler=_sampler("moma", epoch_length=4))
    study.optimize(lambda t: math.sin(t.suggest_int("x", 0, 19)), n_trials=1 + 4 * 5)
    tags = [t.system_attrs.get(PLAY_KEY) for t in study.trials]
    assert tags[0] is None  # the first trial is the independent sampler's
    for epoch in range(5):
        block = study.trials[1 + 4 * epoch : 5 + 4 * epoch]
        assert {t.params["x"] for t in block} == {block[0].params["x"]}
        assert [t.system_attrs[PLAY_KEY]["epoch"] for t in block] == [epoch] * 4
        assert [t.system_attrs[PLAY_KEY]["play"] for t in block] == [0, 1, 2, 3]
    assert study.sampler._state.algorithm.n_epochs == 4  # the fifth is fed at the next ask


def test_moma_ask_tell_enqueue_and_failures_keep_epochs_intact() -> None:
    sampler = _sampler("moma", epoch_length=3)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    first = study.ask(SPACE)  # independent: empty relative space
    study.tell(first, 0.0)
    a, b = study.ask(SPACE), study.ask(SPACE)  # two plays of epoch 0 in flight
    study.enqueue_trial({"x": 7})
    enqueued = study.ask(SPACE)
    assert enqueued.params["x"] == 7 and _tag(study, enqueued) is None
    c = study.ask(SPACE)
    point = a.params["x"]
    assert b.params["x"] == point == c.params["x"]
    assert [_tag(study, t)["play"] for t in (a, b, c)] == [0, 1, 2]
    study.tell(enqueued, 100.0)
    study.tell(c, 1.0)
    study.tell(b, state=TrialState.FAIL)  # play 1 must be played again
    study.tell(a, float("inf"))  # a non-finite value is a failed play too
    replay_1 = study.ask(SPACE)
    replay_0 = study.ask(SPACE)
    assert replay_1.params["x"] == point == replay_0.params["x"]
    assert _tag(study, replay_1)["play"] == 0
    assert _tag(study, replay_0)["play"] == 1
    study.tell(replay_1, 2.0)
    study.tell(replay_0, 3.0)
    nxt = study.ask(SPACE)
    assert _tag(study, nxt)["epoch"] == 1
    algorithm = sampler._state.algorithm
    assert algorithm.n_epochs == 1
    # The epoch's rewards are its finite plays, in play order; the enqueued 100 is not one.
    np.testing.assert_allclose(algorithm._rewards[0], [2.0, 3.0, 1.0])


def test_moma_continues_an_epoch_after_a_restart() -> None:
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, sampler=_sampler("moma", epoch_length=5))
    study.optimize(lambda t: float(t.suggest_int("x", 0, 19)), n_trials=3)  # 1 + 2 plays
    point = study.trials[1].params["x"]
    resumed = optuna.load_study(
        study_name=study.study_name, storage=storage, sampler=_sampler("moma", epoch_length=5)
    )
    resumed.optimize(lambda t: float(t.suggest_int("x", 0, 19)), n_trials=3)
    tags = [t.system_attrs[PLAY_KEY] for t in resumed.trials[1:]]
    assert [(tag["epoch"], tag["play"]) for tag in tags] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 4),
    ]
    assert {t.params["x"] for t in resumed.trials[1:]} == {point}
    with pytest.raises(ValueError, match="k = 5"):
        other = _sampler("moma", epoch_length=4)
        optuna.load_study(study_name=study.study_name, storage=storage, sampler=other).optimize(
            lambda t: float(t.suggest_int("x", 0, 19)), n_trials=1
        )


def test_moma_partly_fixed_trials_are_not_plays() -> None:
    sampler = _sampler("moma", epoch_length=3)
    study = optuna.create_study(sampler=sampler)
    space = {"x": IntDistribution(0, 9), "y": IntDistribution(0, 9)}
    study.tell(study.ask(space), 0.0)
    study.enqueue_trial({"x": 2})
    partly_fixed = study.ask(space)
    assert partly_fixed.params["x"] == 2 and _tag(study, partly_fixed) is None
    play = study.ask(space)
    assert _tag(study, play)["play"] == 0


# --- directions, values, search spaces ---------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["tgp", "ata", "moma"])
@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_direction(algorithm: str, direction: str) -> None:
    # Nearly noiseless values (epsilon large) of an increasing function.
    sampler = _sampler(algorithm, epsilon=200.0, noise_bound=0.0, value_bound=1.0, seed=1)
    study = optuna.create_study(direction=direction, sampler=sampler)
    study.optimize(lambda t: t.suggest_int("x", 0, 19) / 19.0, n_trials=31)
    # The model is of the values oriented for maximization: increasing in x iff maximizing.
    mean, _ = sampler._state.algorithm.posterior.predict(sampler._state.grid)
    slope = np.corrcoef(np.arange(20), mean)[0, 1]
    assert slope > 0.5 if direction == "maximize" else slope < -0.5
    if algorithm != "ata":  # ATA's truncation is still strong after 30 values
        late = [t.params["x"] for t in study.trials[-9:]]
        assert np.median(late) >= 15 if direction == "maximize" else np.median(late) <= 4, late


def test_direction_change_between_runs_is_an_error() -> None:
    sampler = _sampler("tgp")
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    other = optuna.create_study(direction="minimize", sampler=sampler)
    with pytest.raises(ValueError, match="create a new sampler"):
        other.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    # The orientation is also recorded in the study: a study whose direction no longer matches
    # it (here forged) is refused by any sampler.
    storage = optuna.storages.InMemoryStorage()
    forged = optuna.create_study(storage=storage, direction="minimize")
    forged.add_trial(
        optuna.create_trial(
            params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)}, value=1
        )
    )
    storage.set_study_system_attr(forged._study_id, DIRECTION_KEY, "MAXIMIZE")
    forged.sampler = _sampler("tgp")
    with pytest.raises(ValueError, match="direction MAXIMIZE"):
        forged.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)


@pytest.mark.parametrize("algorithm", ["tgp", "ata", "moma"])
def test_non_finite_values_are_ignored(algorithm: str) -> None:
    values = iter([1.0, math.inf, -math.inf, math.nan, 0.5] * 6)
    study = optuna.create_study(sampler=_sampler(algorithm))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.optimize(lambda t: t.suggest_float("x", 0, 1) * 0 + next(values), n_trials=30)
    assert len(study.trials) == 30
    states = {t.state for t in study.trials}
    assert states == {TrialState.COMPLETE, TrialState.FAIL}


def test_finite_domains_are_searched_exhaustively() -> None:
    sampler = _sampler("tgp", max_grid_size=200)
    study = optuna.create_study(sampler=sampler)
    space = {
        "n": IntDistribution(1, 8, log=True),
        "s": FloatDistribution(0.0, 1.0, step=0.25),
        "c": CategoricalDistribution(["a", "b", None]),
    }
    for _ in range(6):
        trial = study.ask(space)
        study.tell(trial, 0.0)
    grid = sampler._state.grid
    assert grid is not None and grid.shape == (8 * 5 * 3, 1 + 1 + 3)
    encoded = sampler._state.encoder.encode([t.params for t in study.trials[1:]])
    assert all(np.any(np.all(grid == row, axis=1)) for row in encoded)
    big = _sampler("tgp", max_grid_size=100)
    study = optuna.create_study(sampler=big)
    for _ in range(3):
        study.tell(study.ask(space), 0.0)
    assert big._state.grid is None


def test_heavy_tailed_variant_runs_without_a_mechanism() -> None:
    sampler = LDPUCBSampler(
        "moma", epsilon=None, value_bound=1.0, noise_moment=3.0, horizon=60, epoch_length=4
    )
    rng = np.random.default_rng(0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + rng.standard_t(3), n_trials=13)
    assert sampler._state.algorithm.n_epochs == 2


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"algorithm": "ucb"}, "algorithm"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"value_bound": 0.0}, "value_bound"),
        ({"noise_bound": -1.0}, "noise_bound"),
        ({"noise_bound": None}, "noise_bound"),
        ({"epsilon": None}, "noise_moment"),
        (
            {"algorithm": "moma", "horizon": 100, "epoch_length": "theorem"},
            "smaller than one MoMA epoch",
        ),
        ({"algorithm": "moma", "epoch_length": "paper"}, "'practical', 'theorem'"),
        ({"regularization": "auto"}, "regularization"),
        ({"regularization": 0.0}, "regularization"),
        ({"algorithm": "ata", "max_dictionary_size": 0}, "max_dictionary_size"),
        ({"algorithm": "moma", "horizon": 10, "epoch_length": 11}, "smaller than one MoMA epoch"),
        ({"algorithm": "ata", "horizon": 0}, "horizon"),
        ({"delta": 0.0}, "delta"),
        ({"beta_scale": 0.0}, "beta_scale"),
        ({"kernel": "rbf"}, "kernel"),
        ({"algorithm": "ata", "nystrom_accuracy": 1.0}, "accuracy"),
        ({"epoch_length": 5}, "no epochs"),
        ({"noise_moment": 3.0}, "non-private"),
    ],
)
def test_bad_input(kwargs: dict, match: str) -> None:
    arguments = {
        "algorithm": "tgp",
        "epsilon": 1.0,
        "value_bound": 1.0,
        "noise_bound": 1.0,
        "horizon": 1000,
    } | kwargs
    algorithm = arguments.pop("algorithm")
    with pytest.raises(ValueError, match=match):
        LDPUCBSampler(algorithm, **arguments)


def test_moma_epoch_length_practical_by_default_theorem_on_request() -> None:
    common = {"epsilon": 1.0, "value_bound": 1.0, "noise_bound": 1.0}
    sampler = LDPUCBSampler("moma", horizon=1000, **common)
    assert sampler.epoch_length == 13 and sampler.algorithm == "moma"  # ceil(ln(4e 1000/0.05))
    assert LDPUCBSampler("moma", horizon=20, **common).epoch_length == 2  # ten epochs
    theorem = LDPUCBSampler("moma", horizon=1000, epoch_length="theorem", **common)
    assert theorem.epoch_length == 295  # ceil(24 ln(4e 1000/0.05))


def test_paper_parameters_reach_the_algorithm_exactly() -> None:
    paper = {
        "epoch_length": "theorem",
        "regularization": 1.0,
        "max_dictionary_size": None,
        "beta_scale": 1.0,
    }
    sampler = LDPUCBSampler(
        "moma", epsilon=1.0, value_bound=1.0, noise_bound=1.0, horizon=2000, **paper
    )
    algorithm = sampler._new_algorithm()
    assert algorithm.epoch_length == 312  # ceil(24 ln(4e 2000 / 0.05)) = ceil(311.6)
    assert algorithm.regularization == 1.0 and algorithm.beta_scale == 1.0
    assert algorithm.max_dictionary_size is None
    practical = LDPUCBSampler(
        "ata", epsilon=1.0, value_bound=1.0, noise_bound=1.0, horizon=2000
    )._new_algorithm()
    assert practical.regularization == pytest.approx(4 * (1 + 2 * 4**2))  # 4 c / B^2, L = 4
    assert practical.max_dictionary_size == 64


@pytest.mark.parametrize("algorithm", ["tgp", "ata", "moma"])
def test_defaults_run_at_a_horizon_of_20(algorithm: str) -> None:
    sampler = LDPUCBSampler(
        algorithm, epsilon=1.0, value_bound=1.0, noise_bound=0.0, horizon=20, seed=0
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(lambda t: math.sin(3 * t.suggest_float("x", 0, 1)), n_trials=20)
    assert len(study.trials) == 20
    if algorithm == "moma":  # k = 2: nine epochs complete after the first (random) trial
        assert sampler.epoch_length == 2
        assert sampler._state.algorithm.n_epochs == 9


# --- end to end: study.optimize with privatized objectives --------------------------------------


def _synthetic_objective(seed: int):
    kernel = SquaredExponential(0.2)
    rng = np.random.default_rng(seed)
    domain = np.linspace(0, 1, 100)[:, None]
    f = kernel(domain, domain[rng.integers(0, 100, 100)]) @ rng.uniform(-1, 1, 100)
    noise = np.random.default_rng(seed + 1)

    def objective(trial: optuna.Trial) -> float:
        return float(f[trial.suggest_int("i", 0, 99)] + noise.uniform(-1, 1))

    return f, objective


def test_tgp_sampler_beats_random_search_on_privatized_values() -> None:
    ratios = []
    for seed in (5, 6):
        f, objective = _synthetic_objective(seed)
        bound = float(np.max(np.abs(f)))
        mechanism = LaplaceMechanism(
            1.0, value_bound=bound, noise_bound=1.0, rng=np.random.default_rng(seed + 2)
        )
        sampler = LDPUCBSampler(
            "tgp", epsilon=1.0, value_bound=bound, noise_bound=1.0, horizon=400, seed=seed
        )
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.optimize(mechanism.wrap(objective), n_trials=400)
        assert mechanism.n_privatized == 400 and mechanism.n_clipped == 0
        played = np.array([t.params["i"] for t in study.trials])
        ratios.append(np.sum(f.max() - f[played]) / (400 * (f.max() - f.mean())))
    assert np.mean(ratios) < 0.7, ratios


@pytest.mark.parametrize("algorithm", ["ata", "moma"])
def test_ata_and_moma_samplers_run_on_privatized_values(algorithm: str) -> None:
    f, objective = _synthetic_objective(9)
    bound = float(np.max(np.abs(f)))
    mechanism = LaplaceMechanism(
        1.0, value_bound=bound, noise_bound=1.0, rng=np.random.default_rng(0)
    )
    extra = {"epoch_length": 10} if algorithm == "moma" else {}
    sampler = _sampler(algorithm, value_bound=bound, **extra)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(mechanism.wrap(objective), n_trials=101)
    algorithm_state = sampler._state.algorithm
    if algorithm == "moma":
        assert algorithm_state.n_epochs == 9  # epoch 9 is fed at the next ask
    else:
        assert algorithm_state.t == 100 and algorithm_state.dimension > 0


def test_optunahub_package_loads_and_optimizes() -> None:
    import optunahub

    root = Path(__file__).resolve().parents[1]
    module = optunahub.load_local_module(package="samplers/ldp_gp_ucb", registry_root=str(root))
    objective = module.privatize_objective(
        lambda t: t.suggest_float("x", -1, 1) ** 2, epsilon=2.0, value_bound=1.0, noise_bound=0.0
    )
    sampler = module.LDPUCBSampler("tgp", epsilon=2.0, value_bound=1.0, noise_bound=0.0, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(objective, n_trials=8)
    assert len(study.trials) == 8 and objective.mechanism.n_privatized == 8
    assert isinstance(module.LaplaceMechanism(1.0, value_bound=1.0, noise_bound=1.0).scale, float)


@pytest.mark.parametrize("algorithm", ["tgp", "ata", "moma"])
def test_every_suggestion_runs_on_one_blas_thread(algorithm: str, monkeypatch) -> None:
    # Small matrices: a threaded BLAS beside other work is 2-40x slower (ATA, 2-D, busy cores:
    # 70 ms per trial against 16-24 ms on one thread).
    from contextlib import contextmanager

    from optuna_fedbo.core import threads
    from optuna_fedbo.samplers import _ldp_ucb

    entered = []

    @contextmanager
    def recording():
        with threads.one_blas_thread():
            entered.append(True)
            yield

    monkeypatch.setattr(_ldp_ucb, "one_blas_thread", recording, raising=False)
    study = optuna.create_study(sampler=_sampler(algorithm))
    study.optimize(lambda t: float(t.suggest_int("x", 0, 19)), n_trials=4)
    assert len(entered) == 3  # every trial after the first (whose relative space is empty)
