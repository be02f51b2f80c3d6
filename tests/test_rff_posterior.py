from __future__ import annotations

import numpy as np
import pytest

from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import BLOCK_ROWS
from optuna_fedbo.core.rff import fast_cos
from optuna_fedbo.core.rff import RandomFourierFeatures


def test_features_are_identical_for_the_same_public_seed() -> None:
    x = np.random.default_rng(0).uniform(size=(5, 3))
    a = RandomFourierFeatures(3, 64, 0.2, seed=7)(x)
    b = RandomFourierFeatures(3, 64, 0.2, seed=7)(x)
    c = RandomFourierFeatures(3, 64, 0.2, seed=8)(x)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_features_have_unit_norm_and_approximate_the_se_kernel() -> None:
    # Appendix A of the FTS paper: phi(x)^T phi(x') ~ exp(-|x - x'|^2 / (2 l^2)), k(x, x) = 1.
    lengthscale = 0.3
    features = RandomFourierFeatures(2, 4000, lengthscale, seed=0)
    x = np.random.default_rng(1).uniform(size=(30, 2))
    phi = features(x)
    np.testing.assert_allclose(np.linalg.norm(phi, axis=1), 1.0)
    exact = np.exp(-np.sum((x[:, None] - x[None]) ** 2, axis=-1) / (2 * lengthscale**2))
    assert np.abs(phi @ phi.T - exact).max() < 0.06


def test_fast_features_are_the_exact_ones_to_single_precision() -> None:
    # Range-reduced in double precision, so however large the argument (lengthscale 0.001
    # makes it thousands of radians) the error stays that of a float32 cosine near [-pi, pi].
    z = np.random.default_rng(0).standard_normal((200, 300)) * np.array([[1.0], [3e3]]).repeat(
        100, axis=0
    )
    assert np.abs(fast_cos(z) - np.cos(z)).max() < 3e-7
    assert fast_cos(z).dtype == np.float64
    for lengthscale in (0.001, 0.2, (0.02, 0.5)):
        features = RandomFourierFeatures(3, 200, lengthscale, seed=3)
        x = np.random.default_rng(4).uniform(size=(500, 3))
        exact, fast = features(x), features(x, fast=True)
        np.testing.assert_allclose(np.linalg.norm(fast, axis=1), 1.0, rtol=1e-6)
        assert np.abs(fast - exact).max() < 1e-6
        assert not np.array_equal(fast, exact)  # the fast path is taken


