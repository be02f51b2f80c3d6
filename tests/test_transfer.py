"""Multi-scale features and the broadcast's prior weight against their closed forms."""

from __future__ import annotations

import numpy as np
from optuna.distributions import CategoricalDistribution as Categorical
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution
import pytest
import scipy.linalg

from optuna_fedbo.core.gp import GaussianProcess
from optuna_fedbo.core.gp import KernelParams
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import mixture_kernel
from optuna_fedbo.core.rff import multiscale_range
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.rff import scale_window
from optuna_fedbo.core.rff import se_kernel
from optuna_fedbo.core.transfer import misordered_fraction
from optuna_fedbo.core.transfer import OneStepRanking
from optuna_fedbo.core.transfer import prior_weight
from optuna_fedbo.core.transfer import ranking_weight
from optuna_fedbo.federation import Federation


def test_mixture_kernel_is_the_average_of_se_kernels() -> None:
    distances = np.array([0.0, 0.01, 0.05, 0.1, 0.3, 1.0])
    logs = np.linspace(np.log(0.02), np.log(0.5), 20001)
    numeric = np.mean([se_kernel(distances, np.exp(u)) for u in logs], axis=0)
    np.testing.assert_allclose(mixture_kernel(distances, 0.02, 0.5), numeric, atol=1e-4)
    assert mixture_kernel(np.array([0.0]), 0.02, 0.5)[0] == 1.0


def test_multiscale_features_approximate_the_mixture_kernel() -> None:
    # E[phi(x)^T phi(y)] = k(|x - y|) for the log-uniform scale mixture; averaged over seeds.
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(25, 2))
    distances = np.linalg.norm(x[:, None] - x[None], axis=-1)
    gram = np.mean(
        [
            (phi := RandomFourierFeatures(2, 500, (0.02, 0.5), seed=s)(x)) @ phi.T
            for s in range(40)
        ],
        axis=0,
    )
    assert np.abs(gram - mixture_kernel(distances, 0.02, 0.5)).max() < 0.03
    features = RandomFourierFeatures(2, 1000, (0.02, 0.5), seed=1)
    np.testing.assert_allclose(np.linalg.norm(features(x), axis=1), 1.0)
    # Stratified log-uniform lengthscales: one per slice of [log 0.02, log 0.5].
    slices = np.log(features.lengthscales / 0.02) / np.log(25.0) * 1000
    np.testing.assert_array_equal(np.floor(slices), np.arange(1000))


def test_multiscale_range_is_full_in_one_and_two_dimensions_and_narrows_beyond() -> None:
    assert multiscale_range(1) == multiscale_range(2) == (0.02, 0.5)
    assert multiscale_range(3) == pytest.approx((0.02 * 2.15**2, 0.5))
    assert multiscale_range(4) == pytest.approx((0.02 * 2.15**3, 0.5))
    assert multiscale_range(5) == multiscale_range(12) == (0.25, 0.5)  # at most half the top


Fixed = FloatDistribution(0.5, 0.5)


@pytest.mark.parametrize(
    ("space", "low"),
    [
        # Two parameters that vary and one fixed: 2-D.
        ({"x0": FloatDistribution(0, 1), "x1": FloatDistribution(0, 1), "z": Fixed}, 0.02),
        ({f"x{i}": FloatDistribution(0, 1) for i in range(4)}, 0.02 * 2.15**3),
        # Three parameters, one of them categorical (four encoded columns): 3-D.
        (
            {
                "a": FloatDistribution(0, 1),
                "b": IntDistribution(1, 9),
                "c": Categorical(("u", "v")),
            },
            0.02 * 2.15**2,
        ),
    ],
)
def test_a_federation_draws_its_features_over_the_range_of_its_dimension(space, low) -> None:
    fed = Federation.create(f"range-{len(space)}-{low:.3f}", search_space=space, n_clients=2)
    features = fed.features()
    assert features.unit_frequencies.shape[0] == fed.encoder.n_columns
    assert low <= features.lengthscales.min() < 1.2 * low
    assert 0.4 < features.lengthscales.max() <= 0.5


