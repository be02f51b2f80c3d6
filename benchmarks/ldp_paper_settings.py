"""Why MoMA is not the best LDP algorithm here: the paper's parameters against our practical ones.

LDP-BO's Figure 2 has (LDP-)MoMA-GP-UCB lowest; ``benchmarks/reproduce.py`` (the sampler's
practical defaults) has TGP lowest. This benchmark runs the paper's synthetic problem
(``ldp_synthetic.py``: CTL(epsilon) rewards; ``ldp_heavy_tailed.py``: Student-t(3) noise) with
the presets of :data:`ldp_common.PRESETS`, one practical constant at a time:

* ``practical``: the sampler's defaults (``lambda = 4 c / B^2``, tuned ``beta_scale``, 64-column
  dictionary);
* ``paper``: the theorems' parameters (``lambda = 1``, ``beta_scale = 1``, unbounded dictionary);
* ``paper+lambda`` / ``paper+beta``: the paper's with our ``lambda`` / our ``beta_scale`` only;

each with MoMA's theorem epoch length (``moma``, ``k = ceil(24 ln(4eT/delta))``, 295 plays at
T = 1000) and the practical one (``moma-k``, 13 plays), and random search as the floor of a
method that learns nothing. Prints the final cumulative regret (mean +- s.e. over seeds, a new f
per seed) and which method is lowest per setting and preset; writes
``results/ldp_paper_settings.json``.

Run: ``nice python benchmarks/ldp_paper_settings.py --seeds 4 --horizon 1000`` (about 15 CPU
minutes; ``--kernels SE --epsilons 1,0`` runs a part).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

from ldp_common import RESULTS  # noqa: E402
from ldp_common import summarize  # noqa: E402
import ldp_heavy_tailed as lh  # noqa: E402
import ldp_synthetic as ls  # noqa: E402

#: Methods per preset: every algorithm with the paper's parameters; TGP and MoMA (ATA is the
#: costliest, and ``reproduce.py`` compares it with the practical defaults) for the others.
METHODS = {
    "practical": ("tgp", "moma", "moma-k"),
    "paper": ("tgp", "ata", "moma", "moma-k"),
    "paper+lambda": ("tgp", "moma"),
    "paper+beta": ("tgp", "moma"),
}


def settings(kernels: list[str], epsilons: list[float]) -> list[tuple[str, str, float | None]]:
    """``(name, kernel, epsilon)``; ``epsilon = 0`` is the heavy-tailed, non-private case."""
    return [
        (f"LDP {k}, eps={e:g}", k, e) if e > 0 else (f"heavy-tailed {k}", k, None)
        for k in kernels
        for e in epsilons
    ]


def run(kernel: str, epsilon: float | None, seeds: list[int], horizon: int, methods):
    if epsilon is None:
        return lh.run_setting(kernel, seeds, horizon, methods)
    return ls.run_setting(kernel, epsilon, seeds, horizon, methods)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--horizon", type=int, default=1000)
    parser.add_argument("--kernels", default="SE,Matern", help="comma-separated: SE, Matern")
    parser.add_argument(
        "--epsilons", default="0.5,1,2,0", help="comma-separated; 0: heavy-tailed, no privacy"
    )
    parser.add_argument("--presets", default=",".join(METHODS), help="comma-separated presets")
    parser.add_argument("--methods", default="tgp,ata,moma,moma-k", help="comma-separated")
    args = parser.parse_args()
    seeds = list(range(args.seeds))
    started = time.time()
    table: dict[str, dict[str, tuple[float, float]]] = {}
    chosen = args.presets.split(",")
    kernels, epsilons = args.kernels.split(","), [float(e) for e in args.epsilons.split(",")]
    for name, kernel, epsilon in settings(kernels, epsilons):
        kept = args.methods.split(",")
        presets = {p: tuple(m for m in METHODS[p] if m in kept) for p in chosen}
        methods = ["random"] + [f"{m}:{p}" for p, ms in presets.items() for m in ms]
        table[name] = summarize(run(kernel, epsilon, seeds, args.horizon, tuple(methods)))
        cells = ", ".join(f"{m} {mean:.0f}+-{se:.0f}" for m, (mean, se) in table[name].items())
        print(f"{name} (T = {args.horizon}, {len(seeds)} seeds, {time.time() - started:.0f} s): "
              f"{cells}", flush=True)  # fmt: skip
        for preset, names in presets.items():
            best = min(names, key=lambda m: table[name][f"{m}:{preset}"][0])
            print(f"  lowest with {preset}: {best}", flush=True)
    name = f"{args.kernels}_{args.epsilons}_{args.presets}_{args.methods}_T{args.horizon}"
    path = RESULTS / f"ldp_paper_settings_{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"horizon": args.horizon, "seeds": seeds, "final_regret": table}
    path.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    print(f"total {time.time() - started:.0f} s; saved {path}")


if __name__ == "__main__":
    main()
