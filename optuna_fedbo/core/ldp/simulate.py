"""Run a GP-UCB state machine on a finite domain, as in the paper's experiments."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from optuna_fedbo.core.ldp.acquisition import argmax_finite
from optuna_fedbo.core.ldp.ata import ATAGPUCB
from optuna_fedbo.core.ldp.moma import MoMAGPUCB
from optuna_fedbo.core.ldp.tgp import TGPUCB

Algorithm = TGPUCB | ATAGPUCB | MoMAGPUCB


def run_finite_domain(
    algorithm: Algorithm,
    domain: np.ndarray,
    reward: Callable[[int], float],
    n_rounds: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Play ``n_rounds`` rounds on a finite domain and return the indices played.

    TGP- and ATA-GP-UCB choose a point and observe its reward every round. MoMA-GP-UCB chooses a
    point per epoch and plays it ``k`` times in a row; if ``n_rounds`` ends inside an epoch, the
    remaining plays are made (they count towards regret) but the incomplete epoch is not added.

    Args:
        algorithm: A fresh (or partly run) state machine.
        domain: The finite domain, shape ``(n_points, D)``.
        reward: Returns the (privatized, for LDP) reward of a domain index.
        n_rounds: Number of rounds ``T``.
        rng: Source of tie-breaking randomness.

    Returns:
        The played indices, shape ``(n_rounds,)``.
    """
    domain = np.atleast_2d(np.asarray(domain, dtype=float))
    played = np.empty(n_rounds, dtype=int)
    t = 0
    while t < n_rounds:
        index = argmax_finite(algorithm.acquisition(), domain, rng)
        if isinstance(algorithm, MoMAGPUCB):
            plays = min(algorithm.epoch_length, n_rounds - t)
            values = np.array([reward(index) for _ in range(plays)])
            played[t : t + plays] = index
            t += plays
            if plays == algorithm.epoch_length:
                algorithm.add_epoch(domain[index], values)
        else:
            algorithm.observe(domain[index], reward(index))
            played[t] = index
            t += 1
    return played
