"""Where does secure aggregation's cost in value come from? The first broadcast, ablated.

On GP draws of ``fts_value.py`` (near-identical sites: ``f + 0.05 h_n``, normalized, noise
0.01), ``--sites`` sites each observe a Latin-hypercube design of ``--design`` points and the
first broadcast is the pooled posterior on the feature block and noise (and, for the plain
server, offsets) of largest evidence. Variants:

* the plain server (:func:`~optuna_fedbo.core.pooling.select_posterior`): offsets chosen, none,
  or a free offset per site;
* secure aggregation as this release does it: each site standardized by its own
  design's mean and spread, summed, no offsets; and the same with one centre, one scale or both
  common to all sites (the pooled design values' mean and spread: given from outside, which no
  site has);
* secure aggregation with each site also eliminating an offset of its own before masking
  (centring its features and values on their own means: summed, exactly the plain server's
  pooling with a free offset per site; the evidence counts one degree of freedom fewer per
  site), with its own scale or one common scale. Tried and not kept: it drops the differences
  in level between sites (README).

Reported, mean over seed functions: the correlation of the broadcast function with the true
function on a grid (smooth, so differences show with few seeds), the regret of its maximizer,
and each variant's paired difference to this release's secure aggregation.

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
PREVIOUS = "secure, own centre and scale (this release)"


def _standardized(packed: np.ndarray, reference: tuple[float, float], centred: bool) -> np.ndarray:
    """A site's input: its values standardized by ``reference`` (this release's
    :func:`~optuna_fedbo.federation.fts.secure.secure_input`), its features and values then
    centred on their own means if ``centred`` (an offset of its own eliminated)."""
    if not centred:
        return secure.secure_input(packed, M, CAP, reference)
    blocks = []
    for block in unpack_blocks(secure.secure_input(packed, M, CAP, reference), M):
        n, features = float(block.count), block.feature_sum
        out = SufficientStatistics(block.n_features)
        out.count = block.count
        out.gram = block.gram - np.outer(features, features) / n
        out.feature_target = block.feature_target - features * (block.target_sum / n)
        out.target_square_sum = max(block.target_square_sum - block.target_sum**2 / n, 0.0)
        blocks.append(out)
    return pack_blocks(blocks)


def _pooled(packed: list[np.ndarray], references: list[tuple[float, float]], centred: bool):
    """``(block, mean)`` of the posterior given the sum of the sites' inputs."""
    total = sum(_standardized(p, r, centred) for p, r in zip(packed, references))
    blocks = unpack_blocks(total, M, strict=False)
    if centred:  # the offsets took one degree of freedom per site
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
        PREVIOUS: _pooled(packed, own, False),
        "secure, one scale": _pooled(packed, [(m, scale) for m, _ in own], False),
        "secure, one centre": _pooled(packed, [(centre, s) for _, s in own], False),
        "secure, one centre and scale": _pooled(packed, [(centre, scale)] * n_sites, False),
        "secure, offsets eliminated, own scale": _pooled(packed, own, True),
        "secure, offsets eliminated, one scale": _pooled(packed, [(0.0, scale)] * n_sites, True),
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
    print(f"{'variant':48s} {'corr':>6s} {'vs secure':>16s} {'regret':>7s} {'vs secure':>17s}")
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
