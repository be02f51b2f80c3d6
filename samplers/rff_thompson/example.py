"""Minimize the Branin function with RFF Thompson sampling loaded from OptunaHub's format."""

from __future__ import annotations

import math
import os

import optuna
import optunahub

REGISTRY_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def branin(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", -5.0, 10.0)
    y = trial.suggest_float("y", 0.0, 15.0)
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x**2 + c * x - 6.0) ** 2 + 10.0 * (1 - t) * math.cos(x) + 10.0


if __name__ == "__main__":
    module = optunahub.load_local_module(
        package="samplers/rff_thompson", registry_root=REGISTRY_ROOT
    )
    study = optuna.create_study(sampler=module.RFFThompsonSampler(seed=0))
    study.optimize(branin, n_trials=40)
    print(f"best value {study.best_value:.4f} at {study.best_params}")
