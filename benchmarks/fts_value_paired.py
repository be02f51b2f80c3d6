"""Does a change to the default participant move its regret beyond what another seed does?

A change that is meant to leave the sampler's behaviour alone (a cheaper computation of the
same quantities, a fit made less often) still changes its trajectory: a difference in the
last bits of one posterior changes one suggestion, and every later trial differs. So two
versions run on the same seed functions are paired by function, not by trajectory, and their
difference has to be read against the spread the *same* code shows under other sampler seeds.

This runs the default participant (``fts`` of ``benchmarks/fts_value.py``: every site in one
federation, :func:`~optuna_fedbo.simulation.simulate`) on fixed GP-draw problems of
``fts_value.py`` (6 sites, 30 trials), one seed function per seed, and saves each seed's regret
per site and trial; ``--reseed K`` runs the samplers with seed ``s + K`` on seed function ``s``
(the same functions, other randomness). ``--compare A B`` prints the paired difference of two
saved runs at 10, 20 and 30 trials: mean, standard error, the seed functions on which B is
worse, and a two-sided Wilcoxon signed-rank p-value.

Usage (each version from its own checkout, e.g. ``git worktree``)::

    PYTHONPATH=. python benchmarks/fts_value_paired.py --save before.npz
    PYTHONPATH=. python benchmarks/fts_value_paired.py --save before-reseeded.npz --reseed 1000
    (cd ../other && PYTHONPATH=. python benchmarks/fts_value_paired.py --save ../before/after.npz)
    python benchmarks/fts_value_paired.py --compare before.npz before-reseeded.npz
    python benchmarks/fts_value_paired.py --compare before.npz after.npz

About 30 s of CPU per seed function and problem on a two-core machine.
"""

from __future__ import annotations

import argparse
import warnings

import fts_value
import numpy as np
import optuna
import scipy.stats

#: name -> (dimensions, lengthscale, relation of the sites); 6 sites each.
PROBLEMS = {
    "4d": (4, 0.2, "identical"),
    "2d": (2, 0.1, "identical"),
    "2dh": (2, 0.2, "heterogeneous"),
    "3di": (3, 0.1, "independent"),
}
SITES = 6
TRIALS = 30
CHECKPOINTS = (10, 20, 30)


def run(names: list[str], n_seeds: int, reseed: int, path: str) -> None:
    """Run the problems ``names`` on ``n_seeds`` seed functions; save after each seed."""
    saved: dict[str, np.ndarray] = {}
    for name in names:
        dims, lengthscale, relation = PROBLEMS[name]
        rows = []
        for seed in range(n_seeds):
            problem = fts_value.gp_problem(dims, lengthscale, relation, SITES, seed)
            curves, _ = fts_value.run_problem(problem, TRIALS, seed + reseed, ["fts"], SITES)
            rows.append(fts_value.regrets(problem, curves)["fts"])
            saved[name] = np.array(rows)  # (seeds, sites, trials)
            np.savez(path, **saved)
            at = np.array(rows[-1]).mean(axis=0)[[t - 1 for t in CHECKPOINTS]]
            print(f"{name} seed {seed}: regret at {CHECKPOINTS} trials {np.round(at, 4)}")


def compare(before_path: str, after_path: str) -> None:
    """Print the paired difference (after - before) of the problems both runs saved."""
    before, after = np.load(before_path), np.load(after_path)
    for name in sorted(set(before.files) & set(after.files)):
        n = min(len(before[name]), len(after[name]))
        a, b = before[name][:n].mean(axis=1), after[name][:n].mean(axis=1)  # (seeds, trials)
        parts = []
        for t in CHECKPOINTS:
            difference = b[:, t - 1] - a[:, t - 1]
            p = scipy.stats.wilcoxon(difference).pvalue if np.any(difference) else 1.0
            error = difference.std(ddof=1) / np.sqrt(n) if n > 1 else float("nan")
            parts.append(
                f"@{t}: {a[:, t - 1].mean():.4f} -> {b[:, t - 1].mean():.4f} "
                f"({difference.mean():+.4f} +- {error:.4f}, worse on {int(np.sum(difference > 0))}"
                f"/{n}, p = {p:.2f})"
            )
        print(f"{name} ({n} seed functions)  " + "  ".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated names")
    parser.add_argument("--seeds", type=int, default=10, help="seed functions")
    parser.add_argument("--reseed", type=int, default=0, help="added to the samplers' seeds")
    parser.add_argument("--save", help="where to save the regrets (.npz)")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if not args.save:
        parser.error("give --save PATH (or --compare BEFORE AFTER)")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    run(args.problems.split(","), args.seeds, args.reseed, args.save)


if __name__ == "__main__":
    main()
