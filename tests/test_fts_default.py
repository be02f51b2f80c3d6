"""The default federated sampler: space-filling start, shared scale, transfer that cannot hurt.

Small, seeded federations on GP draws; the regret curves at scale are in
``benchmarks/fts_value.py``.
"""

from __future__ import annotations

import itertools

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo import LocalGPSampler
from optuna_fedbo.core import gp_fit as _gp_fit
from optuna_fedbo.core.acquisition import LinearAcquisition
from optuna_fedbo.core.gp import GaussianProcess
from optuna_fedbo.core.gp_fit import REFIT_GROWTH
from optuna_fedbo.core.local_model import normalization
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.samplers import _fed_transfer
from optuna_fedbo.samplers._fed_transfer import FedTransferSampler
from optuna_fedbo.samplers._site_state import ONE_STEP_ATTR
from optuna_fedbo.samplers._site_state import one_step_ranking
from optuna_fedbo.simulation import simulate

optuna.logging.set_verbosity(optuna.logging.WARNING)

UNIT = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _draw(rng: np.random.Generator, lengthscale: float = 0.15, k: int = 300):
    w = rng.standard_normal((2, k)) / lengthscale
    b = rng.uniform(0, 2 * np.pi, k)
    a = rng.standard_normal(k) * np.sqrt(2.0 / k)
    return lambda x: np.cos(x @ w + b) @ a


def _sites(seed: int, n_sites: int, related: bool):
    """Objectives of ``n_sites`` sites (near-identical or independent), their true maxima."""
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.linspace(0, 1, 81)] * 2), -1).reshape(-1, 2)
    base = _draw(rng)
    functions, maxima = [], []
    for _ in range(n_sites):
        own = _draw(rng)
        f = (lambda x, own=own: base(x) + 0.05 * own(x)) if related else own
        functions.append(f)
        maxima.append(float(f(grid).max()))

    def objective(f):
        def run(trial: optuna.Trial) -> float:
            x = np.array([[trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)]])
            value = float(f(x)[0])
            trial.set_user_attr("f", value)
            return value

        return run

    return [objective(f) for f in functions], maxima


def _regret(studies, maxima, n_trials: int) -> float:
    return float(
        np.mean(
            [
                m - max(t.user_attrs["f"] for t in s.trials[:n_trials])
                for s, m in zip(studies, maxima)
            ]
        )
    )


def _local(objectives, seed: int, n_trials: int) -> list[optuna.Study]:
    studies = []
    for n, objective in enumerate(objectives):
        sampler = LocalGPSampler(n_startup_trials=4, n_candidates=256, seed=seed * 100 + n)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.optimize(objective, n_trials=n_trials)
        studies.append(study)
    return studies


def _federated(objectives, seed: int, n_trials: int) -> list[optuna.Study]:
    config = FTSConfig(n_init=4)
    return simulate(
        objectives,
        search_space=UNIT,
        n_rounds=n_trials - config.n_init,
        protocol=config,
        seed=seed,
        sampler_kwargs={"n_candidates": 256},
        progress=False,
    ).studies


def test_similar_sites_gain_from_the_federation() -> None:
    n_trials, fed, local = 10, [], []
    for seed in range(3):
        objectives, maxima = _sites(seed, 6, related=True)
        fed.append(_regret(_federated(objectives, seed, n_trials), maxima, n_trials))
        local.append(_regret(_local(objectives, seed, n_trials), maxima, n_trials))
    assert np.mean(fed) < 0.6 * np.mean(local)


def test_independent_sites_stay_close_to_local() -> None:
    n_trials, fed, local = 12, [], []
    for seed in range(3):
        objectives, maxima = _sites(10 + seed, 4, related=False)
        fed.append(_regret(_federated(objectives, seed, n_trials), maxima, n_trials))
        local.append(_regret(_local(objectives, seed, n_trials), maxima, n_trials))
    assert np.mean(fed) < 1.5 * np.mean(local) + 0.02


def _federation(n_clients: int = 2, **protocol) -> Federation:
    return Federation.create(
        f"default-{next(_names)}",
        search_space=UNIT,
        n_clients=n_clients,
        protocol=FTSConfig(
            **{"n_init": 5, **({"min_contributors": 1} if n_clients == 1 else {}), **protocol}
        ),
        seed=1,
    )


