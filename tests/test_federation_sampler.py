from __future__ import annotations

import collections
import itertools
import logging
import threading

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.testing.pytest_samplers import BasicSamplerTestCase
from optuna.testing.pytest_samplers import RelativeSamplerTestCase
from optuna.testing.pytest_samplers import SingleOnlySamplerTestCase
from optuna.trial import TrialState
import pytest

from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import simulate
from optuna_fedbo.federation.fts.messages import parse_broadcast
from optuna_fedbo.federation.fts.presets import PAPER_ALGORITHM
from optuna_fedbo.samplers._fed_thompson import FedThompsonSampler

optuna.logging.set_verbosity(optuna.logging.WARNING)

XY = {"x": FloatDistribution(-10, 10), "y": FloatDistribution(-10, 10)}
UNIT = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _federation(space=UNIT, n_clients: int = 2, **protocol) -> Federation:
    # These tests exercise the papers' algorithm; tests/test_fts_default.py the default.
    lone = {"min_contributors": 1} if n_clients == 1 else {}  # a round of one is published
    config = FTSConfig(**{"n_features": 50, "n_init": 3, **PAPER_ALGORITHM, **lone, **protocol})
    return Federation.create(
        f"fed-{next(_names)}", search_space=space, n_clients=n_clients, protocol=config, seed=3
    )


class TestFedThompsonRelativeConformance(RelativeSamplerTestCase):
    """The relative cases run the federated code path on the federation's own space (x, y)."""

    @pytest.fixture
    def sampler(self):
        def make():
            fed = _federation(XY, n_clients=1, n_init=2)
            return FedThompsonSampler(fed, "solo", n_candidates=64, seed=0)

        return make


class TestFedThompsonBasicConformance(BasicSamplerTestCase, SingleOnlySamplerTestCase):
    """Parameters the conformance suite suggests are outside the federation's space."""

    @pytest.fixture
    def sampler(self):
        def make():
            space = {"fed_u": FloatDistribution(0.0, 1.0)}
            fed = _federation(space, n_clients=1, n_init=2)
            return FedThompsonSampler(
                fed, "solo", n_candidates=64, warn_independent_sampling=False, seed=0
            )

        return make


def _objective(peak: tuple[float, float], scale: float = 1.0):
    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        y = trial.suggest_float("y", 0.0, 1.0)
        return scale * -((x - peak[0]) ** 2 + (y - peak[1]) ** 2)

    return objective


def _modes(study: optuna.Study) -> list[str]:
    return [t.system_attrs.get("fedbo:mode") for t in study.trials]


def test_initial_points_lie_in_the_assigned_sub_region() -> None:
    fed = _federation(n_clients=4, n_subregions=4, n_init=6)
    partition = fed.partition()
    for i in range(4):
        sampler = FedThompsonSampler(fed, f"c{i}", seed=i)
        assert sampler.participant.subregion == i
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.optimize(_objective((0.5, 0.5)), n_trials=6)
        points = fed.encoder.encode([t.params for t in study.trials])
        assert np.all(partition.box(i).contains(points))
        assert _modes(study) == ["init"] * 6


def test_initial_points_cover_the_domain_without_distributed_exploration() -> None:
    fed = _federation(n_clients=4, n_subregions=4, n_init=40, init_in_subregion=False)
    study = optuna.create_study(sampler=FedThompsonSampler(fed, "c1", seed=0))
    study.optimize(_objective((0.5, 0.5)), n_trials=40)
    regions = fed.partition().index_of(fed.encoder.encode([t.params for t in study.trials]))
    assert set(regions) == {0, 1, 2, 3}


