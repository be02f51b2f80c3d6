"""Sites with label-skewed data jointly find SVC hyperparameters best on average, with Fed-PNE.

``N`` sites each hold a label-skewed shard of scikit-learn's ``load_digits`` (Dirichlet label
skew, :func:`optuna_fedbo.datasets.label_skewed_shards`) and tune an RBF SVC (``C`` and
``gamma`` on log scales). One trial trains on a random 70 % of the site's shard and returns the
accuracy on the other 30 % (a fresh split per trial, so rewards are noisy, as in a bandit). The
federation wants the hyperparameters that maximize the *average* site accuracy, which no site can
evaluate alone.

* Fed-PNE: every site runs ``FedPNESampler`` (lock-step phases through the federation server);
  only one mean accuracy per partition cell and phase leaves a site.
* DP-Fed-PNE: the same with ``(epsilon, delta) = (4, 1e-5)`` client-side Gaussian noise on
  every reward.
* Local TPE: each site tunes alone with the same number of trials; its best parameters are then
  judged on every site (rows: the sites whose choice is worst, median and best for the
  federation; no site can know in advance which one it is).

Judged by the average over sites of the 5-fold cross-validated accuracy. The federation's state
lives in memory by default, or in any Optuna storage given with ``--storage``.

Run: ``python examples/fedpne_sites.py`` (about a minute); ``--sites``, ``--horizon``,
``--seed``, ``--storage`` change the setting.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import optuna
from sklearn.datasets import load_digits
from sklearn.model_selection import cross_val_score
from sklearn.model_selection import StratifiedKFold
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC

from optuna_fedbo.datasets import label_skewed_shards
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import simulate_fedpne

SEARCH_SPACE = {
    "C": optuna.distributions.FloatDistribution(1e-2, 1e3, log=True),
    "gamma": optuna.distributions.FloatDistribution(1e-5, 1e0, log=True),
}


def make_objective(features: np.ndarray, labels: np.ndarray):
    """One noisy pull: train on a random 70 % of the shard, accuracy on the rest."""

    def objective(trial: optuna.Trial) -> float:
        c = trial.suggest_float("C", 1e-2, 1e3, log=True)
        gamma = trial.suggest_float("gamma", 1e-5, 1e0, log=True)
        x_train, x_test, y_train, y_test = train_test_split(
            features, labels, test_size=0.3, random_state=trial.number
        )
        return float(SVC(C=c, gamma=gamma).fit(x_train, y_train).score(x_test, y_test))

    return objective


def site_accuracy(features: np.ndarray, labels: np.ndarray, params: dict) -> float:
    """The site's 5-fold cross-validated accuracy (what a pull estimates)."""
    _, counts = np.unique(labels, return_counts=True)
    folds = StratifiedKFold(min(5, int(counts.min())) if counts.min() >= 2 else 2, shuffle=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = cross_val_score(SVC(**params), features, labels, cv=folds)
    return float(np.mean(scores))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=8)
    parser.add_argument("--horizon", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--storage", default=None, help="Optuna storage of the federation.")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    digits = load_digits()
    shards = label_skewed_shards(digits.target, args.sites, concentration=0.5, seed=args.seed)
    data = [(digits.data[idx] / 16.0, digits.target[idx]) for idx in shards]
    objectives = [make_objective(x, y) for x, y in data]
    print(
        f"{args.sites} sites, shard sizes {[len(s) for s in shards]}, "
        f"labels per site {[len(np.unique(y)) for _, y in data]}"
    )

    def judge(params: dict) -> tuple[float, list[float]]:
        np.random.seed(args.seed)
        per_site = [site_accuracy(x, y, params) for x, y in data]
        return float(np.mean(per_site)), per_site

    rows = []
    for label, config in (
        ("Fed-PNE", FedPNEConfig(horizon=args.horizon, value_range=(0.0, 1.0))),
        (
            "DP-Fed-PNE (eps=4)",
            FedPNEConfig(
                horizon=args.horizon, value_range=(0.0, 1.0), dp_epsilon=4.0, dp_delta=1e-5
            ),
        ),
    ):
        start = time.perf_counter()
        result = simulate_fedpne(
            objectives,
            search_space=SEARCH_SPACE,
            protocol=config,
            seed=args.seed,
            storage=args.storage,
        )
        params = result.studies[0].sampler.recommended_params()
        mean, per_site = judge(params)
        rows.append((label, params, mean, min(per_site), time.perf_counter() - start))
        print(
            f"{label}: {len(result.reports)} communication rounds, "
            f"{result.communication()['nodes_per_client']} node means sent per site"
        )

    start = time.perf_counter()
    local = []
    for m, objective in enumerate(objectives):
        study = optuna.create_study(
            direction="maximize", sampler=optuna.samplers.TPESampler(seed=args.seed + m)
        )
        study.optimize(objective, n_trials=args.horizon)
        local.append(judge(study.best_params))
    elapsed = time.perf_counter() - start
    order = np.argsort([mean for mean, _ in local])
    for label, index in (
        ("local TPE, worst site", order[0]),
        ("local TPE, median site", order[len(order) // 2]),
        ("local TPE, best site", order[-1]),
    ):
        mean, per_site = local[int(index)]
        rows.append((label, None, mean, min(per_site), elapsed))

    print()
    print(f"{'method':<26} {'mean acc':>9} {'worst site':>11} {'seconds':>8}  parameters")
    for label, params, mean, worst, seconds in rows:
        shown = "" if params is None else ", ".join(f"{k}={v:.3g}" for k, v in params.items())
        print(f"{label:<26} {mean:9.4f} {worst:11.4f} {seconds:8.1f}  {shown}")


if __name__ == "__main__":
    main()
