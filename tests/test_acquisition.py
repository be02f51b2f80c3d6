from __future__ import annotations

import numpy as np
import pytest

from optuna_fedbo.core.acquisition import LinearAcquisition
from optuna_fedbo.core.acquisition import maximize
from optuna_fedbo.core.acquisition import UpperConfidenceBound
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.space import Box
from optuna_fedbo.core.space import Dimension
from optuna_fedbo.core.space import UnitCubeEncoding


def _grid_max(acquisition, n: int = 401) -> float:
    grid = np.stack(np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n)), -1).reshape(-1, 2)
    return float(acquisition.values(grid).max())


def test_maximize_reaches_the_grid_maximum() -> None:
    features = RandomFourierFeatures(2, 100, 0.2, seed=0)
    encoding = UnitCubeEncoding([Dimension("float", 0, 1)] * 2)
    for seed in range(5):
        w = np.random.default_rng(seed).standard_normal(100)
        acquisition = LinearAcquisition(features, w)
        point, value = maximize(acquisition, encoding, np.random.default_rng(seed))
        assert value == pytest.approx(float(acquisition.values(point[None])[0]))
        assert value >= _grid_max(acquisition) - 1e-3


def test_linear_acquisition_scores_candidates_with_fast_weighted_sums() -> None:
    rows: list[int] = []

    class Counting(RandomFourierFeatures):
        def __call__(self, x: np.ndarray, *, fast: bool = False) -> np.ndarray:
            rows.append(len(x))
            return super().__call__(x, fast=fast)

    features = Counting(4, 200, (0.2, 0.5), seed=0)
    w = np.random.default_rng(1).standard_normal(200)
    x = np.random.default_rng(2).uniform(size=(577, 4))
    values = LinearAcquisition(features, w).values(x)
    # Weighted sums in blocks, without a feature matrix (single precision: to 1e-7 |w|).
    assert rows == []
    assert np.abs(values - features(x) @ w).max() < 2e-7 * np.linalg.norm(w)
    np.testing.assert_array_equal(values, features.weighted_sum(x, w, fast=True))
    # Given features are used as they are.
    rows.clear()
    phi = features(x[:5])
    np.testing.assert_array_equal(
        LinearAcquisition(features, w).values(x[:5], features=phi), phi @ w
    )
    assert rows == [5]


def test_refinement_and_zoom_improve_on_candidates_alone_to_the_same_maximum() -> None:
    features = RandomFourierFeatures(2, 100, 0.2, seed=0)
    encoding = UnitCubeEncoding([Dimension("float", 0, 1)] * 2)
    gains, shortfalls = [], []
    for seed in range(10):
        acquisition = LinearAcquisition(features, np.random.default_rng(seed).standard_normal(100))
        coarse, refined, zoomed = (
            maximize(
                acquisition, encoding, np.random.default_rng(seed), n_candidates=64, **search
            )[1]
            for search in (
                {"n_refinements": 0},
                {},
                {"n_refinements": 0, "n_zoom": 64},
            )
        )
        assert refined >= coarse and zoomed > coarse
        gains.append(refined - coarse)
        shortfalls.append(refined - zoomed)
    assert np.mean(gains) > 0
    # The zoom climbs the best candidate's hill about as high (the function's range is ~4).
    assert np.median(shortfalls) < 1e-3 and max(shortfalls) < 0.03


def test_a_zoom_from_several_starts_finds_hills_the_best_candidate_is_not_on() -> None:
    features = RandomFourierFeatures(2, 100, 0.1, seed=0)
    encoding = UnitCubeEncoding([Dimension("float", 0, 1)] * 2)
    one_start, four_starts = [], []
    for seed in range(20):
        acquisition = LinearAcquisition(features, np.random.default_rng(seed).standard_normal(100))
        candidates = encoding.sample(32, np.random.default_rng(seed))
        best_candidate = float(acquisition.values(candidates).max())
        for starts, out in ((1, one_start), (4, four_starts)):
            point, value = maximize(
                acquisition,
                encoding,
                np.random.default_rng(seed),
                n_candidates=32,
                n_refinements=0,
                n_zoom=16,
                zoom_starts=starts,
                zoom_spreads=(0.3, 0.1, 0.03),
            )
            assert value == pytest.approx(float(acquisition.values(point[None])[0]))
            assert value >= best_candidate  # a start only ever moves uphill
            out.append(value)
    # Each start climbs its own hill: the best of four is at least the best candidate's climb
    # on average, and higher on some functions (their best candidate sat on a lower hill).
    gains = np.array(four_starts) - np.array(one_start)
    assert np.mean(gains) > 0 and np.sum(gains > 1e-3) >= 3


