"""Argument checks of the privacy accounting: one-line ``ValueError``s, Python floats out."""

from __future__ import annotations

import math

import numpy as np


def as_float(name: str, value: float, expected: str) -> float:
    """``value`` as a Python float (never a numpy scalar), or a ValueError naming ``expected``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be {expected}, got {value!r}.")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {expected}, got {value!r}.") from None


def check_noise_multiplier(value: float) -> float:
    z = as_float("noise_multiplier", value, "a positive number")
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"noise_multiplier must be positive and finite, got {value!r}.")
    return z


def check_sample_rate(value: float) -> float:
    q = as_float("sample_rate", value, "a number in (0, 1]")
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sample_rate must lie in (0, 1], got {value!r}.")
    return q


def check_delta(value: float) -> float:
    delta = as_float("delta", value, "a number in (0, 1)")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {value!r}.")
    return delta


def check_budget(value: float) -> float:
    if isinstance(value, bool):
        raise ValueError(f"budget must be a non-negative number, got {value!r}.")
    try:
        budget = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"budget must be a non-negative number, got {value!r}.") from None
    if math.isnan(budget) or budget < 0:
        raise ValueError(f"budget must be a non-negative number, got {value!r}.")
    return budget


def check_rounds(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"rounds must be a non-negative integer, got {value!r}.")
    if value < 0:
        raise ValueError(f"rounds must be a non-negative integer, got {value!r}.")
    return int(value)


def check_positive_int(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


__all__ = [
    "as_float",
    "check_budget",
    "check_delta",
    "check_noise_multiplier",
    "check_positive_int",
    "check_rounds",
    "check_sample_rate",
]