def test_multiscale_gradient_matches_finite_differences() -> None:
    features = RandomFourierFeatures(2, 60, (0.02, 0.5), seed=3)
    rng = np.random.default_rng(4)
    x, w = rng.uniform(size=(3, 2)), rng.standard_normal(60)
    _, grads = features.value_and_grad(x, w)
    eps = 1e-7
    numeric = np.stack(
        [(features(x + eps * e) @ w - features(x - eps * e) @ w) / (2 * eps) for e in np.eye(2)],
        axis=1,
    )
    np.testing.assert_allclose(grads, numeric, rtol=1e-4, atol=1e-5)


def test_scale_window_keeps_the_prior_variance() -> None:
    lengthscales = RandomFourierFeatures(1, 200, (0.02, 0.5), seed=0).lengthscales
    for center in (0.02, 0.1, 0.5):
        scales = scale_window(lengthscales, center)
        assert np.mean(scales**2) == pytest.approx(1.0)
        assert lengthscales[np.argmax(scales)] == pytest.approx(center, rel=0.05)
    np.testing.assert_array_equal(scale_window(lengthscales, None), 1.0)


def _explicit_weight(phi, y, lam, s, g, c0, tau2):
    # y ~ N(c g + Phi omega, lambda I), c ~ N(c0, tau^2), omega ~ N(0, diag(s^2)): explicit
    # n x n generalized least squares for c.
    k_inv = np.linalg.inv(phi @ np.diag(s**2) @ phi.T + lam * np.eye(len(y)))
    precision = 1 / tau2 + g @ k_inv @ g
    return (c0 / tau2 + g @ k_inv @ y) / precision, 1 / precision


def _weight(stats, posterior, phi, g, y, **prior):
    return prior_weight(posterior, phi.T @ g, float(g @ g), float(g @ y), **prior)[:2]


def test_prior_weight_matches_the_explicit_gp() -> None:
    rng = np.random.default_rng(0)
    m, n, lam, c0, tau2 = 12, 9, 0.05, 1.0, 0.5
    phi = rng.standard_normal((n, m)) / np.sqrt(m)
    s = np.exp(rng.uniform(-0.5, 0.5, size=m))
    g = rng.standard_normal(n)  # any prior-mean function's values at the points
    y = 0.7 * g + 0.3 * rng.standard_normal(n)
    stats = SufficientStatistics(m)
    stats.add(phi, y)
    posterior = stats.posterior(lam, standardize=False, prior_scales=s)
    mean, variance = _weight(stats, posterior, phi, g, y, prior_mean=c0, prior_variance=tau2)
    expected_mean, expected_variance = _explicit_weight(phi, y, lam, s, g, c0, tau2)
    assert mean == pytest.approx(expected_mean, rel=1e-9)
    assert variance == pytest.approx(expected_variance, rel=1e-9)
    with pytest.raises(ValueError):
        prior_weight(posterior, phi.T @ g, 1.0, 1.0, prior_variance=0.0)


@pytest.mark.parametrize("seed", range(5))
def test_prior_weight_follows_the_data(seed: int) -> None:
    # A function that predicts the data keeps its weight near one; an unrelated one gets ~0.
    rng = np.random.default_rng(seed)
    features = RandomFourierFeatures(2, 100, (0.02, 0.5), seed=seed)
    x = rng.uniform(size=(40, 2))
    phi = features(x)
    b = rng.standard_normal(100)
    g = phi @ b
    for y, related in (
        (g + 0.05 * rng.standard_normal(40), True),
        (phi @ rng.standard_normal(100), False),
    ):
        stats = SufficientStatistics(100)
        stats.add(phi, y)
        mean, variance = _weight(stats, stats.posterior(0.01, standardize=False), phi, g, y)
        if related:
            assert mean == pytest.approx(1.0, abs=0.1)
        else:
            assert abs(mean) < min(3 * np.sqrt(variance), 0.5)


