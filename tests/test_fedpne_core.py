"""Tests of the Fed-PNE core against the paper's formulas, invariants and behaviour."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from optuna_fedbo.core.fedpne import eliminate
from optuna_fedbo.core.fedpne import FedPNEParams
from optuna_fedbo.core.fedpne import FedPNEServerState
from optuna_fedbo.core.fedpne import global_means
from optuna_fedbo.core.fedpne import local_node_means
from optuna_fedbo.core.fedpne import Node
from optuna_fedbo.core.fedpne import Partition
from optuna_fedbo.core.fedpne import pull_plan
from optuna_fedbo.core.fedpne import simulate_fedpne
from optuna_fedbo.core.fedpne.synthetic import GARLAND_ARGMAX
from optuna_fedbo.core.fedpne.synthetic import GARLAND_MAX
from optuna_fedbo.core.fedpne.synthetic import make_federated_problem

# ------------------------------------------------------------------------------- formulas


def test_tau_h_values_for_the_experimental_constants() -> None:
    # T = 2000, M = 10, delta = 1/M: log(c1 T / delta) = log(20000) = 9.9034875525...
    params = FedPNEParams(horizon=2000, n_clients=10)
    assert params.confidence_delta == pytest.approx(0.1)
    assert params.log_term == pytest.approx(9.903487552536127, rel=1e-14)
    # tau_h = ceil(0.1^2 * 9.9035 * 4^h / 1): 0.099, 0.396, 1.58, 6.34, 25.4, 101.4, ... 6490.3
    expected = [1, 1, 2, 7, 26, 102, 406, 1623, 6491, 25962]
    assert [params.tau(h) for h in range(10)] == expected
    assert [params.pulls_per_client(h) for h in range(10)] == [math.ceil(t / 10) for t in expected]
    assert params.pulls_per_client(8) == 650


def test_tau_h_general_formula_and_width() -> None:
    params = FedPNEParams(horizon=777, n_clients=3, nu1=0.7, rho=0.6, c=0.3, c1=1.7, delta=0.05)
    log_term = math.log(1.7 * 777 / 0.05)
    for h in range(8):
        assert params.tau(h) == math.ceil(0.3**2 * log_term * 0.6 ** (-2 * h) / 0.7**2)
        assert params.smoothness(h) == pytest.approx(0.7 * 0.6**h)
    for pulls in (1, 7, 300):
        assert params.width(pulls) == pytest.approx(0.3 * math.sqrt(log_term / pulls))
    # b at T_{h,i} >= tau_h is at most nu1 rho^h (the design of Eqn. 2).
    for h in range(8):
        assert params.width(params.tau(h)) <= params.smoothness(h) + 1e-12


def test_theory_constants() -> None:
    params = FedPNEParams.theory(horizon=1000, n_clients=16)
    assert params.c == 2.0
    assert params.c1 == pytest.approx(32 ** (1 / 8))
    assert params.confidence_delta == pytest.approx(1 / 16)
    assert params.tau(0) == math.ceil(4 * math.log(32 ** (1 / 8) * 1000 * 16))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"horizon": 0, "n_clients": 2},
        {"horizon": 10, "n_clients": 0},
        {"horizon": 10, "n_clients": 2, "rho": 1.0},
        {"horizon": 10, "n_clients": 2, "c": -1.0},
        {"horizon": 10, "n_clients": 2, "nu1": float("nan")},
        {"horizon": 10, "n_clients": 2, "delta": 1.5},
        {"horizon": 1, "n_clients": 1, "c1": 0.5},  # log(c1 T / delta) < 0
    ],
)
def test_bad_params(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        FedPNEParams(**kwargs)


def test_expansion_rule_both_conditions() -> None:
    part = Partition(1)
    # M = 10, T = 2000: tau = 1, 1, 2, 7: 4 nodes * 2 <= 10 -> expand; 8 * 7 > 10 -> stop.
    state = FedPNEServerState(FedPNEParams(horizon=2000, n_clients=10), part)
    phase = state.current_phase()
    assert (phase.depth, len(phase.nodes), phase.tau, phase.pulls_per_node) == (3, 8, 7, 1)
    # M = 1: |K| tau > M already at depth 1 (2 * 1 > 1) but tau_1 = 1 <= 1 forces one more.
    state = FedPNEServerState(FedPNEParams(horizon=2000, n_clients=1, delta=0.1), part)
    phase = state.current_phase()
    assert (phase.depth, len(phase.nodes), phase.tau) == (2, 4, 2)
    # M = 8 (log 16000 = 9.68, tau_2 = 2): |K| tau = 4 * 2 = M exactly still expands ("<=").
    phase = FedPNEServerState(FedPNEParams(horizon=2000, n_clients=8), part).current_phase()
    assert (phase.depth, len(phase.nodes), phase.tau) == (3, 8, 7)
    # M = 50 (delta = 1/50): tau = 1, 2, 2 (4*2 <= 50), 8 -> 8 * 8 > 50 stops at depth 3.
    params = FedPNEParams(horizon=2000, n_clients=50)
    assert [params.tau(h) for h in range(4)] == [
        math.ceil(0.01 * math.log(100000) * 4**h) for h in range(4)
    ]
    phase = FedPNEServerState(params, part).current_phase()
    assert phase.depth == 3 and phase.pulls_per_node == 1
    # The theory's c = 2 needs many pulls at the root: no expansion at all.
    phase = FedPNEServerState(FedPNEParams.theory(2000, 10), part).current_phase()
    assert phase.depth == 0 and phase.nodes == (Node(0, 1),)


def test_expansion_guard() -> None:
    params = FedPNEParams(horizon=100, n_clients=10, c=1e-6, max_phase_nodes=1000)
    with pytest.raises(ValueError, match="max_phase_nodes"):
        FedPNEServerState(params, Partition(1))


# ------------------------------------------------------------------------------- elimination


def test_elimination_rule_on_hand_made_means() -> None:
    # Depth 3: nu1 rho^h = 0.125; width b = 0.05 for all nodes. Best mean 0.9 -> bar 0.85.
    # A node is eliminated iff mu + 0.05 + 0.125 < 0.85, i.e. mu < 0.675.
    nodes = [Node(3, i) for i in range(1, 9)]
    values = [0.9, 0.676, 0.675 - 1e-9, 0.2, 0.88, 0.675 + 1e-9, 0.1, 0.5]
    means = dict(zip(nodes, values, strict=True))
    widths = dict.fromkeys(nodes, 0.05)
    outcome = eliminate(means, widths, lambda h: 1.0 * 0.5**h)
    assert outcome.best == Node(3, 1)
    assert outcome.eliminated == (Node(3, 3), Node(3, 4), Node(3, 7), Node(3, 8))
    assert outcome.survivors == (Node(3, 1), Node(3, 2), Node(3, 5), Node(3, 6))
    # Exact equality is not eliminated (strict inequality of Eqn. 1).
    eq = eliminate(
        {Node(1, 1): 1.0, Node(1, 2): 0.5},
        dict.fromkeys([Node(1, 1), Node(1, 2)], 0.0),
        lambda h: 0.5,
    )
    assert eq.eliminated == ()
    # Ties go to the first node in index order.
    tie = eliminate(
        {Node(1, 2): 0.7, Node(1, 1): 0.7}, {Node(1, 1): 0.0, Node(1, 2): 0.0}, lambda h: 0.0
    )
    assert tie.best == Node(1, 1)


def test_global_means_average_and_validation() -> None:
    nodes = [Node(2, 1), Node(2, 2)]
    means = global_means(
        {"a": {nodes[0]: 0.2, nodes[1]: 0.4}, "b": {nodes[0]: 0.6, nodes[1]: 0.0}}, nodes
    )
    assert means == {nodes[0]: pytest.approx(0.4), nodes[1]: pytest.approx(0.2)}
    with pytest.raises(ValueError):
        global_means({"a": {nodes[0]: 0.2}}, nodes)


# ------------------------------------------------------------------------------- state machine


def _state(horizon: int = 2000, n_clients: int = 4) -> FedPNEServerState:
    return FedPNEServerState(
        FedPNEParams(horizon=horizon, n_clients=n_clients), Partition(1), ["a", "b", "c", "d"]
    )


def _uniform_means(phase, value: float) -> dict[str, float]:
    return {node.key: value for node in phase.nodes}


def test_submit_validation_and_idempotence() -> None:
    state = _state()
    phase = state.current_phase()
    good = {node.key: 0.1 * k for k, node in enumerate(phase.nodes)}
    with pytest.raises(ValueError, match="Unknown client"):
        state.submit("z", good)
    with pytest.raises(ValueError, match="phase"):
        state.submit("a", good, phase=phase.index + 1)
    with pytest.raises(ValueError, match="does not match"):
        state.submit("a", dict(list(good.items())[:-1]))
    with pytest.raises(ValueError, match="does not match"):
        state.submit("a", {**good, "9:1": 0.5})
    with pytest.raises(ValueError, match="finite"):
        state.submit("a", {**good, phase.nodes[0].key: float("nan")})
    with pytest.raises(ValueError, match="number"):
        state.submit("a", {**good, phase.nodes[0].key: True})
    with pytest.raises(ValueError, match="twice"):
        state.submit("a", {phase.nodes[0]: 0.1, phase.nodes[0].key: 0.1})
    assert state.submit("a", good, phase=phase.index) is True
    # Node objects and keys are interchangeable; an identical resubmission is a no-op.
    assert state.submit("a", {Node.from_key(k): v for k, v in good.items()}) is False
    with pytest.raises(ValueError, match="already uploaded different"):
        state.submit("a", {**good, phase.nodes[0].key: 0.99})
    assert state.missing() == ["b", "c", "d"]
    assert not state.ready()
    with pytest.raises(ValueError, match="waits for clients"):
        state.close_phase()


def test_close_phase_computes_the_papers_quantities() -> None:
    state = _state()
    params = state.params
    phase = state.current_phase()
    rng = np.random.default_rng(0)
    uploads = {c: {n.key: float(rng.random()) for n in phase.nodes} for c in state.client_ids}
    for client, means in uploads.items():
        state.submit(client, means)
    assert state.ready()
    report = state.close_phase()
    total = 4 * phase.pulls_per_node
    assert report.total_pulls == total
    assert report.width == pytest.approx(params.c * math.sqrt(params.log_term / total))
    for node in phase.nodes:
        expected = np.mean([uploads[c][node.key] for c in uploads])
        assert report.means[node] == pytest.approx(expected)
    best = max(phase.nodes, key=lambda n: report.means[n])
    assert report.best == best
    bar = report.means[best] - report.width
    for node in phase.nodes:
        gone = report.means[node] + report.width + params.smoothness(node.depth) < bar
        assert (node in report.eliminated) == gone
    nxt = state.current_phase()
    assert nxt.index == phase.index + 1
    assert nxt.start == phase.length
    # The next node set descends from the survivors only, and covers all their children's
    # descendants at its depth.
    expected_nodes = sorted(
        d for s in report.survivors for d in state.partition.descendants(s, nxt.depth)
    )
    assert list(nxt.nodes) == expected_nodes
    assert len(nxt.nodes) * nxt.tau > 4 and nxt.tau > 1
    assert state.recommendation() == best
    assert state.communication() == {
        "rounds": 1,
        "nodes_per_client": len(phase.nodes),
        "uploaded_means": 4 * len(phase.nodes),
        "broadcast_nodes": len(phase.nodes) + len(nxt.nodes),
    }


def test_forced_close_uses_the_reporting_clients_only() -> None:
    state = _state()
    phase = state.current_phase()
    with pytest.raises(ValueError, match="No client"):
        state.close_phase(force=True)
    state.submit("a", _uniform_means(phase, 0.2))
    state.submit("c", _uniform_means(phase, 0.6))
    report = state.close_phase(force=True)
    assert report.forced and report.contributors == ("a", "c")
    assert report.total_pulls == 2 * phase.pulls_per_node
    assert all(v == pytest.approx(0.4) for v in report.means.values())
    assert report.eliminated == ()


def test_horizon_final_phase_and_exact_exhaustion() -> None:
    # T = 8, M = 10: the first phase is 8 nodes x 1 pull = exactly T; then nothing is left.
    state = FedPNEServerState(FedPNEParams(horizon=8, n_clients=10), Partition(1))
    phase = state.current_phase()
    assert (len(phase.nodes), phase.pulls_per_node, phase.final) == (8, 1, False)
    for client in state.client_ids:
        state.submit(client, _uniform_means(phase, 0.5))
    state.close_phase()
    final = state.current_phase()
    assert final.final and final.budget == 0 and final.nodes == () and state.finished
    assert final.schedule() == []
    # T = 20: the second phase is cut at the horizon and takes no uploads.
    state = FedPNEServerState(FedPNEParams(horizon=20, n_clients=10), Partition(1))
    phase = state.current_phase()
    for client in state.client_ids:
        state.submit(client, {n.key: (0.6 if n.index == 3 else 0.5) for n in phase.nodes})
    report = state.close_phase()
    assert report.eliminated == ()  # 16 children at depth 4, 2 pulls each > 12 pulls left
    final = state.current_phase()
    assert final.final and final.budget == 20 - phase.length < final.length
    assert len(final.schedule()) == final.budget
    assert not state.ready()
    with pytest.raises(ValueError, match="final"):
        state.submit("0", _uniform_means(final, 0.5))
    with pytest.raises(ValueError, match="final"):
        state.close_phase()
    assert state.recommendation() == report.best == Node(phase.depth, 3)
    np.testing.assert_allclose(state.recommended_point(), state.partition.centre(report.best))


def test_persistence_round_trip_mid_phase() -> None:
    problem = make_federated_problem("doublesine", 4, seed=3)
    objectives = problem.objectives(np.random.default_rng(3))
    partition = Partition(1)
    state = FedPNEServerState(FedPNEParams(horizon=3000, n_clients=4), partition)

    def local(client: int) -> dict[str, float]:
        phase = state.current_phase()
        nodes, x = pull_plan(phase, partition)
        return local_node_means(phase, nodes, objectives[client](x))

    for _ in range(2):
        uploads = {str(m): local(m) for m in range(4)}
        for client, means in uploads.items():
            state.submit(client, means)
        state.close_phase()
    uploads = {str(m): local(m) for m in range(4)}
    state.submit("0", uploads["0"])
    state.submit("2", uploads["2"])
    saved = json.loads(json.dumps(state.to_dict()))
    restored = FedPNEServerState.from_dict(saved)
    assert restored.to_dict() == state.to_dict()
    assert restored.missing() == ["1", "3"]
    assert restored.submit("0", uploads["0"]) is False  # a retry after the restart is a no-op
    for s in (state, restored):
        s.submit("1", uploads["1"])
        s.submit("3", uploads["3"])
    a, b = state.close_phase(), restored.close_phase()
    assert a.to_dict() == b.to_dict()
    assert state.to_dict() == restored.to_dict()
    with pytest.raises(ValueError, match="format"):
        FedPNEServerState.from_dict({"format": "something-else"})


# ------------------------------------------------------------------------------- invariants


@pytest.mark.parametrize(
    ("name", "n_clients", "horizon", "seed"),
    [("garland", 10, 2000, 0), ("doublesine", 5, 3000, 1), ("garland", 20, 1500, 2)],
)
def test_invariants_on_simulated_runs(name: str, n_clients: int, horizon: int, seed: int) -> None:
    problem = make_federated_problem(name, n_clients, seed=seed)
    rng = np.random.default_rng(seed)
    result = simulate_fedpne(problem.objectives(rng), horizon, rng=rng)
    state = result.state
    part = state.partition
    history = state.history
    assert len(history) >= 3
    eliminated: set[Node] = set()
    previous_survivors = None
    for report in history:
        phase = report.phase
        # The best node is never eliminated.
        assert report.best in report.survivors and report.best not in report.eliminated
        # An eliminated node (or anything below it) never reappears.
        for node in phase.nodes:
            assert node not in eliminated
            assert not any(e.is_ancestor_of(node, part.branching) for e in eliminated)
        # Every active node descends from a survivor of the previous phase.
        if previous_survivors is not None:
            for node in phase.nodes:
                assert any(s.is_ancestor_of(node, part.branching) for s in previous_survivors)
        eliminated |= set(report.eliminated)
        previous_survivors = report.survivors
        # Every client pulled every active node exactly t times in this phase.
        for m in range(n_clients):
            x = result.points[m, phase.start : phase.start + phase.length, 0]
            for node in phase.nodes:
                lower, upper = part.bounds(node)
                inside = (x >= lower[0]) & (x < upper[0])
                assert inside.sum() == phase.pulls_per_node
    final = state.current_phase()
    for node in final.nodes:
        assert not any(e.is_ancestor_of(node, part.branching) for e in eliminated)
    # Pulls never exceed the horizon: the phases add up to exactly T per client.
    assert final.final and final.start + final.budget == horizon
    assert result.points.shape == (n_clients, horizon, 1)
    assert sum(r.phase.length for r in history) + final.budget == horizon


# ------------------------------------------------------------------------------- behaviour


def test_garland_federation_finds_the_peak_and_beats_random_search() -> None:
    n_clients, horizon = 10, 2000
    problem = make_federated_problem("garland", n_clients, perturbation=0.1, noise=0.1, seed=0)
    # The clients really are heterogeneous: their own maximisers differ from the global one.
    grid = np.linspace(0.0, 1.0, 200_001)[:, None]
    client_argmax = [grid[np.argmax(problem.client_value(m, grid)), 0] for m in range(10)]
    assert max(abs(a - GARLAND_ARGMAX) for a in client_argmax) > 0.01
    rng = np.random.default_rng(0)
    result = simulate_fedpne(
        problem.objectives(rng),
        horizon,
        rng=rng,
        global_objective=problem.global_value,
        f_star=problem.f_star,
    )
    state = result.state
    best = state.recommendation()
    lower, upper = state.partition.bounds(best)
    cell = np.linspace(lower[0], upper[0], 20_001)[:, None]
    # The recommended cell holds a point within 0.05 of the maximum; its centre is within 0.15
    # (a cusp: at depth 7 the centre of the cell of pi/6 lies 0.0037 away, worth 0.118).
    assert GARLAND_MAX - problem.global_value(cell).max() < 0.05
    assert GARLAND_MAX - problem.global_value(state.recommended_point()[None])[0] < 0.15
    fed_regret = result.average_cumulative_regret[-1]
    random_x = np.random.default_rng(1).random((n_clients * horizon, 1))
    random_regret = np.sum(GARLAND_MAX - problem.global_value(random_x)) / n_clients
    assert fed_regret < 0.5 * random_regret
    assert state.communication()["rounds"] <= 10
