"""The LDP-BO core against the paper's formulas (Zhou and Tan, AAAI 2021)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special

from optuna_fedbo.core.ldp import argmax_finite
from optuna_fedbo.core.ldp import ATAGPUCB
from optuna_fedbo.core.ldp import ExactGPPosterior
from optuna_fedbo.core.ldp import FeaturePosterior
from optuna_fedbo.core.ldp import GPUCBIndex
from optuna_fedbo.core.ldp import HeavyTailedRewards
from optuna_fedbo.core.ldp import LaplaceRewards
from optuna_fedbo.core.ldp import make_kernel
from optuna_fedbo.core.ldp import Matern52
from optuna_fedbo.core.ldp import median_of_means_index
from optuna_fedbo.core.ldp import MoMAGPUCB
from optuna_fedbo.core.ldp import nystrom_embed
from optuna_fedbo.core.ldp import NystromEmbedding
from optuna_fedbo.core.ldp import parameters as P
from optuna_fedbo.core.ldp import run_finite_domain
from optuna_fedbo.core.ldp import SquaredExponential
from optuna_fedbo.core.ldp import TGPUCB
from optuna_fedbo.core.ldp.ata import truncated_estimate
from optuna_fedbo.samplers._ldp_ucb import DEFAULT_BETA_SCALES

# --- kernels -----------------------------------------------------------------------------------


def test_squared_exponential_formula() -> None:
    x, z = np.array([[0.1, 0.2]]), np.array([[0.4, -0.2], [0.1, 0.2]])
    s2 = np.sum((x - z) ** 2, axis=1)
    np.testing.assert_allclose(SquaredExponential(0.3)(x, z)[0], np.exp(-s2 / (2 * 0.09)))


def test_matern_matches_the_papers_bessel_form() -> None:
    nu, ell = 2.5, 0.2
    s = np.array([1e-3, 0.05, 0.2, 0.7, 1.5])
    u = s * math.sqrt(2 * nu) / ell
    bessel = 2 ** (1 - nu) / math.gamma(nu) * u**nu * scipy.special.kv(nu, u)
    x = np.zeros((1, 1))
    np.testing.assert_allclose(Matern52(ell)(x, s[:, None])[0], bessel, rtol=1e-10)
    assert Matern52(ell)(x, x)[0, 0] == 1.0


@pytest.mark.parametrize("kernel", [SquaredExponential(0.3), Matern52(0.3)])
def test_kernel_gradient_matches_finite_differences(kernel) -> None:
    rng = np.random.default_rng(0)
    x, z = rng.uniform(size=(3, 2)), rng.uniform(size=(4, 2))
    grad = kernel.gradient(x, z)
    h = 1e-6
    for d in range(2):
        step = np.zeros(2)
        step[d] = h
        numeric = (kernel(x + step, z) - kernel(x - step, z)) / (2 * h)
        np.testing.assert_allclose(grad[:, :, d], numeric, atol=1e-6)


def test_make_kernel() -> None:
    assert isinstance(make_kernel("se", 0.5), SquaredExponential)
    assert make_kernel("matern").lengthscale == 0.2
    kernel = Matern52(0.1)
    assert make_kernel(kernel) is kernel
    with pytest.raises(ValueError, match="Unknown kernel"):
        make_kernel("rbf")
    with pytest.raises(ValueError, match="lengthscale"):
        SquaredExponential(0.0)


# --- exact GP ----------------------------------------------------------------------------------


def test_exact_gp_with_repeats_equals_eq_2_and_3() -> None:
    rng = np.random.default_rng(1)
    kernel = SquaredExponential(0.2)
    base = rng.uniform(size=(5, 1))
    points = base[rng.integers(0, 5, size=30)]  # 30 plays of 5 points
    y = rng.normal(size=30)
    lam = 0.7
    posterior = ExactGPPosterior.from_observations(kernel, points, y, lam)
    x = rng.uniform(size=(7, 1))
    gram = kernel(points, points) + lam * np.eye(30)
    cross = kernel(points, x)
    mean = cross.T @ np.linalg.solve(gram, y)
    variance = 1.0 - np.sum(cross * np.linalg.solve(gram, cross), axis=0)
    got_mean, got_variance = posterior.predict(x)
    np.testing.assert_allclose(got_mean, mean, atol=1e-10)
    np.testing.assert_allclose(got_variance, variance, atol=1e-10)
    gain = 0.5 * np.linalg.slogdet(np.eye(30) + kernel(points, points) / lam)[1]
    assert posterior.information_gain == pytest.approx(gain, rel=1e-10)
    assert posterior.n_observations == 30


def test_exact_gp_gradients_and_prior() -> None:
    rng = np.random.default_rng(2)
    kernel = Matern52(0.3)
    posterior = ExactGPPosterior.from_observations(
        kernel, rng.uniform(size=(6, 2)), rng.normal(size=6), 1.0
    )
    x = rng.uniform(size=(3, 2))
    _, _, grad_mean, grad_var = posterior.predict_with_grads(x)
    h = 1e-6
    for d in range(2):
        step = np.zeros(2)
        step[d] = h
        (mp, vp), (mm, vm) = posterior.predict(x + step), posterior.predict(x - step)
        np.testing.assert_allclose(grad_mean[:, d], (mp - mm) / (2 * h), atol=1e-5)
        np.testing.assert_allclose(grad_var[:, d], (vp - vm) / (2 * h), atol=1e-5)
    prior = ExactGPPosterior.from_observations(kernel, np.zeros((0, 2)), np.zeros(0), 1.0)
    mean, var = prior.predict(x)
    assert np.all(mean == 0) and np.all(var == 1) and prior.information_gain == 0.0


# --- parameters --------------------------------------------------------------------------------


def test_laplace_scale_and_moments() -> None:
    rewards = LaplaceRewards(epsilon=0.5, value_bound=2.0, noise_bound=1.0)
    assert rewards.scale == pytest.approx(2 * 3 / 0.5)  # L = 2 (B + R) / epsilon = 12
    assert rewards.reward_moment == pytest.approx(4 + 1 + 8 * 9 / 0.25)  # Theorem 2's v
    assert rewards.reward_moment == pytest.approx(4 + 1 + 2 * 12**2)  # Algorithm 2's K
    assert rewards.noise_moment == pytest.approx(1 + 8 * 9 / 0.25)  # Corollary 1's c
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="epsilon"):
            LaplaceRewards(bad, 1.0, 1.0)
    with pytest.raises(ValueError, match="value_bound"):
        LaplaceRewards(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="noise_bound"):
        LaplaceRewards(1.0, 1.0, -0.1)


def test_heavy_tailed_moments() -> None:
    # The paper's Student-t (3 dof) setting: alpha = 1, c = 3, v = B^2 + 3.
    rewards = HeavyTailedRewards(value_bound=2.0, noise_moment=3.0)
    assert rewards.reward_moment == pytest.approx(7.0)
    general = HeavyTailedRewards(value_bound=2.0, noise_moment=3.0, moment_order=0.5)
    assert general.reward_moment == pytest.approx(2**0.5 * (2**1.5 + 3))
    assert HeavyTailedRewards(2.0, 3.0, reward_moment_bound=9.0).reward_moment == 9.0
    with pytest.raises(ValueError, match="alpha"):
        HeavyTailedRewards(1.0, 1.0, moment_order=1.5)


def test_tgp_truncation_levels() -> None:
    rewards = LaplaceRewards(1.0, 2.0, 1.0)  # L = 6
    assert P.tgp_truncation(1, rewards) == pytest.approx(3.0)  # b_1 = B + R
    assert P.tgp_truncation(50, rewards) == pytest.approx(3.0 + 6.0 * math.log(50))
    heavy = HeavyTailedRewards(2.0, 3.0)  # v = 7, alpha = 1: b_t = sqrt(7) t^(1/4)
    assert P.tgp_truncation(16, heavy) == pytest.approx(math.sqrt(7) * 2.0)


def test_tgp_beta_is_algorithm_2_line_5() -> None:
    rewards = LaplaceRewards(1.0, 2.0, 1.0)
    t, gamma, lam, delta = 20, 3.5, 2.0, 0.1
    b_prev = 3.0 + 6.0 * math.log(19)
    big_k = 4 + 1 + 2 * 36
    expected = (
        2.0
        + 2 * math.sqrt(2) / math.sqrt(lam) * b_prev * math.sqrt(gamma + math.log(1 / delta))
        + math.sqrt(big_k * (math.log(19) + 1)) / math.sqrt(lam)
    )
    got = P.tgp_beta(t, rewards, information_gain=gamma, regularization=lam, delta=delta)
    assert got == pytest.approx(expected, rel=1e-12)
    heavy = HeavyTailedRewards(2.0, 3.0)
    b_prev = math.sqrt(7) * 19**0.25
    expected = (
        2.0
        + 2 * math.sqrt(2) / math.sqrt(lam) * b_prev * math.sqrt(gamma + math.log(1 / delta))
        + math.sqrt(7) * math.sqrt(2 * 19**0.5) / math.sqrt(lam)
    )
    got = P.tgp_beta(t, heavy, information_gain=gamma, regularization=lam, delta=delta)
    assert got == pytest.approx(expected, rel=1e-12)
    scaled = P.tgp_beta(
        t, heavy, information_gain=gamma, regularization=lam, delta=delta, width_scale=0.1
    )
    assert scaled == pytest.approx(2.0 + 0.1 * (expected - 2.0), rel=1e-12)


def test_nystrom_and_ata_parameters_are_theorem_2() -> None:
    rewards = LaplaceRewards(1.0, 2.0, 1.0)
    v, eps_n, horizon, delta, lam, m = rewards.reward_moment, 0.5, 1000, 0.05, 1.5, 12
    rho = 1.5 / 0.5
    assert P.nystrom_rho(eps_n) == pytest.approx(3.0)
    assert P.nystrom_q(eps_n, horizon, delta) == pytest.approx(
        6 * rho * math.log(4 * horizon / delta) / eps_n**2
    )
    log_term = math.log(4 * m * horizon / delta)
    for t in (1, 7, 300):  # alpha = 1: b_t does not depend on t
        assert P.ata_truncation(t, m, rewards, horizon=horizon, delta=delta) == pytest.approx(
            math.sqrt(v / log_term)
        )
    beta = P.ata_beta(
        9, m, rewards, horizon=horizon, delta=delta, regularization=lam, accuracy=eps_n
    )
    assert beta == pytest.approx(
        2.0 * (1 + 1 / math.sqrt(1 - eps_n)) + 4 * math.sqrt(log_term * v * m / lam)
    )
    scaled = P.ata_beta(
        9,
        m,
        rewards,
        horizon=horizon,
        delta=delta,
        regularization=lam,
        accuracy=eps_n,
        width_scale=0.5,
    )
    # width_scale multiplies every term but B: the approximation term and the noise term.
    assert scaled == pytest.approx(
        2.0 + 0.5 * (2.0 / math.sqrt(1 - eps_n) + 4 * math.sqrt(log_term * v * m / lam))
    )
    with pytest.raises(ValueError, match="accuracy"):
        P.nystrom_q(1.0, horizon, delta)


def test_moma_epoch_length_and_beta() -> None:
    assert P.moma_epoch_length(1000, 0.05) == math.ceil(24 * math.log(4 * math.e * 1000 / 0.05))
    assert P.moma_epoch_length(1000, 0.05) == 295
    assert P.moma_epoch_length(100, 0.1) == 224  # 24 ln(10873.1) = 223.06
    rewards = LaplaceRewards(1.0, 2.0, 1.0)
    c, eps_n, m = rewards.noise_moment, 0.5, 4
    expected = 2.0 * (1 + 1 / math.sqrt(0.5)) + 3 * math.sqrt(9 * m * c)  # alpha = 1, lambda = 1
    beta = P.moma_beta(7, m, rewards, regularization=1.0, accuracy=eps_n)
    assert beta == pytest.approx(expected)
    heavy = HeavyTailedRewards(2.0, 3.0, moment_order=0.5)
    expected = 2.0 * (1 + 1 / math.sqrt(0.5)) + 3 / 2 * (9 * m * 3) ** (1 / 1.5) * 7 ** (0.5 / 3)
    beta = P.moma_beta(7, m, heavy, regularization=4.0, accuracy=eps_n)
    assert beta == pytest.approx(expected)
    scaled = P.moma_beta(7, m, heavy, regularization=4.0, accuracy=eps_n, width_scale=0.2)
    assert scaled == pytest.approx(2.0 + 0.2 * (expected - 2.0))  # all but B scaled


def test_parameter_validation() -> None:
    with pytest.raises(ValueError, match="delta"):
        P.moma_epoch_length(100, 0.0)
    with pytest.raises(ValueError, match="horizon"):
        P.moma_epoch_length(0, 0.1)
    with pytest.raises(ValueError, match="regularization"):
        P.tgp_beta(2, LaplaceRewards(1, 1, 1), information_gain=0, regularization=0, delta=0.1)


# --- Nystrom -----------------------------------------------------------------------------------


def test_nystrom_embedding_reproduces_the_kernel_on_its_dictionary() -> None:
    rng = np.random.default_rng(3)
    kernel = SquaredExponential(0.3)
    dictionary = rng.uniform(size=(6, 2))
    embedding = NystromEmbedding(kernel, np.vstack([dictionary, dictionary[:2]]))
    assert embedding.dimension == 6  # repeats enter once
    phi = embedding(dictionary)
    np.testing.assert_allclose(phi @ phi.T, kernel(dictionary, dictionary), atol=1e-8)
    # phi = (K_D^(1/2))^+ k_D(x): symmetric square root in the dictionary's coordinates.
    values, vectors = np.linalg.eigh(kernel(embedding.dictionary, embedding.dictionary))
    root_inverse = vectors @ np.diag(values**-0.5) @ vectors.T
    x = rng.uniform(size=(3, 2))
    np.testing.assert_allclose(
        embedding(x), kernel(x, embedding.dictionary) @ root_inverse, atol=1e-8
    )


def test_nystrom_sampling_probabilities() -> None:
    kernel = SquaredExponential(0.3)
    points = np.linspace(0, 1, 4)[:, None]
    rng = np.random.default_rng(4)
    # p = min(q sigma^2, 1): q sigma^2 >= 1 keeps every point, sigma = 0 keeps none.
    assert nystrom_embed(kernel, points, np.full(4, 0.5), 2.0, rng).dimension == 4
    assert nystrom_embed(kernel, points, np.zeros(4), 1e6, rng).dimension == 0
    draws = [
        nystrom_embed(kernel, points[:1], np.array([0.1]), 2.0, rng, counts=np.array([3]))
        for _ in range(4000)
    ]
    kept = np.mean([d.dimension for d in draws])
    assert kept == pytest.approx(1 - 0.8**3, abs=0.03)  # 1 - (1 - p)^n with p = 0.2


def test_feature_posterior_formula() -> None:
    rng = np.random.default_rng(5)
    kernel = Matern52(0.3)
    embedding = NystromEmbedding(kernel, rng.uniform(size=(5, 1)))
    phi_data = embedding(rng.uniform(size=(9, 1)))
    lam = 0.5
    gram = phi_data.T @ phi_data + lam * np.eye(5)
    theta = rng.normal(size=5)
    posterior = FeaturePosterior(embedding, theta, gram, lam)
    x = rng.uniform(size=(4, 1))
    phi = embedding(x)
    expected_var = (
        1 - np.sum(phi**2, axis=1) + lam * np.sum(phi * np.linalg.solve(gram, phi.T).T, axis=1)
    )
    mean, var = posterior.predict(x)
    np.testing.assert_allclose(mean, phi @ theta, atol=1e-10)
    np.testing.assert_allclose(var, expected_var, atol=1e-10)
    _, _, grad_mean, grad_var = posterior.predict_with_grads(x)
    h = 1e-6
    (mp, vp), (mm, vm) = posterior.predict(x + h), posterior.predict(x - h)
    np.testing.assert_allclose(grad_mean[:, 0], (mp - mm) / (2 * h), atol=1e-5)
    np.testing.assert_allclose(grad_var[:, 0], (vp - vm) / (2 * h), atol=1e-5)


# --- ATA truncation ----------------------------------------------------------------------------


def test_truncated_estimate_is_algorithm_1_lines_7_to_10() -> None:
    rng = np.random.default_rng(6)
    features = rng.normal(size=(12, 3))
    y = rng.standard_cauchy(12)
    levels = np.full(12, 0.8)
    lam = 1.3
    theta, gram, whitened = truncated_estimate(features, y, levels, lam)
    v = features.T @ features + lam * np.eye(3)
    values, vectors = np.linalg.eigh(v)
    v_inv_root = vectors @ np.diag(values**-0.5) @ vectors.T
    u = v_inv_root @ features.T
    r = np.zeros(3)
    for i in range(3):
        for tau in range(12):
            if abs(u[i, tau] * y[tau]) <= levels[tau]:
                r[i] += u[i, tau] * y[tau]
    np.testing.assert_allclose(gram, v)
    np.testing.assert_allclose(theta, v_inv_root @ r, atol=1e-12)
    # With no truncation, theta is the ridge estimate V^{-1} Phi^T y.
    untruncated, _, _ = truncated_estimate(features, y, np.full(12, np.inf), lam)
    np.testing.assert_allclose(untruncated, np.linalg.solve(v, features.T @ y), atol=1e-10)


# --- median of means ---------------------------------------------------------------------------


def test_median_of_means_picks_the_central_estimate() -> None:
    gram = np.diag([4.0, 1.0])
    estimates = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.3], [5.0, -5.0], [0.05, 0.1]])
    k_star, radii = median_of_means_index(estimates, gram)
    # r_j = median over s != j of ||theta_j - theta_s||_V, computed by hand for j = 0.
    d0 = [
        math.sqrt(4 * 0.01),
        math.sqrt(0.09),
        math.sqrt(4 * 25 + 25),
        math.sqrt(4e-4 * 25 + 0.01),
    ]
    assert radii[0] == pytest.approx(np.median(d0))
    assert k_star == int(np.argmin(radii))
    assert k_star != 3 and radii[3] == max(radii)
    assert k_star == 4


# --- state machines ----------------------------------------------------------------------------


def test_tgp_truncates_once_at_arrival() -> None:
    rewards = LaplaceRewards(1.0, 1.0, 0.0)  # b_1 = 1, b_2 = 1 + 2 ln 2
    algorithm = TGPUCB(SquaredExponential(0.2), rewards, beta_scale=0.01, regularization=1.0)
    algorithm.observe(np.array([0.5]), 1.5)  # |1.5| > b_1: replaced by 0
    algorithm.observe(np.array([0.5]), 1.5)  # |1.5| <= b_2: kept
    assert algorithm.n_truncated == 1 and algorithm.t == 2
    reference = ExactGPPosterior.from_observations(
        SquaredExponential(0.2), np.array([[0.5], [0.5]]), np.array([0.0, 1.5]), 1.0
    )
    x = np.linspace(0, 1, 5)[:, None]
    np.testing.assert_allclose(algorithm.posterior.predict(x)[0], reference.predict(x)[0])
    theorem = P.tgp_beta(
        3, rewards, information_gain=reference.information_gain, regularization=1.0, delta=0.05
    )
    expected_beta = 1.0 + 0.01 * (theorem - 1.0)  # beta_scale shrinks all but the B term
    assert algorithm.beta() == pytest.approx(expected_beta)
    with pytest.raises(ValueError, match="finite"):
        algorithm.observe(np.array([0.1]), math.nan)


def test_moma_epochs_and_errors() -> None:
    rewards = LaplaceRewards(1.0, 1.0, 1.0)
    kernel = SquaredExponential(0.2)
    with pytest.raises(ValueError, match="smaller than one MoMA epoch"):
        MoMAGPUCB(kernel, rewards, horizon=100, delta=0.05, epoch_length="theorem")
    with pytest.raises(ValueError, match="smaller than one MoMA epoch"):
        MoMAGPUCB(kernel, rewards, horizon=10, epoch_length=11)
    with pytest.raises(ValueError, match="'practical', 'theorem'"):
        MoMAGPUCB(kernel, rewards, horizon=100, epoch_length="paper")
    moma = MoMAGPUCB(kernel, rewards, horizon=1000, epoch_length="theorem")
    assert moma.epoch_length == 295 and moma.n_epochs_in_horizon == 3
    moma = MoMAGPUCB(kernel, rewards, horizon=1000)  # the practical default
    assert moma.epoch_length == 13 and moma.n_epochs_in_horizon == 76
    small = MoMAGPUCB(
        kernel,
        rewards,
        horizon=60,
        epoch_length=5,
        regularization=1.0,
        rng=np.random.default_rng(0),
    )
    with pytest.raises(ValueError, match="k = 5"):
        small.add_epoch(np.array([0.2]), np.ones(4))
    # Row j of the table is the j-th play of every epoch (Algorithm 3, line 10).
    plays = np.array([[1.0, 1.1, 0.9, 50.0, 1.0], [-1.0, -0.9, -1.1, -1.0, -60.0]])
    small.add_epoch(np.array([0.2]), plays[0])
    small.add_epoch(np.array([0.8]), plays[1])
    assert small.n_epochs == 2
    phi = small.posterior.embedding(np.array([[0.2], [0.8]]))
    gram = phi.T @ phi + np.eye(small.dimension)
    estimates = np.linalg.solve(gram, phi.T @ plays).T
    k_star, _ = median_of_means_index(estimates, gram)
    assert k_star not in (3, 4)  # the outlying plays are not selected
    np.testing.assert_allclose(small.posterior.theta, estimates[k_star])
    assert small.last_selection == k_star


def test_argmax_finite_breaks_ties_uniformly() -> None:
    prior = ExactGPPosterior.from_observations(
        SquaredExponential(0.2), np.zeros((0, 1)), np.zeros(0), 1.0
    )
    domain = np.linspace(0, 1, 10)[:, None]
    rng = np.random.default_rng(0)
    picks = {argmax_finite(GPUCBIndex(prior, 1.0), domain, rng) for _ in range(200)}
    assert picks == set(range(10))


# --- behaviour: a clear win over random search at epsilon = 1 ----------------------------------


def _synthetic(seed: int, kernel):
    """The paper's synthetic problem: f = sum_i a_i k(., x_i) on 100 points of [0, 1]."""
    rng = np.random.default_rng(seed)
    domain = np.linspace(0, 1, 100)[:, None]
    f = kernel(domain, domain[rng.integers(0, 100, 100)]) @ rng.uniform(-1, 1, 100)
    return domain, f


