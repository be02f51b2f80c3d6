"""LocalGPSampler against Optuna's GPSampler and the other stock samplers: quality and cost.

Run: ``python benchmarks/local_gp.py`` (``--quick`` for a smoke run; ``--only quality`` or
``--only cost`` for one part). Quality: median simple regret at 10/20/40/60 trials over
``--seeds`` seed functions per problem (SE GP draws in 1-4 D at lengthscales 0.02-0.5, and
branin / hartmann3 / hartmann6 with the seed given to the samplers). Cost: wall time of one
whole trial at 50/200/1000 completed trials (3-D hartmann), idle and with one other busy
process, with and without the one-BLAS-thread limit. Prints tables and saves a JSON file and a
plot under ``benchmarks/results/``. BLAS threads are left at the library default (the limit under
test is ours); torch's threads are set to one (``OMP_NUM_THREADS=1``) as GPSampler recommends.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
import contextlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
from pathlib import Path  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import optuna  # noqa: E402
import rff_thompson as rt  # noqa: E402
import scipy.optimize  # noqa: E402

from optuna_fedbo import LocalGPSampler  # noqa: E402
from optuna_fedbo import RFFThompsonSampler  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
RESULTS = Path(__file__).resolve().parent / "results"
HAS_TORCH = importlib.util.find_spec("torch") is not None
BUDGETS = (10, 20, 40, 60)

Sampler = Callable[[int], optuna.samplers.BaseSampler]


class GPDraw:
    """A draw from a zero-mean SE GP on ``[0, 1]^D`` (2,000 random Fourier features)."""

    def __init__(self, dim: int, lengthscale: float, seed: int, n_features: int = 2000) -> None:
        rng = np.random.default_rng(seed)
        self.dim = dim
        self._omega = rng.standard_normal((n_features, dim)) / lengthscale
        self._phase = rng.uniform(0.0, 2.0 * math.pi, n_features)
        self._weights = rng.standard_normal(n_features) * math.sqrt(2.0 / n_features)
        self.maximum = self._find_maximum(rng, lengthscale)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.cos(np.atleast_2d(x) @ self._omega.T + self._phase) @ self._weights

    def _grad(self, x: np.ndarray) -> np.ndarray:
        s = -np.sin(x @ self._omega.T + self._phase) * self._weights
        return s @ self._omega

    def _find_maximum(self, rng: np.random.Generator, lengthscale: float) -> float:
        n = (
            20001
            if self.dim == 1
            else min(200_000, int(50 * (1 / lengthscale) ** self.dim) + 20000)
        )
        points = (
            np.linspace(0, 1, n)[:, None] if self.dim == 1 else rng.uniform(size=(n, self.dim))
        )
        values = np.concatenate(
            [self(chunk) for chunk in np.array_split(points, max(1, n // 5000))]
        )
        best = float(values.max())
        for start in points[np.argsort(-values)[:20]]:
            result = scipy.optimize.minimize(
                lambda x: (-float(self(x)[0]), -self._grad(x[None, :])[0]),
                start,
                jac=True,
                method="L-BFGS-B",
                bounds=[(0.0, 1.0)] * self.dim,
            )
            best = max(best, -float(result.fun))
        return best

    def objective(self) -> Callable[[optuna.Trial], float]:
        def f(trial: optuna.Trial) -> float:
            x = np.array([trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(self.dim)])
            return -float(self(x)[0])  # minimized

        return f


# (problem name, factory seed -> (objective, optimum)); GP draws change with the seed, the
# standard functions do not (their seed goes to the samplers only).
Problem = Callable[[int], tuple[Callable[[optuna.Trial], float], float]]


def _gp_problem(dim: int, lengthscale: float) -> Problem:
    def make(seed: int) -> tuple[Callable[[optuna.Trial], float], float]:
        draw = GPDraw(dim, lengthscale, 1000 * dim + seed)
        return draw.objective(), -draw.maximum

    return make


PROBLEMS: dict[str, Problem] = {
    "GP 1-D l=0.02": _gp_problem(1, 0.02),
    "GP 2-D l=0.05": _gp_problem(2, 0.05),
    "GP 2-D l=0.2": _gp_problem(2, 0.2),
    "GP 3-D l=0.1": _gp_problem(3, 0.1),
    "GP 4-D l=0.5": _gp_problem(4, 0.5),
    "branin (2-D)": lambda s: (rt.branin, 0.397887),
    "hartmann3 (3-D)": lambda s: (rt.hartmann3, -3.86278),
    "hartmann6 (6-D)": lambda s: (rt.hartmann6, -3.32237),
}


def make_samplers() -> dict[str, Sampler]:
    samplers: dict[str, Sampler] = {
        "LocalGP": lambda s: LocalGPSampler(seed=s),
        "LocalGP-TS": lambda s: LocalGPSampler(acquisition="thompson", seed=s),
    }
    if HAS_TORCH:
        samplers["GPSampler"] = lambda s: optuna.samplers.GPSampler(seed=s)
    samplers.update(
        {
            "RFF-TS": lambda s: RFFThompsonSampler(seed=s),
            "TPE": lambda s: optuna.samplers.TPESampler(seed=s),
            "CMA-ES": lambda s: optuna.samplers.CmaEsSampler(seed=s),
            "QMC": lambda s: optuna.samplers.QMCSampler(seed=s),
            "Random": lambda s: optuna.samplers.RandomSampler(seed=s),
        }
    )
    return samplers


def _run_problem(
    pname: str, seeds: int, n_trials: int, names: list[str] | None
) -> tuple[str, dict[str, list[list[float]]], dict[str, float]]:
    samplers = {n: f for n, f in make_samplers().items() if names is None or n in names}
    regret: dict[str, list[list[float]]] = {name: [] for name in samplers}
    seconds = {name: 0.0 for name in samplers}
    for seed in range(seeds):
        objective, optimum = PROBLEMS[pname](seed)
        for sname, make in samplers.items():
            start = time.perf_counter()
            study = optuna.create_study(sampler=make(seed))
            study.optimize(objective, n_trials=n_trials)
            seconds[sname] += time.perf_counter() - start
            values = np.array([t.value for t in study.trials])
            regret[sname].append(np.maximum(np.minimum.accumulate(values) - optimum, 0.0).tolist())
    print(f"  done {pname}", flush=True)
    return pname, regret, seconds


def quality(
    problems: list[str], seeds: int, n_trials: int, workers: int, names: list[str] | None
) -> tuple[dict, dict]:
    """``regret[problem][sampler]``: best-so-far regret curves; ``seconds[sampler]``: time."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    k = len(problems)
    with ProcessPoolExecutor(workers) as pool:
        done = list(pool.map(_run_problem, problems, [seeds] * k, [n_trials] * k, [names] * k))
    regret = {pname: r for pname, r, _ in done}
    seconds: dict[str, float] = {}
    for _, _, sec in done:
        for name, value in sec.items():
            seconds[name] = seconds.get(name, 0.0) + value
    return regret, seconds


