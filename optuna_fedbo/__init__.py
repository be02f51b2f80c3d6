"""optuna-fedbo: federated and differentially private Bayesian optimization for Optuna."""

from __future__ import annotations

from optuna_fedbo.samplers import RFFThompsonSampler

__version__ = "0.1.0"

__all__ = ["RFFThompsonSampler", "__version__"]