def _with_defaults(name: str, kernel, rewards, horizon: int, rng: np.random.Generator):
    """A core algorithm with the sampler's defaults (``beta_scale`` and every core default)."""
    scale = DEFAULT_BETA_SCALES[name]
    if name == "tgp":
        return TGPUCB(kernel, rewards, beta_scale=scale)
    if name == "ata":
        return ATAGPUCB(kernel, rewards, horizon=horizon, beta_scale=scale, rng=rng)
    return MoMAGPUCB(kernel, rewards, horizon=horizon, beta_scale=scale, rng=rng)


@pytest.mark.parametrize(
    "name,horizon", [("tgp", 600), ("ata", 1000), ("moma", 3000)], ids=["tgp", "ata", "moma"]
)
def test_ldp_algorithms_beat_random_search_at_epsilon_1(name: str, horizon: int) -> None:
    kernel = SquaredExponential(0.2)
    ratios = []
    for seed in (11, 12, 13):
        domain, f = _synthetic(seed, kernel)
        rewards = LaplaceRewards(1.0, float(np.max(np.abs(f))), 1.0)
        noise = np.random.default_rng(seed + 1)

        def reward(i: int, f=f, noise=noise, scale=rewards.scale) -> float:
            return f[i] + noise.uniform(-1, 1) + noise.laplace(0.0, scale)

        rng = np.random.default_rng(seed + 2)
        algorithm = _with_defaults(name, kernel, rewards, horizon, rng)
        played = run_finite_domain(algorithm, domain, reward, horizon, rng)
        regret = np.sum(f.max() - f[played])
        random_regret = horizon * (f.max() - f.mean())  # expected regret of random search
        ratios.append(regret / random_regret)
    assert np.mean(ratios) < 0.6, ratios