def test_the_search_refines_the_best_region_instead_of_the_corners() -> None:
    # A rotated 4-D Styblinski-Tang bowl (quartic walls, its optimum inside the cube), one
    # participant alone: with the GP's constant mean at the worst value seen, 9 of the 45
    # suggestions after the design lie on the cube's boundary (30 of 45 with the values'
    # average: expected improvement then favours the unexplored corners).
    space = {f"x{i}": FloatDistribution(0.0, 1.0) for i in range(4)}

    def bowl(seed: int):
        rng = np.random.default_rng(seed)
        rotation, _ = np.linalg.qr(rng.standard_normal((4, 4)))
        centre = rng.uniform(0.3, 0.7, 4)

        def objective(trial: optuna.Trial) -> float:
            x = np.array([trial.suggest_float(name, 0.0, 1.0) for name in space])
            z = 6.0 * (x - centre) @ rotation.T - 2.9035
            return float(-0.5 * np.sum(z**4 - 16.0 * z**2 + 5.0 * z))

        return objective

    on_boundary = 0
    for seed in (0, 2, 4):
        study = simulate(
            [bowl(seed)],
            search_space=space,
            n_rounds=15,
            protocol=FTSConfig(min_contributors=1),
            seed=seed,
            progress=False,
        ).studies[0]
        X = np.array([[t.params[name] for name in space] for t in study.trials[5:]])
        on_boundary += int(np.sum(np.any((X < 1e-6) | (X > 1.0 - 1e-6), axis=1)))
    assert on_boundary <= 15


def test_initial_design_is_a_latin_hypercube_over_the_whole_space() -> None:
    fed = _federation()
    study = optuna.create_study(sampler=FedTransferSampler(fed, "a", seed=0))
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_float("y", 0, 1), n_trials=5)
    points = np.array([[t.params["x"], t.params["y"]] for t in study.trials])
    for column in points.T:  # one point in each fifth of each axis
        np.testing.assert_array_equal(np.sort(np.floor(column * 5)), np.arange(5))
    assert {t.system_attrs["fedbo:mode"] for t in study.trials} == {"init"}


def test_a_late_joiner_uses_the_broadcast_from_its_first_trial() -> None:
    fed = _federation(min_contributors=1)  # the first broadcast is of one participant
    early = optuna.create_study(direction="maximize", sampler=FedTransferSampler(fed, "a", seed=0))

    def objective(trial: optuna.Trial) -> float:
        x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
        return -((x - 0.8) ** 2) - (y - 0.3) ** 2

    early.optimize(objective, n_trials=8)
    FederationServer(fed).step(force=True)
    late = optuna.create_study(direction="maximize", sampler=FedTransferSampler(fed, "b", seed=1))
    late.optimize(objective, n_trials=2)
    assert late.trials[0].system_attrs["fedbo:mode"] == "federated"
    assert late.trials[1].system_attrs["fedbo:mode"] == "init"
    # The first point maximizes the broadcast function g(x) = phi(x)^T omega.
    broadcast = fed.latest_broadcast()
    omega = broadcast.vectors[0]
    grid = np.stack(np.meshgrid(*[np.linspace(0, 1, 101)] * 2), -1).reshape(-1, 2)
    first = np.array([[late.trials[0].params["x"], late.trials[0].params["y"]]])
    g = fed.pooling_features()[broadcast.feature_block]
    assert (g(first) @ omega)[0] >= (g(grid) @ omega).max() - 1e-3


def test_transfer_steps_are_recorded_with_their_broadcast_round() -> None:
    objectives, _ = _sites(0, 2, related=True)
    result = simulate(
        objectives,
        search_space=UNIT,
        n_rounds=3,
        protocol=FTSConfig(n_init=3),
        seed=0,
        progress=False,
    )
    for study in result.studies:
        modes = [t.system_attrs["fedbo:mode"] for t in study.trials]
        assert modes == ["init"] * 3 + ["transfer"] * 3
        rounds = [t.system_attrs.get("fedbo:broadcast_round") for t in study.trials[3:]]
        assert rounds == [0, 1, 2]


