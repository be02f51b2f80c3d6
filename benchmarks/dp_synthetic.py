"""DP-FTS-DE on the paper's synthetic problem: privacy (three accountants) against utility.

Setting: ``dp_common.py`` (DP-FTS-DE App. B.1.1, ``N = 200`` similar agents, 40 BO rounds,
``M = 50``, ``P = 2`` sub-regions, ``1 - p_t = 1/sqrt(t)``). Methods: local TS (no federation),
FTS-DE without privacy, and DP-FTS-DE (Algorithm 1 through the federation's server, noise from
the OS) at ``q in {0.15, 0.25, 0.5}`` with ``z = 1`` (the paper's Fig. 2c) and
``z in {1.2, 1.5, 2}`` with ``q = 0.25`` (Fig. 2d, plus ``z = 2``), all with ``S = 12.3``
(about 1% of the vectors clipped).

Prints (a) epsilon after ``T = 40`` used broadcasts by the moments accountant (the paper's:
it must reproduce 5.93 / 9.91 / 20.12 / 7.39 / 5.22), by RDP and by PLD, with the ledger's own
PLD epsilon (the same 40 broadcasts, all published) and the fraction of clipped vectors; (b)
the simple regret (mean +- standard error over seed functions) after rounds 0-40; (c) the
privacy-utility points (epsilon against regret after 40 rounds, the paper's Fig. 3 in the
synthetic setting). Saves ``benchmarks/results/dp_synthetic.{txt,json,png}``.

Expected (paper): a larger ``q`` or smaller ``z`` gives lower regret and more epsilon; DP-FTS-DE
beats local TS at single-digit epsilon.

Run: ``python benchmarks/dp_synthetic.py`` (``--seeds``, ``--agents``, ``--rounds``); about
5-6 minutes with the default 3 seeds on two shared cores.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import sys
import time

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dp_common as dc  # noqa: E402
import federation_synthetic as fs  # noqa: E402
import numpy as np  # noqa: E402
import optuna  # noqa: E402

from optuna_fedbo.federation.dp_config import DPConfig  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PAPER = {
    (0.15, 1.0): 5.93,
    (0.25, 1.0): 9.91,
    (0.5, 1.0): 20.12,
    (0.25, 1.2): 7.39,
    (0.25, 1.5): 5.22,
}
SETTINGS = [(0.15, 1.0), (0.25, 1.0), (0.5, 1.0), (0.25, 1.2), (0.25, 1.5), (0.25, 2.0)]
CHECKPOINTS = (0, 5, 10, 20, 30, 40)


def label(q: float, z: float) -> str:
    return f"DP-FTS-DE q={q:g} z={z:g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=dc.N_AGENTS)
    parser.add_argument("--rounds", type=int, default=dc.N_ROUNDS)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()

    methods: dict[str, list[dc.Run]] = {"TS (local)": [], "FTS-DE (no DP)": []}
    methods.update({label(q, z): [] for q, z in SETTINGS})
    for seed in range(args.seeds):
        functions = fs.homogeneous(args.agents, np.random.default_rng(seed))
        methods["TS (local)"].append(dc.run_local(functions, args.rounds, seed))
        methods["FTS-DE (no DP)"].append(
            dc.run_private(functions, args.rounds, seed, dc.de_protocol(2), None)
        )
        for q, z in SETTINGS:
            privacy = DPConfig(noise_multiplier=z, sample_rate=q, clip_norm=dc.S_DE)
            run = dc.run_private(functions, args.rounds, seed, dc.de_protocol(2), privacy)
            methods[label(q, z)].append(run)
            print(f"seed {seed} {label(q, z)}: {run.seconds:.0f} s", file=sys.stderr, flush=True)
    runs = {name: dc.merge(values) for name, values in methods.items()}

    lines: list[str] = []
    lines.append(
        f"(a) epsilon of DP-FTS-DE (N = {args.agents}, delta = N^-1.1, P = 2, S = {dc.S_DE}): "
        f"T = {args.rounds} used (and published) broadcasts by three accountants and by the "
        "federation's ledger (PLD)"
    )
    lines.append(
        f"{'q':>5} {'z':>4} {'paper':>7} {'moments':>8} {'rdp':>7} {'pld':>7} "
        f"{'ledger':>7} {'clipped':>8}"
    )
    records = []
    for q, z in SETTINGS:
        values = dc.epsilons(q, z, args.rounds, args.agents)
        run = runs[label(q, z)]
        paper = PAPER.get((q, z)) if (args.agents, args.rounds) == (200, 40) else None
        lines.append(
            f"{q:>5g} {z:>4g} {'-' if paper is None else f'{paper:.2f}':>7} "
            f"{values['moments']:>8.2f} {values['rdp']:>7.2f} {values['pld']:>7.2f} "
            f"{run.ledger_epsilon:>7.2f} {dc.clipped_percent(run):>8}"
        )
        records.append(
            {
                "q": q,
                "z": z,
                "epsilon": values,
                "ledger_epsilon_pld": run.ledger_epsilon,
                "published": run.published,
                "clipped_fraction": run.clipped / max(run.contributed, 1),
                "regret_at_end": float(run.curves[:, -1].mean()),
                "regret_mean": float(run.curves[:, 1:].mean()),
            }
        )

    checkpoints = [c for c in CHECKPOINTS if c <= args.rounds]
    lines.append("")
    lines.append(
        f"(b) simple regret averaged over {args.agents} agents, mean +- standard error over "
        f"{args.seeds} seed function(s); 'mean' averages rounds 1..T"
    )
    lines.append(
        f"{'method':28s}"
        + "".join(f"{'t=' + str(c):>17s}" for c in checkpoints)
        + f"{'mean':>9s}{'seconds':>9s}"
    )
    for name, run in runs.items():
        lines.append(
            f"{name:28s}"
            + "".join(f"{dc.regret_cell(run.curves, c):>17s}" for c in checkpoints)
            + f"{run.curves[:, 1:].mean():9.4f}{run.seconds:9.0f}"
        )

    ts_end = runs["TS (local)"].curves[:, -1].mean()
    lines.append("")
    lines.append(
        f"(c) privacy-utility after {args.rounds} rounds (regret at t={args.rounds}; TS "
        f"{ts_end:.4f}, FTS-DE {runs['FTS-DE (no DP)'].curves[:, -1].mean():.4f})"
    )
    lines.append(f"{'setting':28s}{'eps moments':>12s}{'eps pld':>9s}{'regret':>9s}{'vs TS':>8s}")
    for record in sorted(records, key=lambda r: r["epsilon"]["moments"]):
        lines.append(
            f"{label(record['q'], record['z']):28s}{record['epsilon']['moments']:12.2f}"
            f"{record['epsilon']['pld']:9.2f}{record['regret_at_end']:9.4f}"
            f"{record['regret_at_end'] / ts_end:8.2f}"
        )
    lines.append(f"\ntotal {time.perf_counter() - start:.0f} s")
    text = "\n".join(lines)
    print(text)

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dp_synthetic.txt").write_text(text + "\n", encoding="utf-8")
    curves = {name: run.curves.mean(axis=0).tolist() for name, run in runs.items()}
    (RESULTS / "dp_synthetic.json").write_text(
        json.dumps(
            {"agents": args.agents, "rounds": args.rounds, "seeds": args.seeds,
             "settings": records, "mean_regret_curves": curves},
            indent=1,
        ),
        encoding="utf-8",
    )  # fmt: skip
    if not args.no_plot:
        plot(runs, records, RESULTS / "dp_synthetic.png")
        print(f"saved {RESULTS / 'dp_synthetic.png'}")


def plot(runs: dict[str, dc.Run], records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 4.8))
    groups = [
        ("impact of q (z = 1)", [label(q, 1.0) for q in (0.15, 0.25, 0.5)]),
        ("impact of z (q = 0.25)", [label(0.25, z) for z in (1.0, 1.2, 1.5, 2.0)]),
    ]
    for axis, (title, names) in zip(axes[:2], groups):
        for name in ["TS (local)", "FTS-DE (no DP)", *names]:
            mean = runs[name].curves.mean(axis=0)
            axis.plot(np.arange(len(mean)), mean, label=name)
        axis.set_title(title)
        axis.set_xlabel("BO round t")
        axis.set_ylabel("simple regret")
        axis.set_yscale("log")
        axis.legend(fontsize=8)
    axis = axes[2]
    for record in records:
        for kind, marker in (("moments", "o"), ("pld", "s")):
            axis.scatter(
                record["epsilon"][kind],
                record["regret_at_end"],
                marker=marker,
                color="tab:red" if record["z"] == 1.0 else "tab:green",
            )
        axis.annotate(
            f"q={record['q']:g},z={record['z']:g}",
            (record["epsilon"]["moments"], record["regret_at_end"]),
            fontsize=7,
        )
    for name, style in (("TS (local)", "--"), ("FTS-DE (no DP)", ":")):
        axis.axhline(runs[name].curves[:, -1].mean(), linestyle=style, color="grey", label=name)
    axis.scatter([], [], marker="o", color="black", label="epsilon by moments accountant")
    axis.scatter([], [], marker="s", color="black", label="epsilon by PLD")
    axis.set_xlabel("privacy loss epsilon (T = 40, delta = N^-1.1)")
    axis.set_ylabel("simple regret after 40 rounds")
    axis.set_title("privacy-utility (red: q sweep at z=1; green: z sweep at q=0.25)")
    axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
