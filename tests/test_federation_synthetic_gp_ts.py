"""``benchmarks/federation_synthetic.py``'s GP-TS on raw values (the papers' TS baseline that
``reproduce.py`` tests Fig. 7a against): it finds the optimum of a smooth function, refits its
hyperparameters only every 5 observations, samples the exact GP posterior, and repeats given
its seed."""

from __future__ import annotations

from pathlib import Path
import sys

import numpy as np

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import federation_synthetic as fs  # noqa: E402


def _bump(centre: float) -> np.ndarray:
    """A smooth function on a 200-point grid with its maximum 1 at ``centre``."""
    x = np.linspace(0.0, 1.0, 200)
    return np.exp(-0.5 * (x - centre) ** 2 / 0.1**2)


def test_gp_ts_finds_a_near_optimal_point_of_a_smooth_function() -> None:
    functions = np.stack([_bump(0.63), _bump(0.2)])
    f_values = fs.run_gp_ts(functions, n_rounds=15, seed=3)
    regret = fs.regret_of(f_values, functions, n_rounds=15)
    assert regret.shape == (2, 16)
    assert np.all(regret[:, -1] < 0.01), regret[:, -1]
    # It improves on its 10 random initial points (which alone leave a larger regret).
    assert np.all(regret[:, -1] <= regret[:, 0])


def test_gp_ts_refits_its_hyperparameters_only_every_5_observations() -> None:
    grid = np.linspace(0.0, 1.0, 200)
    values = np.sin(6.0 * grid)
    model = fs.GridGPThompson(grid, np.random.default_rng(0))
    indices = list(range(0, 200, 20))  # 10 initial points
    thetas = []
    for _ in range(12):
        observed = np.asarray(indices)
        indices.append(model.suggest(observed, values[observed]))
        thetas.append(model.theta.copy())
    # Observations 10..21: fits at 10 (the first suggestion), 15 and 20 only.
    assert model.fit_sizes == [10, 15, 20]
    # Held in between: the same hyperparameters from 10 to 14 and from 15 to 19.
    assert all(np.array_equal(thetas[0], t) for t in thetas[1:5])
    assert all(np.array_equal(thetas[5], t) for t in thetas[6:10])
    assert not np.array_equal(thetas[0], thetas[5])


def test_gp_ts_samples_the_exact_gp_posterior() -> None:
    """Matheron's rule with the cached prior factor: the samples' mean and variance match the
    closed-form posterior at the fitted hyperparameters."""
    grid = np.linspace(0.0, 1.0, 60)
    rng = np.random.default_rng(1)
    indices = np.array([3, 17, 30, 44, 58])
    y = np.cos(4.0 * grid[indices]) + 0.05 * rng.standard_normal(5)
    model = fs.GridGPThompson(grid, np.random.default_rng(2))
    model.fit(grid[indices], y)
    samples = np.stack([model.sample(indices, y) for _ in range(4000)])
    variance, lengthscale, noise = np.exp(model.theta)
    kernel = variance * np.exp(-0.5 * (grid[:, None] - grid[None, :]) ** 2 / lengthscale**2)
    gram = kernel[np.ix_(indices, indices)] + noise * np.eye(5)
    mean = kernel[:, indices] @ np.linalg.solve(gram, y)
    covariance = kernel - kernel[:, indices] @ np.linalg.solve(gram, kernel[indices])
    spread = np.sqrt(np.clip(np.diag(covariance), 0.0, None) + 1e-6 * variance)
    assert np.all(np.abs(samples.mean(axis=0) - mean) < 5 * spread / np.sqrt(4000) + 1e-6)
    assert np.allclose(samples.std(axis=0), spread, rtol=0.1, atol=1e-3)


def test_gp_ts_is_deterministic_given_its_seed() -> None:
    functions = fs.mixed(2, 0.7, np.random.default_rng(4))[:, ::5]  # 200 grid points
    first = fs.run_gp_ts(functions, n_rounds=6, seed=5)
    assert fs.run_gp_ts(functions, n_rounds=6, seed=5) == first
    assert fs.run_gp_ts(functions, n_rounds=6, seed=6) != first