def test_a_transfer_trial_fits_hyperparameters_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GP with the broadcast as prior mean shares the own GP's hyperparameters: one fit per
    trial (two fits were 42% of a participant's trial at 20-60 trials)."""
    fits, gps = [], []
    update_gp, with_prior_mean = _fed_transfer.update_gp, GaussianProcess.with_prior_mean

    def counted(*args, **kwargs):
        fits.append(kwargs.get("prior_mean") is None)
        return update_gp(*args, **kwargs)

    def kept(own: GaussianProcess, prior_mean: np.ndarray | None) -> GaussianProcess:
        gps.append(with_prior_mean(own, prior_mean))
        return gps[-1]

    monkeypatch.setattr(_fed_transfer, "update_gp", counted)
    monkeypatch.setattr(GaussianProcess, "with_prior_mean", kept)
    objectives, _ = _sites(0, 2, related=True)
    result = simulate(
        objectives, search_space=UNIT, n_rounds=3, protocol=FTSConfig(n_init=3), seed=0,
        progress=False,
    )  # fmt: skip
    modes = [t.system_attrs["fedbo:mode"] for s in result.studies for t in s.trials[3:]]
    assert modes == ["transfer"] * 6
    assert fits == [True] * 6  # the own GP's fit only
    assert len(gps) == 6 and all(gp.has_prior_mean for gp in gps)


@pytest.mark.parametrize("given", [None, 96])
def test_the_gp_search_scores_512_candidates_unless_told(
    monkeypatch: pytest.MonkeyPatch, given: int | None
) -> None:
    """Half of the FTS participants' 1024 by default (issue 28: the cost per trial)."""
    scored = []
    maximize_on_gp = _fed_transfer.maximize_on_gp

    def counted(*args, **kwargs):
        scored.append(kwargs["n_candidates"])
        return maximize_on_gp(*args, **kwargs)

    monkeypatch.setattr(_fed_transfer, "maximize_on_gp", counted)
    objectives, _ = _sites(1, 2, related=False)
    kwargs = {} if given is None else {"n_candidates": given}
    simulate(
        objectives, search_space=UNIT, n_rounds=2, protocol=FTSConfig(n_init=3), seed=0,
        sampler_kwargs=kwargs, progress=False,
    )  # fmt: skip
    assert scored == [512 if given is None else given] * 4  # two sites, two BO trials each


def _add_scored(study: optuna.Study, losses: tuple[float, float]) -> None:
    """Ten finished trials (as other workers of the site would add) scored ``losses``."""
    space = {"x": FloatDistribution(0, 1), "y": FloatDistribution(0, 1)}
    for k in range(10):
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": 0.05 * k, "y": 0.9}, distributions=space, value=-1.0 - k,
                system_attrs={ONE_STEP_ATTR: list(losses)},
            )
        )  # fmt: skip


def _objective(trial: optuna.Trial) -> float:
    x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
    return -((x - 0.8) ** 2) - (y - 0.3) ** 2


def test_a_broadcast_of_only_the_own_data_is_not_used_as_a_prior() -> None:
    fed = _federation(min_contributors=1)
    server = FederationServer(fed)
    a = optuna.create_study(direction="maximize", sampler=FedTransferSampler(fed, "a", seed=0))
    a.optimize(_objective, n_trials=5)
    server.step(force=True)  # round 0: a's design alone
    a.optimize(_objective, n_trials=2)
    assert [t.system_attrs["fedbo:mode"] for t in a.trials[5:]] == ["fallback"] * 2
    b = optuna.create_study(direction="maximize", sampler=FedTransferSampler(fed, "b", seed=1))
    b.optimize(_objective, n_trials=5)
    a.optimize(_objective, n_trials=1)
    server.step(force=True)  # round 1: both
    assert fed.latest_broadcast().n_contributors == 2
    a.optimize(_objective, n_trials=1)
    assert a.trials[-1].system_attrs["fedbo:mode"] == "transfer"