# --- tuning-budget defaults: epoch length, regularization, bounded dictionaries ------------------


def test_practical_epoch_length_keeps_ten_epochs_and_the_log_order() -> None:
    for horizon in (20, 150, 1000, 10_000):
        order = math.ceil(math.log(4 * math.e * horizon / 0.05))  # the theorem's k without 24
        k = P.practical_epoch_length(horizon, 0.05)
        assert k == min(order, horizon // 10)
        assert horizon // k >= 10
    assert [P.practical_epoch_length(t, 0.05) for t in (20, 150, 1000, 10_000)] == [2, 11, 13, 15]
    assert P.practical_epoch_length(5, 0.05) == 1  # below ten plays: one play per epoch
    assert P.moma_epoch_length(20, 0.05) == 202 > 20  # the theorem's k: no epoch fits


def test_practical_regularization_is_noise_moment_over_half_b_squared() -> None:
    rewards = LaplaceRewards(1.0, 2.0, 1.0)  # L = 6, c = R^2 + 2 L^2 = 73
    assert P.practical_regularization(rewards) == pytest.approx(4 * 73 / 4)  # c / (B / 2)^2
    assert P.resolve_regularization("practical", rewards) == pytest.approx(73)
    assert P.resolve_regularization(0.5, rewards) == 0.5
    heavy = HeavyTailedRewards(2.0, 3.0, moment_order=0.5)  # c^(2 / 1.5) / B^2
    assert P.practical_regularization(heavy) == pytest.approx(3 ** (4 / 3))
    nearly_exact = LaplaceRewards(1e4, 1.0, 0.0)
    assert P.practical_regularization(nearly_exact) == P.MIN_PRACTICAL_REGULARIZATION
    for bad in ("auto", 0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="regularization"):
            P.resolve_regularization(bad, rewards)


def test_capped_oversampling_expects_exactly_the_bound() -> None:
    from optuna_fedbo.core.ldp.nystrom import capped_oversampling
    from optuna_fedbo.core.ldp.nystrom import inclusion_probabilities

    rng = np.random.default_rng(7)
    variances, counts = rng.uniform(0, 1, 500), rng.integers(1, 4, 500)
    q = 800.0
    assert capped_oversampling(variances, q, 600, counts) == q  # not binding: the paper's q
    capped = capped_oversampling(variances, q, 40, counts)
    assert capped < q
    expected = np.sum(inclusion_probabilities(variances, capped, counts))
    assert expected == pytest.approx(40, abs=1e-6)


def test_bounded_dictionary_never_exceeds_its_bound() -> None:
    kernel = SquaredExponential(0.2)
    rng = np.random.default_rng(8)
    points = rng.uniform(size=(400, 2))
    sizes = [
        nystrom_embed(kernel, points, np.ones(400), 1e3, rng, max_size=25).dimension
        for _ in range(20)
    ]
    assert max(sizes) <= 25 and np.mean(sizes) >= 20  # the paper's q would keep all 400
    assert nystrom_embed(kernel, points, np.ones(400), 1e3, rng).dimension == 400


@pytest.mark.parametrize("name", ["ata", "moma"])
def test_ata_and_moma_dictionaries_stay_bounded_on_continuous_points(name: str) -> None:
    kernel = SquaredExponential(0.2)
    rewards = LaplaceRewards(1.0, 1.0, 0.0)
    rng = np.random.default_rng(9)
    sizes = []
    if name == "ata":
        algorithm = ATAGPUCB(kernel, rewards, horizon=300, max_dictionary_size=12, rng=rng)
        for _ in range(120):
            algorithm.observe(rng.uniform(size=2), rng.laplace(0, 2))
            sizes.append(algorithm.dimension)
            # The variances kept for the next dictionary are those of the new posterior.
            _, direct = algorithm.posterior.predict(algorithm._unique)
            np.testing.assert_allclose(algorithm._variances, direct, atol=1e-8)
    else:
        algorithm = MoMAGPUCB(
            kernel, rewards, horizon=300, epoch_length=2, max_dictionary_size=12, rng=rng
        )
        for _ in range(120):
            algorithm.add_epoch(rng.uniform(size=2), rng.laplace(0, 2, size=2))
            sizes.append(algorithm.dimension)
    assert max(sizes) == 12  # reached, never exceeded
    with pytest.raises(ValueError, match="max_dictionary_size"):
        ATAGPUCB(kernel, rewards, horizon=10, max_dictionary_size=0)


def _tiny_run(name: str, horizon: int, seed: int = 0) -> np.ndarray:
    """Run an algorithm with its defaults on 5 points of [0, 1] (f = 0, 0.25, 0.5, 0.75, 1)."""
    domain = np.linspace(0, 1, 5)[:, None]
    f = domain[:, 0]
    rewards = LaplaceRewards(1.0, 1.0, 0.0)
    noise = np.random.default_rng(seed)
    rng = np.random.default_rng(seed + 1)
    algorithm = _with_defaults(name, SquaredExponential(0.2), rewards, horizon, rng)
    reward = lambda i: f[i] + noise.laplace(0.0, rewards.scale)  # noqa: E731
    return f[run_finite_domain(algorithm, domain, reward, horizon, rng)]


@pytest.mark.parametrize(
    "name,horizon", [("tgp", 3_000), ("ata", 3_000), ("moma", 10_000)], ids=["tgp", "ata", "moma"]
)
def test_every_algorithm_runs_from_t_20_to_thousands(name: str, horizon: int) -> None:
    short = _tiny_run(name, 20)
    assert short.shape == (20,)
    long = _tiny_run(name, horizon)
    assert long.shape == (horizon,)
    # After thousands of privatized values the plays concentrate on the best points: mean
    # regret per play below 0.1 (random search: 0.5; Laplace noise of standard deviation 2.8).
    # MoMA needs the longest horizon: each of its epochs plays one point many times.
    assert np.mean(1.0 - long[-1000:]) < 0.1
