"""Cost per trial of LDPUCBSampler (TGP, ATA, MoMA) in ``study.optimize``, with Optuna's for scale.

Two studies with a privatized, instantly evaluated objective (so the time is the sampler's and
Optuna's): a finite domain (one integer in 0..99, searched exhaustively by LDPUCBSampler) for
1000 trials, and a continuous 2-D box (random candidates + L-BFGS-B) for 1000 trials. Times are
wall-clock milliseconds per trial, averaged over windows of trials, on one BLAS thread, with the
sampler's defaults (MoMA's practical epoch length, ATA's and MoMA's dictionaries bounded at 64
points). On the continuous box the exact-GP samplers (LDP-TGP, whose GP grows with every
distinct point, and Optuna's GPSampler) run 300 trials only: their cost grows like ``t^2``-
``t^3``. ``--unbounded`` adds ATA with the paper's unbounded dictionary (300 trials).

Run: ``python benchmarks/ldp_cost.py`` (``--quick`` for a smoke run). Prints a table and saves
``results/ldp_cost.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

from ldp_common import RESULTS  # noqa: E402
import numpy as np  # noqa: E402
import optuna  # noqa: E402
from optuna.samplers import BaseSampler  # noqa: E402

from optuna_fedbo import LaplaceMechanism  # noqa: E402
from optuna_fedbo import LDPUCBSampler  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
HAS_TORCH = importlib.util.find_spec("torch") is not None


def finite_objective(trial: optuna.Trial) -> float:
    return math.sin(trial.suggest_int("i", 0, 99) / 15.0)


def continuous_objective(trial: optuna.Trial) -> float:
    x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
    return math.sin(5 * x) * math.cos(3 * y)


def samplers(horizon: int, unbounded: bool) -> dict[str, Callable[[], BaseSampler]]:
    common = {"epsilon": 1.0, "value_bound": 1.0, "noise_bound": 0.0, "horizon": horizon}
    out: dict[str, Callable[[], BaseSampler]] = {
        "ldp-tgp": lambda: LDPUCBSampler("tgp", seed=0, **common),
        "ldp-ata": lambda: LDPUCBSampler("ata", seed=0, **common),
        "ldp-moma": lambda: LDPUCBSampler("moma", seed=0, **common),
        "tpe": lambda: optuna.samplers.TPESampler(seed=0),
        "random": lambda: optuna.samplers.RandomSampler(seed=0),
    }
    if unbounded:
        out["ata-unbounded"] = lambda: LDPUCBSampler(
            "ata", max_dictionary_size=None, seed=0, **common
        )
    if HAS_TORCH:
        out["gp"] = lambda: optuna.samplers.GPSampler(seed=0)
    return out


#: Samplers whose cost grows with every distinct point: fewer trials on the continuous box.
SHORT = ("ldp-tgp", "gp", "ata-unbounded")


def time_study(
    make_sampler: Callable[[], BaseSampler],
    objective: Callable[[optuna.Trial], float],
    n_trials: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Wall-clock and CPU milliseconds between consecutive objective calls (one trial's cost).

    The CPU time of this process is what the trial costs on an idle machine (one BLAS thread);
    the wall-clock time also holds waiting for other processes on a shared machine.
    """
    mechanism = LaplaceMechanism(
        1.0, value_bound=1.0, noise_bound=0.0, rng=np.random.default_rng(0)
    )
    private = mechanism.wrap(objective)
    stamps: list[tuple[float, float]] = []

    def now() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def timed(trial: optuna.Trial) -> float:
        stamps.append(now())
        return private(trial)

    study = optuna.create_study(direction="maximize", sampler=make_sampler())
    start = now()
    study.optimize(timed, n_trials=n_trials)
    stamps.append(now())
    clocks = 1000.0 * np.diff(np.array([start] + stamps[1:]), axis=0)
    return clocks[:, 0], clocks[:, 1]


def _windows(n_trials: int) -> list[tuple[int, int]]:
    width = max(n_trials // 10, 1)
    points = sorted({width, n_trials // 3, n_trials // 2, n_trials})
    return [(max(end - width, 0), end) for end in points]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 trials (60 for exact GPs)")
    parser.add_argument("--unbounded", action="store_true", help="also ATA, unbounded dictionary")
    args = parser.parse_args()
    n_trials, short_trials = (100, 60) if args.quick else (1000, 300)
    settings = [
        ("finite 1-D (100 points)", finite_objective),
        ("continuous 2-D", continuous_objective),
    ]
    results: dict[str, dict[str, dict[str, float]]] = {}
    for label, objective in settings:
        results[label] = {}
        for name, make in samplers(n_trials, args.unbounded).items():
            if name == "gp" and label.startswith("finite"):
                continue
            short = name in SHORT and label.startswith("continuous")
            trials = short_trials if short else n_trials
            wall, cpu = time_study(make, objective, trials)
            row = {}
            for a, b in _windows(trials):
                row[f"{a + 1}-{b} wall"] = float(wall[a:b].mean())
                row[f"{a + 1}-{b} cpu"] = float(cpu[a:b].mean())
            row["total wall s"] = float(wall.sum() / 1000.0)
            results[label][name] = row
            print(f"  timed {name} on {label}", flush=True)
        print(f"\n{label}: ms per trial (wall-clock and CPU, mean over windows of trials)")
        for name, row in results[label].items():
            cells = ", ".join(f"{column} {value:.2f}" for column, value in row.items())
            print(f"| {name:13s} | {cells} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ldp_cost.json").write_text(json.dumps(results, indent=2))
    print("\nsaved results/ldp_cost.json")


if __name__ == "__main__":
    main()