def print_quality(regret: dict, seconds: dict, n_trials: int, seeds: int) -> list[str]:
    budgets = [b for b in BUDGETS if b <= n_trials]
    names = list(next(iter(regret.values())).keys())
    lines = [
        f"Quality: median simple regret over {seeds} seeds (lower is better); "
        "ratio = LocalGP / GPSampler",
    ]
    for budget in budgets:
        lines.append(f"\n-- after {budget} trials --")
        lines.append(f"{'problem':18s}" + "".join(f"{n:>12s}" for n in names) + "  LocalGP/GP")
        for pname, per_sampler in regret.items():
            medians = {n: float(np.median([c[budget - 1] for c in per_sampler[n]])) for n in names}
            ratio = (
                f"{medians['LocalGP'] / medians['GPSampler']:10.2f}"
                if "GPSampler" in medians and medians["GPSampler"] > 0
                else "         -"
            )
            best = min(medians.values())
            cells = "".join(
                f"{v:>11.4g}{'*' if v == best else ' '}" for v in (medians[n] for n in names)
            )
            lines.append(f"{pname:18s}{cells}  {ratio}")
        ranks = []
        for per_sampler in regret.values():
            medians = np.array([np.median([c[budget - 1] for c in per_sampler[n]]) for n in names])
            ranks.append(_average_ranks(medians))
        mean_ranks = np.mean(ranks, axis=0)
        lines.append(f"{'mean rank':18s}" + "".join(f"{r:>12.2f}" for r in mean_ranks))
    lines.append(
        "\nTotal wall time of the quality runs (s): "
        + ", ".join(f"{n} {s:.0f}" for n, s in seconds.items())
    )
    lines.append("(* = best median in the row; ranks average ties)")
    return lines


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for v in np.unique(values):
        tied = values == v
        ranks[tied] = ranks[tied].mean()
    return ranks


