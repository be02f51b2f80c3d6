"""A monotone warp of observed values that compresses their lower tail before a GP models them.

A stationary GP fitted to values with a heavy lower tail (a quartic bowl whose corners lie
thousands of units below its optimum, a loss that explodes at bad settings) spends its fit on
the tail: standardized by a spread the tail inflates, the differences between the good values
that decide where to sample next are hardly above the noise, and the lengthscales follow the
bowl instead of the region near the optimum. Rank-based samplers (TPE, CMA-ES) do not see the
tail at all. :class:`TailWarp` keeps every value at or above ``t = median - s`` (``s``: the
values' robust spread, the interquartile range over 1.349, a standard deviation for normal
values) and maps the ones below it to ``t - s log(1 + (t - v) / s)``: the order of all values
stays, the top of the distribution is untouched, and a value ``k s`` below ``t`` ends only
``s log(1 + k)`` below it. Normal values are hardly touched (a sixth of them lie below ``t``,
most by less than ``s``).

This module knows nothing of Optuna.
"""

from __future__ import annotations

import numpy as np

from optuna_fedbo.core.acquisition import AcquisitionFunction


class TailWarp:
    """The warp of :mod:`optuna_fedbo.core.warping` for a set of values (its ``t`` and ``s``).

    Args:
        values: The values the warp is set from (at least one, finite).
    """

    def __init__(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=float)
        if values.size == 0 or not np.all(np.isfinite(values)):
            raise ValueError("TailWarp needs at least one value, all finite.")
        low, median, high = np.percentile(values, [25.0, 50.0, 75.0])
        spread = (high - low) / 1.349
        if not spread > 0:
            spread = float(values.std()) if values.std() > 0 else 1.0
        self.spread = float(spread)
        self.threshold = float(median) - self.spread

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """The warped values (same shape)."""
        values = np.asarray(values, dtype=float)
        below = np.maximum(self.threshold - values, 0.0)
        if not below.any():  # nothing below the threshold: the values themselves
            return values.copy()
        return np.where(
            below > 0, self.threshold - self.spread * np.log1p(below / self.spread), values
        )

    def derivative(self, values: np.ndarray) -> np.ndarray:
        """The warp's derivative at ``values`` (one at and above the threshold)."""
        below = np.maximum(self.threshold - np.asarray(values, dtype=float), 0.0)
        if not below.any():
            return np.ones_like(below)
        return 1.0 / (1.0 + below / self.spread)

    def with_derivative(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The warped values and the warp's derivative at ``values`` (the same numbers as
        :meth:`__call__` and :meth:`derivative`, one pass over the values)."""
        values = np.asarray(values, dtype=float)
        below = np.maximum(self.threshold - values, 0.0)
        if not below.any():
            return values.copy(), np.ones_like(below)
        positive = below > 0
        below /= self.spread
        warped = np.where(positive, self.threshold - self.spread * np.log1p(below), values)
        below += 1.0
        return warped, np.reciprocal(below, out=below)

    def inverse(self, warped: np.ndarray) -> np.ndarray:
        """The values whose warp is ``warped``."""
        warped = np.asarray(warped, dtype=float)
        below = np.maximum(self.threshold - warped, 0.0)
        return np.where(
            below > 0, self.threshold - self.spread * np.expm1(below / self.spread), warped
        )


class WarpedFunction:
    """``warp(f(x))`` for an acquisition-like function ``f`` (e.g. a weighted broadcast).

    Args:
        function: ``f``, with ``values(x)`` and ``values_and_grads(x)``.
        warp: The warp applied to its values.
    """

    def __init__(self, function: AcquisitionFunction, warp: TailWarp) -> None:
        self._function = function
        self._warp = warp

    def values(self, x: np.ndarray) -> np.ndarray:
        return self._warp(self._function.values(x))

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values, grads = self._function.values_and_grads(x)
        if values.size and values.min() >= self._warp.threshold:  # (not with a NaN)
            # Nothing to compress: the warp is the identity and its slope one, so these are
            # the numbers of the general path, without its arrays (an acquisition search
            # evaluates this a dozen times per trial, on a few points).
            return values.copy(), grads.copy()
        warped, derivative = self._warp.with_derivative(values)
        return warped, derivative[:, None] * grads


__all__ = ["TailWarp", "WarpedFunction"]
