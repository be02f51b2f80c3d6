"""Secure aggregation keeps the plain server's per-site offsets: each site eliminates its own.

A participant centres its statistics on its own means before masking
(:func:`~optuna_fedbo.core.pooling.without_offset`); the securely summed statistics then give
the posterior mean of the plain pooling with a free offset per site, within the fixed-point step,
whatever reference each site standardized its values by.
"""

from __future__ import annotations

import numpy as np
import pytest

from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.pooling import pooled_posterior
from optuna_fedbo.core.pooling import pooling_feature_maps
from optuna_fedbo.core.pooling import unpack_blocks
from optuna_fedbo.core.pooling import without_offset
from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import ring_add
from optuna_fedbo.federation import SecureAggregation
from optuna_fedbo.federation.fts.secure import pooled_from_sum
from optuna_fedbo.federation.fts.secure import secure_input

M = 12
CAP = 1000


def _sites(n_sites: int = 4, seed: int = 0) -> list[np.ndarray]:
    """Packed statistics (every pooling block) of sites measuring one function on their own
    baselines (offsets of up to 50)."""
    rng = np.random.default_rng(seed)
    maps = pooling_feature_maps(RandomFourierFeatures(2, M, 0.3, seed=seed))
    packed = []
    for n in range(n_sites):
        x = rng.uniform(size=(6 + n, 2))
        y = np.sin(3 * x[:, 0]) + x[:, 1] ** 2 + 50 * rng.uniform(-1, 1)
        y = y + 0.05 * rng.standard_normal(len(y))
        blocks = []
        for features in maps:
            statistics = SufficientStatistics(features.n_features)
            statistics.add(features(x), y)
            blocks.append(statistics)
        packed.append(pack_blocks(blocks))
    return packed


def _securely_summed(inputs: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """The decoded ring sum of ``inputs`` (as the server unmasks it) and the fixed-point step."""
    config = SecureAggregation()
    ring = config.ring(len(inputs), len(inputs[0]))
    total = encode(inputs[0], ring)
    for values in inputs[1:]:
        total = ring_add(total, encode(values, ring), ring)
    return decode(total, ring), config.step


def test_the_summed_centred_statistics_give_the_plain_pooling_with_free_offsets() -> None:
    packed = _sites()
    # Each site standardizes by its own reference: different centres, one spread.
    references = [(float(k) * 7.0, 1.0) for k in range(len(packed))]
    inputs = [secure_input(p, M, CAP, r) for p, r in zip(packed, references)]
    summed, step = _securely_summed(inputs)
    block = unpack_blocks(summed, M, strict=False)[0]
    exact = unpack_blocks(sum(inputs), M, strict=False)[0]
    sites = [unpack_blocks(p, M)[0] for p in packed]
    # The plain server's pooled posterior with an offset per site of (practically) unbounded
    # scale, on its own standardization of everyone's values together.
    count = sum(s.count for s in sites)
    mean = sum(s.target_sum for s in sites) / count
    spread = np.sqrt(sum(s.target_square_sum for s in sites) / count - mean**2)
    # The fixed-point sum moves each coordinate by at most N step / 2, so the posterior mean
    # (G + lambda I)^-1 b by at most N step / 2 (M |mean| + sqrt(M) / spread) / lambda.
    error = len(inputs) * step / 2
    for noise_variance in (1e-2, 1.0):
        plain, _ = pooled_posterior(sites, np.ones(len(sites)), noise_variance, 1e6)
        for statistics, tolerance in (
            (exact, 1e-8 * np.max(np.abs(plain))),
            (block, error * (M * np.linalg.norm(plain) + np.sqrt(M) / spread) / noise_variance),
        ):
            secure = LinearPosterior(
                statistics.gram, statistics.feature_target / spread, noise_variance, 1.0, count
            ).mean
            assert np.linalg.norm(secure - plain) <= tolerance
    # Without the offsets' elimination the site's own centres pull the posterior elsewhere.
    uncentred = sum(
        pack_blocks([_shifted(s, r[0]) for s in unpack_blocks(p, M)])
        for p, r in zip(packed, references)
    )
    raw = unpack_blocks(uncentred, M, strict=False)[0]
    away = LinearPosterior(raw.gram, raw.feature_target / spread, 1e-2, 1.0, count).mean
    assert np.max(np.abs(away - plain)) > 0.1 * np.max(np.abs(plain))
    # And the statistics themselves are the plain sum of centred ones within the step.
    expected = sum(without_offset(s).gram for s in sites)
    assert np.max(np.abs(block.gram - expected)) <= len(sites) * step / 2 + 1e-9


def _shifted(statistics: SufficientStatistics, centre: float) -> SufficientStatistics:
    """``statistics`` of the values minus ``centre`` (a site's own centring, not eliminated)."""
    out = SufficientStatistics(statistics.n_features)
    n = statistics.count
    out.count = n
    out.gram = statistics.gram
    out.feature_sum = statistics.feature_sum
    out.target_sum = statistics.target_sum - n * centre
    out.target_square_sum = (
        statistics.target_square_sum - 2 * centre * statistics.target_sum + n * centre**2
    )
    out.feature_target = statistics.feature_target - centre * statistics.feature_sum
    return out


def test_a_sites_centre_leaves_its_input_unchanged() -> None:
    packed = _sites(n_sites=1)
    first = secure_input(packed[0], M, CAP, (0.0, 2.0))
    second = secure_input(packed[0], M, CAP, (123.0, 2.0))
    np.testing.assert_allclose(first, second, atol=1e-9)
    block = unpack_blocks(first, M, strict=False)[0]
    assert block.target_sum == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(block.feature_sum, 0.0, atol=1e-12)


def test_a_sum_with_one_uncentred_input_is_not_published() -> None:
    # A participant that sends its statistics without centring them (consistent statistics,
    # within the bound) makes a sum that is not of centred observations: refused.
    packed = _sites()
    inputs = [secure_input(p, M, CAP, (0.0, 1.0)) for p in packed]
    summed, step = _securely_summed(inputs)
    pooled_from_sum(summed, M, 0, len(inputs) * step, len(inputs))  # honest: fine
    inputs[0] = pack_blocks(unpack_blocks(packed[0], M))
    summed, step = _securely_summed(inputs)
    with pytest.raises(ValueError, match="not statistics that observations"):
        pooled_from_sum(summed, M, 0, len(inputs) * step, len(inputs))
