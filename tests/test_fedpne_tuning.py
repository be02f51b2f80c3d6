"""Fed-PNE's tuning preset in the core: schedule, beam, pulls in the cell, recommendation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optuna_fedbo.core.fedpne import eliminate
from optuna_fedbo.core.fedpne import FedPNEParams
from optuna_fedbo.core.fedpne import FedPNEServerState
from optuna_fedbo.core.fedpne import Node
from optuna_fedbo.core.fedpne import Partition
from optuna_fedbo.core.fedpne import RewardPrivacy
from optuna_fedbo.core.fedpne import simulate_fedpne
from optuna_fedbo.core.fedpne.elimination import beam_scores
from optuna_fedbo.core.fedpne.synthetic import make_federated_problem


def _run(name: str, params: FedPNEParams, seed: int, representative: str = "uniform"):
    problem = make_federated_problem(name, params.n_clients, seed=seed)
    rng = np.random.default_rng(seed)
    result = simulate_fedpne(
        problem.objectives(rng),
        params.horizon,
        rng=rng,
        partition=Partition(problem.dim, seed=seed, representative=representative),
        params=params,
        global_objective=problem.global_value,
        f_star=problem.f_star,
    )
    return problem, result


def test_tuning_schedule_is_flat_and_scaled_by_the_dp_variance() -> None:
    params = FedPNEParams.tuning(200, 10)
    assert (params.node_pulls, params.max_survivors, params.spread_bonus) == (10, 3, 1.0)
    assert [params.tau(h) for h in range(12)] == [10] * 12
    assert [params.pulls_per_client(h) for h in range(12)] == [1] * 12
    assert FedPNEParams.tuning(200, 1).node_pulls == 2
    assert FedPNEParams.tuning(200, 10, dim=2).max_survivors == 4
    assert FedPNEParams.tuning(200, 4, node_pulls=10).pulls_per_client(7) == 3  # ceil(10 / 4)
    privacy = RewardPrivacy(4.0, 1e-5)
    private = FedPNEParams.tuning(200, 10, privacy=privacy)
    assert private.tau(5) == math.ceil(10 * (1.0 + 4.0 * privacy.sigma**2))
    # The paper's Eqn. (3) is untouched without node_pulls.
    paper = FedPNEParams(200, 10)
    assert paper.tau(6) == math.ceil(0.01 * math.log(2000) * 4**6)


def test_params_round_trip_and_old_states_still_load() -> None:
    params = FedPNEParams.tuning(150, 7, node_pulls=6, max_survivors=5)
    assert FedPNEParams.from_dict(params.to_dict()) == params
    old = FedPNEParams(150, 7).to_dict()
    del old["node_pulls"], old["max_survivors"]
    assert FedPNEParams.from_dict(old) == FedPNEParams(150, 7)
    with pytest.raises(ValueError, match="max_survivors"):
        FedPNEParams(10, 2, max_survivors=0)
    for bad in (1.5, 1, 0):
        with pytest.raises(ValueError, match="node_pulls"):
            FedPNEParams(10, 2, node_pulls=bad)


def test_beam_keeps_the_best_means_after_eqn_1() -> None:
    nodes = [Node(3, i) for i in range(1, 9)]
    means = dict(zip(nodes, [0.5, 0.9, 0.7, 0.9, 0.1, 0.6, 0.8, 0.2]))
    widths = dict.fromkeys(nodes, 0.05)
    paper = eliminate(means, widths, lambda h: 0.1)
    # Eqn. (1): mu + 0.05 + 0.1 < 0.9 - 0.05, i.e. mu < 0.7.
    assert {n.index for n in paper.eliminated} == {1, 5, 6, 8}
    beam = eliminate(means, widths, lambda h: 0.1, max_survivors=3)
    # Ties (0.9, 0.9) go by index; the best node always survives.
    assert [n.index for n in beam.survivors] == [2, 4, 7]
    assert beam.best == paper.best == Node(3, 2)
    assert set(beam.eliminated) | set(beam.survivors) == set(nodes)
    assert set(paper.eliminated) <= set(beam.eliminated)
    assert eliminate(means, widths, lambda h: 0.1, max_survivors=20) == paper
    # With scores (the spread bonus) the beam ranks by score, but the best mean survives.
    scores = dict(zip(nodes, [0.5, 0.9, 0.7, 0.95, 0.1, 0.6, 1.2, 0.2]))
    ranked = eliminate(means, widths, lambda h: 0.1, max_survivors=2, scores=scores)
    assert [n.index for n in ranked.survivors] == [2, 7] and ranked.best == Node(3, 2)


def test_beam_scores_add_the_spread_of_the_participants_means() -> None:
    a, b = Node(2, 1), Node(2, 2)
    client_means = {"0": {a: 0.2, b: 0.5}, "1": {a: 0.8, b: 0.5}, "2": {a: 0.5, b: 0.5}}
    means = {a: 0.5, b: 0.5}
    scores = beam_scores(client_means, means, 2.0)
    assert scores[a] == pytest.approx(0.5 + 2.0 * 0.3)  # sample sd of (0.2, 0.8, 0.5) = 0.3
    assert scores[b] == pytest.approx(0.5)
    assert beam_scores(client_means, means, None) is None
    assert beam_scores({"0": client_means["0"]}, means, 1.0) is None


@pytest.mark.parametrize("name", ["garland", "bumps2d"])
def test_pulls_lie_in_their_node_and_eliminated_nodes_are_never_pulled(name: str) -> None:
    params = FedPNEParams.tuning(120, 6)
    problem, result = _run(name, params, seed=3)
    state = result.state
    partition = state.partition
    reports = state.history
    assert len(reports) >= 8
    eliminated: set[Node] = set()
    for report in reports:
        phase = report.phase
        # No node of this phase descends from (or is) an eliminated node.
        for node in phase.nodes:
            assert node not in eliminated
            assert not any(e.is_ancestor_of(node, partition.branching) for e in eliminated)
        # Every pull of every client lies in the cell of its scheduled node.
        schedule = phase.schedule()
        for m in range(problem.n_clients):
            for slot, node in enumerate(schedule):
                assert partition.contains(node, result.points[m, phase.start + slot])
        assert len(report.survivors) <= params.max_survivors
        eliminated.update(report.eliminated)
    # The pulls land anywhere in the cells, not only on centres.
    centres = {tuple(partition.centre(n)) for r in reports for n in r.phase.nodes}
    pulled = {tuple(p) for p in result.points.reshape(-1, problem.dim)}
    assert len(pulled - centres) > 0.99 * len(pulled)


def test_recommendation_is_the_best_surviving_deepest_node() -> None:
    params = FedPNEParams.tuning(100, 5)
    _, result = _run("doublesine", params, seed=1)
    state = result.state
    last = state.history[-1]
    best = state.recommendation()
    assert best == last.best and best in last.survivors
    assert best.depth == max(r.phase.depth for r in state.history)
    assert last.means[best] == max(last.means.values())
    assert state.partition.contains(best, state.recommended_point())


def test_uniform_pulls_estimate_the_cell_average_without_bias() -> None:
    # Each client's node mean of uniform pulls estimates the cell average of its objective, so
    # the global mean estimates the cell average of f (the quantity Lemmas B.2-B.4 need).
    problem = make_federated_problem("garland", 4, seed=0, noise=0.1)
    partition = Partition(1, representative="uniform")
    node = Node(2, 2)  # [0.25, 0.5]
    lower, upper = partition.bounds(node)
    grid = np.linspace(lower[0], upper[0], 200_001)[:, None]
    cell_average = problem.to_reward(problem.global_value(grid)).mean()
    rng = np.random.default_rng(0)
    objectives = problem.objectives(rng)
    estimates = [
        np.mean([objectives[m](partition.points(node, 3, rng)).mean() for m in range(4)])
        for _ in range(4000)
    ]
    standard_error = np.std(estimates) / math.sqrt(len(estimates))
    assert abs(np.mean(estimates) - cell_average) < 4 * standard_error
    # The centre's value is a different (biased) target for this cell.
    centre_value = problem.to_reward(problem.global_value(partition.centre(node)[None]))[0]
    assert abs(centre_value - cell_average) > 20 * standard_error


def test_tuning_beats_the_paper_preset_and_random_search_at_a_tuning_budget() -> None:
    horizon, n_clients = 150, 8
    for name in ("garland", "doublesine"):
        tuned, paper, rand = [], [], []
        for seed in range(4):
            problem, result = _run(name, FedPNEParams.tuning(horizon, n_clients), seed)
            tuned.append(result.average_cumulative_regret[-1])
            _, result = _run(name, FedPNEParams(horizon, n_clients), seed, "centre")
            paper.append(result.average_cumulative_regret[-1])
            points = np.random.default_rng(seed).random((n_clients * horizon, 1))
            rand.append(horizon * np.mean(problem.f_star - problem.global_value(points)))
        assert np.mean(tuned) < 0.6 * np.mean(paper)
        assert np.mean(tuned) < 0.35 * np.mean(rand)


def test_server_state_with_beam_round_trips() -> None:
    params = FedPNEParams.tuning(60, 3)
    state = FedPNEServerState(params, Partition(2, representative="uniform"))
    phase = state.current_phase()
    for client in state.client_ids:
        state.submit(client, {n: 0.1 * n.index for n in phase.nodes})
    state.close_phase()
    again = FedPNEServerState.from_dict(state.to_dict())
    assert again.to_dict() == state.to_dict()
    assert again.params.max_survivors == 3


def test_a_long_run_stops_refining_at_the_floating_point_depth() -> None:
    params = FedPNEParams.tuning(700, 2, max_survivors=1)
    problem, result = _run("doublesine", params, seed=0)
    partition = result.state.partition
    assert partition.max_depth == 40
    depths = [r.phase.depth for r in result.state.history]
    assert max(depths) == partition.max_depth and depths.count(partition.max_depth) > 5
    best = result.state.recommendation()
    lower, upper = partition.bounds(best)
    assert np.all(upper > lower)
    assert partition.contains(best, result.state.recommended_point())
    for report in result.state.history:
        for slot, node in enumerate(report.phase.schedule()):
            assert partition.contains(node, result.points[0, report.phase.start + slot])
