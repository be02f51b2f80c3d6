"""Federated SVC tuning on label-skewed shards of scikit-learn's digits, FTS-DE against local.

``N`` sites each hold a label-skewed shard of ``load_digits`` and tune an RBF SVC (``C`` and
``gamma``, both on a log scale) on it, maximizing 3-fold cross-validated accuracy. The sites'
objectives differ (different classes, different sizes) but are related, which is the setting
federated BO is for. Compared, with the same budget of trials per site:

* FTS-DE: ``FedThompsonSampler`` with the DP-FTS-DE preset (``P = 4`` sub-regions, softmax
  weights, ``1 - p_t = 1/t``) and no privacy; the sites run in lock-step rounds and share one
  random-feature vector per round through the federation server;
* FTS: the original FTS (the server relays the vectors; each site draws one other site's);
* local RFF Thompson sampling (the same model without federation), TPE and random search.

The federation's state lives in an embedded SQLite file in a temporary directory by default, or in
any Optuna storage given with ``--storage`` (``memory`` for in-memory, ``sqlite:///fed.db``, a
PostgreSQL URL). Each site's own trials always stay in its own in-memory study: only the
random-feature vectors pass through the federation's storage.

Run: ``python examples/federated_svc.py`` (about two minutes on two cores); ``--sites``,
``--trials``, ``--repeats``, ``--n-init`` and ``--seed`` change the setting.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import numpy as np
import optuna
from scipy.stats import rankdata
from sklearn.datasets import load_digits
from sklearn.model_selection import cross_val_score
from sklearn.model_selection import KFold
from sklearn.svm import SVC

from optuna_fedbo import RFFThompsonSampler
from optuna_fedbo.datasets import label_skewed_shards
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import simulate

SEARCH_SPACE = {
    "C": optuna.distributions.FloatDistribution(1e-3, 1e3, log=True),
    "gamma": optuna.distributions.FloatDistribution(1e-5, 1e1, log=True),
}


def make_objective(features: np.ndarray, labels: np.ndarray):
    def objective(trial: optuna.Trial) -> float:
        c = trial.suggest_float("C", 1e-3, 1e3, log=True)
        gamma = trial.suggest_float("gamma", 1e-5, 1e1, log=True)
        folds = KFold(3, shuffle=True, random_state=0)
        scores = cross_val_score(SVC(C=c, gamma=gamma), features, labels, cv=folds)
        return float(np.mean(scores))

    return objective


def best_curves(studies: list[optuna.Study], n_trials: int) -> np.ndarray:
    """Best accuracy so far per site and trial, shape ``(sites, n_trials)``."""
    curves = np.zeros((len(studies), n_trials))
    for i, study in enumerate(studies):
        values = [t.value if t.value is not None else 0.0 for t in study.trials[:n_trials]]
        curves[i] = np.maximum.accumulate(values)
    return curves


def run_federated(objectives, protocol, n_rounds: int, seed: int, storage: str | None):
    result = simulate(
        objectives,
        search_space=SEARCH_SPACE,
        n_rounds=n_rounds,
        protocol=protocol,
        direction="maximize",
        seed=seed,
        storage=storage,
        progress=False,
    )
    return result.studies


def run_local(objectives, make_sampler, n_trials: int):
    studies = []
    for site, objective in enumerate(objectives):
        study = optuna.create_study(direction="maximize", sampler=make_sampler(site))
        study.optimize(objective, n_trials=n_trials)
        studies.append(study)
    return studies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=8)
    parser.add_argument("--trials", type=int, default=30, help="Trials per site.")
    parser.add_argument("--n-init", type=int, default=10, help="Initial points per site.")
    parser.add_argument("--repeats", type=int, default=3, help="Independent repetitions.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--storage",
        default=None,
        help="Federation storage URL, or 'memory' (default: a SQLite file in a temporary dir).",
    )
    args = parser.parse_args()
    if args.storage is None:
        workdir = tempfile.TemporaryDirectory(prefix="optuna-fedbo-")
        args.storage = f"sqlite:///{os.path.join(workdir.name, 'federation.db')}"
        print(f"federation storage: {args.storage}")
    elif args.storage == "memory":
        args.storage = None
    if args.trials <= args.n_init:
        parser.error("--trials must exceed --n-init.")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    data = load_digits()
    n_rounds = args.trials - args.n_init
    methods = {
        "FTS-DE (P=4)": lambda objs, seed: run_federated(
            objs, FTSConfig(n_subregions=4, n_init=args.n_init), n_rounds, seed, args.storage
        ),
        "FTS (original)": lambda objs, seed: run_federated(
            objs,
            FTSConfig(aggregation="sample", schedule="fts", n_init=args.n_init),
            n_rounds,
            seed,
            args.storage,
        ),
        "local RFF-TS": lambda objs, seed: run_local(
            objs,
            lambda site: RFFThompsonSampler(n_startup_trials=args.n_init, seed=seed + site),
            args.trials,
        ),
        "TPE": lambda objs, seed: run_local(
            objs, lambda site: optuna.samplers.TPESampler(seed=seed + site), args.trials
        ),
        "Random": lambda objs, seed: run_local(
            objs, lambda site: optuna.samplers.RandomSampler(seed=seed + site), args.trials
        ),
    }
    curves = {name: [] for name in methods}
    seconds = dict.fromkeys(methods, 0.0)
    for repeat in range(args.repeats):
        seed = args.seed + 1000 * repeat
        shards = label_skewed_shards(data.target, args.sites, seed=seed)
        objectives = [make_objective(data.data[i], data.target[i]) for i in shards]
        for name, run in methods.items():
            start = time.perf_counter()
            studies = run(objectives, seed)
            seconds[name] += time.perf_counter() - start
            curves[name].append(best_curves(studies, args.trials))
        print(f"repeat {repeat + 1}/{args.repeats} done", flush=True)

    stacked = {name: np.concatenate(c) for name, c in curves.items()}  # (repeats*sites, trials)
    final = np.stack([stacked[name][:, -1] for name in methods], axis=1)
    ranks = np.array([rankdata(-row) for row in final])  # ties share their average rank
    checkpoints = sorted({min(args.n_init + 5, args.trials), args.trials})
    print(
        f"\n{args.sites} sites x {args.trials} trials ({args.n_init} initial), "
        f"{args.repeats} repeats: best 3-fold CV accuracy, mean over sites and repeats"
    )
    header = f"{'method':16s}" + "".join(f"{'@' + str(c):>9s}" for c in checkpoints)
    print(header + f"{'worst':>9s}{'mean rank':>11s}{'seconds':>9s}")
    for k, name in enumerate(methods):
        at = "".join(f"{stacked[name][:, c - 1].mean():9.4f}" for c in checkpoints)
        print(
            f"{name:16s}{at}{stacked[name][:, -1].min():9.4f}"
            f"{ranks[:, k].mean():11.2f}{seconds[name]:9.1f}"
        )


if __name__ == "__main__":
    main()
