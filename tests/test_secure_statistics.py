"""Pooled statistics summed exactly in the ring (``core/secure_statistics.py``): digits carry,
the sum decodes to the plain sum, and the pooled posterior does not depend on the values' level
or scale, as the plain server's does not."""

from __future__ import annotations

from functools import reduce
import math

import numpy as np
import pytest

from optuna_fedbo.core.pooling import block_sizes
from optuna_fedbo.core.pooling import packed_blocks_length
from optuna_fedbo.core.pooling import pooling_feature_maps
from optuna_fedbo.core.pooling import select_posterior
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.ring import ring_add
from optuna_fedbo.core.secure_statistics import decode_statistics
from optuna_fedbo.core.secure_statistics import DIGIT_MAX
from optuna_fedbo.core.secure_statistics import DigitCode
from optuna_fedbo.core.secure_statistics import encode_statistics
from optuna_fedbo.core.secure_statistics import FEATURE
from optuna_fedbo.core.secure_statistics import input_length
from optuna_fedbo.core.secure_statistics import LINEAR
from optuna_fedbo.core.secure_statistics import SQUARE

M = 8
STEP = 2.0**-20


def _digit_sums(code: DigitCode, rows: list[np.ndarray]) -> np.ndarray:
    return np.sum([code.encode(row) for row in rows], axis=0)


def test_digits_are_bounded_and_decode_to_the_value_in_whole_units() -> None:
    values = np.array([0.0, 1.0, -1.0, 2.0**-64, -(2.0**40) - 0.5, 1e20, 3.25e-7])
    digits = LINEAR.encode(values)
    assert digits.shape == (len(values) * LINEAR.digits,) and digits.dtype == np.int64
    assert np.max(np.abs(digits)) <= DIGIT_MAX
    units = [round(math.ldexp(v, 64)) for v in values]
    np.testing.assert_array_equal(LINEAR.decode(digits), [math.ldexp(u, -64) for u in units])


def test_summed_digits_carry_into_the_exact_sum() -> None:
    # Each digit of 2^32 - 1 summed twice overflows a digit: the sum of the digits must be
    # recombined with its carries, not digit by digit.
    just_below = math.ldexp(2.0**96 - 2.0**44, -64)  # every one of the low digits is full
    rows = [np.array([just_below, -3.5]), np.array([just_below, 1.25]), np.array([1.0, 2.0**-60])]
    exact = [2 * just_below + 1.0, -2.25 + 2.0**-60]
    np.testing.assert_array_equal(LINEAR.decode(_digit_sums(LINEAR, rows)), exact)


def test_a_sum_whose_terms_cancel_keeps_every_bit() -> None:
    # At a fixed step of 2^-20 the 1e-12 would be lost; in units of 2^-64 it is exact.
    rows = [np.array([1e6 + 1e-12]), np.array([-1e6])]
    total = FEATURE.decode(_digit_sums(FEATURE, rows))[0]
    assert total == pytest.approx(1e-12, rel=1e-6)


def test_values_beyond_the_limit_are_clipped_and_non_finite_ones_refused() -> None:
    assert LINEAR.limit == 2.0**96 and FEATURE.limit == 2.0**32 and SQUARE.limit == 2.0**160
    clipped = LINEAR.decode(LINEAR.encode(np.array([1e40, -1e40])))
    np.testing.assert_allclose(clipped, [LINEAR.limit, -LINEAR.limit], rtol=2.0**-52, atol=0)
    assert np.max(np.abs(LINEAR.encode(np.array([1e40])))) <= DIGIT_MAX
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match="only finite numbers"):
            LINEAR.encode(np.array([1.0, bad]))


def _site(seed: int, n: int, level: float, scale: float) -> list[SufficientStatistics]:
    rng = np.random.default_rng(seed)
    shared = RandomFourierFeatures(2, M, lengthscale=0.3, seed=7)
    x = rng.uniform(size=(n, 2))
    y = level + scale * (np.sin(4 * x[:, 0]) + x[:, 1] ** 2 + 0.05 * rng.standard_normal(n))
    blocks = []
    for features in pooling_feature_maps(shared):
        statistics = SufficientStatistics(features.n_features)
        statistics.add(features(x), y)
        blocks.append(statistics)
    return blocks


def _secure_sum(sites: list[list[SufficientStatistics]]) -> list[SufficientStatistics]:
    ring = plan_ring(
        n_inputs=len(sites), bound=DIGIT_MAX * STEP, step=STEP, dimension=input_length(M)
    )
    total = reduce(lambda a, b: ring_add(a, b, ring), [encode_statistics(s, ring) for s in sites])
    return decode_statistics(decode(total, ring), STEP, M)


def test_the_input_has_the_length_its_layout_says() -> None:
    sizes = block_sizes(M)
    extra = (FEATURE.digits + LINEAR.digits - 2) * sum(sizes) + LINEAR.digits + SQUARE.digits
    # the plain packing: 3 sums per block; here the count once and the two value sums as digits
    assert input_length(M) == packed_blocks_length(M) - 3 * len(sizes) + 1 + extra
    ring = plan_ring(n_inputs=3, bound=DIGIT_MAX * STEP, step=STEP, dimension=input_length(M) + 1)
    with pytest.raises(ValueError, match="need .* ring coordinates, the ring has"):
        encode_statistics(_site(0, 5, 0.0, 1.0), ring)


def test_the_decoded_sum_is_the_plain_sum_of_the_statistics() -> None:
    sites = [_site(i, 5 + i, level=10.0 * i, scale=1.0 + i) for i in range(4)]
    summed = _secure_sum(sites)
    for index, block in enumerate(summed):
        parts = [site[index] for site in sites]
        assert block.count == pytest.approx(sum(p.count for p in parts), abs=4 * STEP)
        np.testing.assert_allclose(block.gram, sum(p.gram for p in parts), rtol=0, atol=4 * STEP)
        # The values centred on their pooled mean (exactly: the count here is whole).
        centre = sum(p.target_sum for p in parts) / sum(p.count for p in parts)
        feature_sum = sum(p.feature_sum for p in parts)
        feature_target = sum(p.feature_target for p in parts) - centre * feature_sum
        square_sum = sum(p.target_square_sum for p in parts) - centre**2 * block.count
        np.testing.assert_allclose(block.feature_sum, feature_sum, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(block.feature_target, feature_target, rtol=1e-9, atol=1e-9)
        assert block.target_sum == 0.0
        assert block.target_square_sum == pytest.approx(square_sum, rel=1e-9)


@pytest.mark.parametrize(("level", "scale"), [(1e6, 1.0), (0.0, 1e-9), (-3e4, 1e3)])
def test_the_pooled_posterior_does_not_depend_on_the_values_level_or_scale(
    level: float, scale: float
) -> None:
    """Standardized by the pooled mean and spread after the exact sum (and centred exactly),
    values around 1e6 or of order 1e-9 pool as those near 0 do; the fixed-point step alone
    (2^-20 of 1e6 times the features' sums) would move the posterior by far more."""
    reference = select_posterior(
        [_secure_sum([_site(i, 6, 0.0, 1.0) for i in range(3)])], offset_scales=(0.0,)
    )
    moved = select_posterior(
        [_secure_sum([_site(i, 6, level, scale) for i in range(3)])], offset_scales=(0.0,)
    )
    assert moved[0] == reference[0]
    # What is left is each site's own floating-point sum of squares (1.8e13 near 1e6, to 1e-3).
    np.testing.assert_allclose(moved[1], reference[1], atol=1e-3)
