"""Fed-PNE on the paper's synthetic functions (Section 4, Appendix E of the Fed-PNE paper).

Garland and DoubleSine on [0, 1]; client m sees f + p_m with smooth perturbations p_m that sum to
zero over clients (so the global objective is exactly f), uniform noise U(-0.1, 0.1), rewards
mapped affinely into [0, 1] (see ``optuna_fedbo.core.fedpne.synthetic``). Regret is measured on f.

Reports:
1. Average cumulative regret per client vs rounds: Fed-PNE (M = 10), HCT run centrally on the
   global objective with PyXAB (nu = 1, rho = 0.75 as the paper's Appendix E.1.1, and PyXAB's
   default rho = 0.5), and uniform random search. As in Remark 4.1, HCT's regret is per
   evaluation of the global objective, Fed-PNE's per client and round.
2. Communication rounds (closed phases) and nodes uploaded per client vs the horizon T.
3. Fed-PNE regret for M = 5, 10, 20, 50 clients.
4. DP-Fed-PNE regret for a few epsilons (delta = 1e-5).
5. Cost of the core: time per pull (amortised) and per phase close.

Run: ``python benchmarks/fedpne_synthetic.py`` (about a minute on one core). Tables are printed
and written to ``benchmarks/results/fedpne_synthetic.md``; plots go to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import time

import matplotlib

matplotlib.use("Agg")
from fedpne_common import table  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from optuna_fedbo.core.fedpne import FedPNEParams  # noqa: E402
from optuna_fedbo.core.fedpne import FedPNEServerState  # noqa: E402
from optuna_fedbo.core.fedpne import local_node_means  # noqa: E402
from optuna_fedbo.core.fedpne import Partition  # noqa: E402
from optuna_fedbo.core.fedpne import pull_plan  # noqa: E402
from optuna_fedbo.core.fedpne import RewardPrivacy  # noqa: E402
from optuna_fedbo.core.fedpne import simulate_fedpne  # noqa: E402
from optuna_fedbo.core.fedpne.synthetic import make_federated_problem  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
FUNCTIONS = ("garland", "doublesine")

try:
    from PyXAB.algos.HCT import HCT
    from PyXAB.partition.BinaryPartition import BinaryPartition

    PYXAB_ERROR = None
except ImportError as exc:  # pragma: no cover - reported in the output
    HCT = None
    PYXAB_ERROR = repr(exc)


def fedpne_curve(name: str, n_clients: int, horizon: int, seed: int, **params) -> np.ndarray:
    """Average cumulative regret per client after each round."""
    problem = make_federated_problem(name, n_clients, seed=seed)
    rng = np.random.default_rng(seed)
    result = simulate_fedpne(
        problem.objectives(rng),
        horizon,
        rng=rng,
        params=FedPNEParams(horizon=horizon, n_clients=n_clients, **params),
        global_objective=problem.global_value,
        f_star=problem.f_star,
        noise_rng=np.random.default_rng(10_000 + seed),
    )
    return result.average_cumulative_regret


def hct_curve(name: str, horizon: int, seed: int, rho: float) -> np.ndarray:
    """Cumulative regret of PyXAB's HCT on the global objective (same noise and reward map)."""
    problem = make_federated_problem(name, 1, seed=seed)
    rng = np.random.default_rng(seed)
    reward = problem.global_reward(rng)
    np.random.seed(seed)  # PyXAB draws its split dimensions from the global NumPy state
    algo = HCT(nu=1.0, rho=rho, domain=[[0.0, 1.0]], partition=BinaryPartition)
    points = np.empty(horizon)
    for t in range(1, horizon + 1):
        x = algo.pull(t)
        points[t - 1] = x[0]
        algo.receive_reward(t, float(reward(np.array([x]))[0]))
    return np.cumsum(problem.f_star - problem.global_value(points[:, None]))


