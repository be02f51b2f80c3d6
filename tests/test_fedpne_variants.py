"""Fed-PNE variants through Optuna: the tuning default, the paper preset, rewards under noise."""

from __future__ import annotations

import logging

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.study import StudyDirection
import pytest

from optuna_fedbo.core.fedpne import FedPNEParams
from optuna_fedbo.core.fedpne import Node
from optuna_fedbo.core.fedpne.synthetic import make_federated_problem
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import simulate_fedpne
from optuna_fedbo.samplers._fed_pne import FedPNESampler

optuna.logging.set_verbosity(optuna.logging.WARNING)

UNIT = {"x": FloatDistribution(0.0, 1.0)}
PLANE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}


def _problem_objectives(name: str, n_clients: int, seed: int, noise: float = 0.1):
    """Raw noisy objectives ``f + p_m + U(-noise, noise)`` of a synthetic problem."""
    problem = make_federated_problem(name, n_clients, seed=seed, noise=noise)
    rng = np.random.default_rng(seed)
    names = list(PLANE)[: problem.dim]

    def make(m: int):
        def objective(trial: optuna.Trial) -> float:
            x = np.array([[trial.suggest_float(n, 0.0, 1.0) for n in names]])
            return float(problem.client_value(m, x)[0] + rng.uniform(-noise, noise))

        return objective

    value_range = (problem.f_min - problem.perturbation, problem.f_star + problem.perturbation)
    return problem, [make(m) for m in range(n_clients)], value_range


def test_the_paper_variant_is_the_old_configuration_exactly() -> None:
    paper = FedPNEConfig(horizon=300, variant="paper")
    assert paper.params(10, dim=2) == FedPNEParams(300, 10, max_phase_nodes=10_000)
    partition = paper.partition(2, seed=4)
    assert (partition.representative, partition.split) == ("centre", "random")
    theory = FedPNEConfig(horizon=300, variant="paper", constants="theory")
    assert theory.params(10) == FedPNEParams.theory(300, 10, max_phase_nodes=10_000)


def test_the_tuning_variant_is_the_default() -> None:
    config = FedPNEConfig(horizon=200)
    assert config.variant == "tuning"
    assert config.params(10, dim=2) == FedPNEParams.tuning(200, 10, dim=2, max_phase_nodes=10_000)
    partition = config.partition(2, seed=4)
    assert (partition.representative, partition.split) == ("uniform", "longest")
    custom = FedPNEConfig(horizon=200, max_survivors=6, node_pulls=4, representative="centre")
    params = custom.params(3, dim=1)
    assert (params.max_survivors, params.node_pulls) == (6, 4)
    assert custom.partition(1, 0).representative == "centre"
    with pytest.raises(ValueError, match="variant"):
        FedPNEConfig(horizon=10, variant="fast")
    with pytest.raises(ValueError, match="tuning"):
        FedPNEConfig(horizon=10, variant="paper", max_survivors=3)
    with pytest.raises(ValueError, match="noise_bound"):
        FedPNEConfig(horizon=10, noise_bound=-0.1)


def test_noise_bound_keeps_noisy_rewards_unbiased_where_clipping_biases_them() -> None:
    rng = np.random.default_rng(0)
    f, noise = 0.95, 0.2  # near the top of value_range = (0, 1)
    values = f + rng.uniform(-noise, noise, size=20_000)
    widened = FedPNEConfig(horizon=10, value_range=(0.0, 1.0), noise_bound=noise)
    assert widened.reward_range == (-0.2, 1.2)
    rewards = [widened.reward(v, StudyDirection.MAXIMIZE) for v in values]
    assert not any(clipped for _, clipped in rewards)
    mean = np.mean([r for r, _ in rewards])
    standard_error = np.std([r for r, _ in rewards]) / np.sqrt(len(values))
    assert abs(mean - (f + 0.2) / 1.4) < 4 * standard_error
    # Minimizing maps the other way round, also without bias.
    low = [widened.reward(v, StudyDirection.MINIMIZE)[0] for v in values]
    assert abs(np.mean(low) - (1.2 - f) / 1.4) < 4 * standard_error
    # Without the noise bound, values above 1 are clipped and the mean is biased down.
    clipped = FedPNEConfig(horizon=10, value_range=(0.0, 1.0))
    biased = [clipped.reward(v, StudyDirection.MAXIMIZE) for v in values]
    assert sum(c for _, c in biased) > 5000
    assert np.mean([r for r, _ in biased]) < f - 0.02


