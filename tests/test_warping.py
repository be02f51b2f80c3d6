"""The lower-tail warp of a participant's values (optuna_fedbo/core/warping.py)."""

from __future__ import annotations

import numpy as np
import pytest

from optuna_fedbo.core.warping import TailWarp
from optuna_fedbo.core.warping import WarpedFunction


def _heavy_tailed(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(size=40), -50.0 - 100.0 * rng.random(5)])


def test_tail_warp_keeps_the_order_and_the_top_and_compresses_the_tail() -> None:
    values = _heavy_tailed()
    warp = TailWarp(values)
    warped = warp(values)
    assert np.array_equal(np.argsort(values), np.argsort(warped))
    top = values >= warp.threshold
    assert top.sum() >= 30
    np.testing.assert_array_equal(warped[top], values[top])
    # A value k spreads below the threshold ends log(1 + k) spreads below it.
    k = (warp.threshold - values.min()) / warp.spread
    assert warped.min() == pytest.approx(warp.threshold - warp.spread * np.log1p(k))
    assert warp.threshold - warped.min() < 0.2 * (warp.threshold - values.min())


def test_tail_warp_inverse_and_derivative() -> None:
    values = _heavy_tailed(1)
    warp = TailWarp(values)
    np.testing.assert_allclose(warp.inverse(warp(values)), values, rtol=1e-10, atol=1e-10)
    grid = np.linspace(values.min(), values.max(), 101)
    step = 1e-6
    numeric = (warp(grid + step) - warp(grid - step)) / (2 * step)
    np.testing.assert_allclose(warp.derivative(grid), numeric, rtol=1e-5, atol=1e-6)


def test_tail_warp_of_equal_values_is_the_identity() -> None:
    warp = TailWarp(np.full(5, 3.0))
    np.testing.assert_array_equal(warp(np.array([3.0, 2.5])), [3.0, 2.5])
    with pytest.raises(ValueError, match="finite"):
        TailWarp(np.array([1.0, np.nan]))


class _Quadratic:
    def values(self, x: np.ndarray) -> np.ndarray:
        return -30.0 * np.sum(x**2, axis=1)

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.values(x), -60.0 * x


def test_warped_function_gradient_is_the_chain_rule() -> None:
    warp = TailWarp(_heavy_tailed(2))
    function = WarpedFunction(_Quadratic(), warp)
    x = np.random.default_rng(3).uniform(-1, 1, size=(20, 2))
    values, grads = function.values_and_grads(x)
    np.testing.assert_allclose(values, warp(_Quadratic().values(x)))
    step = 1e-6
    for d in range(2):
        shift = np.zeros(2)
        shift[d] = step
        numeric = (function.values(x + shift) - function.values(x - shift)) / (2 * step)
        np.testing.assert_allclose(grads[:, d], numeric, rtol=1e-5, atol=1e-6)
