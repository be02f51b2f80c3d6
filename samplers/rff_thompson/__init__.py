"""OptunaHub package: local Thompson sampling on random Fourier features (optuna-fedbo)."""

from __future__ import annotations

from optuna_fedbo import RFFThompsonSampler

__all__ = ["RFFThompsonSampler"]
