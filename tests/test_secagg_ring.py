"""Fixed-point encoding in Z_2^k: the decoded sum is the plain sum within N step / 2, and a
configuration whose sum could wrap the ring is refused."""

from __future__ import annotations

import numpy as np
import pytest

from optuna_fedbo.core.secagg.ring import centred
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.ring import ring_add
from optuna_fedbo.core.secagg.ring import RingSpec
from optuna_fedbo.core.secagg.ring import to_ring


@pytest.mark.parametrize("n", [1, 3, 50, 200])
def test_decoded_sum_is_the_plain_sum_within_n_half_steps(n: int) -> None:
    rng = np.random.default_rng(n)
    ring = plan_ring(n_inputs=n, bound=2.0, step=1e-5, dimension=40)
    # Extreme inputs included: every coordinate at the bound, so the sum is at its largest.
    values = rng.uniform(-2.0, 2.0, size=(n, 40))
    values[0] = 2.0
    total = np.zeros(40, dtype=np.uint64)
    for row in values:
        total = ring_add(total, encode(row, ring), ring)
    error = np.max(np.abs(decode(total, ring) - values.sum(axis=0)))
    assert error <= n * ring.step / 2 + 1e-9


def test_the_ring_is_the_smallest_that_holds_the_largest_sum() -> None:
    ring = plan_ring(n_inputs=10, bound=1.0, step=0.01, dimension=3, noise_bound=24)
    largest = 10 * 100 + 24
    assert 2 ** (ring.bits - 1) > largest >= 2 ** (ring.bits - 2)
    # The extreme sums (all inputs at +bound or -bound, noise at its bound) decode exactly.
    for sign in (1, -1):
        levels = np.full(3, sign * largest, dtype=np.int64)
        assert np.all(centred(to_ring(levels, ring), ring) == sign * largest)


def test_inputs_out_of_range_are_clipped_not_wrapped() -> None:
    ring = plan_ring(n_inputs=2, bound=1.0, step=0.1, dimension=2)
    assert decode(encode(np.array([1e9, -1e9]), ring), ring).tolist() == [1.0, -1.0]
    with pytest.raises(ValueError, match="non-finite"):
        encode(np.array([np.nan, 0.0]), ring)
    with pytest.raises(ValueError, match="shape"):
        encode(np.zeros(3), ring)


def test_a_configuration_that_would_wrap_the_ring_is_refused() -> None:
    with pytest.raises(ValueError, match="would wrap the ring Z_2\\^64: use a coarser step"):
        plan_ring(n_inputs=200, bound=1e6, step=1e-12, dimension=10)
    with pytest.raises(ValueError, match="would wrap"):
        plan_ring(n_inputs=2, bound=1.0, step=1.0, dimension=1, noise_bound=2**63)
    with pytest.raises(ValueError, match="positive"):
        plan_ring(n_inputs=2, bound=0.0, step=1.0, dimension=1)


def test_sixty_four_bit_ring_decodes_without_overflow() -> None:
    ring = RingSpec(bits=64, step=1.0, bound=2.0**61, dimension=2)
    levels = np.array([-(2**62), 2**62], dtype=np.int64)
    assert centred(to_ring(levels, ring), ring).tolist() == [-(2**62), 2**62]
    assert RingSpec.from_dict(ring.to_dict()) == ring