class _CountingFeatures(RandomFourierFeatures):
    """Features that record how many rows each feature matrix they compute has."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.rows: list[int] = []

    def __call__(self, x: np.ndarray, *, fast: bool = False) -> np.ndarray:
        self.rows.append(len(x))
        return super().__call__(x, fast=fast)


@pytest.mark.parametrize("n", [1, 3, 127, 128, 255, 256, 300, 577, 1345])
def test_weighted_sums_come_from_blocks_of_a_few_hundred_kilobytes_at_most(n: int) -> None:
    features = _CountingFeatures(4, 200, (0.2, 0.5), seed=3)
    weights = np.random.default_rng(5).standard_normal(200)
    x = np.random.default_rng(n).uniform(size=(n, 4))
    features.rows.clear()
    sums = features.weighted_sum(x, weights)
    blocks = features.rows.copy()
    # The numbers of one product over all rows (blockwise, each row meets the same BLAS
    # kernels: equal to the last bit with OpenBLAS; rounding is all another BLAS may add).
    np.testing.assert_allclose(sums, features(x) @ weights, rtol=0, atol=1e-14)
    # Blocks of BLOCK_ROWS rows, the rows left over in the last: never one large matrix.
    assert sum(blocks) == n
    assert all(rows == BLOCK_ROWS for rows in blocks[:-1])
    assert blocks[-1] < 2 * BLOCK_ROWS
    # The fast path: blockwise too (no feature matrix at all), to single precision.
    features.rows.clear()
    fast = features.weighted_sum(x, weights, fast=True)
    assert features.rows == []
    assert np.abs(fast - sums).max() < 2e-7 * np.linalg.norm(weights)


def _single_precision_sums(
    features: RandomFourierFeatures, x: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """The fast weighted sums' formula: arguments in turns less their nearest integer (double
    precision), then cosines, norms and sums in single precision."""
    turns = (x @ features.unit_frequencies / features.lengthscales + features.phases) / (2 * np.pi)
    cosines = np.cos((turns - np.rint(turns)).astype(np.float32) * np.float32(2 * np.pi))
    norms = np.sqrt((cosines * cosines).sum(axis=1, dtype=np.float32))
    return (cosines @ weights.astype(np.float32)) / norms


def test_fast_weighted_sums_are_single_precision_after_an_exact_reduction() -> None:
    # However large the arguments (lengthscale 0.001: thousands of radians), the reduction in
    # turns is exact, and what is left is single precision's rounding.
    for n_dims, lengthscale in ((1, 0.001), (2, (0.02, 0.5)), (4, (0.2, 0.5)), (8, 0.1)):
        features = RandomFourierFeatures(n_dims, 200, lengthscale, seed=n_dims)
        rng = np.random.default_rng(n_dims)
        weights = rng.standard_normal(200)
        x = rng.uniform(size=(300, n_dims))
        fast = features.weighted_sum(x, weights, fast=True)
        assert fast.dtype == np.float64
        np.testing.assert_allclose(
            fast, _single_precision_sums(features, x, weights), rtol=1e-5, atol=1e-6
        )
        exact = features(x) @ weights
        assert np.abs(fast - exact).max() < 2e-7 * np.linalg.norm(weights)
        assert not np.array_equal(fast, features(x, fast=True) @ weights)  # not double's


def test_frequencies_follow_the_spectral_density() -> None:
    # s_i ~ N(0, I / l^2) and b_i ~ U(0, 2 pi).
    features = RandomFourierFeatures(3, 20000, 0.25, seed=0)
    frequencies = features.unit_frequencies / features.lengthscale
    assert np.std(frequencies) == pytest.approx(4.0, rel=0.02)
    assert 0.0 <= features.phases.min() and features.phases.max() <= 2 * np.pi
    assert np.mean(features.phases) == pytest.approx(np.pi, rel=0.02)


def test_gradient_matches_finite_differences() -> None:
    features = RandomFourierFeatures(3, 50, 0.3, seed=1)
    rng = np.random.default_rng(2)
    x, w = rng.uniform(size=(4, 3)), rng.standard_normal(50)
    values, grads = features.value_and_grad(x, w)
    np.testing.assert_allclose(values, features(x) @ w)
    eps = 1e-6
    numeric = np.stack(
        [(features(x + eps * e) @ w - features(x - eps * e) @ w) / (2 * eps) for e in np.eye(3)],
        axis=1,
    )
    np.testing.assert_allclose(grads, numeric, atol=1e-7)
    np.testing.assert_allclose(grads, np.einsum("nmd,m->nd", features.jacobian(x), w))
    # One weight vector per point (FTS-DE's sub-region vectors).
    per_point = rng.standard_normal((4, 50))
    values, grads = features.value_and_grad(x, per_point)
    np.testing.assert_allclose(values, np.einsum("nm,nm->n", features(x), per_point))
    np.testing.assert_allclose(grads, np.einsum("nmd,nm->nd", features.jacobian(x), per_point))


def _explicit_posterior(phi: np.ndarray, y: np.ndarray, lam: float):
    # Equation (3) of the FTS paper with explicit inverses, for reference only.
    sigma = phi.T @ phi + lam * np.eye(phi.shape[1])
    sigma_inv = np.linalg.inv(sigma)
    return sigma_inv @ phi.T @ y, lam * sigma_inv


def test_posterior_matches_equation_3() -> None:
    rng = np.random.default_rng(0)
    phi, y, lam = rng.standard_normal((30, 10)), rng.standard_normal(30), 0.1
    stats = SufficientStatistics(10)
    stats.add(phi[:17], y[:17])
    stats.add(phi[17:], y[17:])  # incremental updates equal one batch
    posterior = stats.posterior(lam, standardize=False)
    mean, cov = _explicit_posterior(phi, y, lam)
    np.testing.assert_allclose(posterior.mean, mean, rtol=1e-10)
    draws = posterior.sample(np.random.default_rng(1), size=40000)
    np.testing.assert_allclose(
        draws.mean(axis=0), mean, atol=4 * np.sqrt(cov.max() / 40000) + 1e-3
    )
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=0.05 * np.abs(cov).max())
    pred_mean, pred_var = posterior.predict(phi[:3])
    np.testing.assert_allclose(pred_mean, phi[:3] @ mean)
    np.testing.assert_allclose(pred_var, np.einsum("nm,mk,nk->n", phi[:3], cov, phi[:3]))


def test_standardization_from_sufficient_statistics() -> None:
    rng = np.random.default_rng(0)
    phi, y = rng.standard_normal((25, 6)), 100.0 + 7.0 * rng.standard_normal(25)
    stats = SufficientStatistics(6)
    stats.add(phi, y)
    standardized = (y - y.mean()) / y.std()
    expected = LinearPosterior(phi.T @ phi, phi.T @ standardized, 0.01)
    np.testing.assert_allclose(stats.posterior(0.01).mean, expected.mean, rtol=1e-9)


def test_log_marginal_likelihood_matches_the_gp_form() -> None:
    rng = np.random.default_rng(3)
    phi, y, lam = rng.standard_normal((15, 8)), rng.standard_normal(15), 0.3
    stats = SufficientStatistics(8)
    stats.add(phi, y)
    cov = phi @ phi.T + lam * np.eye(15)
    sign, logdet = np.linalg.slogdet(cov)
    expected = -0.5 * (y @ np.linalg.solve(cov, y) + logdet + 15 * np.log(2 * np.pi))
    got = stats.posterior(lam, standardize=False).log_marginal_likelihood()
    assert got == pytest.approx(expected, rel=1e-10)


def test_empty_posterior_is_the_prior() -> None:
    posterior = SufficientStatistics(5).posterior(0.5)
    np.testing.assert_array_equal(posterior.mean, np.zeros(5))
    draws = posterior.sample(np.random.default_rng(0), size=20000)
    np.testing.assert_allclose(np.var(draws, axis=0), 1.0, rtol=0.05)  # lambda (lambda I)^-1 = I


def test_bad_inputs_are_rejected() -> None:
    stats = SufficientStatistics(3)
    with pytest.raises(ValueError):
        stats.add(np.zeros((2, 3)), np.array([1.0, np.nan]))
    with pytest.raises(ValueError):
        stats.add(np.zeros((2, 4)), np.array([1.0, 2.0]))
    with pytest.raises(ValueError):
        stats.posterior(0.0)
    with pytest.raises(ValueError):
        RandomFourierFeatures(2, 10, -1.0, seed=0)
    with pytest.raises(ValueError):
        RandomFourierFeatures(2, 10, 0.1, seed=0)(np.zeros((1, 3)))


def test_column_scales_divide_each_columns_lengthscale() -> None:
    rng = np.random.default_rng(7)
    x = rng.uniform(size=(6, 3))
    plain = RandomFourierFeatures(3, 64, (0.2, 0.5), seed=3)
    ones = RandomFourierFeatures(3, 64, (0.2, 0.5), seed=3, column_scales=np.ones(3))
    np.testing.assert_array_equal(ones(x), plain(x))
    # A column scaled by 0 is left out: points that differ only there have equal features.
    scaled = RandomFourierFeatures(3, 64, (0.2, 0.5), seed=3, column_scales=[1.0, 1.0, 0.0])
    moved = x.copy()
    moved[:, 2] = 1.0 - moved[:, 2]
    np.testing.assert_allclose(scaled(moved), scaled(x), rtol=0, atol=1e-12)
    assert not np.allclose(plain(moved), plain(x))
    # A column scaled by 1/2 moves like its half-way point in the plain features.
    half = RandomFourierFeatures(3, 64, (0.2, 0.5), seed=3, column_scales=[1.0, 0.5, 1.0])
    squeezed = x * [1.0, 0.5, 1.0]
    np.testing.assert_allclose(half(x), plain(squeezed), rtol=0, atol=1e-12)
    _, grads = half.value_and_grad(x, np.ones(64))
    _, plain_grads = plain.value_and_grad(squeezed, np.ones(64))
    np.testing.assert_allclose(grads, plain_grads * [1.0, 0.5, 1.0], rtol=1e-10, atol=1e-12)
    # Other lengthscales keep the scales.
    assert np.array_equal(scaled.with_lengthscale(0.1).column_scales, [1.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="column_scales"):
        RandomFourierFeatures(3, 8, 0.2, seed=0, column_scales=[1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="column_scales"):
        RandomFourierFeatures(3, 8, 0.2, seed=0, column_scales=[1.0, 1.0])