def test_clipped_values_give_one_warning_and_a_count(propagate, caplog) -> None:
    config = FedPNEConfig(horizon=40, value_range=(0.0, 1.0))
    objectives = [lambda t: 2.0 + t.suggest_float("x", 0.0, 1.0)] * 2
    with caplog.at_level(logging.WARNING):
        result = simulate_fedpne(objectives, search_space=UNIT, protocol=config, seed=0)
    samplers = [s.sampler for s in result.studies]
    assert [s.n_clipped for s in samplers] == [40, 40]
    warnings = [r for r in caplog.records if "clipped" in r.getMessage()]
    assert len(warnings) == 2  # one per participant, not one per trial
    assert all("noise_bound" in r.getMessage() for r in warnings)


@pytest.mark.parametrize("name,space", [("garland", UNIT), ("bumps2d", PLANE)])
def test_tuning_pulls_lie_anywhere_in_their_cells_and_skip_eliminated_nodes(
    name: str, space: dict
) -> None:
    problem, objectives, value_range = _problem_objectives(name, 4, seed=2)
    config = FedPNEConfig(horizon=80, value_range=value_range, noise_bound=0.1)
    result = simulate_fedpne(objectives, search_space=space, protocol=config, seed=2)
    channel = result.studies[0].sampler.channel
    partition = channel.partition
    rows = [r for r in result.table() if r["mode"] == "pull"]
    assert len(rows) == 4 * 80
    centres = 0
    for row in rows:
        node = Node.from_key(row["node"])
        point = np.array([row[f"params_{n}"] for n in space])
        assert partition.contains(node, point)
        centres += bool(np.array_equal(point, partition.centre(node)))
    assert centres == 0
    eliminated: set[Node] = set()
    for report in result.reports:
        for node in report.phase_report.phase.nodes:
            assert not any(
                e == node or e.is_ancestor_of(node, partition.branching) for e in eliminated
            )
        assert len(report.phase_report.survivors) <= 2 + problem.dim
        eliminated.update(report.phase_report.eliminated)
    assert not any(r.phase_report.forced for r in result.reports)
    assert sum(s.sampler.n_clipped for s in result.studies) == 0


def test_recommended_params_is_the_centre_of_the_best_surviving_node() -> None:
    _, objectives, value_range = _problem_objectives("doublesine", 5, seed=1)
    config = FedPNEConfig(horizon=60, value_range=value_range, noise_bound=0.1)
    result = simulate_fedpne(objectives, search_space=UNIT, protocol=config, seed=1)
    last = result.reports[-1].phase_report
    assert last.best in last.survivors
    assert last.means[last.best] == max(last.means.values())
    sampler: FedPNESampler = result.studies[3].sampler
    centre = float(sampler.channel.partition.centre(last.best)[0])
    assert sampler.recommended_params() == {"x": centre}
    assert all(s.sampler.recommended_params() == {"x": centre} for s in result.studies)


def test_tuning_default_beats_the_paper_preset_and_random_search_through_optuna() -> None:
    horizon, n_clients = 100, 5
    for name in ("garland", "doublesine"):
        regret: dict[str, list[float]] = {"tuning": [], "paper": [], "random": []}
        recommendation: dict[str, list[float]] = {"tuning": [], "paper": []}
        for seed in range(3):
            problem, objectives, value_range = _problem_objectives(name, n_clients, seed)
            for variant in ("tuning", "paper"):
                config = FedPNEConfig(
                    horizon=horizon, value_range=value_range, noise_bound=0.1, variant=variant
                )
                result = simulate_fedpne(objectives, search_space=UNIT, protocol=config, seed=seed)
                x = np.array([[r["params_x"]] for r in result.table()])
                regret[variant].append(np.mean(problem.f_star - problem.global_value(x)))
                best = result.studies[0].sampler.recommended_params()["x"]
                recommendation[variant].append(
                    problem.f_star - problem.global_value(np.array([[best]]))[0]
                )
            x = np.random.default_rng(seed).random((n_clients * horizon, 1))
            regret["random"].append(np.mean(problem.f_star - problem.global_value(x)))
        assert np.mean(regret["tuning"]) < 0.7 * np.mean(regret["paper"])
        assert np.mean(regret["tuning"]) < 0.4 * np.mean(regret["random"])
        assert np.mean(recommendation["tuning"]) < np.mean(recommendation["paper"])
