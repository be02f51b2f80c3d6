"""Fed-PNE at tuning budgets against per-participant stock Optuna samplers (issue 12).

Setting: ``M = 10`` participants, ``T = 200`` trials each, 10 seeds (each seed draws the
participants' perturbations, the noise, and for Bumps2D the peak positions). Participant ``m``
observes ``f + p_m`` plus ``U(-0.1, 0.1)`` noise as its raw objective value; the ``p_m`` average
out, so the global objective is ``f`` (see ``optuna_fedbo.core.fedpne.synthetic``):

* Garland and DoubleSine on ``[0, 1]`` (the paper's functions, perturbation bound 0.1);
* Bumps2D on ``[0, 1]^2``: a narrow global peak and a broad lower one, perturbation bound 0.3,
  so 2-3 of the 10 participants have their own optimum on the wrong (broad) peak.

Every algorithm runs in real ``study.optimize`` loops on the same objectives:

* Fed-PNE (default ``variant="tuning"``) and the paper preset (``variant="paper"``), through
  ``FedPNESampler`` and the server in lock-step (``optuna_fedbo.federation.simulate_fedpne``),
  with ``value_range`` = the noise-free range of the participants' objectives and
  ``noise_bound = 0.1`` (no reward is clipped);
* per participant, alone on its own objective: RandomSampler, TPESampler, CmaEsSampler,
  QMCSampler, and GPSampler when torch is importable (on ``--gp-seeds`` seeds only: it is
  O(n^3) per trial).

Metrics, all on the global objective ``f``:

* cumulative regret: ``sum_t mean_m (f* - f(x_{m,t}))`` (the paper's average cumulative regret
  per participant);
* deployed point: what a user would deploy at ``T``. Fed-PNE: ``recommended_params()`` (the same
  for every participant). Stock samplers: each participant's ``study.best_params`` (its best
  observed noisy value), averaged over participants;
* best pulled point (not deployable, for reference): ``min`` over everything the participants
  evaluated.

Targets (issue 12): Fed-PNE's cumulative regret <= 0.8x per-participant CMA-ES; the
recommendation's regret <= the best stock sampler's deployed point.

Run: ``python benchmarks/fedpne_tuning.py`` (full), ``--quick`` (3 seeds, T = 60, no GP).
Tables go to stdout and ``benchmarks/results/fedpne_tuning[_quick].md``, the plot to
``benchmarks/results/fedpne_tuning[_quick].png``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
import sys
import time

import matplotlib

matplotlib.use("Agg")
from fedpne_common import table  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optuna  # noqa: E402
from optuna.distributions import FloatDistribution  # noqa: E402

from optuna_fedbo.core.fedpne.synthetic import FederatedProblem  # noqa: E402
from optuna_fedbo.core.fedpne.synthetic import make_federated_problem  # noqa: E402
from optuna_fedbo.federation import FedPNEConfig  # noqa: E402
from optuna_fedbo.federation import simulate_fedpne  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PROBLEMS = {"garland": 0.1, "doublesine": 0.1, "bumps2d": 0.3}  # name -> perturbation bound
NOISE = 0.1
FEDPNE = {"Fed-PNE (tuning, default)": "tuning", "Fed-PNE (paper preset)": "paper"}

try:
    import torch  # noqa: F401

    HAS_TORCH = True
except ImportError:  # pragma: no cover - reported in the output
    HAS_TORCH = False


def stock_samplers(include_gp: bool) -> dict[str, Callable[[int], optuna.samplers.BaseSampler]]:
    samplers: dict[str, Callable[[int], optuna.samplers.BaseSampler]] = {
        "random": lambda s: optuna.samplers.RandomSampler(seed=s),
        "TPE": lambda s: optuna.samplers.TPESampler(seed=s),
        "CMA-ES": lambda s: optuna.samplers.CmaEsSampler(seed=s),
        "QMC": lambda s: optuna.samplers.QMCSampler(seed=s),
    }
    if include_gp:
        samplers["GP"] = lambda s: optuna.samplers.GPSampler(seed=s)
    return samplers


def search_space(problem: FederatedProblem) -> dict[str, FloatDistribution]:
    return {f"x{i}": FloatDistribution(0.0, 1.0) for i in range(problem.dim)}


def objectives(problem: FederatedProblem, seed: int) -> list[Callable[[optuna.Trial], float]]:
    """Participant ``m``'s raw noisy objective ``f + p_m + U(-noise, noise)``."""
    rng = np.random.default_rng(seed)

    def make(m: int) -> Callable[[optuna.Trial], float]:
        def objective(trial: optuna.Trial) -> float:
            x = np.array([[trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(problem.dim)]])
            return float(problem.client_value(m, x)[0] + rng.uniform(-NOISE, NOISE))

        return objective

    return [make(m) for m in range(problem.n_clients)]


