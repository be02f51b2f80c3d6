"""FedPNESampler in real ``study.optimize`` loops: the paper's invariants, bad input, restarts."""

from __future__ import annotations

import itertools
import json
import logging
import math
import time

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution
from optuna.testing.pytest_samplers import BasicSamplerTestCase
from optuna.testing.pytest_samplers import SingleOnlySamplerTestCase
from optuna.trial import TrialState
import pytest

from optuna_fedbo.core.fedpne import FedPNEParams
from optuna_fedbo.core.fedpne import Node
from optuna_fedbo.core.fedpne import Partition
from optuna_fedbo.core.fedpne import simulate_fedpne as core_simulate
from optuna_fedbo.core.fedpne.synthetic import make_federated_problem
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import simulate
from optuna_fedbo.federation import simulate_fedpne
from optuna_fedbo.federation.fedpne.channel import FedPNEChannel
from optuna_fedbo.samplers._fed_pne import FedPNEPhaseTimeout
from optuna_fedbo.samplers._fed_pne import FedPNESampler
from optuna_fedbo.samplers._fed_pne import REWARD_ATTR

optuna.logging.set_verbosity(optuna.logging.WARNING)

UNIT = {"x": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _garland_objectives(n_clients: int, *, noise: float = 0.0, seed: int = 0):
    problem = make_federated_problem("garland", n_clients, seed=seed, noise=noise)

    def make(m: int):
        def objective(trial: optuna.Trial) -> float:
            x = trial.suggest_float("x", 0.0, 1.0)
            return float(problem.to_reward(problem.client_value(m, np.array([[x]])))[0])

        return objective

    return problem, [make(m) for m in range(n_clients)]


def _federation(n_clients: int, space=UNIT, **protocol) -> Federation:
    config = FedPNEConfig(**{"horizon": 60, "variant": "paper", **protocol})
    return Federation.create(
        f"pne-{next(_names)}", search_space=space, n_clients=n_clients, protocol=config, seed=1
    )


def _x_objective(shift: float = 0.0):
    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        return 1.0 - (x - 0.3 - shift) ** 2

    return objective


# --------------------------------------------------------------------------- equivalence
def test_lock_step_optuna_run_reproduces_the_core_simulator_exactly() -> None:
    n_clients, horizon = 5, 300
    problem, objectives = _garland_objectives(n_clients)
    result = simulate_fedpne(
        objectives,
        search_space=UNIT,
        protocol=FedPNEConfig(horizon=horizon, variant="paper"),
        seed=0,
    )
    core = core_simulate(
        [lambda x, m=m: problem.to_reward(problem.client_value(m, x)) for m in range(n_clients)],
        horizon,
        rng=np.random.default_rng(0),
        partition=Partition(1, seed=0),
    )
    table = result.table()
    points = np.array(
        [[row["params_x"] for row in table if row["participant"] == m] for m in range(n_clients)]
    )
    np.testing.assert_array_equal(points, core.points[:, :, 0])
    assert result.communication() == {
        k: v for k, v in core.state.communication().items() if k in result.communication()
    }
    assert [r.phase_report.best for r in result.reports] == [r.best for r in core.state.history]
    sampler = result.studies[0].sampler
    assert sampler.recommended_params() == {"x": float(core.state.recommended_point()[0])}


# ---------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("n_clients,horizon,seed", [(4, 400, 0), (7, 250, 3)])
def test_paper_invariants_hold_in_optuna_runs(n_clients: int, horizon: int, seed: int) -> None:
    _, objectives = _garland_objectives(n_clients, seed=seed)
    config = FedPNEConfig(horizon=horizon, variant="paper")
    result = simulate_fedpne(objectives, search_space=UNIT, protocol=config, seed=seed)
    params = FedPNEParams(horizon=horizon, n_clients=n_clients)
    log_term = math.log(1.0 * horizon * n_clients)  # log(c1 T / delta), delta = 1/M
    table = result.table()
    eliminated: list[tuple[int, Node]] = []
    for report in result.reports:
        phase = report.phase_report.phase
        h = phase.depth
        # tau_h and t follow Eqn. (3) and Algorithm 2 line 8; b follows Eqn. (1).
        assert phase.tau == math.ceil(0.1**2 * log_term * 0.5 ** (-2 * h) / 1.0**2)
        assert phase.tau == params.tau(h)
        assert phase.pulls_per_node == math.ceil(phase.tau / n_clients)
        assert report.phase_report.total_pulls == n_clients * phase.pulls_per_node
        assert report.phase_report.width == pytest.approx(
            0.1 * math.sqrt(log_term / (n_clients * phase.pulls_per_node)), rel=1e-12
        )
        # Expansion stopped as soon as |K^p| tau_h > M and tau_h > 1 (lines 5-7).
        assert len(phase.nodes) * phase.tau > n_clients and phase.tau > 1
        # Every participant pulled every active node exactly t times in the phase.
        for m in range(n_clients):
            pulled = [
                row["node"]
                for row in table
                if row["participant"] == m and row["phase"] == phase.index
            ]
            counts = {key: pulled.count(key) for key in set(pulled)}
            assert counts == {node.key: phase.pulls_per_node for node in phase.nodes}
        eliminated += [(phase.index, node) for node in report.phase_report.eliminated]
    assert eliminated, "the run should eliminate something"
    # An eliminated node (and its subtree) is never pulled again.
    partition = result.studies[0].sampler.channel.partition
    for row in table:
        node = Node.from_key(row["node"])
        for phase_index, gone in eliminated:
            if row["phase"] > phase_index:
                assert node != gone and not gone.is_ancestor_of(node, partition.branching)
    # Every participant made exactly T pulls.
    for study in result.studies:
        assert len(study.trials) == horizon
        assert all(t.system_attrs["fedbo:mode"] == "pull" for t in study.trials)


def test_garland_federation_beats_random_search_through_optuna() -> None:
    n_clients, horizon = 10, 150  # regret 0.17x random on seeds 0-3 (0.09x at 300)
    problem, objectives = _garland_objectives(n_clients, noise=0.1, seed=2)
    result = simulate_fedpne(
        objectives, search_space=UNIT, protocol=FedPNEConfig(horizon=horizon), seed=2
    )
    x = np.array([[row["params_x"] for row in result.table()]]).reshape(-1, 1)
    regret = problem.f_star - problem.global_value(x)
    random_regret = problem.f_star - problem.global_value(
        np.random.default_rng(2).random((x.shape[0], 1))
    )
    assert regret.mean() < 0.5 * random_regret.mean()
    best = result.studies[0].sampler.recommended_params()["x"]
    assert problem.f_star - problem.global_value(np.array([[best]]))[0] < 0.05


# ---------------------------------------------------------------------- rewards, horizon
def test_rewards_follow_direction_and_value_range_and_clipping_is_counted(propagate, caplog):
    fed = _federation(1, horizon=12, value_range=(-2.0, 2.0))
    sampler = FedPNESampler(fed, "solo", phase_timeout=0.0, seed=0)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    values = iter([-2.0, 2.0, 0.0, 5.0, -7.0, 1.0] * 10)

    def objective(trial: optuna.Trial) -> float:
        trial.suggest_float("x", 0.0, 1.0)
        return next(values)

    with caplog.at_level(logging.WARNING, logger="optuna_fedbo"):
        study.optimize(objective, n_trials=6)
    rewards = [t.system_attrs["fedpne:reward"] for t in study.trials]
    # minimize: reward = (hi - v) / (hi - lo), clipped into [0, 1].
    assert rewards == [1.0, 0.0, 0.5, 0.0, 1.0, 0.25]
    clipped = [t.system_attrs.get("fedpne:clipped", False) for t in study.trials]
    assert clipped == [False, False, False, True, True, False]
    assert sampler.n_clipped == 2
    # One warning (the first clipped value), not one per clipped trial.
    assert sum("is clipped" in r.getMessage() for r in caplog.records) == 1


def test_after_the_horizon_the_best_node_is_evaluated() -> None:
    _, objectives = _garland_objectives(3)
    result = simulate_fedpne(
        objectives,
        search_space=UNIT,
        protocol=FedPNEConfig(horizon=40),
        seed=0,
        extra_trials=5,
    )
    for study in result.studies:
        trials = study.trials
        assert len(trials) == 45
        assert [t.system_attrs["fedbo:mode"] for t in trials[40:]] == ["exploit"] * 5
        best = study.sampler.recommended_params()
        assert all(t.params == best for t in trials[40:])
        assert "fedpne:phase" not in trials[-1].system_attrs


def test_failed_and_nan_trials_are_not_pulls_and_are_repeated() -> None:
    fed = _federation(1, horizon=30)
    sampler = FedPNESampler(fed, "solo", phase_timeout=0.0, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    calls = itertools.count()

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        k = next(calls)
        if k % 4 == 1:
            raise RuntimeError("broken evaluation")
        if k % 4 == 2:
            return float("nan")
        return x

    study.optimize(objective, n_trials=20, catch=(RuntimeError,))
    pulls = [t for t in study.trials if t.state == TrialState.COMPLETE]
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert len(pulls) == 10 and len(failed) == 10
    phase = FedPNEChannel(fed).initial_phase
    schedule = phase.schedule()
    # Completed pulls follow the schedule slot by slot; a failed slot is pulled again.
    assert [t.system_attrs["fedpne:slot"] for t in pulls] == list(range(10))[: len(pulls)]
    assert [t.system_attrs["fedpne:node"] for t in pulls] == [
        node.key for node in schedule[: len(pulls)]
    ]
    for bad in failed:
        good = next(t for t in pulls if t.number > bad.number)
        assert good.system_attrs["fedpne:slot"] == bad.system_attrs["fedpne:slot"]


def test_uniform_representatives_lie_in_their_nodes_and_exploit_uses_the_centre() -> None:
    _, objectives = _garland_objectives(3)
    config = FedPNEConfig(horizon=60, representative="uniform", split="longest")
    result = simulate_fedpne(
        objectives, search_space=UNIT, protocol=config, seed=0, extra_trials=2
    )
    sampler = result.studies[0].sampler
    partition = sampler.channel.partition
    rows = [r for r in result.table() if r["mode"] == "pull"]
    xs = [r["params_x"] for r in rows]
    assert len(rows) == 180 and len(set(xs)) == len(xs)  # a fresh point per pull
    for row in rows:
        lower, upper = partition.bounds(Node.from_key(row["node"]))
        assert lower[0] <= row["params_x"] <= upper[0]
    best = partition.centre(sampler.channel.view().best)[0]
    assert [t.params["x"] for t in result.studies[1].trials[-2:]] == [best, best]


# --------------------------------------------------------------------------- bad input
def test_a_different_distribution_for_a_federation_parameter_is_a_clear_error() -> None:
    fed = _federation(1)
    study = optuna.create_study(sampler=FedPNESampler(fed, "solo", seed=0))
    with pytest.raises(ValueError, match="defines it as"):
        study.optimize(lambda t: t.suggest_float("x", 0.0, 2.0), n_trials=1)
    # Nothing was counted as a pull.
    assert "fedpne:slot" not in study.trials[0].system_attrs


def test_parameters_outside_the_space_are_sampled_independently(propagate, caplog) -> None:
    fed = _federation(1, horizon=10)
    study = optuna.create_study(sampler=FedPNESampler(fed, "solo", phase_timeout=0.0, seed=0))

    def objective(trial: optuna.Trial) -> float:
        return trial.suggest_float("x", 0.0, 1.0) + 0.01 * trial.suggest_int("extra", 0, 3)

    with caplog.at_level(logging.WARNING):
        study.optimize(objective, n_trials=3)
    assert all(0 <= t.params["extra"] <= 3 for t in study.trials)
    assert any("extra" in r.getMessage() for r in caplog.records)
    assert [t.system_attrs["fedbo:mode"] for t in study.trials] == ["pull"] * 3


def test_mixed_space_with_categoricals_split_as_category_sets() -> None:
    space = {
        "kernel": CategoricalDistribution(["linear", "poly", "rbf"]),
        "c": FloatDistribution(1e-3, 1e3, log=True),
        "depth": IntDistribution(1, 8),
        "fixed": FloatDistribution(2.0, 2.0),
    }
    bonus = {"linear": 0.0, "poly": 0.2, "rbf": 0.5}

    def objective(trial: optuna.Trial) -> float:
        kernel = trial.suggest_categorical("kernel", ["linear", "poly", "rbf"])
        c = trial.suggest_float("c", 1e-3, 1e3, log=True)
        depth = trial.suggest_int("depth", 1, 8)
        fixed = trial.suggest_float("fixed", 2.0, 2.0)
        assert fixed == 2.0
        return bonus[kernel] + 0.3 * (1.0 - abs(math.log10(c)) / 3.0) + 0.02 * depth

    config = FedPNEConfig(horizon=200, value_range=(0.0, 1.0))
    result = simulate_fedpne([objective] * 3, search_space=space, protocol=config, seed=4)
    kernels = {row["params_kernel"] for row in result.table()}
    assert kernels == {"linear", "poly", "rbf"}
    best = result.studies[0].sampler.recommended_params()
    assert best["kernel"] == "rbf" and best["fixed"] == 2.0
    assert result.studies[0].sampler.channel.space.dim == 3  # the constant is not partitioned


def test_enqueued_trials_are_not_pulls() -> None:
    fed = _federation(1, horizon=10)
    study = optuna.create_study(sampler=FedPNESampler(fed, "solo", phase_timeout=0.0, seed=0))
    study.enqueue_trial({"x": 0.123})
    study.optimize(_x_objective(), n_trials=3)
    first = study.trials[0]
    assert first.params == {"x": 0.123}
    assert "fedpne:slot" not in first.system_attrs
    assert [t.system_attrs["fedpne:slot"] for t in study.trials[1:]] == [0, 1]


def test_multi_objective_studies_are_refused() -> None:
    fed = _federation(1)
    study = optuna.create_study(
        directions=["maximize", "minimize"], sampler=FedPNESampler(fed, "solo", seed=0)
    )
    with pytest.raises(ValueError, match="single-objective"):
        study.optimize(lambda t: (t.suggest_float("x", 0, 1), 0.0), n_trials=1)


def test_sampler_arguments_are_checked() -> None:
    fed = _federation(2)
    with pytest.raises(ValueError, match="on_timeout"):
        FedPNESampler(fed, "a", on_timeout="ignore")
    with pytest.raises(ValueError, match="phase_timeout"):
        FedPNESampler(fed, "a", phase_timeout=-1.0)
    fts = Federation.create(f"fts-{next(_names)}", search_space=UNIT, n_clients=2)
    with pytest.raises(ValueError, match="not Fed-PNE"):
        FedPNESampler(fts, "a")


# -------------------------------------------------------------------- waiting, timeouts
def test_waiting_for_a_missing_participant_times_out_with_its_name() -> None:
    fed = _federation(2, horizon=40)
    sampler = FedPNESampler(fed, "site-a", phase_timeout=0.2, poll_interval=0.02, seed=0)
    fed.join("site-b")
    study = optuna.create_study(sampler=sampler)
    budget = FedPNEChannel(fed).initial_phase.budget
    study.optimize(_x_objective(), n_trials=budget)
    with pytest.raises(FedPNEPhaseTimeout, match="site-b") as info:
        study.optimize(_x_objective(), n_trials=1)
    assert "never seen" in str(info.value) and "resume" in str(info.value)
    assert FedPNEChannel(fed).status().missing == ("site-b",)


def test_on_timeout_best_keeps_evaluating_the_best_node(propagate, caplog) -> None:
    fed = _federation(2, horizon=40)
    sampler = FedPNESampler(
        fed, "site-a", phase_timeout=0.0, on_timeout="best", poll_interval=0.02, seed=0
    )
    study = optuna.create_study(sampler=sampler)
    budget = FedPNEChannel(fed).initial_phase.budget
    with caplog.at_level(logging.WARNING):
        study.optimize(_x_objective(), n_trials=budget + 2)
    modes = [t.system_attrs["fedbo:mode"] for t in study.trials]
    assert modes == ["pull"] * budget + ["timeout"] * 2
    assert study.trials[-1].params == sampler.recommended_params() == {"x": 0.5}
    assert any("not published within" in r.getMessage() for r in caplog.records)


def test_a_participant_waits_and_proceeds_when_the_phase_is_published() -> None:
    import threading

    fed = _federation(2, horizon=40)
    server = FederationServer(fed)
    a = optuna.create_study(sampler=FedPNESampler(fed, "a", phase_timeout=30, poll_interval=0.01))
    b = optuna.create_study(sampler=FedPNESampler(fed, "b", phase_timeout=30, poll_interval=0.01))
    budget = FedPNEChannel(fed).initial_phase.budget
    a.optimize(_x_objective(), n_trials=budget)
    waiting = threading.Thread(target=a.optimize, args=(_x_objective(), 1))
    waiting.start()  # a waits for phase 2
    b.optimize(_x_objective(0.1), n_trials=budget)
    assert server.step() is not None
    waiting.join(timeout=30)
    assert not waiting.is_alive()
    assert a.trials[-1].system_attrs["fedpne:phase"] == 2


def test_a_phase_published_just_before_the_wait_ends_is_pulled(monkeypatch) -> None:
    """The server publishes its last phase and at once says it stopped: a participant that
    learns why its wait ends after the phase was published pulls that phase (a race seen under
    load, where the participant gave up on a phase that had arrived)."""
    from optuna_fedbo.samplers import _waiting

    fed = _federation(2, horizon=40)
    server = FederationServer(fed)
    budget = FedPNEChannel(fed).initial_phase.budget
    for client_id in ("a", "b"):
        sampler = FedPNESampler(fed, client_id, phase_timeout=0.0, on_timeout="best", seed=0)
        study = optuna.create_study(sampler=sampler)
        study.optimize(_x_objective(), n_trials=budget)
    over = _waiting.Wait.over

    def published_then_over(wait: _waiting.Wait) -> bool:
        server.step()  # the phase arrives between the participant's look and its wait's end
        return over(wait)

    monkeypatch.setattr(_waiting.Wait, "over", published_then_over)
    study.optimize(_x_objective(), n_trials=1)
    assert study.trials[-1].system_attrs["fedbo:mode"] == "pull"
    assert study.trials[-1].system_attrs["fedpne:phase"] == 2


# ----------------------------------------------------------------------------- restarts
def test_participant_restart_mid_phase_resumes_and_never_uploads_twice(monkeypatch) -> None:
    fed = _federation(2, horizon=40, dp_epsilon=2.0, dp_delta=1e-5)
    storage = optuna.storages.InMemoryStorage()
    phase = FedPNEChannel(fed).initial_phase
    assert phase.budget >= 4
    study = optuna.create_study(
        study_name="site-a", storage=storage, sampler=FedPNESampler(fed, "site-a", seed=0)
    )
    study.optimize(_x_objective(), n_trials=2)
    # "Restart": a new sampler object on the same study storage.
    resumed = optuna.load_study(
        study_name="site-a",
        storage=storage,
        sampler=FedPNESampler(fed, "site-a", phase_timeout=0.0, seed=0),
    )
    resumed.optimize(_x_objective(), n_trials=phase.budget - 2)
    slots = [t.system_attrs["fedpne:slot"] for t in resumed.trials]
    assert slots == list(range(phase.budget))
    raw = fed.store.read_uploads(0)["site-a"]
    record = json.loads(fed.read_upload(0, "site-a"))
    assert set(record["means"]) == {n.key for n in phase.nodes}
    # A second restart after the upload: nothing is re-sent (DP noise would differ).
    again = optuna.load_study(
        study_name="site-a",
        storage=storage,
        sampler=FedPNESampler(fed, "site-a", phase_timeout=0.0, seed=0),
    )
    with pytest.raises(FedPNEPhaseTimeout):
        again.optimize(_x_objective(), n_trials=1)
    assert fed.store.read_uploads(0)["site-a"] == raw


def test_failed_upload_is_retried_at_the_next_trial(monkeypatch, propagate, caplog) -> None:
    fed = _federation(1, horizon=40)
    sampler = FedPNESampler(fed, "solo", phase_timeout=0.0, seed=0)
    study = optuna.create_study(sampler=sampler)
    budget = sampler.channel.initial_phase.budget
    original = sampler.channel.upload
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("storage unavailable")
        return original(*args, **kwargs)

    monkeypatch.setattr(sampler.channel, "upload", flaky)
    with caplog.at_level(logging.WARNING):
        study.optimize(_x_objective(), n_trials=budget)  # never raises into optimize
    assert any("handling the pull" in r.getMessage() for r in caplog.records)
    assert "solo" not in fed.store.read_uploads(0)
    with pytest.raises(FedPNEPhaseTimeout):
        study.optimize(_x_objective(), n_trials=1)  # retries the upload, then waits
    assert "solo" in fed.store.read_uploads(0) and len(calls) == 2


# -------------------------------------------------------------------------- DP-Fed-PNE
def test_dp_noise_comes_from_secure_rng_with_the_papers_sigma(monkeypatch) -> None:
    import optuna_fedbo.core.fedpne.privacy as privacy_module

    draws = []

    def fake_secure_rng():
        draws.append(1)
        return np.random.default_rng(123)

    monkeypatch.setattr(privacy_module, "secure_rng", fake_secure_rng)
    fed = _federation(2, horizon=40, dp_epsilon=1.0, dp_delta=1e-5)
    sampler = FedPNESampler(fed, "a", phase_timeout=0.0, seed=0)
    study = optuna.create_study(sampler=sampler)
    phase = sampler.channel.initial_phase
    study.optimize(_x_objective(), n_trials=phase.budget)
    assert draws == [1]
    rewards = np.array([t.system_attrs["fedpne:reward"] for t in study.trials])
    sigma = math.sqrt(2.0 * math.log(1.25 / 1e-5)) / 1.0
    noisy = rewards + np.random.default_rng(123).normal(0.0, sigma, size=rewards.shape)
    uploaded = json.loads(fed.read_upload(0, "a"))["means"]
    schedule = phase.schedule()
    for node in phase.nodes:
        expected = np.mean([noisy[k] for k in range(phase.budget) if schedule[k] == node])
        assert uploaded[node.key] == pytest.approx(expected, abs=1e-12)
    guarantee = sampler.privacy_guarantee
    assert guarantee is not None and guarantee.sigma == pytest.approx(sigma)
    assert "(1, 1e-05, 2)-federated" in guarantee.description
    assert fed.privacy_spent() == (pytest.approx(guarantee.tight_epsilon), 1e-5)
    assert guarantee.tight_epsilon <= 1.0


def test_dp_fedpne_runs_end_to_end_and_widens_the_confidence() -> None:
    _, objectives = _garland_objectives(4)
    config = FedPNEConfig(horizon=150, dp_epsilon=4.0, dp_delta=1e-5)
    result = simulate_fedpne(objectives, search_space=UNIT, protocol=config, seed=0)
    sigma = math.sqrt(2.0 * math.log(1.25 / 1e-5)) / 4.0
    report = result.reports[0].phase_report
    log_term = math.log(150 * 4)
    expected_c = 0.1 * math.sqrt(1.0 + 4.0 * sigma**2)
    assert report.width == pytest.approx(expected_c * math.sqrt(log_term / report.total_pulls))
    assert all(len(s.trials) == 150 for s in result.studies)


# ------------------------------------------------------------------------ concurrency
def _pulled_slots(study: optuna.Study, phase_index: int) -> list[int]:
    """The pull slots of a phase that the study's trials took, sorted (repeats kept)."""
    return sorted(
        t.system_attrs["fedpne:slot"]
        for t in study.trials
        if t.system_attrs.get("fedpne:phase") == phase_index
    )


def test_threads_of_one_participant_share_the_phase_without_double_pulls() -> None:
    fed = _federation(1, horizon=60)
    server = FederationServer(fed)
    sampler = FedPNESampler(fed, "solo", phase_timeout=20.0, poll_interval=0.01, seed=0)
    study = optuna.create_study(sampler=sampler)
    for _ in range(3):
        phase = server.phase
        study.optimize(_x_objective(), n_trials=phase.budget, n_jobs=2)
        assert _pulled_slots(study, phase.index) == list(range(phase.budget))
        if phase.final:
            break
        assert server.step() is not None


def test_a_slow_storage_write_after_a_pull_does_not_free_its_slot_early() -> None:
    """Regression: the slot was freed before it was recorded as done, then pulled again."""
    fed = _federation(1, horizon=60)
    server = FederationServer(fed)
    sampler = FedPNESampler(fed, "solo", phase_timeout=20.0, poll_interval=0.01, seed=0)
    study = optuna.create_study(sampler=sampler)
    write = study._storage.set_trial_system_attr

    def slow_write(trial_id, key, value):  # noqa: ANN001, ANN202
        write(trial_id, key, value)
        if key == REWARD_ATTR:
            time.sleep(0.02)  # widens the gap between the trial's end and its done record

    study._storage.set_trial_system_attr = slow_write  # type: ignore[method-assign]
    phase = server.phase
    study.optimize(_x_objective(), n_trials=phase.budget, n_jobs=2)
    assert _pulled_slots(study, phase.index) == list(range(phase.budget))


# ---------------------------------------------------------------------- entry points
def test_generic_simulate_dispatches_to_fedpne() -> None:
    _, objectives = _garland_objectives(3)
    result = simulate(
        objectives,
        search_space=UNIT,
        n_rounds=2,
        protocol=FedPNEConfig(horizon=200),
        progress=False,
    )
    assert len(result.reports) == 2
    with pytest.raises(ValueError, match="FedPNEConfig"):
        simulate(
            objectives,
            search_space=UNIT,
            n_rounds=1,
            protocol=FedPNEConfig(horizon=200),
            privacy={"noise_multiplier": 1.0},
        )


def test_optunahub_package_loads_and_runs() -> None:
    from pathlib import Path

    import optunahub

    root = Path(__file__).resolve().parents[1]
    module = optunahub.load_local_module(package="samplers/fed_pne", registry_root=str(root))
    fed = module.Federation.create(
        f"hub-{next(_names)}",
        search_space=UNIT,
        n_clients=1,
        protocol=module.FedPNEConfig(horizon=20),
    )
    study = optuna.create_study(sampler=module.FedPNESampler(fed, "solo", phase_timeout=0.0))
    study.optimize(_x_objective(), n_trials=FedPNEChannel(fed).initial_phase.budget)
    assert module.FederationServer(fed).step() is not None


# ------------------------------------------------------------------------ conformance
class TestFedPNEConformance(BasicSamplerTestCase, SingleOnlySamplerTestCase):
    """Optuna's conformance cases, on parameters outside the federation's space.

    The suite suggests parameters with arbitrary distributions, which a Fed-PNE pull cannot
    serve (its point is the protocol's node); they go to the independent sampler, so these
    cases check that the sampler stays out of the way (no pull is counted, nothing raises).
    ``RelativeSamplerTestCase`` does not apply: Fed-PNE is not a relative sampler (its relative
    search space is always empty; every point is dictated per trial by the published phase).
    """

    @pytest.fixture
    def sampler(self):
        def make():
            fed = _federation(1, space={"fed_u": FloatDistribution(0.0, 1.0)})
            return FedPNESampler(fed, "solo", warn_independent_sampling=False, seed=0)

        return make