def test_the_own_gp_replaces_a_broadcast_that_ordered_the_latest_trials_worse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = _federation(min_contributors=1)  # the first broadcast is of one participant
    sampler = FedTransferSampler(fed, "a", seed=0)
    # The mechanics, shown on a lone participant's broadcast (its own data, otherwise unused).
    monkeypatch.setattr(sampler, "_only_own", lambda broadcast: False)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
        return -((x - 0.8) ** 2) - (y - 0.3) ** 2

    study.optimize(objective, n_trials=5)
    FederationServer(fed).step(force=True)
    study.optimize(objective, n_trials=3)
    modes = [t.system_attrs["fedbo:mode"] for t in study.trials[5:]]
    assert modes[0] == "transfer" and set(modes) <= {"transfer", "own"}
    # Each trial's two one-step predictions were scored into the trial once it finished (any
    # worker of the site reads the ranking from the study).
    scored = [t for t in study.trials if ONE_STEP_ATTR in t.system_attrs]
    assert len(scored) == 3 and one_step_ranking(study)._losses
    # When the own GP ordered the latest trials better, it alone chooses the next point ...
    _add_scored(study, (0.0, 1.0))
    study.optimize(objective, n_trials=1)
    assert study.trials[-1].system_attrs["fedbo:mode"] == "own"
    assert study.trials[-1].system_attrs["fedbo:broadcast_round"] == 0
    # ... and the broadcast is back once it did better again.
    _add_scored(study, (1.0, 0.0))
    study.optimize(objective, n_trials=1)
    assert study.trials[-1].system_attrs["fedbo:mode"] == "transfer"
    modes = [t.system_attrs.get("fedbo:mode") for t in study.trials[5:]]
    assert sampler.counts.local == modes.count("own")
    assert sampler.counts.federated == modes.count("transfer")


def test_the_broadcast_is_weighed_again_as_often_as_hyperparameters_are_refitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At every trial in small studies; from REFIT_FROM observations on, once the observations
    have grown by 10% or the broadcast comes on another feature block."""
    monkeypatch.setattr(_fed_transfer, "REFIT_FROM", 8)
    fed = _federation(n_clients=1)
    server = FederationServer(fed)
    sampler = FedTransferSampler(fed, "a", seed=0)
    # Shown on a lone participant's broadcast (its own data, otherwise unused).
    monkeypatch.setattr(sampler, "_only_own", lambda broadcast: False)
    steps, weighings = [], []
    broadcast_function, prior_weight = sampler._broadcast_function, _fed_transfer.prior_weight

    def step(broadcast):
        function = broadcast_function(broadcast)
        if sampler._observations.count in (20, 21):  # as if broadcast on another block
            block = (sampler._feature_maps.index(function.feature_map) + 1) % 5
            other = sampler._feature_maps[block]
            function = LinearAcquisition(other, np.linspace(-1, 1, other.n_features))
        block = sampler._feature_maps.index(function.feature_map)
        steps.append((sampler._observations.count, block))
        return function

    def weigh(posterior, *args):
        weighings.append(posterior.count)
        return prior_weight(posterior, *args)

    monkeypatch.setattr(sampler, "_broadcast_function", step)
    monkeypatch.setattr(_fed_transfer, "prior_weight", weigh)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    weights = []

    def objective(trial: optuna.Trial) -> float:
        x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
        return -((x - 0.8) ** 2) - (y - 0.3) ** 2

    for _ in range(40):
        study.optimize(objective, n_trials=1)
        server.step(force=True)
        if sampler._transfer_weight is not None:
            weights.append(sampler._transfer_weight[2])
    expected, last = [], None
    for (count, block), weight, previous in zip(steps, weights, [None, *weights]):
        if last is None or last[1] != block or not 8 <= count < REFIT_GROWTH * last[0]:
            expected.append(count)
            last = (count, block)
        else:
            assert weight == previous  # kept between weighings
    assert len(steps) == 35 and weighings == expected
    assert 10 < len(weighings) < len(steps)  # weighed at every trial below 8, then less often
    assert {20, 22} <= set(weighings) and 21 not in weighings  # on another block, and back


def test_the_participant_refits_from_ten_observations_on_and_searches_ten_iterations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hyperparameters fitted at every trial up to 10 observations, then once they have grown
    by 10% (the fits were 40% of a trial at 11-20 trials); the acquisition refined with at
    most 10 L-BFGS-B iterations."""
    fitted, iterations = [], []
    fit_gp, maximize_on_gp = _gp_fit.fit_gp, _fed_transfer.maximize_on_gp

    def counted_fit(X, y, **options):  # noqa: ANN001, ANN003, ANN202
        fitted.append(len(y))
        return fit_gp(X, y, **options)

    def counted_search(*args, **options):  # noqa: ANN002, ANN003, ANN202
        iterations.append(options["max_iterations"])
        return maximize_on_gp(*args, **options)

    monkeypatch.setattr(_gp_fit, "fit_gp", counted_fit)
    monkeypatch.setattr(_fed_transfer, "maximize_on_gp", counted_search)
    fed = _federation(n_clients=1)
    server = FederationServer(fed)
    study = optuna.create_study(direction="maximize", sampler=FedTransferSampler(fed, "a", seed=0))
    for _ in range(25):
        study.optimize(
            lambda t: -((t.suggest_float("x", 0, 1) - 0.4) ** 2) - t.suggest_float("y", 0, 1),
            n_trials=1,
        )
        server.step(force=True)
    assert fitted == [5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 21, 24]
    assert iterations == [_fed_transfer.SEARCH_MAX_ITERATIONS] * 20
    assert _fed_transfer.SEARCH_MAX_ITERATIONS == 10


