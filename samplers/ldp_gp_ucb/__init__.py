"""OptunaHub package: GP-UCB under local differential privacy (LDP-BO, optuna-fedbo)."""

from __future__ import annotations

from optuna_fedbo import LaplaceMechanism
from optuna_fedbo import LDPUCBSampler
from optuna_fedbo import privatize_objective

__all__ = ["LDPUCBSampler", "LaplaceMechanism", "privatize_objective"]