def test_without_broadcast_the_participant_falls_back_to_local_ts() -> None:
    fed = _federation(n_clients=2)
    sampler = FedThompsonSampler(fed, "c0", schedule=lambda t: 0.0, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(_objective((0.2, 0.8)), n_trials=8)
    assert _modes(study) == ["init"] * 3 + ["fallback"] * 5
    assert fed.open_round() == 0 and sampler.last_upload_round == 0


def _omega_peaked_at(fed: Federation, peak: tuple[float, float]) -> np.ndarray:
    """A posterior-mean vector of a function peaked at ``peak`` (fitted on a grid)."""
    grid = np.array([[a, b] for a in np.linspace(0, 1, 15) for b in np.linspace(0, 1, 15)])
    values = -np.sum((grid - np.array(peak)) ** 2, axis=1)
    statistics = SufficientStatistics(fed.fts.n_features)
    statistics.add(fed.features()(grid), values)
    return statistics.posterior(1e-3).mean


def test_federated_steps_maximize_the_broadcast_function() -> None:
    fed = _federation(n_clients=2, min_contributors=1)  # the broadcast is c1's alone
    server = FederationServer(fed)
    sampler = FedThompsonSampler(fed, "c0", schedule=lambda t: 0.0, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    # c0's own objective peaks at (0.1, 0.1); the broadcast (from c1 only) peaks at (0.8, 0.3).
    study.optimize(_objective((0.1, 0.1)), n_trials=3)
    fed.store.discard_uploads(0)
    fed.store.open_uploads(0)
    fed.join("c1")
    fed.upload("c1", _omega_peaked_at(fed, (0.8, 0.3)), n_observations=225, iteration=0)
    assert server.step(force=True).contributors == ("c1",)
    study.optimize(_objective((0.1, 0.1)), n_trials=4)
    federated = [t for t in study.trials if t.system_attrs.get("fedbo:mode") == "federated"]
    assert len(federated) == 4
    for trial in federated:
        assert trial.system_attrs["fedbo:broadcast_round"] == 0
        assert abs(trial.params["x"] - 0.8) < 0.1 and abs(trial.params["y"] - 0.3) < 0.1


def test_local_steps_when_p_t_is_one() -> None:
    fed = _federation(n_clients=1)
    server = FederationServer(fed)
    study = optuna.create_study(
        sampler=FedThompsonSampler(fed, "c0", schedule=lambda t: 1.0, seed=0)
    )
    study.optimize(_objective((0.5, 0.5)), n_trials=3)
    server.step()
    study.optimize(_objective((0.5, 0.5)), n_trials=5)
    assert _modes(study)[3:] == ["local"] * 5


def test_uploads_are_oriented_and_standardized() -> None:
    """A minimized study uploads the same vector as the maximized, rescaled mirror study."""
    omegas = []
    for direction, sign, scale in (("maximize", 1.0, 1.0), ("minimize", -1.0, 250.0)):
        fed = _federation(n_clients=1, n_init=12)
        study = optuna.create_study(
            direction=direction, sampler=FedThompsonSampler(fed, "c0", seed=5)
        )

        def objective(t: optuna.Trial, sign: float = sign, scale: float = scale) -> float:
            return sign * scale * _objective((0.7, 0.2))(t) + 17.0 * sign

        study.optimize(objective, n_trials=12)
        raw = fed.read_upload(0, "c0")
        from optuna_fedbo.federation.fts.messages import parse_upload

        upload = parse_upload(
            raw, client_id="c0", round_index=0, config_hash=fed.config_hash, length=50
        )
        assert upload.n_observations == 12 and upload.iteration == 0
        omegas.append(upload.omega)
    np.testing.assert_allclose(omegas[0], omegas[1], rtol=1e-6, atol=1e-8)
    # The uploaded function peaks near the best point of the (oriented) objective.
    fed = _federation(n_clients=1)
    grid = np.array([[a, b] for a in np.linspace(0, 1, 21) for b in np.linspace(0, 1, 21)])
    best = grid[np.argmax(fed.features()(grid) @ omegas[0])]
    assert np.linalg.norm(best - np.array([0.7, 0.2])) < 0.35


def test_the_upload_posterior_is_reused_only_for_the_same_observations() -> None:
    """A trial reuses the posterior the last upload computed, never a stale one."""
    fed = _federation(n_clients=1, n_init=2)
    server = FederationServer(fed)
    sampler = FedThompsonSampler(fed, "c0", seed=0)
    calls = []
    posterior = sampler._posterior

    def spy(study: optuna.Study):
        used = posterior(study)
        statistics = sampler._observations.statistics[0]
        expected = statistics.posterior(
            sampler._fts.noise_variance, standardize=sampler._normalization()
        )
        np.testing.assert_allclose(used.mean, expected.mean, rtol=1e-10, atol=1e-12)
        calls.append(used is sampler._uploads._posterior[1])
        return used

    sampler._posterior = spy
    objective = _objective((0.3, 0.6))
    study = optuna.create_study(sampler=sampler)
    for _ in range(6):
        study.optimize(objective, n_trials=1)
        server.step(force=True)
    assert calls == [True] * 4
    # A trial added without the sampler (so without an upload): computed afresh.
    study.add_trial(
        optuna.trial.create_trial(params={"x": 0.1, "y": 0.9}, distributions=UNIT, value=-3.0)
    )
    study.optimize(objective, n_trials=1)
    assert calls[4:] == [False]
    # Another study with the same trials: same count, numbers and normalization, not reused.
    other = optuna.create_study(sampler=sampler)
    for trial in study.trials:
        other.add_trial(trial)
    other.optimize(objective, n_trials=1)
    assert calls[5:] == [False]


def test_failed_uploads_never_reach_study_optimize(monkeypatch, propagate, caplog) -> None:
    fed = _federation(n_clients=1)
    sampler = FedThompsonSampler(fed, "c0", seed=0)

    def broken(*args, **kwargs):
        raise ConnectionError("storage unreachable")

    monkeypatch.setattr(fed, "upload", broken)
    study = optuna.create_study(sampler=sampler)
    with caplog.at_level(logging.WARNING):
        study.optimize(_objective((0.5, 0.5)), n_trials=5)
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    assert sum("upload after trial" in r.getMessage() for r in caplog.records) == 5


def test_failed_pruned_and_nan_trials_are_not_modelled_but_still_upload() -> None:
    fed = _federation(n_clients=1, n_init=2)
    study = optuna.create_study(sampler=FedThompsonSampler(fed, "c0", seed=0))

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0, 1)
        trial.suggest_float("y", 0, 1)
        if trial.number == 2:
            raise optuna.TrialPruned()
        if trial.number == 3:
            return float("nan")
        return x

    study.optimize(objective, n_trials=6, catch=(ValueError,))
    raw = fed.read_upload(0, "c0")
    from optuna_fedbo.federation.fts.messages import parse_upload

    upload = parse_upload(
        raw, client_id="c0", round_index=0, config_hash=fed.config_hash, length=50
    )
    assert upload.n_observations == 4


def test_sample_aggregation_never_uses_the_own_vector() -> None:
    fed = _federation(n_clients=2, aggregation="sample", n_init=3)
    server = FederationServer(fed)
    sampler = FedThompsonSampler(fed, "c0", schedule=lambda t: 0.0, seed=1)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(_objective((0.1, 0.9)), n_trials=3)  # c0 uploads its own vector
    fed.join("c1")
    fed.upload("c1", _omega_peaked_at(fed, (0.9, 0.1)), n_observations=225, iteration=0)
    assert server.step().n_contributors == 2
    study.optimize(_objective((0.1, 0.9)), n_trials=3)
    for trial in study.trials[3:]:
        assert trial.system_attrs["fedbo:mode"] == "federated"
        assert trial.params["x"] > 0.75 and trial.params["y"] < 0.25


def test_a_custom_local_sampler_takes_the_local_steps() -> None:
    fed = _federation(n_clients=1, n_init=2)
    local = optuna.samplers.TPESampler(seed=0, n_startup_trials=2)
    sampler = FedThompsonSampler(fed, "c0", schedule=lambda t: 1.0, local_sampler=local, seed=0)
    proposed = []
    original = local.sample_relative

    def recording(*args, **kwargs):
        params = original(*args, **kwargs)
        proposed.append(params)
        return params

    local.sample_relative = recording  # type: ignore[method-assign]
    study = optuna.create_study(sampler=sampler)
    study.optimize(_objective((0.5, 0.5)), n_trials=6)
    assert _modes(study)[2:] == ["local"] * 4
    assert len(proposed) == 4
    assert [t.params for t in study.trials[2:]] == proposed


def test_parameters_outside_the_federation_space_are_sampled_independently() -> None:
    fed = _federation(n_clients=1, n_init=1)
    study = optuna.create_study(
        sampler=FedThompsonSampler(fed, "c0", warn_independent_sampling=False, seed=0)
    )

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0, 1)
        y = trial.suggest_float("y", 0, 1)
        extra = trial.suggest_int("extra", 1, 3)
        return x + y + extra

    study.optimize(objective, n_trials=5)
    assert all(1 <= t.params["extra"] <= 3 for t in study.trials)


