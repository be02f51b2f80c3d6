"""RFFThompsonSampler: per-trial overhead and solution quality beside Optuna's samplers.

Run: ``OMP_NUM_THREADS=1 python benchmarks/rff_thompson.py`` (add ``--quick`` for a smoke run).
Prints three tables (overhead, quality, lengthscale study) and saves a plot and a JSON file under
``benchmarks/results/``. GPSampler columns need torch (``pip install -e .[gp]``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
from pathlib import Path  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from optuna_fedbo import RFFThompsonSampler  # noqa: E402
from optuna_fedbo.samplers._rff_thompson import DEFAULT_LENGTHSCALE  # noqa: E402
from optuna_fedbo.samplers._rff_thompson import DEFAULT_NOISE_VARIANCE  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
RESULTS = Path(__file__).resolve().parent / "results"
HAS_TORCH = importlib.util.find_spec("torch") is not None

# Standard test functions (minimization) on their usual boxes, with their known minima.
HARTMANN3_A = np.array([[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]])
HARTMANN3_P = 1e-4 * np.array(
    [[3689, 1170, 2673], [4699, 4387, 7470], [1091, 8732, 5547], [381, 5743, 8828]]
)
HARTMANN6_A = np.array(
    [
        [10, 3, 17, 3.5, 1.7, 8],
        [0.05, 10, 17, 0.1, 8, 14],
        [3, 3.5, 1.7, 10, 17, 8],
        [17, 8, 0.05, 10, 0.1, 14],
    ]
)
HARTMANN6_P = 1e-4 * np.array(
    [
        [1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381],
    ]
)
HARTMANN_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def _hartmann(x: np.ndarray, a: np.ndarray, p: np.ndarray) -> float:
    return -float(HARTMANN_ALPHA @ np.exp(-np.sum(a * (x - p) ** 2, axis=1)))


def branin(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x0", -5.0, 10.0)
    y = trial.suggest_float("x1", 0.0, 15.0)
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x**2 + c * x - 6.0) ** 2 + 10.0 * (1 - t) * math.cos(x) + 10.0


def hartmann3(trial: optuna.Trial) -> float:
    x = np.array([trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(3)])
    return _hartmann(x, HARTMANN3_A, HARTMANN3_P)


def hartmann6(trial: optuna.Trial) -> float:
    x = np.array([trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(6)])
    return _hartmann(x, HARTMANN6_A, HARTMANN6_P)


def levy4(trial: optuna.Trial) -> float:
    x = np.array([trial.suggest_float(f"x{i}", -10.0, 10.0) for i in range(4)])
    w = 1 + (x - 1) / 4
    head = math.sin(math.pi * w[0]) ** 2
    body = np.sum((w[:-1] - 1) ** 2 * (1 + 10 * np.sin(math.pi * w[:-1] + 1) ** 2))
    tail = (w[-1] - 1) ** 2 * (1 + math.sin(2 * math.pi * w[-1]) ** 2)
    return float(head + body + tail)


FUNCTIONS: dict[str, tuple[Callable[[optuna.Trial], float], float]] = {
    "branin (2-D)": (branin, 0.397887),
    "hartmann3 (3-D)": (hartmann3, -3.86278),
    "levy (4-D)": (levy4, 0.0),
    "hartmann6 (6-D)": (hartmann6, -3.32237),
}


def make_samplers(quick: bool) -> dict[str, Callable[[int], optuna.samplers.BaseSampler]]:
    samplers: dict[str, Callable[[int], optuna.samplers.BaseSampler]] = {
        "RFF-TS": lambda s: RFFThompsonSampler(seed=s),
        "RFF-TS l=0.2": lambda s: RFFThompsonSampler(
            lengthscale=DEFAULT_LENGTHSCALE, noise_variance=DEFAULT_NOISE_VARIANCE, seed=s
        ),
        "TPE": lambda s: optuna.samplers.TPESampler(seed=s),
        "Random": lambda s: optuna.samplers.RandomSampler(seed=s),
    }
    if importlib.util.find_spec("cmaes") is not None:
        samplers["CMA-ES"] = lambda s: optuna.samplers.CmaEsSampler(seed=s)
    if HAS_TORCH and not quick:
        samplers["GP"] = lambda s: optuna.samplers.GPSampler(seed=s)
    return samplers


def overhead(
    make: Callable[[int], optuna.samplers.BaseSampler], n_trials: int, checkpoints: list[int]
) -> dict[int, float]:
    """Median wall time of one whole trial (sampler + Optuna + a microsecond objective).

    Relative sampling runs lazily inside the objective's first ``suggest_*`` call, so a trial is
    timed from the end of the previous objective call to the end of its own.
    """
    ends: list[float] = []

    def objective(trial: optuna.Trial) -> float:
        value = hartmann3(trial)
        ends.append(time.perf_counter())
        return value

    study = optuna.create_study(sampler=make(0))
    study.optimize(objective, n_trials=n_trials)
    gaps = np.diff(np.array(ends))
    return {
        c: float(np.median(gaps[max(0, c - 11) : c - 1])) * 1e3
        for c in checkpoints
        if c <= n_trials
    }


def quality(
    samplers: dict[str, Callable[[int], optuna.samplers.BaseSampler]],
    budgets: tuple[int, int],
    seeds: int,
) -> dict[str, dict[str, list[list[float]]]]:
    """Best-so-far regret curves: results[function][sampler] = one curve per seed."""
    results: dict[str, dict[str, list[list[float]]]] = {}
    for fname, (objective, optimum) in FUNCTIONS.items():
        results[fname] = {}
        for sname, make in samplers.items():
            curves = []
            for seed in range(seeds):
                study = optuna.create_study(sampler=make(seed))
                study.optimize(objective, n_trials=budgets[1])
                values = np.array([t.value for t in study.trials])
                curves.append((np.minimum.accumulate(values) - optimum).tolist())
            results[fname][sname] = curves
            print(f"  done {fname:16s} {sname}", flush=True)
    return results


def print_quality(results: dict, budgets: tuple[int, int], title: str) -> list[str]:
    names = list(next(iter(results.values())).keys())
    lines = [title, "median simple regret (best value - optimum) over seeds; lower is better"]
    header = f"{'function':18s}" + "".join(
        f"{n + ' @' + str(b):>18s}" for n in names for b in budgets
    )
    lines.append(header)
    for fname, by_sampler in results.items():
        row = f"{fname:18s}"
        for n in names:
            curves = np.array(by_sampler[n])
            for b in budgets:
                row += f"{np.median(curves[:, b - 1]):18.4f}"
        lines.append(row)
    ranks = []
    for by_sampler in results.values():
        medians = [np.median(np.array(by_sampler[n])[:, budgets[1] - 1]) for n in names]
        ranks.append(np.argsort(np.argsort(medians)) + 1)
    lines.append(
        f"{'mean rank @' + str(budgets[1]):18s}"
        + "".join(f"{r:36.2f}" for r in np.mean(ranks, axis=0))
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--gp-max-trials", type=int, default=300)
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    checkpoints = [50, 200, 1000] if not args.quick else [50, 100]
    budgets = (30, 60) if not args.quick else (15, 30)
    seeds = args.seeds if not args.quick else 2
    samplers = make_samplers(args.quick)
    report: list[str] = []

    timing_samplers = {
        "RFF-TS": samplers["RFF-TS"],
        "TPE": samplers["TPE"],
        **({"GP": samplers["GP"]} if "GP" in samplers else {}),
    }
    report.append(
        "Per-trial overhead, ms (median of the 10 trials before the checkpoint; D=3, M=100)"
    )
    report.append(f"{'sampler':10s}" + "".join(f"{'@' + str(c):>10s}" for c in checkpoints))
    timing: dict[str, dict[int, float]] = {}
    for name, make in timing_samplers.items():
        n = checkpoints[-1] if name != "GP" else min(checkpoints[-1], args.gp_max_trials)
        timing[name] = overhead(make, n, checkpoints)
        report.append(
            f"{name:10s}"
            + "".join(
                f"{timing[name][c]:10.2f}" if c in timing[name] else f"{'n/a':>10s}"
                for c in checkpoints
            )
        )
        print(report[-1], flush=True)

    results = quality(samplers, budgets, seeds)
    report += [""] + print_quality(results, budgets, "Quality")

    lengthscales = [0.01, 0.05, 0.1, 0.2, 0.3, 0.5]
    ls_samplers = {
        f"l={ls}": (
            lambda s, ls=ls: RFFThompsonSampler(
                lengthscale=ls, noise_variance=DEFAULT_NOISE_VARIANCE, seed=s
            )
        )
        for ls in lengthscales
    }
    ls_results = quality(ls_samplers, budgets, seeds)
    report += [""] + print_quality(ls_results, budgets, "RFF-TS lengthscale study")

    print("\n".join(report))
    (RESULTS / "rff_thompson.txt").write_text("\n".join(report) + "\n")
    (RESULTS / "rff_thompson.json").write_text(
        json.dumps({"timing_ms": timing, "quality": results, "lengthscales": ls_results})
    )
    _plot(timing, results, RESULTS / "rff_thompson.png")


def _plot(timing: dict, results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 1 + len(results), figsize=(4 * (1 + len(results)), 3.5))
    for name, by_checkpoint in timing.items():
        xs = sorted(by_checkpoint)
        axes[0].plot(xs, [by_checkpoint[x] for x in xs], marker="o", label=name)
    axes[0].set(xscale="log", yscale="log", xlabel="trials", ylabel="ms / trial", title="overhead")
    axes[0].legend()
    for ax, (fname, by_sampler) in zip(axes[1:], results.items()):
        for sname, curves in by_sampler.items():
            ax.plot(np.median(np.array(curves), axis=0), label=sname)
        ax.set(yscale="symlog", xlabel="trial", ylabel="simple regret", title=fname)
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
