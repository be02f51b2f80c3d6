"""What does secure aggregation cost in value? The first broadcast, with and without it.

On GP draws of ``fts_value.py`` (near-identical sites: ``f + 0.05 h_n``, normalized, noise
0.01; with ``--heterogeneous``, ``f + 0.75 h_n`` times a scale and plus an offset of each
site's own, as ``fts_value.py``'s heterogeneous sites), ``--sites`` sites each observe a
Latin-hypercube design of ``--design`` points and the first broadcast is the pooled posterior
on the feature block and noise (and, for the plain server, offsets) of largest evidence.
Variants:

* the plain server (:func:`~optuna_fedbo.core.pooling.select_posterior`): offsets chosen, or none;
* secure aggregation as this release does it: each site's statistics encoded in the ring
  (:func:`~optuna_fedbo.federation.fts.secure.secure_input`), summed there, decoded and pooled
  with everyone's values standardized together (:func:`~optuna_fedbo.federation.fts.secure.
  pooled_from_sum`'s :func:`~optuna_fedbo.core.secure_statistics.decode_statistics`);
* the previous release's secure aggregation: each site standardized by its own design's mean
  and spread before masking, summed, no offsets;
* two other summable inputs: the pooled mean (given from outside, which no site has) subtracted
  and each site's own spread divided out; each site's features and values centred on their own
  means (a free offset per site, eliminated exactly) and the sum standardized together.

Reported, mean over seed functions: the correlation of the broadcast function with the true
function on a grid (smooth, so differences show with few seeds), the regret of its maximizer,
and each variant's paired difference to this release's secure aggregation.

Run: ``python benchmarks/secagg_value_ablation.py --dims 2 --lengthscale 0.1 --seeds 30`` and
``... --heterogeneous --sites 5 --lengthscale 0.2 --seeds 30``.

``--regret "gp D=2 l=0.1 identical N=10"`` (a problem of ``fts_value.py``'s grid) runs the
whole optimization instead, ``fts`` and ``fts-secagg`` as there and ``fts-secagg-centred``:
secure aggregation with each site's features and values centred on their own means before
masking (:func:`_own_offset_eliminated`), and prints ``fts_value.py``'s tables with the paired
differences to ``fts``. Curves are kept in ``--curves`` per commit, method and seed, so that
runs of one method at a time combine.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import contextlib
import math
import os
import subprocess
from unittest import mock

import fts_value
import numpy as np

from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.pooling import pooling_feature_maps
from optuna_fedbo.core.pooling import select_posterior
from optuna_fedbo.core.pooling import unpack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import multiscale_range
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secure_statistics import decode_statistics
from optuna_fedbo.core.secure_statistics import encode_statistics
from optuna_fedbo.core.secure_statistics import input_length
from optuna_fedbo.core.space import Dimension
from optuna_fedbo.core.space import UnitCubeEncoding
from optuna_fedbo.federation import SecureAggregation
from optuna_fedbo.federation.fts import secure

M = 100
SECURE = "secure aggregation (this release)"
CONFIG = SecureAggregation()


def _secure(sites: list[list[SufficientStatistics]]) -> tuple[int, np.ndarray]:
    """``(block, mean)`` of the posterior given the ring's sum of the sites' inputs."""
    ring = CONFIG.ring(len(sites), input_length(M))
    inputs = [secure.secure_input(pack_blocks(s), M, CONFIG.max_observations, ring) for s in sites]
    total = sum(decode(x, ring) for x in inputs)  # the ring's sum, decoded (it never wraps)
    return select_posterior([decode_statistics(total, ring.step, M)], offset_scales=(0.0,))


_SUMS = ("count", "target_sum", "target_square_sum", "feature_sum", "feature_target", "gram")


def _summed(
    sites: list[list[SufficientStatistics]],
    site_input: Callable[[SufficientStatistics, float], SufficientStatistics],
) -> tuple[int, np.ndarray]:
    """``(block, mean)`` of the posterior given the sum of ``site_input(block, pooled mean)``
    over the sites (what a site would mask, summed exactly)."""
    centre = sum(site[0].target_sum for site in sites) / sum(site[0].count for site in sites)
    summed = []
    for index in range(len(sites[0])):
        total = SufficientStatistics(sites[0][index].n_features)
        for site in sites:
            part = site_input(site[index], centre)
            for name in _SUMS:
                setattr(total, name, getattr(total, name) + getattr(part, name))
        summed.append(total)
    return select_posterior([summed], offset_scales=(0.0,))


def _affine(block: SufficientStatistics, mean: float, spread: float) -> SufficientStatistics:
    """``block`` of the values ``(y - mean) / spread``."""
    out = SufficientStatistics(block.n_features)
    out.feature_target, out.target_square_sum = block.targets(mean, spread)
    out.target_sum = (block.target_sum - mean * block.count) / spread
    out.count, out.feature_sum, out.gram = block.count, block.feature_sum, block.gram
    return out


def _own_centre_and_scale(block: SufficientStatistics, centre: float) -> SufficientStatistics:
    """The previous release: a site's values standardized by its own mean and spread."""
    return _affine(block, *block.standardization())


