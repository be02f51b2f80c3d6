"""Tests of DP-Fed-PNE (Appendix D of the Fed-PNE paper) and of the client-side helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optuna_fedbo.core.fedpne import federated_dp_guarantee
from optuna_fedbo.core.fedpne import FedPNEParams
from optuna_fedbo.core.fedpne import FedPNEServerState
from optuna_fedbo.core.fedpne import gaussian_mechanism_epsilon
from optuna_fedbo.core.fedpne import gaussian_sigma
from optuna_fedbo.core.fedpne import local_node_means
from optuna_fedbo.core.fedpne import Partition
from optuna_fedbo.core.fedpne import privatize_rewards
from optuna_fedbo.core.fedpne import pull_plan
from optuna_fedbo.core.fedpne import RewardPrivacy
from optuna_fedbo.core.fedpne import simulate_fedpne
import optuna_fedbo.core.fedpne.privacy as fedpne_privacy
from optuna_fedbo.core.fedpne.privacy import gaussian_mechanism_delta
from optuna_fedbo.core.fedpne.synthetic import make_federated_problem


def test_sigma_of_theorem_d1() -> None:
    assert gaussian_sigma(1.0, 1e-5) == pytest.approx(math.sqrt(2 * math.log(125000.0)))
    assert gaussian_sigma(0.5, 0.01) == pytest.approx(math.sqrt(2 * math.log(125.0)) / 0.5)
    assert RewardPrivacy(2.0, 1e-3).sigma == pytest.approx(math.sqrt(2 * math.log(1250.0)) / 2)
    for bad in [(0.0, 1e-5), (1.0, 0.0), (1.0, 1.0), (-1.0, 0.1), (float("inf"), 0.1)]:
        with pytest.raises(ValueError):
            gaussian_sigma(*bad)


def test_confidence_constant_follows_lemma_d3() -> None:
    privacy = RewardPrivacy(1.0, 1e-5)
    sigma2 = privacy.sigma**2
    theory = FedPNEParams.theory(horizon=1000, n_clients=8, privacy=privacy)
    assert theory.effective_c == pytest.approx(math.sqrt(4 + 16 * sigma2))  # Lemma D.3
    assert theory.c1 == pytest.approx(16 ** (1 / 8))
    plain = FedPNEParams(horizon=1000, n_clients=8)
    private = FedPNEParams(horizon=1000, n_clients=8, privacy=privacy)
    assert private.effective_c == pytest.approx(0.1 * math.sqrt(1 + 4 * sigma2))
    # tau_h and b_{h,i} both use the adjusted constant (Remark D.2).
    for h in range(5):
        assert private.tau(h) == math.ceil(
            private.effective_c**2 * plain.log_term * 0.5 ** (-2 * h)
        )
    assert private.width(10) / plain.width(10) == pytest.approx(math.sqrt(1 + 4 * sigma2))
    unadjusted = FedPNEParams(
        horizon=1000, n_clients=8, privacy=RewardPrivacy(1.0, 1e-5, adjust_confidence=False)
    )
    assert unadjusted.effective_c == plain.effective_c


def test_privatize_rewards_noise_statistics_and_validation() -> None:
    sigma = 0.7
    rewards = np.full(200_000, 0.25)
    noisy = privatize_rewards(rewards, sigma, np.random.default_rng(0))
    assert abs(np.mean(noisy - rewards)) < 4 * sigma / math.sqrt(rewards.size)
    assert np.std(noisy - rewards) == pytest.approx(sigma, rel=0.01)
    np.testing.assert_array_equal(rewards, 0.25)  # input untouched
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        privatize_rewards(np.array([0.5, 1.2]), sigma, np.random.default_rng(0))
    with pytest.raises(ValueError, match="finite"):
        privatize_rewards(np.array([np.nan]), sigma, np.random.default_rng(0))
    with pytest.raises(ValueError, match="sigma"):
        privatize_rewards(np.array([0.5]), 0.0, np.random.default_rng(0))


def test_default_noise_comes_from_secure_rng(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_secure_rng() -> np.random.Generator:
        calls.append(1)
        return np.random.default_rng(123)

    monkeypatch.setattr(fedpne_privacy, "secure_rng", fake_secure_rng)
    out = privatize_rewards(np.zeros(5), 1.0)
    assert calls == [1]
    np.testing.assert_array_equal(out, np.random.default_rng(123).normal(0.0, 1.0, 5))
    monkeypatch.undo()
    # Unpatched, two calls draw different noise (OS entropy, no seed).
    a, b = privatize_rewards(np.zeros(5), 1.0), privatize_rewards(np.zeros(5), 1.0)
    assert not np.array_equal(a, b)


def test_analytic_gaussian_epsilon() -> None:
    # Balle & Wang (2018), Thm. 8 at s = 1, eps = 1: Phi(-0.5) - e Phi(-1.5) = 0.1269367...
    assert gaussian_mechanism_delta(1.0, 1.0) == pytest.approx(0.12693673750664392, rel=1e-9)
    assert gaussian_mechanism_epsilon(1.0, 0.12693673750664392) == pytest.approx(1.0, abs=1e-6)
    # Values cross-checked with dp_accounting's PLD accountant (to 1e-7).
    for epsilon, tight in [(0.5, 0.3525725), (1.0, 0.7509770), (4.0, 3.5111784)]:
        sigma = gaussian_sigma(epsilon, 1e-5)
        assert gaussian_mechanism_epsilon(sigma, 1e-5) == pytest.approx(tight, abs=1e-6)
    assert gaussian_mechanism_epsilon(1e6, 1e-5) == 0.0


def test_federated_guarantee_description() -> None:
    guarantee = federated_dp_guarantee(RewardPrivacy(0.5, 1e-5), 10)
    assert (guarantee.epsilon, guarantee.delta, guarantee.n_clients) == (0.5, 1e-5, 10)
    assert guarantee.sigma == pytest.approx(gaussian_sigma(0.5, 1e-5))
    assert guarantee.classic_bound_applies
    assert 0.0 < guarantee.tight_epsilon <= 0.5
    assert "(0.5, 1e-05, 10)-federated" in guarantee.description
    assert set(guarantee.to_dict()) >= {"epsilon", "delta", "n_clients", "sigma", "description"}
    large = federated_dp_guarantee(RewardPrivacy(3.0, 1e-5), 4)
    assert not large.classic_bound_applies and "epsilon < 1" in large.description
    with pytest.raises(ValueError, match=">= 2"):
        federated_dp_guarantee(RewardPrivacy(1.0, 1e-5), 1)


def test_pull_plan_and_local_means() -> None:
    partition = Partition(1)
    state = FedPNEServerState(FedPNEParams(horizon=5000, n_clients=3), partition)
    phase = state.current_phase()
    nodes, x = pull_plan(phase, partition)
    t = phase.pulls_per_node
    assert nodes == [n for n in phase.nodes for _ in range(t)]
    np.testing.assert_allclose(x[:, 0], [partition.centre(n)[0] for n in nodes])
    rewards = np.linspace(0.0, 1.0, len(nodes))
    means = local_node_means(phase, nodes, rewards)
    for k, node in enumerate(phase.nodes):
        assert means[node.key] == pytest.approx(rewards[k * t : (k + 1) * t].mean())
    with pytest.raises(ValueError, match="exactly"):
        local_node_means(phase, nodes[:-1], rewards[:-1])
    with pytest.raises(ValueError, match="rewards"):
        local_node_means(phase, nodes, rewards[:-1])
    with pytest.raises(ValueError, match="not in phase"):
        local_node_means(phase, ["9:1"] + nodes[1:], rewards)
    uniform = Partition(1, representative="uniform")
    nodes_u, x_u = pull_plan(phase, uniform, np.random.default_rng(0))
    for node, point in zip(nodes_u, x_u, strict=True):
        assert uniform.contains(node, point)


def test_dp_local_means_add_noise_of_the_right_size() -> None:
    partition = Partition(1)
    privacy = RewardPrivacy(1.0, 1e-5)
    params = FedPNEParams(horizon=5000, n_clients=2, privacy=privacy)
    phase = FedPNEServerState(params, partition).current_phase()
    nodes, _ = pull_plan(phase, partition)
    rewards = np.full(len(nodes), 0.5)
    deviations = []
    for seed in range(300):
        means = local_node_means(
            phase, nodes, rewards, privacy=privacy, noise_rng=np.random.default_rng(seed)
        )
        deviations.extend(v - 0.5 for v in means.values())
    # Mean of t noisy rewards: N(0, sigma^2 / t).
    expected = privacy.sigma / math.sqrt(phase.pulls_per_node)
    assert np.std(deviations) == pytest.approx(expected, rel=0.1)


def test_dp_fedpne_simulation_is_reproducible_and_noisy() -> None:
    problem = make_federated_problem("doublesine", 5, noise=0.0, seed=4)
    privacy = RewardPrivacy(1.0, 1e-3)
    params = FedPNEParams(horizon=3000, n_clients=5, privacy=privacy)

    def run(seed: int):
        rng = np.random.default_rng(0)
        return simulate_fedpne(
            problem.objectives(rng),
            3000,
            rng=rng,
            params=params,
            global_objective=problem.global_value,
            f_star=problem.f_star,
            noise_rng=np.random.default_rng(seed),
        )

    a, b, c = run(1), run(1), run(2)
    assert a.state.to_dict() == b.state.to_dict()
    first = a.state.history[0]
    part = a.state.partition
    # Noise-free rewards and perturbations averaging to zero: without DP the global means would
    # be exactly the mapped global values of the centres (the reward map is affine).
    noiseless = {
        n: problem.to_reward(problem.global_value(part.centre(n)[None]))[0]
        for n in first.phase.nodes
    }
    errors = [first.means[n] - noiseless[n] for n in first.phase.nodes]
    sd = privacy.sigma / math.sqrt(5 * first.phase.pulls_per_node)
    assert max(abs(e) for e in errors) > 0.1 * sd  # noise is there ...
    assert max(abs(e) for e in errors) < 6 * sd  # ... of the calibrated size
    assert c.state.history[0].means != first.means
