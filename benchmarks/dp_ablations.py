"""DP-FTS against DP-FTS-DE at equal clipped fractions, and the effect of the clip norm ``S``.

Setting: ``dp_common.py`` (DP-FTS-DE App. B.1.1, ``N = 200`` similar agents, 40 BO rounds), all
private runs at ``q = 0.25``, ``z = 1`` (epsilon 9.91 by the paper's moments accountant, 7.05 by
PLD, after 40 used broadcasts).

(a) DP-FTS (``P = 1``, ``S = 8.7``) against DP-FTS-DE (``P = 2``, ``S = 12.3``): the same
per-vector clip bound ``S / sqrt(P) = 8.7``, hence the same (about 1%) fraction of clipped
vectors, as the paper's App. B.1.2 / Fig. 4 comparison (``S = 8`` and ``S = 11`` there).
(b) DP-FTS-DE with ``S in {6, 9, 12.3, 16, 24}`` (the paper's Fig. 2b): a small ``S`` clips most
vectors (bias), a large one adds noise ``z phi_max S / q``. Note that once ``S / sqrt(P)`` is below
every vector's norm, the broadcast is ``S`` times a random vector whose distribution no longer
depends on ``S`` (every clipped vector is its direction times ``S / sqrt(P)``, and the noise is
proportional to ``S``), so the maximizers the agents pick, hence the regret, stop depending on
``S``: clipping everything costs only the vectors' differences in length.

Prints both tables and saves ``benchmarks/results/dp_ablations.{txt,png}``.

Run: ``python benchmarks/dp_ablations.py`` (``--seeds``, ``--agents``, ``--rounds``); about
4-5 minutes with the default 2 seeds on two shared cores.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
import sys
import time

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dp_common as dc  # noqa: E402
import federation_synthetic as fs  # noqa: E402
import numpy as np  # noqa: E402
import optuna  # noqa: E402

from optuna_fedbo.core.weights import subregion_weights  # noqa: E402
from optuna_fedbo.core.weights import WeightSchedule  # noqa: E402
from optuna_fedbo.federation.dp_config import DPConfig  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
Q, Z = 0.25, 1.0
S_VALUES = (6.0, 9.0, dc.S_DE, 16.0, 24.0)
CHECKPOINTS = (0, 5, 10, 20, 30, 40)


def noise_std(n_agents: int, n_subregions: int, clip: float, round_index: int) -> float:
    """``z phi_max S / q`` at a round (the synthetic weight schedule: hold 5, decay over 5)."""
    weights = subregion_weights(
        np.arange(n_agents) % n_subregions,
        n_subregions,
        round_index=round_index,
        schedule=WeightSchedule(15.0, 5, 5),
    )
    return Z * float(weights.max()) * clip / Q


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=dc.N_AGENTS)
    parser.add_argument("--rounds", type=int, default=dc.N_ROUNDS)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()

    # (name, P, S); None: local TS.
    methods: dict[str, tuple[int, float] | None] = {
        "TS (local)": None,
        f"DP-FTS P=1 S={dc.S_FTS:g}": (1, dc.S_FTS),
    }
    methods.update({f"DP-FTS-DE P=2 S={s:g}": (2, s) for s in S_VALUES})
    raw: dict[str, list[dc.Run]] = {name: [] for name in methods}
    for seed in range(args.seeds):
        functions = fs.homogeneous(args.agents, np.random.default_rng(seed))
        for name, setting in methods.items():
            if setting is None:
                run = dc.run_local(functions, args.rounds, seed)
            else:
                n_subregions, clip = setting
                privacy = DPConfig(noise_multiplier=Z, sample_rate=Q, clip_norm=clip)
                run = dc.run_private(
                    functions, args.rounds, seed, dc.de_protocol(n_subregions), privacy
                )
            raw[name].append(run)
            print(f"seed {seed} {name}: {run.seconds:.0f} s", file=sys.stderr, flush=True)
    runs = {name: dc.merge(values) for name, values in raw.items()}
    checkpoints = [c for c in CHECKPOINTS if c <= args.rounds]
    epsilons = dc.epsilons(Q, Z, args.rounds, args.agents)

    def row(name: str) -> str:
        run = runs[name]
        setting = methods[name]
        if setting is None:
            head = f"{name:24s}{'-':>7s}{'-':>9s}{'-':>15s}"
        else:
            n_subregions, clip = setting
            early = noise_std(args.agents, n_subregions, clip, 0)
            late = noise_std(args.agents, n_subregions, clip, args.rounds)
            head = (
                f"{name:24s}{clip / math.sqrt(n_subregions):7.2f}{dc.clipped_percent(run):>9s}"
                f"{f'{early:.3f}/{late:.3f}':>15s}"
            )
        cells = "".join(f"{dc.regret_cell(run.curves, c):>17s}" for c in checkpoints)
        return head + cells + f"{run.curves[:, 1:].mean():9.4f}"

    header = (
        f"{'method':24s}{'bound':>7s}{'clipped':>9s}{'noise std':>15s}"
        + "".join(f"{'t=' + str(c):>17s}" for c in checkpoints)
        + f"{'mean':>9s}"
    )
    lines = [
        f"N = {args.agents}, q = {Q}, z = {Z}: epsilon after T = {args.rounds} used broadcasts "
        f"{epsilons['moments']:.2f} (moments) / {epsilons['rdp']:.2f} (rdp) / "
        f"{epsilons['pld']:.2f} (pld), delta = N^-1.1; simple regret mean +- standard error "
        f"over {args.seeds} seed function(s); bound = S / sqrt(P); noise std per coordinate "
        "at round 0 / at the end",
        "",
        "(a) DP-FTS vs DP-FTS-DE at equal clipped fractions",
        header,
        row("TS (local)"),
        row(f"DP-FTS P=1 S={dc.S_FTS:g}"),
        row(f"DP-FTS-DE P=2 S={dc.S_DE:g}"),
        "",
        "(b) effect of the clip norm S (DP-FTS-DE, P = 2)",
        header,
        *[row(f"DP-FTS-DE P=2 S={s:g}") for s in S_VALUES],
        "",
        f"total {time.perf_counter() - start:.0f} s",
    ]
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dp_ablations.txt").write_text(text + "\n", encoding="utf-8")
    if not args.no_plot:
        plot(runs, RESULTS / "dp_ablations.png")
        print(f"saved {RESULTS / 'dp_ablations.png'}")


def plot(runs: dict[str, dc.Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    groups = [
        (
            "DP-FTS vs DP-FTS-DE (equal clipped fraction)",
            ["TS (local)", f"DP-FTS P=1 S={dc.S_FTS:g}", f"DP-FTS-DE P=2 S={dc.S_DE:g}"],
        ),
        (
            "effect of S (DP-FTS-DE, P = 2)",
            ["TS (local)", *[f"DP-FTS-DE P=2 S={s:g}" for s in S_VALUES]],
        ),
    ]
    for axis, (title, names) in zip(axes, groups):
        for name in names:
            mean = runs[name].curves.mean(axis=0)
            axis.plot(np.arange(len(mean)), mean, label=name)
        axis.set_title(title)
        axis.set_xlabel("BO round t")
        axis.set_ylabel("simple regret")
        axis.set_yscale("log")
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
