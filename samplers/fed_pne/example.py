"""Three sites jointly find the dosage that is best on average, with Fed-PNE from OptunaHub.

Each site's response curve peaks somewhere else; Fed-PNE finds the maximizer of their average.
Only one mean reward per partition cell and phase leaves a site.
"""

from __future__ import annotations

import os

import optuna
import optunahub

REGISTRY_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEAKS = (0.30, 0.45, 0.60)  # the average response peaks at 0.45


def make_objective(peak: float):
    def objective(trial: optuna.Trial) -> float:
        dose = trial.suggest_float("dose", 0.0, 1.0)
        return 1.0 - 2.0 * (dose - peak) ** 2

    return objective


if __name__ == "__main__":
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pne = optunahub.load_local_module(package="samplers/fed_pne", registry_root=REGISTRY_ROOT)
    result = pne.simulate_fedpne(
        [make_objective(peak) for peak in PEAKS],
        search_space={"dose": optuna.distributions.FloatDistribution(0.0, 1.0)},
        protocol=pne.FedPNEConfig(horizon=300, value_range=(0.0, 1.0)),
        seed=0,  # public: the partition
    )
    best = result.studies[0].sampler.recommended_params()
    print(f"{len(result.reports)} communication rounds; recommended dose {best['dose']:.4f}")
    for client_id, study in zip(result.client_ids, result.studies):
        print(f"{client_id}: {len(study.trials)} trials, best own value {study.best_value:.4f}")