@pytest.mark.parametrize("n_columns", [2, 4, 5])
def test_the_participant_searches_by_zoom_up_to_four_columns(
    monkeypatch: pytest.MonkeyPatch, n_columns: int
) -> None:
    """Zoom rounds from the best candidates cost half of L-BFGS-B's time and reached as high a
    log EI in 2-D and 4-D (in 6-D and 8-D they fell behind: ``ZOOM_MAX_COLUMNS``). With the
    broadcast as prior mean, L-BFGS-B searches up to ``ZOOM_WITH_BROADCAST_FROM`` observations
    (the zoom cost regret before), then the zoom steps in the shorter of the GP's lengthscales
    and the broadcast features' shortest one (in the GP's it lost log EI in 2-D)."""
    searches = []
    maximize_on_gp = _fed_transfer.maximize_on_gp

    def recorded(acquisition, gp, *args, **options):  # noqa: ANN001, ANN002, ANN003, ANN202
        searches.append((acquisition._prior_mean, gp.params.lengthscales, options))
        return maximize_on_gp(acquisition, gp, *args, **options)

    monkeypatch.setattr(_fed_transfer, "maximize_on_gp", recorded)
    assert _fed_transfer.ZOOM_WITH_BROADCAST_FROM == 20
    monkeypatch.setattr(_fed_transfer, "ZOOM_WITH_BROADCAST_FROM", 6)  # within eight rounds
    space = {f"x{i}": FloatDistribution(0, 1) for i in range(n_columns)}
    centres = np.linspace(0.3, 0.6, n_columns)

    def bowl(centre: np.ndarray):  # noqa: ANN202
        return lambda t: -sum((t.suggest_float(n, 0, 1) - c) ** 2 for n, c in zip(space, centre))

    simulate(
        [bowl(centres), bowl(centres + 0.05)],
        search_space=space, n_rounds=8, protocol=FTSConfig(n_init=3), seed=0, progress=False,
    )  # fmt: skip
    with_prior = [(o["n_observations"], p) for p, _, o in searches if p is not None]
    assert min(n for n, _ in with_prior) < 6 <= max(n for n, _ in with_prior)
    shortened = 0
    for prior, lengthscales, options in searches:
        zoom = n_columns <= 4 and (prior is None or options["n_observations"] >= 6)
        assert options["local_search"] == ("zoom" if zoom else "lbfgsb")
        if prior is None:
            assert options["zoom_scales"] is None
            continue
        # The prior: the warped, weighted broadcast (WarpedFunction of a ScaledFunction).
        shortest = prior._function._function.feature_map.lengthscales.min()
        np.testing.assert_array_equal(options["zoom_scales"], np.minimum(lengthscales, shortest))
        shortened += int(np.any(lengthscales > shortest))
    assert shortened > 0  # the broadcast's features were the shorter somewhere


def test_normalization_modes() -> None:
    values = np.array([1.0, 3.0, 5.0, 100.0])
    assert normalization(values, "raw", 2) == (0.0, 1.0)
    assert normalization(values, "shared", 2) == (2.0, 1.0)  # frozen after the design
    assert normalization(values, "participant", 2) == pytest.approx((values.mean(), values.std()))
    assert normalization(values[:1], "shared", 3) == (1.0, 1.0)  # a zero spread counts as one
    with pytest.raises(ValueError):
        normalization(values, "global", 2)


@pytest.mark.parametrize(
    "field, value",
    [
        ("normalization", "global"),
        ("transfer", "always"),
        ("initial_design", "grid"),
        ("lengthscale", -1.0),
    ],
)
def test_config_rejects_bad_values(field: str, value) -> None:
    with pytest.raises(ValueError):
        FTSConfig(**{field: value})