@contextlib.contextmanager
def blas_limit_disabled() -> Iterator[None]:
    """Replace the one-BLAS-thread limit by a no-op (to measure what it saves)."""
    import optuna_fedbo.core.acquisition as acquisition
    import optuna_fedbo.core.gp as gp
    import optuna_fedbo.core.gp_fit as gp_fit
    import optuna_fedbo.core.posterior as posterior
    import optuna_fedbo.samplers._local_gp as local_gp
    import optuna_fedbo.samplers._rff_thompson as rff_thompson

    modules = (acquisition, gp, gp_fit, posterior, local_gp, rff_thompson)
    saved = [m.one_blas_thread for m in modules]
    for m in modules:
        m.one_blas_thread = contextlib.nullcontext  # type: ignore[assignment]
    try:
        yield
    finally:
        for m, original in zip(modules, saved):
            m.one_blas_thread = original  # type: ignore[assignment]


def per_trial_ms(make: Sampler, n_prefill: int, n_timed: int) -> tuple[float, float, float]:
    """(first trial wall, median wall, median CPU) in ms after ``n_prefill`` random trials.

    A trial is timed from the end of the previous objective call to the end of its own (relative
    sampling runs inside the first ``suggest_*``); the first trial after the prefill carries a
    cold hyperparameter fit for the GP samplers. CPU is this process's time (all its threads):
    on a shared machine it shows the work done, the wall time what a user waits.
    """
    rng = np.random.default_rng(0)
    distributions = {f"x{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(3)}
    study = optuna.create_study(sampler=make(0))
    trials = []
    for x in rng.uniform(size=(n_prefill, 3)):
        params = {f"x{i}": float(v) for i, v in enumerate(x)}
        value = rt._hartmann(x, rt.HARTMANN3_A, rt.HARTMANN3_P)
        trials.append(
            optuna.trial.create_trial(params=params, distributions=distributions, value=value)
        )
    study.add_trials(trials)
    ends: list[tuple[float, float]] = []

    def objective(trial: optuna.Trial) -> float:
        value = rt.hartmann3(trial)
        ends.append((time.perf_counter(), time.process_time()))
        return value

    start = (time.perf_counter(), time.process_time())
    study.optimize(objective, n_trials=n_timed + 1)
    gaps = np.diff(np.array([start, *ends]), axis=0) * 1e3
    return float(gaps[0, 0]), float(np.median(gaps[1:, 0])), float(np.median(gaps[1:, 1]))


def cost(
    sizes: list[int], n_timed: int, busy: bool
) -> dict[str, dict[int, tuple[float, float, float]]]:
    samplers: dict[str, Sampler] = {
        "LocalGP": lambda s: LocalGPSampler(seed=s),
        "LocalGP-TS": lambda s: LocalGPSampler(acquisition="thompson", seed=s),
        "RFF-TS": lambda s: RFFThompsonSampler(seed=s),
        "TPE": lambda s: optuna.samplers.TPESampler(seed=s),
    }
    if HAS_TORCH:
        samplers["GPSampler"] = lambda s: optuna.samplers.GPSampler(seed=s)
    out: dict[str, dict[int, tuple[float, float, float]]] = {}
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        for name, make in samplers.items():
            out[name] = {n: per_trial_ms(make, n, n_timed) for n in sizes}
            print(f"  done {name}", flush=True)
        for name in ("LocalGP", "RFF-TS"):
            with blas_limit_disabled():
                out[f"{name} (no limit)"] = {
                    n: per_trial_ms(samplers[name], n, n_timed) for n in sizes
                }
            print(f"  done {name} (no limit)", flush=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    return out


def print_cost(table: dict, sizes: list[int], title: str) -> list[str]:
    lines = [
        title,
        "ms per trial: median wall / median CPU of the timed trials "
        "[wall of the first trial after the prefill: cold fit]",
    ]
    lines.append(f"{'sampler':20s}" + "".join(f"{f'n={n}':>24s}" for n in sizes))
    for name, row in table.items():
        cells = "".join(f"{row[n][1]:>9.1f} /{row[n][2]:>6.1f} [{row[n][0]:>5.0f}]" for n in sizes)
        lines.append(f"{name:20s}{cells}")
    return lines


def plot(regret: dict, n_trials: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(regret)
    cols = 4
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, (pname, per_sampler) in zip(axes.flat, regret.items()):
        for sname, curves in per_sampler.items():
            med = np.median(np.array(curves), axis=0)
            ax.plot(np.arange(1, n_trials + 1), np.maximum(med, 1e-8), label=sname)
        ax.set_yscale("log")
        ax.set_title(pname, fontsize=9)
        ax.set_xlabel("trial")
    for ax in axes.flat[n:]:
        ax.axis("off")
    axes.flat[0].set_ylabel("median simple regret")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, 20 trials, small sizes")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--only", choices=("quality", "cost"), default=None)
    parser.add_argument("--workers", type=int, default=1, help="processes for the quality runs")
    parser.add_argument(
        "--samplers", default=None, help="comma-separated subset of the quality samplers to run"
    )
    parser.add_argument(
        "--reuse",
        default=None,
        help="JSON of an earlier quality run (same seeds and trials) supplying the samplers "
        "not run now",
    )
    args = parser.parse_args()
    seeds, n_trials = (3, 20) if args.quick else (args.seeds, args.trials)
    sizes = [50, 200] if args.quick else [50, 200, 1000]
    n_timed = 3 if args.quick else 5
    RESULTS.mkdir(exist_ok=True)
    suffix = "_quick" if args.quick else ""
    report: list[str] = []
    data: dict = {"seeds": seeds, "n_trials": n_trials}
    if args.only in (None, "quality"):
        problems = list(PROBLEMS)[:3] if args.quick else list(PROBLEMS)
        names = args.samplers.split(",") if args.samplers else None
        regret, seconds = quality(problems, seeds, n_trials, args.workers, names)
        if args.reuse:
            with open(args.reuse) as f:
                earlier = json.load(f)
            assert (earlier["seeds"], earlier["n_trials"]) == (seeds, n_trials)
            for pname in regret:
                fresh = regret[pname]
                regret[pname] = {
                    n: fresh.get(n, earlier["regret"][pname].get(n)) for n in make_samplers()
                }
            seconds = {n: seconds.get(n, earlier["seconds"].get(n, 0.0)) for n in make_samplers()}
        report += print_quality(regret, seconds, n_trials, seeds)
        data.update(regret=regret, seconds=seconds)
        plot(regret, n_trials, RESULTS / f"local_gp_quality{suffix}.png")
    if args.only in (None, "cost"):
        for busy in (False, True):
            table = cost(sizes, n_timed, busy)
            title = "\nCost, " + ("one other busy process" if busy else "idle") + " (3-D hartmann)"
            report += print_cost(table, sizes, title)
            data[f"cost_{'busy' if busy else 'idle'}"] = {
                k: {str(n): v for n, v in row.items()} for k, row in table.items()
            }
    print("\n".join(report))
    part = f"_{args.only}" if args.only else ""
    with open(RESULTS / f"local_gp{part}{suffix}.json", "w") as f:
        json.dump(data, f)


if __name__ == "__main__":
    main()