def test_n_jobs_2_with_one_shared_sampler_is_safe() -> None:
    fed = _federation(n_clients=1, n_init=4)
    server = FederationServer(fed)
    stop = threading.Event()
    thread = threading.Thread(target=server.serve, kwargs={"poll_interval": 0.01, "stop": stop})
    thread.start()
    evaluate = _objective((0.3, 0.6))

    def objective(trial: optuna.Trial) -> float:
        # Each trial first publishes what earlier trials uploaded (the serving thread may have
        # done it already), so rounds advance with the trials, not with how many 10 ms polls
        # fit into the run (30 trials take ~0.1 s: a machine twice as fast saw ~4 rounds).
        server.step()
        return evaluate(trial)

    try:
        # p_t = 0: every trial after the initial design is federated once a broadcast exists,
        # so the assertion on modes does not depend on how the two threads interleave.
        sampler = FedThompsonSampler(fed, "c0", schedule=lambda t: 0.0, seed=0)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.optimize(objective, n_trials=30, n_jobs=2)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert len(study.trials) == 30
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    assert fed.open_round() >= 5
    assert {"init", "federated"} <= set(_modes(study))
    # No trial was lost or modelled twice by the shared sampler; its incumbent is the study's.
    sampler._observations.update(study)
    assert sampler._observations.count == 30
    assert sampler._observations.best_value == study.best_value
    # Each federated point maximizes the broadcast its own trial recorded (no state crossed
    # between the threads). Not the best value: with n_jobs > 1 Optuna reseeds the sampler from
    # the OS and the interleaving decides which broadcast a trial sees, so that is not
    # reproducible (best > -0.05 failed in 4 of 550 runs, 0-2% per batch with the machine's load).
    # A point off its broadcast's maximizer has a gap of order 0.5 (median 0.25 when the points
    # are random); an optimizer miss above 0.05 occurred about once in 1,000 maximizations.
    gaps = _gaps_to_broadcast_maximum(fed, study)
    assert len(gaps) >= 10 and float(np.median(gaps)) < 0.05, gaps


