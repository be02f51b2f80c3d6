"""The Laplace mechanism CTL(epsilon) of the LDP-BO paper (Curator 1, Lemma 1).

Each user privatizes the reward of the configuration they evaluated before it leaves their
hands: the value is clipped to the declared range ``[-(B + R), B + R]`` (``B`` bounds ``|f|``,
``R`` the observation noise), so the sensitivity is ``2 (B + R)``, and Laplace noise of scale
``L = 2 (B + R) / epsilon`` is added. The learner only ever sees the noisy value; by Lemma 1 each
released value is epsilon-LDP. Clipping is not in the paper's curator, which assumes the bound
holds; it is what makes the guarantee hold when a value breaks the declared bound, and every
clip is counted so that a wrong bound is visible.

Noise is drawn from :func:`optuna_fedbo.privacy._rng.secure_rng` (operating-system entropy)
unless a generator is injected explicitly for reproducible tests.
"""

from __future__ import annotations

from collections.abc import Callable
import functools
import math
import numbers
import threading
from typing import Any

import numpy as np

from optuna_fedbo.privacy._rng import secure_rng


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, numbers.Real) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}.")
    return float(value)


def _non_negative(name: str, value: float) -> float:
    if not (isinstance(value, numbers.Real) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a non-negative finite number, got {value!r}.")
    return float(value)


def laplace_scale(epsilon: float, value_bound: float, noise_bound: float) -> float:
    """The scale ``L = 2 (B + R) / epsilon`` of CTL(epsilon) (Curator 1).

    Rewards ``y = f(x) + eta`` lie in ``[-(B + R), B + R]``, so the sensitivity is ``2 (B + R)``
    and Laplace noise of scale ``L`` gives epsilon-LDP (Lemma 1).

    Raises:
        ValueError: If ``epsilon <= 0``, ``B <= 0`` or ``R < 0``.
    """
    epsilon = _positive("epsilon", epsilon)
    value_bound = _positive("value_bound", value_bound)
    noise_bound = _non_negative("noise_bound", noise_bound)
    return 2.0 * (value_bound + noise_bound) / epsilon


class LaplaceMechanism:
    """CTL(epsilon): clip to ``[-(B + R), B + R]``, then add ``Laplace(2 (B + R) / epsilon)``.

    Args:
        epsilon: The privacy level ``epsilon > 0`` of each released value.
        value_bound: ``B > 0``, a bound on ``|f(x)|``.
        noise_bound: ``R >= 0``, a bound on the observation noise (0 for a deterministic
            objective).
        rng: Generator of the Laplace noise. ``None`` (the default, and the only choice that
            protects users) draws from the operating system's entropy; pass a seeded generator
            only for reproducible tests.

    Raises:
        ValueError: If ``epsilon <= 0``, ``value_bound <= 0`` or ``noise_bound < 0``.

    Example:
        >>> mechanism = LaplaceMechanism(1.0, value_bound=1.0, noise_bound=0.5)
        >>> mechanism.scale
        3.0
    """

    def __init__(
        self,
        epsilon: float,
        *,
        value_bound: float,
        noise_bound: float,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.scale = laplace_scale(epsilon, value_bound, noise_bound)  # validates the inputs
        self.epsilon = float(epsilon)
        self.value_bound = float(value_bound)
        self.noise_bound = float(noise_bound)
        self._rng = rng if rng is not None else secure_rng()
        self._lock = threading.Lock()
        self._n_privatized = 0
        self._n_clipped = 0

    def __repr__(self) -> str:
        return (
            f"LaplaceMechanism(epsilon={self.epsilon}, value_bound={self.value_bound}, "
            f"noise_bound={self.noise_bound})"
        )

    @property
    def bound(self) -> float:
        """``B + R``: values are clipped to ``[-bound, bound]``."""
        return self.value_bound + self.noise_bound

    @property
    def sensitivity(self) -> float:
        """``2 (B + R)``: the largest change of a clipped value."""
        return 2.0 * self.bound

    @property
    def n_privatized(self) -> int:
        """Number of values released so far."""
        return self._n_privatized

    @property
    def n_clipped(self) -> int:
        """Number of released values that broke the declared bound and were clipped."""
        return self._n_clipped

    def privatize(self, value: float) -> float:
        """Release one value: clip it to ``[-(B + R), B + R]``, add ``Laplace(L)`` noise.

        Args:
            value: The true (noisy) reward ``y``.

        Returns:
            The privatized reward ``ybar``.

        Raises:
            ValueError: If ``value`` is not a finite real number (a failed evaluation has no
                value to release).
        """
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"Only real numbers can be privatized, got {value!r}.")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"Only finite values can be privatized, got {value}.")
        clipped = min(max(value, -self.bound), self.bound)
        with self._lock:
            noise = float(self._rng.laplace(0.0, self.scale))
            self._n_privatized += 1
            self._n_clipped += int(clipped != value)
        return clipped + noise

    def wrap(self, objective: Callable[..., float]) -> Callable[..., float]:
        """Wrap an objective so that every value it returns is privatized.

        A non-finite value (a failed evaluation) is not released: the wrapper returns ``nan``,
        which Optuna records as a failed trial. Exceptions (including ``optuna.TrialPruned``)
        pass through unchanged.

        Args:
            objective: A function returning one real number, e.g. an Optuna objective.

        Returns:
            The privatized objective, with the same arguments.
        """

        @functools.wraps(objective)
        def private_objective(*args: Any, **kwargs: Any) -> float:
            value = objective(*args, **kwargs)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(
                    "A privatized objective must return one real number, got "
                    f"{type(value).__name__}."
                )
            if not math.isfinite(float(value)):
                return math.nan
            return self.privatize(value)

        return private_objective


def privatize_objective(
    objective: Callable[..., float],
    *,
    epsilon: float,
    value_bound: float,
    noise_bound: float,
) -> Callable[..., float]:
    """Wrap ``objective`` in a fresh :class:`LaplaceMechanism` (noise from OS entropy).

    Args:
        objective: A function returning one real number.
        epsilon: The privacy level of each released value.
        value_bound: ``B``, a bound on ``|f(x)|``.
        noise_bound: ``R``, a bound on the observation noise.

    Returns:
        The privatized objective; its mechanism is available as ``.mechanism``.
    """
    mechanism = LaplaceMechanism(epsilon, value_bound=value_bound, noise_bound=noise_bound)
    wrapped = mechanism.wrap(objective)
    wrapped.mechanism = mechanism  # type: ignore[attr-defined]
    return wrapped
