"""Three participants tune related functions together with FTS-DE, loaded from OptunaHub's format.

Each participant has its own study (its trials never leave it); only one random-feature weight
vector per round goes to the server, which publishes the per-sub-region aggregates.
"""

from __future__ import annotations

import os

import optuna
import optunahub

REGISTRY_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_objective(shift: float):
    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -5.0, 5.0)
        y = trial.suggest_float("y", -5.0, 5.0)
        return (x - 1.0 - shift) ** 2 + (y + 2.0) ** 2

    return objective


if __name__ == "__main__":
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    fts = optunahub.load_local_module(package="samplers/fed_thompson", registry_root=REGISTRY_ROOT)
    search_space = {
        "x": optuna.distributions.FloatDistribution(-5.0, 5.0),
        "y": optuna.distributions.FloatDistribution(-5.0, 5.0),
    }
    federation = fts.Federation.create(
        "example",
        search_space=search_space,
        n_clients=3,
        protocol=fts.FTSConfig(n_subregions=2, n_init=5),
        seed=0,  # public: the shared random features and the sub-regions
    )
    server = fts.FederationServer(federation)
    studies = [
        optuna.create_study(sampler=fts.FedSampler(federation, client_id=f"site-{i}", seed=i))
        for i in range(3)
    ]
    objectives = [make_objective(0.1 * i) for i in range(3)]
    for round_index in range(21):  # round 0: the 5 initial points; then one trial per round
        for study, objective in zip(studies, objectives):
            study.optimize(objective, n_trials=5 if round_index == 0 else 1)
        server.step()
    for i, study in enumerate(studies):
        print(f"site-{i}: best value {study.best_value:.4f} at {study.best_params}")
