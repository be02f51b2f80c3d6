"""Eight sites tune an SVC with 15 trials each: alone with Optuna's samplers, or as a federation.

Each site holds its own small, label-skewed sample of scikit-learn's ``digits`` (a few hundred
images, a few dominant classes: the sites differ) and tunes an RBF SVC's ``C`` and ``gamma``
(log scales) by 3-fold cross-validated accuracy. Every fit is taken to be expensive, so each site
affords only 15 trials. The sites' accuracy surfaces share their shape (which ``gamma`` suits
8x8 images, how much regularization a few hundred samples need) but not their values.

Compared, on the same sites and seeds:

* ``federated``: :class:`~optuna_fedbo.FedTransferSampler` with the default
  :class:`~optuna_fedbo.FTSConfig`: a space-filling start of 5 trials per site, then each site's
  own GP with the federation's broadcast as a prior mean, weighted by how well it predicts the
  site's own trials, and dropped while the GP alone predicts the site's new trials better. Only
  a random-feature vector per round leaves a site; its trials stay in its own study. The
  federation's state (uploads, broadcasts) lives in an embedded SQLite file in a temporary
  directory, or in the storage given by ``--storage``; each federation is deleted with its keys
  (:func:`optuna_fedbo.delete_federation`) once its run is over, so the job leaves nothing in
  the key folder;
* each site alone with Optuna's stock samplers: ``TPE``, ``random``, ``QMC``, ``CMA-ES`` and
  ``GP`` (:class:`optuna.samplers.GPSampler`, when torch is installed), and with the default's
  local model alone (``local GP``).

The table shows the gap to the best accuracy any method found on the site (mean over sites and
repeats; lower is better) after 5, 10 and 15 trials, each method's ratio to the best stock
sampler, and the mean rank after 15 trials (ties share their average rank). A plot of the gap
per trial is saved as ``examples/results/federated_svc.png`` (not tracked by git; ``--plot``
writes it elsewhere).

Run: ``python examples/federated_svc.py`` (about two to three minutes on two cores);
``--sites``, ``--trials``, ``--repeats``, ``--seed``, ``--storage`` and ``--plot`` change the
setting.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
import warnings

import numpy as np
import optuna
from scipy.stats import rankdata
from sklearn.datasets import load_digits
from sklearn.model_selection import cross_val_score
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import SVC

from optuna_fedbo import delete_federation
from optuna_fedbo import FTSConfig
from optuna_fedbo import LocalGPSampler
from optuna_fedbo.datasets import label_skewed_shards
from optuna_fedbo.simulation import simulate

SEARCH_SPACE = {
    "C": optuna.distributions.FloatDistribution(1e-2, 1e3, log=True),
    "gamma": optuna.distributions.FloatDistribution(1e-4, 1e1, log=True),
}
SAMPLES_PER_SITE = 250


def make_objective(features: np.ndarray, labels: np.ndarray):
    def objective(trial: optuna.Trial) -> float:
        c = trial.suggest_float("C", 1e-2, 1e3, log=True)
        gamma = trial.suggest_float("gamma", 1e-4, 1e1, log=True)
        folds = StratifiedKFold(3, shuffle=True, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # rare classes of a skewed shard
            scores = cross_val_score(SVC(C=c, gamma=gamma), features, labels, cv=folds)
        return float(np.mean(scores))

    return objective


def site_objectives(n_sites: int, seed: int):
    data = load_digits()
    rng = np.random.default_rng(seed)
    objectives = []
    for shard in label_skewed_shards(data.target, n_sites, concentration=0.5, seed=seed):
        keep = rng.choice(shard, size=min(SAMPLES_PER_SITE, len(shard)), replace=False)
        objectives.append(make_objective(data.data[keep] / 16.0, data.target[keep]))
    return objectives


def best_curves(studies: list[optuna.Study], n_trials: int) -> np.ndarray:
    """Best accuracy so far per site and trial, shape ``(sites, n_trials)``."""
    curves = np.zeros((len(studies), n_trials))
    for i, study in enumerate(studies):
        values = [t.value if t.value is not None else 0.0 for t in study.trials[:n_trials]]
        curves[i] = np.maximum.accumulate(values)
    return curves


def run_federated(objectives, n_trials: int, seed: int, storage: str | None):
    """One federation over ``storage``, deleted with its keys afterwards (the sites' studies,
    in memory, are returned)."""
    protocol = FTSConfig()
    name = f"svc-{seed}-{uuid.uuid4().hex[:8]}"  # unique: never another run's federation
    try:
        result = simulate(
            objectives,
            search_space=SEARCH_SPACE,
            n_rounds=n_trials - protocol.n_init,
            protocol=protocol,
            direction="maximize",
            seed=seed,
            storage=storage,
            name=name,
            progress=False,
        )
    finally:
        if storage is not None:  # in memory, nothing was written
            try:
                delete_federation(name, storage)
            except KeyError:  # it was never created
                pass
    return result.studies


def run_alone(objectives, make_sampler, n_trials: int):
    studies = []
    for site, objective in enumerate(objectives):
        study = optuna.create_study(direction="maximize", sampler=make_sampler(site))
        study.optimize(objective, n_trials=n_trials)
        studies.append(study)
    return studies


def stock_samplers() -> dict:
    samplers = {
        "TPE": lambda seed: optuna.samplers.TPESampler(seed=seed),
        "random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
        "QMC": lambda seed: optuna.samplers.QMCSampler(seed=seed),
        "CMA-ES": lambda seed: optuna.samplers.CmaEsSampler(seed=seed),
    }
    try:
        import torch  # noqa: F401

        samplers["GP"] = lambda seed: optuna.samplers.GPSampler(seed=seed)
    except ImportError:
        print("torch is not installed: Optuna's GPSampler is left out.")
    return samplers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=8)
    parser.add_argument("--trials", type=int, default=15, help="Trials per site.")
    parser.add_argument("--repeats", type=int, default=3, help="Independent repetitions.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--storage",
        default=None,
        help="Federation storage URL, or 'memory' (default: a SQLite file in a temporary dir).",
    )
    parser.add_argument(
        "--plot",
        default=os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "results", "federated_svc.png"
        ),
        help="Where to save the plot (default: examples/results/federated_svc.png, untracked).",
    )
    args = parser.parse_args()
    workdir = None
    if args.storage is None:
        workdir = tempfile.TemporaryDirectory(prefix="optuna-fedbo-")
        args.storage = f"sqlite:///{os.path.join(workdir.name, 'federation.db')}"
        print(f"federation storage: {args.storage}")
    elif args.storage == "memory":
        args.storage = None
    if args.trials <= FTSConfig().n_init:
        parser.error(f"--trials must exceed the initial design ({FTSConfig().n_init}).")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    stock = stock_samplers()
    methods = {
        "federated": lambda objs, seed: run_federated(objs, args.trials, seed, args.storage),
        "local GP": lambda objs, seed: run_alone(
            objs, lambda site: LocalGPSampler(n_startup_trials=5, seed=seed + site), args.trials
        ),
        **{
            name: (
                lambda objs, seed, make=make: run_alone(
                    objs, lambda site: make(seed + site), args.trials
                )
            )
            for name, make in stock.items()
        },
    }
    curves: dict[str, list[np.ndarray]] = {name: [] for name in methods}
    seconds = dict.fromkeys(methods, 0.0)
    for repeat in range(args.repeats):
        seed = args.seed + 1000 * repeat
        objectives = site_objectives(args.sites, seed)
        for name, run in methods.items():
            start = time.perf_counter()
            studies = run(objectives, seed)
            seconds[name] += time.perf_counter() - start
            curves[name].append(best_curves(studies, args.trials))
        print(f"repeat {repeat + 1}/{args.repeats} done", flush=True)
    report(curves, seconds, stock, args)


def report(curves, seconds, stock, args) -> None:
    names = list(curves)
    # The gap to the best accuracy any method found on the site (per repeat and site).
    stacked = np.stack([np.concatenate(curves[n]) for n in names])  # (methods, runs, trials)
    gaps = stacked.max(axis=(0, 2))[None, :, None] - stacked
    mean_gap = gaps.mean(axis=1)  # (methods, trials)
    ranks = np.array([rankdata(-stacked[:, run, -1]) for run in range(stacked.shape[1])])
    checkpoints = sorted({5, 10, args.trials} & set(range(1, args.trials + 1)))
    stock_rows = [names.index(n) for n in stock]
    best_stock = {c: min(stock_rows, key=lambda k: mean_gap[k, c - 1]) for c in checkpoints}
    print(
        f"\n{args.sites} sites x {args.trials} trials, {args.repeats} repeats. Accuracy gap to "
        "the "
        "best any method found on the site (lower is better), mean over sites and repeats;"
        "\nx best stock = gap / gap of the best stock Optuna sampler at that trial; rank at the "
        "last trial (1 = best; ties share their average rank)."
    )
    header = "".join(f"{'gap@' + str(c):>9s}" for c in checkpoints)
    header += "".join(f"{'x stock@' + str(c):>11s}" for c in checkpoints)
    print(f"{'method':10s}{header}{'mean rank':>11s}{'seconds':>9s}")
    for k, name in enumerate(names):
        line = f"{name:10s}" + "".join(f"{mean_gap[k, c - 1]:9.4f}" for c in checkpoints)
        for c in checkpoints:
            line += f"{mean_gap[k, c - 1] / max(mean_gap[best_stock[c], c - 1], 1e-12):11.2f}"
        print(f"{line}{ranks[:, k].mean():11.2f}{seconds[name]:9.1f}")
    for c in checkpoints:
        winner = names[int(np.argmin(mean_gap[:, c - 1]))]
        ref = names[best_stock[c]]
        fed = names.index("federated")
        ratio = mean_gap[fed, c - 1] / max(mean_gap[best_stock[c], c - 1], 1e-12)
        print(
            f"after {c:2d} trials: best is {winner}; the federation's gap is {ratio:.2f}x that of "
            f"the best stock sampler ({ref})."
        )
    plot(names, mean_gap, args.plot)


def plot(names, mean_gap, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot.")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    trials = np.arange(1, mean_gap.shape[1] + 1)
    for k, name in enumerate(names):
        ax.plot(trials, mean_gap[k], "-" if k < 2 else "--", label=name, lw=2 if k == 0 else 1)
    ax.set_yscale("log")
    ax.set_xlabel("trials per site")
    ax.set_ylabel("accuracy gap to the best found")
    ax.set_title("SVC tuning on 8 label-skewed digits sites")
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot saved to {path}")


if __name__ == "__main__":
    main()
