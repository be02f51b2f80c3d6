"""The GP-UCB index ``mu(x) + beta sigma(x)`` and its maximization over a finite domain.

The LDP-BO paper writes the index with ``beta`` multiplying the standard deviation directly
(Algorithm 1 line 4, Algorithm 2 line 6, Algorithm 3 line 5), unlike
:class:`optuna_fedbo.core.acquisition.UpperConfidenceBound`, which takes ``sqrt(beta)``. The class
here satisfies :class:`optuna_fedbo.core.acquisition.AcquisitionFunction`, so continuous search
spaces reuse :func:`optuna_fedbo.core.acquisition.maximize`.
"""

from __future__ import annotations

import numpy as np

from optuna_fedbo.core.ldp.gp import PosteriorModel

#: Variance floor of the gradient of ``sqrt(var)``.
_VARIANCE_FLOOR = 1e-12


class GPUCBIndex:
    """``mu(x) + beta sigma(x)`` for a posterior model.

    Args:
        model: The posterior (mean and variance).
        beta: The confidence width ``beta >= 0``.
    """

    def __init__(self, model: PosteriorModel, beta: float) -> None:
        if not (np.isfinite(beta) and beta >= 0):
            raise ValueError(f"beta must be a non-negative finite number, got {beta}.")
        self.model = model
        self.beta = float(beta)

    def values(self, x: np.ndarray) -> np.ndarray:
        """Index values of shape ``(n,)`` at points of shape ``(n, D)``."""
        mean, variance = self.model.predict(x)
        return mean + self.beta * np.sqrt(variance)

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index values ``(n,)`` and gradients ``(n, D)``."""
        mean, variance, grad_mean, grad_variance = self.model.predict_with_grads(x)
        std = np.sqrt(np.maximum(variance, _VARIANCE_FLOOR))
        return mean + self.beta * np.sqrt(variance), grad_mean + self.beta * grad_variance / (
            2.0 * std[:, None]
        )


def argmax_finite(
    acquisition: GPUCBIndex,
    candidates: np.ndarray,
    rng: np.random.Generator,
    *,
    relative_tolerance: float = 1e-9,
) -> int:
    """Index of the best candidate, ties (within a relative tolerance) broken uniformly.

    The paper maximizes over the finite domain exactly ("x_t = argmax_{x in D}"). Under the
    prior every point ties, so the first choice is uniform over the domain.

    Args:
        acquisition: The index to maximize.
        candidates: The finite domain, shape ``(n, D)``.
        rng: Source of randomness for tie-breaking.
        relative_tolerance: Values within this fraction of the range of ``|values|`` of the
            maximum count as ties.

    Returns:
        The row index of the chosen candidate.
    """
    values = acquisition.values(candidates)
    best = float(np.max(values))
    scale = max(float(np.max(np.abs(values))), 1.0)
    ties = np.flatnonzero(values >= best - relative_tolerance * scale)
    return int(ties[0] if len(ties) == 1 else rng.choice(ties))