@pytest.mark.parametrize(
    "search",
    [
        {},
        {"n_refinements": 0, "n_zoom": 32, "scales": np.full(4, 10.0)},
        {"n_refinements": 0, "n_zoom": 16, "zoom_starts": 4, "scales": np.full(4, 10.0)},
    ],
    ids=["refinement", "zoom", "zoom-from-four"],  # spreads of 1 and 0.1: draws leave the box
)
def test_maximize_stays_in_the_box_and_on_the_grid(search: dict) -> None:
    features = RandomFourierFeatures(4, 60, 0.2, seed=1)
    encoding = UnitCubeEncoding(
        [
            Dimension("float", 0, 1),
            Dimension("int", 0, 10, step=1),
            Dimension("categorical", n_choices=2),
        ]
    )
    box = Box(np.array([0.5, 0.0, 0.0, 0.0]), np.array([0.75, 1.0, 1.0, 1.0]))
    for seed in range(5):
        acquisition = LinearAcquisition(features, np.random.default_rng(seed).standard_normal(60))
        point, _ = maximize(acquisition, encoding, np.random.default_rng(seed), box=box, **search)
        assert 0.5 <= point[0] <= 0.75
        np.testing.assert_array_equal(point, encoding.snap(point[None])[0])
        assert point[2:].sum() == 1.0
        if search.get("zoom_starts", 1) == 1 and "n_zoom" in search:
            # The zoom keeps the best candidate's category.
            coarse, _ = maximize(
                acquisition, encoding, np.random.default_rng(seed), box=box, n_refinements=0
            )
            np.testing.assert_array_equal(point[2:], coarse[2:])


def test_ucb_gradient_and_values() -> None:
    features = RandomFourierFeatures(2, 40, 0.3, seed=0)
    rng = np.random.default_rng(0)
    x_obs = rng.uniform(size=(12, 2))
    stats = SufficientStatistics(40)
    stats.add(features(x_obs), np.sin(5 * x_obs[:, 0]))
    posterior = stats.posterior(0.01)
    ucb = UpperConfidenceBound(features, posterior, beta=4.0)
    x = rng.uniform(size=(5, 2))
    mean, var = posterior.predict(features(x))
    values, grads = ucb.values_and_grads(x)
    np.testing.assert_allclose(values, mean + 2.0 * np.sqrt(var))
    # Candidates are scored with fast cosines (to about 2e-7), gradients are exact.
    np.testing.assert_allclose(ucb.values(x), values, rtol=0, atol=1e-6)
    eps = 1e-6
    numeric = np.stack(
        [
            (ucb.values_and_grads(x + eps * e)[0] - ucb.values_and_grads(x - eps * e)[0])
            / (2 * eps)
            for e in np.eye(2)
        ],
        1,
    )
    np.testing.assert_allclose(grads, numeric, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError):
        UpperConfidenceBound(features, posterior, beta=-1.0)


def test_linear_acquisition_rejects_wrong_length() -> None:
    with pytest.raises(ValueError, match="length 10"):
        LinearAcquisition(RandomFourierFeatures(1, 10, 0.2, seed=0), np.zeros(11))


class _IllScaledQuadratic:
    """``-sum(((x - c) / s)^2)``: steep along column 0, flat along column 1."""

    centre = np.array([0.3, 0.6])
    scale = np.array([0.01, 1.0])

    def values(self, x: np.ndarray) -> np.ndarray:
        return -np.sum(((x - self.centre) / self.scale) ** 2, axis=1)

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.values(x), -2.0 * (x - self.centre) / self.scale**2


def test_maximize_with_scales_refines_in_scaled_coordinates() -> None:
    encoding = UnitCubeEncoding([Dimension("float"), Dimension("float")])
    function = _IllScaledQuadratic()
    results = {}
    for name, scales in (("plain", None), ("scaled", function.scale)):
        point, value = maximize(
            function,
            encoding,
            np.random.default_rng(0),
            n_candidates=16,
            n_refinements=2,
            max_iterations=5,
            scales=scales,
        )
        assert np.all((point >= 0.0) & (point <= 1.0))
        results[name] = value
    # With the function's own scales the problem is isotropic: a few iterations suffice.
    assert results["scaled"] > -1e-6
    assert results["scaled"] >= results["plain"]