def _gaps_to_broadcast_maximum(fed: Federation, study: optuna.Study) -> list[float]:
    """Per federated trial: ``(max f - f(x)) / (max f - min f)``, f = its broadcast, on a grid."""
    vectors = {}
    for trial in fed.store.broadcast_trials():
        if trial.state != TrialState.COMPLETE:
            continue
        round_index, payload = fed.store.read_broadcast(trial._trial_id)
        vectors[round_index] = parse_broadcast(payload).vectors[0]  # one sub-region
    features = fed.features()
    axis = np.linspace(0.0, 1.0, 101)
    grid = features(fed.encoder.encode([{"x": a, "y": b} for a in axis for b in axis]))
    gaps = []
    for trial in study.trials:
        if trial.system_attrs.get("fedbo:mode") != "federated":
            continue
        omega = vectors[trial.system_attrs["fedbo:broadcast_round"]]
        values = grid @ omega
        value = float((features(fed.encoder.encode([trial.params])) @ omega)[0])
        gaps.append(float((values.max() - value) / (values.max() - values.min())))
    return gaps


def test_synchronous_participants_move_in_lock_step() -> None:
    fed = _federation(n_clients=3, n_init=2, n_subregions=2)
    server = FederationServer(fed)
    stop = threading.Event()
    reports = []
    server_thread = threading.Thread(
        target=server.serve,
        kwargs={
            "poll_interval": 0.005,
            "stop": stop,
            "callback": reports.append,
            "max_rounds": 7,
            "timeout": 120,
        },
    )
    server_thread.start()
    studies = []

    def participant(i: int) -> None:
        sampler = FedThompsonSampler(
            fed, f"c{i}", synchronous=True, sync_timeout=60, poll_interval=0.005, seed=i
        )
        study = optuna.create_study(direction="maximize", sampler=sampler)
        studies.append(study)
        study.optimize(_objective((0.4, 0.4)), n_trials=8)

    threads = [threading.Thread(target=participant, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    server_thread.join(timeout=120)
    stop.set()
    # Round 0 holds the initial design (2 trials), then one round per BO iteration.
    assert [r.round for r in reports] == list(range(7))
    assert all(r.n_contributors == 3 and r.reason == "complete" for r in reports)
    for study in studies:
        used = [t.system_attrs.get("fedbo:broadcast_round") for t in study.trials[2:]]
        modes = [t.system_attrs["fedbo:mode"] for t in study.trials[2:]]
        for k, (mode, round_used) in enumerate(zip(modes, used)):
            if mode == "federated":
                assert round_used == k  # the broadcast of the previous round, never older


def test_simulate_runs_lock_step_rounds_and_returns_a_tidy_table() -> None:
    objectives = [_objective((0.3 + 0.01 * i, 0.7)) for i in range(4)]
    result = simulate(
        objectives,
        search_space=UNIT,
        n_rounds=5,
        protocol=FTSConfig(n_features=50, n_init=3, n_subregions=2, **PAPER_ALGORITHM),
        progress=False,
        seed=1,
    )
    assert len(result.studies) == 4 and len(result.reports) == 5  # the last round is not closed
    assert all(r.n_contributors == 4 and r.reason == "complete" for r in result.reports)
    table = result.table()
    assert len(table) == 4 * 8
    assert {row["round"] for row in table} == set(range(6))
    assert collections.Counter(row["mode"] for row in table)["init"] == 12
    assert all(row["mode"] in ("init", "local", "federated") for row in table)
    best = result.best_values()
    assert best.shape == (4, 6) and np.all(np.diff(best, axis=1) >= 0)
    again = simulate(
        objectives,
        search_space=UNIT,
        n_rounds=5,
        protocol=FTSConfig(n_features=50, n_init=3, n_subregions=2, **PAPER_ALGORITHM),
        progress=False,
        seed=1,
        as_table=True,
    )
    assert [row["value"] for row in again] == [row["value"] for row in table]


def test_sampler_rejects_bad_arguments() -> None:
    fed = _federation(n_clients=1)
    with pytest.raises(ValueError):
        FedThompsonSampler(fed, "c0", schedule="nope")
    with pytest.raises(ValueError):
        FedThompsonSampler("not a federation", "c0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="full"):
        FedThompsonSampler(fed, "c0")
        FedThompsonSampler(fed, "c1")
    study = optuna.create_study(
        directions=["minimize", "minimize"], sampler=FedThompsonSampler(fed, "c0")
    )
    with pytest.raises(ValueError, match="single-objective"):
        study.optimize(lambda t: (t.suggest_float("x", 0, 1), 0.0), n_trials=1)


def test_optunahub_package_loads_and_runs_a_federation() -> None:
    from pathlib import Path

    import optunahub

    module = optunahub.load_local_module(
        package="samplers/fed_thompson", registry_root=str(Path(__file__).resolve().parents[1])
    )
    fed = module.Federation.create(
        f"hub-{next(_names)}",
        search_space=UNIT,
        n_clients=2,
        protocol=module.FTSConfig(n_subregions=2, n_init=2, n_features=30),
    )
    server = module.FederationServer(fed)
    studies = [
        optuna.create_study(sampler=module.FedThompsonSampler(fed, f"s{i}", seed=i))
        for i in range(2)
    ]
    for round_index in range(4):
        for study in studies:
            study.optimize(_objective((0.5, 0.5)), n_trials=2 if round_index == 0 else 1)
        assert server.step() is not None
    assert fed.open_round() == 4
    assert all(len(s.trials) == 5 for s in studies)
