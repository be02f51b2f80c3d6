"""Find the best item of a finite catalogue from locally privatized ratings (LDP-TGP-UCB).

Each trial stands for one user: the user rates the suggested item (a noisy value in [-2, 2]),
privatizes the rating on their side with CTL(epsilon = 1), and only the privatized value reaches
the study. The sampler never sees a true rating.
"""

from __future__ import annotations

import math
import os

import numpy as np
import optuna
import optunahub

REGISTRY_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mean_rating(item: int) -> float:
    """The unknown mean rating of an item: a smooth function of its index, in [-1, 1]."""
    return math.cos((item - 70) / 18.0)


if __name__ == "__main__":
    module = optunahub.load_local_module(
        package="samplers/ldp_gp_ucb", registry_root=REGISTRY_ROOT
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    users = np.random.default_rng(0)

    def rating(trial: optuna.Trial) -> float:
        item = trial.suggest_int("item", 0, 99)
        return mean_rating(item) + users.uniform(-1.0, 1.0)  # |f| <= 1, |noise| <= 1

    # value_bound B = 1 and noise_bound R = 1: the Laplace scale is 2 (B + R) / epsilon = 4.
    private_rating = module.privatize_objective(
        rating, epsilon=1.0, value_bound=1.0, noise_bound=1.0
    )
    sampler = module.LDPUCBSampler(
        "tgp", epsilon=1.0, value_bound=1.0, noise_bound=1.0, horizon=500, seed=0
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(private_rating, n_trials=500)

    best = max(range(100), key=mean_rating)
    late = [t.params["item"] for t in study.trials[-100:]]
    favourite = max(set(late), key=late.count)
    catalogue = sum(mean_rating(i) for i in range(100)) / 100
    print(f"true best item {best} (mean rating {mean_rating(best):.3f})")
    print(f"most suggested of the last 100: item {favourite} (mean {mean_rating(favourite):.3f})")
    print(
        f"mean rating of the last 100 suggestions {sum(map(mean_rating, late)) / 100:.3f} "
        f"(catalogue average {catalogue:.3f})"
    )
    print(
        f"values released {private_rating.mechanism.n_privatized}, clipped "
        f"{private_rating.mechanism.n_clipped}"
    )
