"""Local differential privacy for BO: the GP-UCB algorithms of Zhou and Tan (AAAI 2021).

* :class:`TGPUCB` — raw-reward truncation (Algorithm 2, Theorem 3);
* :class:`ATAGPUCB` — Nystrom features and feature-adaptive truncation (Algorithm 1, Theorem 2);
* :class:`MoMAGPUCB` — epochs of ``k`` plays and median-of-means estimates (Algorithm 3,
  Theorem 4, Corollary 1).

Each runs on privatized rewards (:class:`LaplaceRewards`, CTL(epsilon)) or, without the mechanism,
on heavy-tailed rewards with a bounded ``(1 + alpha)``-th moment (:class:`HeavyTailedRewards`).
Everything works on points encoded in ``[0, 1]^D``; nothing here knows of Optuna.
"""

from __future__ import annotations

from optuna_fedbo.core.ldp.acquisition import argmax_finite
from optuna_fedbo.core.ldp.acquisition import GPUCBIndex
from optuna_fedbo.core.ldp.ata import ATAGPUCB
from optuna_fedbo.core.ldp.gp import ExactGPPosterior
from optuna_fedbo.core.ldp.kernels import Kernel
from optuna_fedbo.core.ldp.kernels import make_kernel
from optuna_fedbo.core.ldp.kernels import Matern52
from optuna_fedbo.core.ldp.kernels import SquaredExponential
from optuna_fedbo.core.ldp.moma import median_of_means_index
from optuna_fedbo.core.ldp.moma import MoMAGPUCB
from optuna_fedbo.core.ldp.nystrom import FeaturePosterior
from optuna_fedbo.core.ldp.nystrom import nystrom_embed
from optuna_fedbo.core.ldp.nystrom import NystromEmbedding
from optuna_fedbo.core.ldp.parameters import HeavyTailedRewards
from optuna_fedbo.core.ldp.parameters import laplace_scale
from optuna_fedbo.core.ldp.parameters import LaplaceRewards
from optuna_fedbo.core.ldp.parameters import RewardModel
from optuna_fedbo.core.ldp.simulate import run_finite_domain
from optuna_fedbo.core.ldp.tgp import TGPUCB

__all__ = [
    "ATAGPUCB",
    "ExactGPPosterior",
    "FeaturePosterior",
    "GPUCBIndex",
    "HeavyTailedRewards",
    "Kernel",
    "LaplaceRewards",
    "Matern52",
    "MoMAGPUCB",
    "NystromEmbedding",
    "RewardModel",
    "SquaredExponential",
    "TGPUCB",
    "argmax_finite",
    "laplace_scale",
    "make_kernel",
    "median_of_means_index",
    "nystrom_embed",
    "run_finite_domain",
]
