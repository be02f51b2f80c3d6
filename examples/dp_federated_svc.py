"""A differentially private federation: DP-FTS-DE sites tuning an SVC, a server, and a budget.

``N`` sites each hold a label-skewed shard of scikit-learn's digits and tune an RBF SVC (``C``,
``gamma``) by 3-fold cross-validated accuracy, as in ``examples/federated_svc.py``, but as a real
deployment: the federation lives in a SQLite file, a server thread runs
``FederationServer.serve()`` and every site runs ``study.optimize`` in its own thread with a
synchronous :class:`~optuna_fedbo.FedSampler` (a :class:`~optuna_fedbo.FedTransferSampler`:
the default ``FTSConfig.transfer``). The federation is created with the
DP-FTS-DE paper's privacy settings (``z = 1``, ``q = 0.35``, ``S = 22``, ``delta = 1/N^1.1``)
and an epsilon budget: every round is accounted in the privacy ledger before its broadcast is
readable; when the next round would exceed the budget the server stops and the sites carry on
with their local model (no further privacy is spent).

Printed: the server's rounds (epsilon after each; how many vectors were selected and clipped,
which only the server sees), the ledger (``optuna-fedbo status --ledger`` shows the same), and
the sites' best accuracies against local RFF Thompson sampling with the same trials. Central DP
needs many participants: with a few dozen sites the noise ``z phi_max S / q`` is large against
the shared vectors, so expect the private federation to be close to local TS here; the
synthetic benchmark (``benchmarks/dp_synthetic.py``, 200 agents) is where it pays off.

Run: ``python examples/dp_federated_svc.py`` (about a minute on two cores); ``--sites``,
``--trials``, ``--budget``, ``--accountant``, ``--seed``.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import threading
import time

import numpy as np
import optuna
from sklearn.datasets import load_digits
from sklearn.model_selection import cross_val_score
from sklearn.model_selection import KFold
from sklearn.svm import SVC

from optuna_fedbo import FedSampler
from optuna_fedbo import RFFThompsonSampler
from optuna_fedbo.datasets import label_skewed_shards
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import RoundReport
from optuna_fedbo.federation.dp_config import DPConfig

SEARCH_SPACE = {
    "C": optuna.distributions.FloatDistribution(1e-3, 1e3, log=True),
    "gamma": optuna.distributions.FloatDistribution(1e-5, 1e1, log=True),
}


def make_objective(features: np.ndarray, labels: np.ndarray):
    def objective(trial: optuna.Trial) -> float:
        c = trial.suggest_float("C", 1e-3, 1e3, log=True)
        gamma = trial.suggest_float("gamma", 1e-5, 1e1, log=True)
        folds = KFold(3, shuffle=True, random_state=0)
        return float(np.mean(cross_val_score(SVC(C=c, gamma=gamma), features, labels, cv=folds)))

    return objective


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=30)
    parser.add_argument("--trials", type=int, default=30, help="Trials per site.")
    parser.add_argument("--budget", type=float, default=4.0, help="Epsilon budget.")
    parser.add_argument("--accountant", default="pld", choices=["moments", "rdp", "pld"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Each site logs one warning when the budget runs out; the server's report says it once.
    logging.getLogger("optuna_fedbo").setLevel(logging.ERROR)

    data = load_digits()
    shards = label_skewed_shards(data.target, args.sites, seed=args.seed)
    objectives = [make_objective(data.data[i], data.target[i]) for i in shards]
    workdir = tempfile.TemporaryDirectory(prefix="optuna-fedbo-dp-")
    storage = f"sqlite:///{os.path.join(workdir.name, 'federation.db')}"

    # DP-FTS-DE's mechanism (z = 1, q = 0.35, S = 22; presets.dp_fts_de_privacy() is the paper's).
    privacy = DPConfig(
        noise_multiplier=1.0,
        sample_rate=0.35,
        clip_norm=22.0,
        accountant=args.accountant,
        epsilon_budget=args.budget,
    )
    federation = Federation.create(
        "dp-svc",
        search_space=SEARCH_SPACE,
        n_clients=args.sites,
        storage=storage,
        protocol=FTSConfig(n_subregions=4),
        privacy=privacy,
        seed=args.seed,
    )
    dp = federation.privacy
    assert dp is not None
    print(
        f"federation {federation.name} in {storage}: {args.sites} sites, "
        f"z {dp.noise_multiplier:g}, q {dp.sample_rate:g}, S {dp.clip_norm:g}, "
        f"delta {dp.delta:.3g}, "
        f"{dp.accountant} accountant, epsilon budget {dp.epsilon_budget:g} "
        f"(enough for {dp.max_rounds(args.sites)} rounds)"
    )

    def show(report: RoundReport) -> None:
        if report.budget_exhausted:
            print(f"round {report.round:2d}: not published, the budget is exhausted")
        else:
            print(
                f"round {report.round:2d}: epsilon {report.epsilon:6.3f}; {report.n_selected} "
                f"selected, {report.n_contributors} contributed, {report.n_clipped} clipped "
                "(server-side only)"
            )

    stop = threading.Event()
    server = FederationServer(Federation.load("dp-svc", storage))
    serving = threading.Thread(
        target=server.serve,
        kwargs={"poll_interval": 0.05, "stop": stop, "callback": show},
        daemon=True,
    )
    studies = []
    for site in range(args.sites):
        sampler = FedSampler(
            Federation.load("dp-svc", storage),
            client_id=f"site-{site:02d}",
            synchronous=True,
            seed=args.seed * 1000 + site,
        )
        studies.append(optuna.create_study(direction="maximize", sampler=sampler))
    sites = [
        threading.Thread(
            target=study.optimize, args=(objective,), kwargs={"n_trials": args.trials}
        )
        for study, objective in zip(studies, objectives)
    ]
    start = time.perf_counter()
    serving.start()
    for thread in sites:
        thread.start()
    for thread in sites:
        thread.join()
    stop.set()
    serving.join()
    elapsed = time.perf_counter() - start

    epsilon, delta = federation.privacy_spent()
    print(f"\nspent epsilon {epsilon:.3f} at delta {delta:.3g} ({elapsed:.0f} s)")
    print(federation.status().format())

    local = []
    for site, objective in enumerate(objectives):
        study = optuna.create_study(
            direction="maximize",
            sampler=RFFThompsonSampler(n_startup_trials=10, seed=args.seed * 1000 + site),
        )
        study.optimize(objective, n_trials=args.trials)
        local.append(study.best_value)
    private = [study.best_value for study in studies]
    modes = [t.system_attrs.get("fedbo:mode") for s in studies for t in s.trials]
    print(
        f"\nbest 3-fold CV accuracy after {args.trials} trials, mean over {args.sites} sites: "
        f"DP-FTS-DE {np.mean(private):.4f} (worst {np.min(private):.4f}), "
        f"local RFF-TS {np.mean(local):.4f} (worst {np.min(local):.4f})"
    )
    print(
        "DP-FTS-DE trials by mode: "
        + ", ".join(f"{mode} {modes.count(mode)}" for mode in sorted(set(modes), key=str))
    )


if __name__ == "__main__":
    main()
