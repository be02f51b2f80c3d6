"""Per-site SVC tuning on label-skewed shards of scikit-learn's digits, sampler against sampler.

Every site holds its own label-skewed shard of ``load_digits`` and tunes an RBF SVC (``C`` and
``gamma``, both on a log scale) on it, maximizing 3-fold cross-validated accuracy. Each site runs
one Optuna study per sampler, with no federation: RFFThompsonSampler beside TPE, random search,
CMA-ES and (where torch is installed) GPSampler. The table shows each sampler's mean best accuracy
over sites and the mean rank among samplers.

Run: ``python examples/local_svc.py`` (``--sites``, ``--trials``, ``--seed`` change the setting).
"""

from __future__ import annotations

import argparse
import importlib.util
import time
import warnings

import numpy as np
import optuna
from sklearn.datasets import load_digits
from sklearn.model_selection import cross_val_score
from sklearn.model_selection import KFold
from sklearn.svm import SVC

from optuna_fedbo import RFFThompsonSampler
from optuna_fedbo.datasets import label_skewed_shards


def make_objective(features: np.ndarray, labels: np.ndarray):
    def objective(trial: optuna.Trial) -> float:
        c = trial.suggest_float("C", 1e-3, 1e3, log=True)
        gamma = trial.suggest_float("gamma", 1e-5, 1e1, log=True)
        folds = KFold(3, shuffle=True, random_state=0)
        scores = cross_val_score(SVC(C=c, gamma=gamma), features, labels, cv=folds)
        return float(np.mean(scores))

    return objective


def samplers(seed: int) -> dict[str, optuna.samplers.BaseSampler]:
    found = {
        "RFF-TS (ours)": RFFThompsonSampler(seed=seed),
        "TPE": optuna.samplers.TPESampler(seed=seed),
        "Random": optuna.samplers.RandomSampler(seed=seed),
    }
    if importlib.util.find_spec("cmaes") is not None:
        found["CMA-ES"] = optuna.samplers.CmaEsSampler(seed=seed)
    if importlib.util.find_spec("torch") is not None:
        found["GP"] = optuna.samplers.GPSampler(seed=seed)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=6)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    data = load_digits()
    shards = label_skewed_shards(data.target, args.sites, seed=args.seed)
    names = list(samplers(0))
    best = np.zeros((args.sites, len(names)))
    seconds = np.zeros(len(names))
    for site, index in enumerate(shards):
        objective = make_objective(data.data[index], data.target[index])
        for k, sampler in enumerate(samplers(args.seed + site).values()):
            study = optuna.create_study(direction="maximize", sampler=sampler)
            start = time.perf_counter()
            study.optimize(objective, n_trials=args.trials)
            seconds[k] += time.perf_counter() - start
            best[site, k] = study.best_value
        print(
            f"site {site}: {len(index)} samples, "
            + ", ".join(f"{n} {v:.4f}" for n, v in zip(names, best[site])),
            flush=True,
        )

    ranks = np.array([np.argsort(np.argsort(-row)) + 1 for row in best])
    print(f"\n{args.sites} sites x {args.trials} trials, best 3-fold CV accuracy per site")
    print(
        f"{'sampler':16s}{'mean best':>12s}{'worst site':>12s}{'mean rank':>12s}{'seconds':>10s}"
    )
    for k, name in enumerate(names):
        print(
            f"{name:16s}{best[:, k].mean():12.4f}{best[:, k].min():12.4f}"
            f"{ranks[:, k].mean():12.2f}{seconds[k]:10.1f}"
        )


if __name__ == "__main__":
    main()