def test_leave_one_out_matches_refitting_without_each_point() -> None:
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(12, 2))
    y = np.sin(5.0 * X[:, 0]) + X[:, 1] ** 2
    params = KernelParams(np.array([0.4, 0.6]), 1.3, 1e-2)
    gp = GaussianProcess(X, y, params)
    mean, std = gp.leave_one_out()
    for i in range(len(y)):
        rest = np.arange(len(y)) != i
        # The same standardization as the full fit, so the hyperparameters mean the same.
        reduced = GaussianProcess(X[rest], y[rest], params)
        reduced.offset, reduced.scale = gp.offset, gp.scale
        reduced._targets = (y[rest] - gp.offset) / gp.scale
        reduced._alpha = scipy.linalg.cho_solve((reduced._cholesky, True), reduced._targets)
        expected_mean, expected_std = reduced.predict(X[i : i + 1])
        noise_std = gp.scale * np.sqrt(params.noise_variance)
        assert mean[i] == pytest.approx(expected_mean[0], rel=1e-6, abs=1e-9)
        assert std[i] == pytest.approx(np.hypot(expected_std[0], noise_std), rel=1e-6)


def test_ranking_weight_trusts_a_prior_that_ranks_better_than_the_own_model() -> None:
    rng = np.random.default_rng(0)
    y = np.arange(8.0)
    vague = (np.zeros(8), np.full(8, 10.0))  # the own model knows nothing yet
    sharp = (y.copy(), np.full(8, 1e-3))  # the own model ranks perfectly
    assert ranking_weight(y, *vague, y, rng) > 0.99
    assert ranking_weight(-y, *vague, y, rng) < 0.01  # a prior that ranks backwards
    assert ranking_weight(y, *sharp, y, rng) == pytest.approx(0.5)  # a tie: one half
    assert ranking_weight(rng.permutation(y), *sharp, y, rng) == 0.0
    assert ranking_weight(np.zeros(8), *sharp, y, rng) == 0.0  # a constant ties every pair
    assert ranking_weight(-y[:2], np.zeros(2), np.ones(2), y[:2], rng) == 1.0  # < 3 points
    # Equal observed values order nothing: a prior that ties exactly those pairs and ranks
    # every other pair right is as good a ranker as an own model that splits them.
    steps = np.array([0.0, 0.0, 1.0, 1.0, 2.0, 2.0])
    sharp_steps = (steps + np.array([0.0, 0.1, 0.0, 0.1, 0.0, 0.1]), np.full(6, 1e-3))
    assert ranking_weight(steps, *sharp_steps, steps, rng) == pytest.approx(0.5)


def test_misordered_fraction_counts_earlier_values_on_the_wrong_side() -> None:
    previous = np.array([0.0, 1.0, 2.0, 3.0])
    assert misordered_fraction(2.6, 2.5, previous) == 0.0  # above 0, 1, 2 and below 3: right
    assert misordered_fraction(0.5, 2.5, previous) == 0.5  # wrongly below 1 and 2
    assert misordered_fraction(1.0, 2.5, previous) == pytest.approx(1.5 / 4)  # ties 1: half
    assert misordered_fraction(10.0, -1.0, previous) == 1.0
    # An earlier value equal to the new one orders nothing.
    assert misordered_fraction(0.5, 2.0, previous) == pytest.approx(1 / 3)
    assert misordered_fraction(5.0, 1.0, np.ones(3)) == 0.0


def test_one_step_ranking_prefers_the_model_that_ordered_the_latest_values_better() -> None:
    previous = np.arange(5.0)
    ranking = OneStepRanking(window=3)
    assert not ranking.own_is_better()  # nothing scored: the transfer
    ranking.record(3.5, 3.5, 3.4, previous)  # both right: a tie favours the transfer
    assert not ranking.own_is_better()
    ranking.record(3.5, 0.5, 3.4, previous)  # the transfer misorders three of five
    assert ranking.own_is_better()
    for _ in range(3):  # the window forgets: three newer trials where the transfer was right
        ranking.record(0.5, 3.5, 3.4, previous)
    assert not ranking.own_is_better()
    with pytest.raises(ValueError, match="window"):
        OneStepRanking(window=0)