def regret(problem: FederatedProblem, points: np.ndarray) -> np.ndarray:
    """``f* - f`` of points shaped ``(..., dim)``."""
    flat = points.reshape(-1, problem.dim)
    return (problem.f_star - problem.global_value(flat)).reshape(points.shape[:-1])


def trial_points(study: optuna.Study, dim: int, horizon: int) -> np.ndarray:
    trials = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE][:horizon]
    return np.array([[t.params[f"x{i}"] for i in range(dim)] for t in trials])


def run_fedpne(problem: FederatedProblem, horizon: int, seed: int, variant: str) -> dict:
    lo = problem.f_min - problem.perturbation
    hi = problem.f_star + problem.perturbation
    protocol = FedPNEConfig(
        horizon=horizon, value_range=(lo, hi), noise_bound=NOISE, variant=variant
    )
    result = simulate_fedpne(
        objectives(problem, seed), search_space=search_space(problem), protocol=protocol, seed=seed
    )
    points = np.stack([trial_points(s, problem.dim, horizon) for s in result.studies])
    best = result.studies[0].sampler.recommended_params()
    recommended = np.array([[best[f"x{i}"] for i in range(problem.dim)]])
    clipped = sum(s.sampler.n_clipped for s in result.studies)
    return {
        "points": points,
        "deployed": float(regret(problem, recommended)[0]),
        "clipped": clipped,
    }


def run_stock(
    problem: FederatedProblem, horizon: int, seed: int, factory: Callable[[int], object]
) -> dict:
    points, deployed = [], []
    for m, objective in enumerate(objectives(problem, seed)):
        study = optuna.create_study(direction="maximize", sampler=factory(seed * 1000 + m))
        study.optimize(objective, n_trials=horizon)
        points.append(trial_points(study, problem.dim, horizon))
        best = np.array([[study.best_params[f"x{i}"] for i in range(problem.dim)]])
        deployed.append(regret(problem, best)[0])
    return {"points": np.stack(points), "deployed": float(np.mean(deployed)), "clipped": 0}