def communication(name: str, n_clients: int, horizon: int, seed: int) -> tuple[int, int]:
    """Communication rounds (closed phases) and nodes uploaded per client over a run."""
    problem = make_federated_problem(name, n_clients, seed=seed)
    rng = np.random.default_rng(seed)
    comm = simulate_fedpne(problem.objectives(rng), horizon, rng=rng).state.communication()
    return comm["rounds"], comm["nodes_per_client"]


def rounds_bound(n_clients: int, horizon: int, c: float = 0.1, rho: float = 0.5) -> float:
    """Eqn. (37)'s bound on the number of rounds, ``log(M T / (2 c^2)) / log(rho^-2)``."""
    return float(np.log(n_clients * horizon / (2 * c**2)) / np.log(rho**-2))


def random_curve(name: str, n_clients: int, horizon: int, seed: int) -> np.ndarray:
    """Average cumulative regret per client of uniform random search."""
    problem = make_federated_problem(name, n_clients, seed=seed)
    x = np.random.default_rng(seed).random((n_clients * horizon, 1))
    regret = (problem.f_star - problem.global_value(x)).reshape(n_clients, horizon)
    return np.cumsum(regret.mean(axis=0))


def fmt(values: list[float]) -> str:
    return f"{np.mean(values):7.1f} ± {np.std(values):5.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--horizon", type=int, default=2000)
    args = parser.parse_args()
    seeds, horizon = range(args.seeds), args.horizon
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = [
        f"Fed-PNE synthetic benchmark: T = {horizon}, {args.seeds} seeds (mean ± std), "
        "noise U(-0.1, 0.1), perturbation bound 0.1, paper constants nu1 = 1, rho = 0.5, "
        "c = 0.1, c1 = 1, delta = 1/M.\n"
    ]
    if PYXAB_ERROR:
        report.append(f"PyXAB could not be imported ({PYXAB_ERROR}); HCT rows are skipped.\n")
    checkpoints = [c for c in (250, 500, 1000, 2000, 5000) if c <= horizon]

    # 1. Regret vs rounds ---------------------------------------------------------------------
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, name in zip(axes, FUNCTIONS, strict=True):
        curves: dict[str, list[np.ndarray]] = {"Fed-PNE (M=10)": [], "uniform random": []}
        if HCT is not None:
            curves["HCT central, rho=0.75"] = []
            curves["HCT central, rho=0.5"] = []
        timings: dict[str, float] = dict.fromkeys(curves, 0.0)
        for seed in seeds:
            for label in curves:
                start = time.perf_counter()
                if label.startswith("Fed-PNE"):
                    curve = fedpne_curve(name, 10, horizon, seed)
                elif label.startswith("uniform"):
                    curve = random_curve(name, 10, horizon, seed)
                else:
                    curve = hct_curve(name, horizon, seed, 0.75 if "0.75" in label else 0.5)
                timings[label] += time.perf_counter() - start
                curves[label].append(curve)
        rows = []
        for label, runs in curves.items():
            rows.append(
                [label]
                + [fmt([r[c - 1] for r in runs]) for c in checkpoints]
                + [f"{1000 * timings[label] / args.seeds:.0f}"]
            )
            mean, std = np.mean(runs, axis=0), np.std(runs, axis=0)
            xs = np.arange(1, horizon + 1)
            ax.plot(xs, mean, label=label)
            ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
        report.append(
            table(
                f"{name}: average cumulative regret per client vs rounds",
                ["algorithm"] + [f"t={c}" for c in checkpoints] + ["ms/run"],
                rows,
            )
        )
        ax.set_title(name)
        ax.set_xlabel("round t")
        ax.set_ylabel("average cumulative regret per client")
        ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "fedpne_regret.png", dpi=120)
    plt.close(fig)

    # 2. Communication vs T --------------------------------------------------------------------
    horizons = [250, 500, 1000, 2000, 4000, 8000, 16000, 32000]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name in FUNCTIONS:
        rows = []
        rounds_mean = []
        for T in horizons:
            rounds, nodes = zip(*(communication(name, 10, T, seed) for seed in seeds))
            bound = rounds_bound(10, T)
            rows.append(
                [
                    str(T),
                    f"{np.mean(rounds):.1f}",
                    f"{np.mean(nodes):.1f}",
                    f"{bound:.1f}",
                ]
            )
            rounds_mean.append(np.mean(rounds))
        slope = np.polyfit(np.log(horizons), rounds_mean, 1)[0]
        report.append(
            table(
                f"{name}: communication vs horizon (M = 10); fit rounds ~ {slope:.2f} log T",
                ["T", "rounds", "nodes uploaded per client", "Eqn. (37) bound on rounds"],
                rows,
            )
        )
        ax.plot(horizons, rounds_mean, marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("horizon T")
    ax.set_ylabel("communication rounds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "fedpne_rounds.png", dpi=120)
    plt.close(fig)

    # 3. Number of clients ---------------------------------------------------------------------
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, name in zip(axes, FUNCTIONS, strict=True):
        rows = []
        for m in (5, 10, 20, 50):
            runs = [fedpne_curve(name, m, horizon, seed) for seed in seeds]
            rows.append([str(m)] + [fmt([r[c - 1] for r in runs]) for c in checkpoints])
            ax.plot(np.arange(1, horizon + 1), np.mean(runs, axis=0), label=f"M={m}")
        report.append(
            table(
                f"{name}: Fed-PNE average cumulative regret per client vs number of clients",
                ["M"] + [f"t={c}" for c in checkpoints],
                rows,
            )
        )
        ax.set_title(name)
        ax.set_xlabel("round t")
        ax.set_ylabel("average cumulative regret per client")
        ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "fedpne_clients.png", dpi=120)
    plt.close(fig)

    # 4. DP-Fed-PNE ----------------------------------------------------------------------------
    rows = []
    for name in FUNCTIONS:
        for epsilon in (None, 16.0, 4.0, 1.0):
            privacy = None if epsilon is None else RewardPrivacy(epsilon, 1e-5)
            runs = [fedpne_curve(name, 10, horizon, seed, privacy=privacy) for seed in seeds]
            rows.append(
                [
                    name,
                    "off" if epsilon is None else f"{epsilon:g}",
                    "-" if privacy is None else f"{privacy.sigma:.3f}",
                    f"{FedPNEParams(horizon, 10, privacy=privacy).effective_c:.3f}",
                    fmt([r[-1] for r in runs]),
                ]
            )
    report.append(
        table(
            "DP-Fed-PNE (delta = 1e-5, M = 10): average cumulative regret per client at "
            f"T={horizon}",
            ["function", "epsilon", "sigma", "effective c", "regret"],
            rows,
        )
    )

    # 5. Cost of the core ----------------------------------------------------------------------
    problem = make_federated_problem("garland", 50, seed=0)
    objectives = problem.objectives(np.random.default_rng(0))
    partition = Partition(1)
    state = FedPNEServerState(FedPNEParams(horizon=20000, n_clients=50), partition)
    client_time = close_time = 0.0
    pulls = phases = 0
    while not state.finished:
        phase = state.current_phase()
        start = time.perf_counter()
        for m in range(50):
            nodes, x = pull_plan(phase, partition)
            state.submit(str(m), local_node_means(phase, nodes, objectives[m](x)))
        client_time += time.perf_counter() - start
        pulls += 50 * phase.budget
        start = time.perf_counter()
        state.close_phase()
        close_time += time.perf_counter() - start
        phases += 1
    report.append(
        table(
            "Core cost (Garland, M = 50, T = 20000)",
            ["closed phases", "pulls in them", "client side µs/pull", "server close ms/phase"],
            [
                [
                    str(phases),
                    str(pulls),
                    f"{1e6 * client_time / pulls:.2f}",
                    f"{1e3 * close_time / phases:.2f}",
                ]
            ],
        )
    )

    text = "\n".join(report)
    print(text)
    (RESULTS / "fedpne_synthetic.md").write_text(text)


if __name__ == "__main__":
    main()
