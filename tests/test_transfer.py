"""Multi-scale features and the transfer posterior against their closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import mixture_kernel
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.rff import scale_window
from optuna_fedbo.core.rff import se_kernel
from optuna_fedbo.core.transfer import TransferPosterior


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


def _explicit_gp(phi, y, lam, s, g, c0, tau2, phi_test):
    # y ~ N(c0 g, Phi S^2 Phi^T + tau^2 g g^T + lambda I) with explicit n x n matrices.
    kernel = phi @ np.diag(s**2) @ phi.T + lam * np.eye(len(y))
    full = kernel + tau2 * np.outer(g, g)
    residual = y - c0 * g
    k_inv = np.linalg.inv(kernel)
    precision = 1 / tau2 + g @ k_inv @ g
    c_mean = (c0 / tau2 + g @ k_inv @ y) / precision
    _, log_det = np.linalg.slogdet(full)
    log_ml = -0.5 * (residual @ np.linalg.solve(full, residual) + log_det)
    log_ml -= 0.5 * len(y) * np.log(2 * np.pi)
    # Predictive mean of f = c g + phi^T omega at test points (g_test from the test features).
    return c_mean, 1 / precision, log_ml, kernel


def test_transfer_posterior_matches_the_explicit_gp() -> None:
    rng = np.random.default_rng(0)
    m, n, lam, c0, tau2 = 12, 9, 0.05, 1.0, 0.5
    phi = rng.standard_normal((n, m)) / np.sqrt(m)
    b = rng.standard_normal(m)
    s = np.exp(rng.uniform(-0.5, 0.5, size=m))
    y = 0.7 * phi @ b + 0.3 * rng.standard_normal(n)
    stats = SufficientStatistics(m)
    stats.add(phi, y)
    local = stats.posterior(lam, standardize=False, prior_scales=s)
    transfer = TransferPosterior(local, stats.gram, b, prior_mean=c0, prior_variance=tau2)
    c_mean, c_var, log_ml, kernel = _explicit_gp(phi, y, lam, s, phi @ b, c0, tau2, None)
    assert transfer.weight_mean == pytest.approx(c_mean, rel=1e-9)
    assert transfer.weight_variance == pytest.approx(c_var, rel=1e-9)
    assert transfer.log_marginal_likelihood() == pytest.approx(log_ml, rel=1e-9)
    # The posterior mean of omega given c: S^2 Phi^T K^{-1} (y - c g).
    omega = np.diag(s**2) @ phi.T @ np.linalg.solve(kernel, y - c_mean * (phi @ b))
    np.testing.assert_allclose(transfer.mean, c_mean * b + omega, rtol=1e-8, atol=1e-10)
    draws = np.array([transfer.sample(np.random.default_rng(i)) for i in range(4000)])
    np.testing.assert_allclose(draws.mean(axis=0), transfer.mean, atol=0.08)


@pytest.mark.parametrize("seed", range(5))
def test_transfer_weight_follows_the_data(seed: int) -> None:
    # Related data keep the broadcast's weight near one; unrelated data pull it to zero.
    rng = np.random.default_rng(seed)
    features = RandomFourierFeatures(2, 100, (0.02, 0.5), seed=seed)
    x = rng.uniform(size=(40, 2))
    phi = features(x)
    b = rng.standard_normal(100)
    related, unrelated = SufficientStatistics(100), SufficientStatistics(100)
    related.add(phi, phi @ b + 0.05 * rng.standard_normal(40))
    unrelated.add(phi, phi @ rng.standard_normal(100))
    posteriors = [
        TransferPosterior(s.posterior(0.01, standardize=False), s.gram, b)
        for s in (related, unrelated)
    ]
    assert posteriors[0].weight_mean == pytest.approx(1.0, abs=0.1)
    assert abs(posteriors[1].weight_mean) < 3 * np.sqrt(posteriors[1].weight_variance)
    assert abs(posteriors[1].weight_mean) < 0.5
