"""Renyi orders of the accountants and the moments accountant's classic conversion to epsilon.

Apart from :mod:`optuna_fedbo.privacy._accounting` so that :mod:`optuna_fedbo.privacy._moments`
(which imports ``dp_accounting``) and the accountants share them without importing each other.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from optuna_fedbo.privacy._checks import check_delta

MOMENTS_ORDERS: Final[tuple[int, ...]] = tuple(range(2, 65)) + (
    80,
    96,
    128,
    192,
    256,
    384,
    512,
    768,
    1024,
)
"""Integer Renyi orders of the moments accountant: 2-64, then up to 1024 for strong noise."""

RDP_ORDERS: Final[tuple[float, ...]] = tuple(
    sorted(
        {round(1.0 + k / 10.0, 1) for k in range(1, 100)}  # 1.1, 1.2, ..., 10.9
        | {float(order) for order in range(11, 65)}
        | {float(order) for order in MOMENTS_ORDERS if order > 64}
    )
)
"""Renyi orders of the ``"rdp"`` accountant: fractional 1.1-10.9, integers 11-64, up to 1024."""


def classic_rdp_to_epsilon(
    orders: np.ndarray, rdp: np.ndarray, delta: float
) -> tuple[float, float]:
    """The moments accountant's conversion ``eps = min_a [rdp(a) + log(1/delta) / (a - 1)]``.

    Args:
        orders: Renyi orders (> 1).
        rdp: Composed Renyi DP at those orders (``+inf`` entries are ignored).
        delta: Target delta in ``(0, 1)``.

    Returns:
        ``(epsilon, optimal order)``; ``(inf, nan)`` if every order is infinite.
    """
    delta = check_delta(delta)
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    if orders.shape != rdp.shape or orders.ndim != 1:
        raise ValueError(
            f"orders and rdp must be 1-D of equal length: {orders.shape}, {rdp.shape}."
        )
    if np.any(orders <= 1.0):
        raise ValueError("Renyi orders must all be > 1 for the classic conversion.")
    eps = rdp + math.log(1.0 / delta) / (orders - 1.0)
    eps = np.where(np.isnan(eps), np.inf, eps)
    best = int(np.argmin(eps))
    if not math.isfinite(float(eps[best])):
        return math.inf, math.nan
    return max(0.0, float(eps[best])), float(orders[best])


__all__ = ["MOMENTS_ORDERS", "RDP_ORDERS", "classic_rdp_to_epsilon"]
