"""Where does secure aggregation's cost in value come from? The first broadcast, ablated.

On GP draws of ``fts_value.py`` (near-identical sites: ``f + 0.05 h_n``, normalized, noise
0.01), ``--sites`` sites each observe a Latin-hypercube design of ``--design`` points and the
first broadcast is the pooled posterior on the feature block and noise (and, for the plain
server, offsets) of largest evidence. Variants:

* the plain server (:func:`~optuna_fedbo.core.pooling.select_posterior`): offsets chosen, none,
  or a free offset per site;
* secure aggregation as the previous release did it: each site standardized by its own
  design's mean and spread, summed, no offsets; and the same with one centre, one scale or both
  common to all sites (the pooled design values' mean and spread: given from outside, which no
  site has);
* secure aggregation now (:func:`~optuna_fedbo.federation.fts.secure.secure_input`: each site
  also eliminates an offset of its own), with its own scale or one common scale.

Reported, mean over seed functions: the correlation of the broadcast function with the true
function on a grid (smooth, so differences show with few seeds), the regret of its maximizer,
and each variant's paired difference to the previous release.

Run: ``python benchmarks/secagg_value_ablation.py --dims 2 --lengthscale 0.1 --seeds 30``.
"""

from __future__ import annotations

import argparse

import fts_value
import numpy as np

from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.pooling import pooling_feature_maps
from optuna_fedbo.core.pooling import select_posterior
from optuna_fedbo.core.pooling import unpack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import multiscale_range
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.space import Dimension
from optuna_fedbo.core.space import UnitCubeEncoding
from optuna_fedbo.federation.fts import secure

CAP = 1000
M = 100
PREVIOUS = "secure, own centre and scale (previous release)"


def _previous(packed: list[np.ndarray], references: list[tuple[float, float]]):
    """The previous release's sum: each site standardized by its reference, no offsets."""
    total = sum(
        pack_blocks([secure._standardized(b, CAP, r) for b in unpack_blocks(p, M)])
        for p, r in zip(packed, references)
    )
    return select_posterior([unpack_blocks(total, M, strict=False)], offset_scales=(0.0,))


def _now(packed: list[np.ndarray], references: list[tuple[float, float]]):
    """This release's sum (offsets eliminated by each site), decoded as the server does."""
    total = sum(secure.secure_input(p, M, CAP, r) for p, r in zip(packed, references))
    blocks = unpack_blocks(total, M, strict=False)
    for block in blocks:
        block.count = max(block.count - len(references), 1.0)
    return select_posterior([blocks], offset_scales=(0.0,))


def broadcasts(
    dims: int, lengthscale: float, seed: int, n_sites: int, n_design: int
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
    observed = [
        (base(d) + 0.05 * own(d) - low) / (high - low)
        + fts_value.NOISE_STD * rng.standard_normal(len(d))
        for d, own in zip(designs, owns)
    ]
    maps = pooling_feature_maps(RandomFourierFeatures(dims, M, multiscale_range(dims), seed=seed))
    sites = []
    for design, values in zip(designs, observed):
        sites.append([SufficientStatistics(f.n_features) for f in maps])
        for statistics, features in zip(sites[-1], maps):
            statistics.add(features(design), values)
    packed = [pack_blocks(s) for s in sites]
    own = [secure.reference_of(p, M) for p in packed]
    values = np.concatenate(observed)
    centre, scale = float(values.mean()), float(values.std())
    chosen = {
        "plain server, offsets chosen": select_posterior(sites),
        "plain server, no offsets": select_posterior(sites, offset_scales=(0.0,)),
        "plain server, free offsets": select_posterior(sites, offset_scales=(1e3,)),
        PREVIOUS: _previous(packed, own),
        "previous, one scale": _previous(packed, [(m, scale) for m, _ in own]),
        "previous, one centre": _previous(packed, [(centre, s) for _, s in own]),
        "previous, one centre and scale": _previous(packed, [(centre, scale)] * n_sites),
        "secure, offsets eliminated, own scale (now)": _now(packed, own),
        "secure, offsets eliminated, one scale": _now(packed, [(0.0, scale)] * n_sites),
    }
    functions = {name: maps[block](dense) @ mean for name, (block, mean) in chosen.items()}
    return (truth - low) / (high - low), functions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, default=2)
    parser.add_argument("--lengthscale", type=float, default=0.1)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--sites", type=int, default=10)
    parser.add_argument("--design", type=int, default=5)
    args = parser.parse_args()
    correlations: dict[str, list[float]] = {}
    regrets: dict[str, list[float]] = {}
    for seed in range(args.seeds):
        truth, functions = broadcasts(args.dims, args.lengthscale, seed, args.sites, args.design)
        for name, g in functions.items():
            correlations.setdefault(name, []).append(float(np.corrcoef(g, truth)[0, 1]))
            regrets.setdefault(name, []).append(float(1.0 - truth[np.argmax(g)]))
    print(
        f"D={args.dims} l={args.lengthscale}: first broadcast of {args.sites} sites x "
        f"{args.design} design points, {args.seeds} seed functions"
    )
    print(f"{'variant':48s} {'corr':>6s} {'vs previous':>16s} {'regret':>7s} {'vs previous':>17s}")
    reference_c, reference_r = np.array(correlations[PREVIOUS]), np.array(regrets[PREVIOUS])
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