def _pooled_centre_own_scale(block: SufficientStatistics, centre: float) -> SufficientStatistics:
    """A site's values less the pooled mean (given from outside), over its own spread."""
    return _affine(block, centre, block.standardization()[1])


def _own_offset_eliminated(block: SufficientStatistics, centre: float) -> SufficientStatistics:
    """A site's features and values centred on their own means (a free offset per site; one
    observation's worth of evidence fewer)."""
    n, a = float(block.count), block.feature_sum
    out = SufficientStatistics(block.n_features)
    out.count = block.count - 1
    out.gram = block.gram - np.outer(a, a) / n
    out.feature_target = block.feature_target - a * block.target_sum / n
    out.target_square_sum = block.target_square_sum - block.target_sum**2 / n
    return out


def broadcasts(
    dims: int, lengthscale: float, seed: int, n_sites: int, n_design: int, heterogeneous: bool
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The true function on a grid and each variant's first broadcast function there."""
    rng = np.random.default_rng([seed, dims, int(lengthscale * 1000)])
    base = fts_value.RandomFunction(dims, lengthscale, rng)
    dense = fts_value._dense(dims, rng)
    truth = base(dense)
    low, high = truth.min(), truth.max()
    owns = [fts_value.RandomFunction(dims, lengthscale, rng) for _ in range(n_sites)]
    encoding = UnitCubeEncoding([Dimension("float", 0.0, 1.0)] * dims)
    designs = [encoding.space_filling(n_design, rng) for _ in range(n_sites)]
    weight = 0.75 if heterogeneous else 0.05
    observed = [
        (base(d) + weight * own(d) - low) / (high - low)
        + fts_value.NOISE_STD * rng.standard_normal(len(d))
        for d, own in zip(designs, owns)
    ]
    if heterogeneous:  # each site's own scale and offset, as fts_value's heterogeneous sites
        observed = [
            rng.uniform(-1, 1) + float(np.exp(rng.uniform(np.log(0.2), np.log(5.0)))) * v
            for v in observed
        ]
    maps = pooling_feature_maps(RandomFourierFeatures(dims, M, multiscale_range(dims), seed=seed))
    sites = []
    for design, values in zip(designs, observed):
        sites.append([SufficientStatistics(f.n_features) for f in maps])
        for statistics, features in zip(sites[-1], maps):
            statistics.add(features(design), values)
    chosen = {
        "plain server, offsets chosen": select_posterior(sites),
        "plain server, no offsets": select_posterior(sites, offset_scales=(0.0,)),
        SECURE: _secure(sites),
        "previous release: each site's own centre and scale": _summed(
            sites, _own_centre_and_scale
        ),
        "pooled centre, each site's own scale": _summed(sites, _pooled_centre_own_scale),
        "offsets eliminated, pooled scale": _summed(sites, _own_offset_eliminated),
    }
    functions = {name: maps[block](dense) @ mean for name, (block, mean) in chosen.items()}
    return (truth - low) / (high - low), functions


# ------------------------------------------------------------------------ whole optimizations
@contextlib.contextmanager
def _centred_sites():
    """Secure aggregation with each site's statistics centred before masking (a free offset per
    site), the server's consistency check (trace = count, which centring breaks) left out."""
    pooled_from_sum = secure.pooled_from_sum

    def centred_input(omega, n_features, cap, ring):  # noqa: ANN001, ANN202
        blocks = [secure._weighed(b, cap) for b in unpack_blocks(omega, n_features)]
        return encode_statistics([_own_offset_eliminated(b, 0.0) for b in blocks], ring)

    def unchecked(values, n_features, round_index, step, slack, **kept):  # noqa: ANN001, ANN003, ANN202
        return pooled_from_sum(values, n_features, round_index, step, math.inf, **kept)

    with (
        mock.patch.object(secure, "secure_input", centred_input),
        mock.patch.object(secure, "pooled_from_sum", unchecked),
    ):
        yield


VARIANTS = {"fts": "fts", "fts-secagg": "fts-secagg", "fts-secagg-centred": "fts-secagg"}


def regret(row: str, n_seeds: int, n_trials: int, methods: list[str], folder: str) -> None:
    """``fts_value.py``'s tables for ``methods`` (of :data:`VARIANTS`) on the problem ``row``."""
    (make,) = [make for name, make in _problems() if name == row]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    per_seed = []
    for seed in range(n_seeds):
        problem, curves = make(seed), {}
        for method in methods:
            path = os.path.join(folder, f"{row}_{commit}_{method}_T{n_trials}_s{seed}.npy")
            if not os.path.exists(path):
                patch = (
                    _centred_sites() if method.endswith("centred") else contextlib.nullcontext()
                )
                with patch:
                    run, _ = fts_value.run_problem(problem, n_trials, seed, [VARIANTS[method]], 4)
                os.makedirs(folder, exist_ok=True)
                np.save(path, run[VARIANTS[method]])
            curves[method] = np.load(path)
        per_seed.append(fts_value.regrets(problem, curves))
    checkpoints = [t for t in (5, 10, 20, 40) if t <= n_trials]
    fts_value.report(row, per_seed, checkpoints, {})


def _problems() -> list[tuple[str, Callable[[int], fts_value.Problem]]]:
    rows = [
        (d, ls, r) for d in (1, 2, 3) for ls in (0.1, 0.2) for r in ("identical", "heterogeneous")
    ]
    return [
        (
            fts_value.gp_name(d, ls, r, 10),
            lambda s, d=d, ls=ls, r=r: fts_value.gp_problem(d, ls, r, 10, s),
        )
        for d, ls, r in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, default=2)
    parser.add_argument("--lengthscale", type=float, default=0.1)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--sites", type=int, default=10)
    parser.add_argument("--design", type=int, default=5)
    parser.add_argument("--heterogeneous", action="store_true")
    parser.add_argument("--regret", default=None, help="a problem of fts_value.py's grid")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--methods", default=",".join(VARIANTS))
    parser.add_argument("--curves", default="benchmarks/results/cache/secagg_ablation")
    args = parser.parse_args()
    if args.regret:
        fts_value.optuna.logging.set_verbosity(fts_value.optuna.logging.ERROR)
        fts_value.warnings.filterwarnings("ignore", category=fts_value.ExperimentalWarning)
        regret(args.regret, args.seeds, args.trials, args.methods.split(","), args.curves)
        return
    correlations: dict[str, list[float]] = {}
    regrets: dict[str, list[float]] = {}
    for seed in range(args.seeds):
        truth, functions = broadcasts(
            args.dims, args.lengthscale, seed, args.sites, args.design, args.heterogeneous
        )
        for name, g in functions.items():
            correlations.setdefault(name, []).append(float(np.corrcoef(g, truth)[0, 1]))
            regrets.setdefault(name, []).append(float(1.0 - truth[np.argmax(g)]))
    print(
        f"D={args.dims} l={args.lengthscale}: first broadcast of {args.sites} sites x "
        f"{args.design} design points, {args.seeds} seed functions"
    )
    print(f"{'variant':48s} {'corr':>6s} {'vs secure':>16s} {'regret':>7s} {'vs secure':>17s}")
    reference_c, reference_r = np.array(correlations[SECURE]), np.array(regrets[SECURE])
    for name in correlations:
        c, r = np.array(correlations[name]), np.array(regrets[name])
        dc, dr = c - reference_c, r - reference_r
        n = np.sqrt(len(c))
        print(
            f"{name:48s} {c.mean():6.3f} {dc.mean():+7.3f} +- {dc.std(ddof=1) / n:.3f} "
            f"{r.mean():7.4f} {dr.mean():+8.4f} +- {dr.std(ddof=1) / n:.4f}"
        )


if __name__ == "__main__":
    main()