def fmt(values: list[float], digits: int = 2) -> str:
    return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, T = 60, no GP")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--horizon", type=int, default=None)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--gp-seeds", type=int, default=None, help="seeds GPSampler runs on")
    parser.add_argument("--problems", nargs="*", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="run only the methods whose label contains one of these words (e.g. GP); the "
        "targets table then needs Fed-PNE and CMA-ES among them",
    )
    parser.add_argument("--tag", default="", help="suffix of the output files")
    args = parser.parse_args()
    n_seeds = args.seeds if args.seeds is not None else (3 if args.quick else 10)
    horizon = args.horizon if args.horizon is not None else (60 if args.quick else 200)
    gp_seeds = args.gp_seeds if args.gp_seeds is not None else (0 if args.quick else 2)
    gp_seeds = gp_seeds if HAS_TORCH else 0
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    suffix = ("_quick" if args.quick else "") + (f"_{args.tag}" if args.tag else "")
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = [
        f"Fed-PNE vs per-participant stock samplers: M = {args.clients}, T = {horizon}, "
        f"{n_seeds} seeds (mean ± std over seeds), noise U(-{NOISE}, {NOISE}); GPSampler on "
        f"{gp_seeds} seed(s){'' if HAS_TORCH else ' (torch not importable)'}. Regret on the "
        "global objective f.\n"
    ]
    fig, axes = plt.subplots(1, len(args.problems), figsize=(5.5 * len(args.problems), 4))
    axes = np.atleast_1d(axes)
    summary = []
    for ax, name in zip(axes, args.problems, strict=True):
        methods: dict[str, Callable[[FederatedProblem, int], dict]] = {
            label: (lambda p, s, v=variant: run_fedpne(p, horizon, s, v))
            for label, variant in FEDPNE.items()
        }
        for label, factory in stock_samplers(gp_seeds > 0).items():
            methods[f"per-participant {label}"] = lambda p, s, f=factory: run_stock(
                p, horizon, s, f
            )
        if args.only:
            methods = {k: v for k, v in methods.items() if any(w in k for w in args.only)}
        runs: dict[str, list[dict]] = {label: [] for label in methods}
        seconds = dict.fromkeys(methods, 0.0)
        for seed in range(n_seeds):
            problem = make_federated_problem(
                name, args.clients, perturbation=PROBLEMS[name], noise=NOISE, seed=seed
            )
            for label, method in methods.items():
                if label.endswith("GP") and seed >= gp_seeds:
                    continue
                start = time.perf_counter()
                out = method(problem, seed)
                seconds[label] += time.perf_counter() - start
                print(f"{name} seed {seed} {label}: {seconds[label]:.0f} s", file=sys.stderr)
                curve = np.cumsum(regret(problem, out["points"]).mean(axis=0))
                runs[label].append(
                    {
                        "curve": curve,
                        "deployed": out["deployed"],
                        "oracle": float(regret(problem, out["points"]).min()),
                        "clipped": out["clipped"],
                    }
                )
        rows = []
        for label, results in runs.items():
            curves = np.array([r["curve"] for r in results])
            rows.append(
                [
                    label,
                    str(len(results)),
                    fmt([c[-1] for c in curves]),
                    fmt([r["deployed"] for r in results], 4),
                    fmt([r["oracle"] for r in results], 4),
                    str(sum(r["clipped"] for r in results)),
                    f"{seconds[label] / len(results):.1f}",
                ]
            )
            mean = curves.mean(axis=0)
            xs = np.arange(1, horizon + 1)
            ax.plot(xs, mean, label=label, lw=2.0 if label.startswith("Fed-PNE") else 1.0)
        report.append(
            table(
                f"{name}: global regret at T = {horizon}",
                [
                    "algorithm",
                    "seeds",
                    "cumulative regret",
                    "deployed point regret",
                    "best pulled point regret",
                    "clipped",
                    "s/run",
                ],
                rows,
            )
        )
        ax.set_title(f"{name} (M = {args.clients})")
        ax.set_xlabel("trial t per participant")
        ax.set_ylabel("average cumulative global regret")
        ax.legend(fontsize=7)

        # Targets, on the seeds every method ran.
        if not {"Fed-PNE (tuning, default)", "per-participant CMA-ES"} <= set(runs):
            continue
        fed = runs["Fed-PNE (tuning, default)"]
        paper = runs["Fed-PNE (paper preset)"]
        cma = runs["per-participant CMA-ES"]
        ratio = np.mean([r["curve"][-1] for r in fed]) / np.mean([r["curve"][-1] for r in cma])
        paper_ratio = np.mean([r["curve"][-1] for r in paper]) / np.mean(
            [r["curve"][-1] for r in cma]
        )
        stock = {
            label: np.mean([r["deployed"] for r in results[:n_seeds]])
            for label, results in runs.items()
            if label.startswith("per-participant")
        }
        best_label = min(stock, key=stock.get)
        rec = np.mean([r["deployed"] for r in fed])
        summary.append(
            [
                name,
                f"{ratio:.2f}x ({'hit' if ratio <= 0.8 else 'MISS'})",
                f"{paper_ratio:.2f}x",
                f"{rec:.4f} vs {stock[best_label]:.4f} ({best_label.split()[-1]}) "
                f"({'hit' if rec <= stock[best_label] else 'MISS'})",
                f"{np.mean([r['deployed'] for r in paper]):.4f}",
            ]
        )
    fig.tight_layout()
    fig.savefig(RESULTS / f"fedpne_tuning{suffix}.png", dpi=110)
    plt.close(fig)
    report.append(
        ""
        if not summary
        else table(
            "Targets: cumulative regret <= 0.8x per-participant CMA-ES; recommendation <= best "
            "stock deployed point (GP, if run, counts on its seeds only)",
            [
                "problem",
                "Fed-PNE / CMA-ES cumulative",
                "paper preset / CMA-ES",
                "Fed-PNE recommendation vs best stock deployed point",
                "paper preset recommendation",
            ],
            summary,
        )
    )
    text = "\n".join(report)
    print(text)
    (RESULTS / f"fedpne_tuning{suffix}.md").write_text(text)


if __name__ == "__main__":
    main()
