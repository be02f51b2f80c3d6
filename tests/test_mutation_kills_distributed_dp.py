"""The distributed Skellam mechanism (``core/secagg/distributed_dp.py``), in process: what one
participant adds and clips, the ring sized for all ``N`` noise shares, the variance and the
epsilon the ledger is given (written to kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optuna_fedbo.core.secagg import distributed_dp
from optuna_fedbo.core.secagg.distributed_dp import DistributedSkellam
from optuna_fedbo.core.secagg.ring import centred
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.privacy._skellam import SKELLAM_ORDERS
from optuna_fedbo.privacy._skellam import skellam_tail_bound


def _mechanism(**changes) -> DistributedSkellam:
    values = {
        "n_participants": 5,
        "threshold": 3,
        "clip_norm": 2.0,
        "step": 0.25,
        "dimension": 9,
        "noise_multiplier": 1.5,
    }
    return DistributedSkellam(**{**values, **changes})


def test_the_threshold_must_be_one_to_n_and_n_itself_is_allowed() -> None:
    assert _mechanism(threshold=5).threshold == 5
    assert _mechanism(threshold=1).threshold == 1
    for threshold in (0, -1, 6):
        with pytest.raises(ValueError, match="threshold must be in"):
            _mechanism(threshold=threshold)


@pytest.mark.parametrize("name", ["clip_norm", "step", "noise_multiplier"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_each_scale_must_be_positive_and_finite(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"{name} must be a positive number"):
        _mechanism(**{name: value})
    assert getattr(_mechanism(**{name: 0.5}), name) == 0.5  # below 1 is fine


def test_sensitivities_and_variances_are_the_documented_formulas() -> None:
    mechanism = _mechanism()  # D2 = 2 / 0.25 + 3 / 2 = 9.5, D1 = 3 D2, V = (1.5 D2)^2
    assert mechanism.sample_rate == 1.0
    assert mechanism.l2_sensitivity == 9.5
    assert mechanism.l1_sensitivity == 28.5
    assert mechanism.central_variance == pytest.approx(14.25**2, rel=1e-15)
    assert isinstance(mechanism.central_variance, float)
    assert mechanism.share_variance == pytest.approx(14.25**2 / 3, rel=1e-15)


def test_the_ring_holds_n_clipped_inputs_and_the_noise_of_all_n_shares(monkeypatch) -> None:
    mechanism = _mechanism()
    asked: list[tuple] = []
    real_tail = distributed_dp.skellam_tail_bound

    def tail(variance: float, dimension: int, probability: float) -> int:
        asked.append((variance, dimension, probability))
        return real_tail(variance, dimension, probability)

    monkeypatch.setattr(distributed_dp, "skellam_tail_bound", tail)
    ring = mechanism.ring()
    # The summed noise of all N shares, N V / t, wraps with probability at most 2^-40.
    ((variance, dimension, probability),) = asked
    assert variance == pytest.approx(5 * mechanism.central_variance / 3, rel=1e-15)
    assert (dimension, probability) == (9, 2.0**-40)
    noise = skellam_tail_bound(variance, 9, 2.0**-40)
    assert ring == plan_ring(n_inputs=5, bound=2.0, step=0.25, dimension=9, noise_bound=noise)
    # The largest sum fits: N inputs at the clip norm (in units of the step) plus the noise.
    assert 5 * 8 + noise < 2 ** (ring.bits - 1)


def _plain(monkeypatch, mechanism: DistributedSkellam, noise: np.ndarray | None = None):
    """participant_input's integers before reduction, with the noise given (zero if None)."""
    drawn: list[tuple] = []

    def fixed(variance: float, size: int, rng) -> np.ndarray:
        drawn.append((variance, size, rng))
        return np.zeros(size, dtype=np.int64) if noise is None else noise

    monkeypatch.setattr(distributed_dp, "skellam_noise", fixed)
    return drawn


def test_an_input_is_clipped_to_the_clip_norm_then_rounded_to_the_step(monkeypatch) -> None:
    mechanism = _mechanism()
    ring = mechanism.ring()
    bounds: list[float] = []
    real_clip = distributed_dp.clip_to_norm

    def clip(values: np.ndarray, bound: float) -> np.ndarray:
        bounds.append(bound)
        return real_clip(values, bound)

    monkeypatch.setattr(distributed_dp, "clip_to_norm", clip)
    _plain(monkeypatch, mechanism)
    long = np.arange(1.0, 10.0)  # norm about 16.9: clipped to 2
    levels = centred(mechanism.participant_input(long, ring), ring).astype(float)
    (bound,) = bounds
    assert 2.0 * (1 - 1e-9) < bound <= 2.0  # never above the clip norm (the sensitivity's)
    expected = np.rint(long / np.linalg.norm(long) * bound / 0.25)
    np.testing.assert_array_equal(levels, expected)
    assert np.linalg.norm(levels) <= mechanism.l2_sensitivity
    short = np.array([0.3, -0.6, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0])  # within: kept, rounded
    levels = centred(mechanism.participant_input(short, ring), ring).astype(float)
    np.testing.assert_array_equal(levels, [1, -2, 0, 0, 0, 0, 0, 0, 0])


def test_the_noise_share_has_the_share_variance_and_is_added(monkeypatch) -> None:
    mechanism = _mechanism()
    ring = mechanism.ring()
    noise = np.array([3, -2, 0, 1, 0, 0, 0, 0, -7], dtype=np.int64)
    drawn = _plain(monkeypatch, mechanism, noise)
    rng = np.random.default_rng(0)
    values = np.array([0.5, 0.5, 0, 0, 0, 0, 0, 0, 0], dtype=float)
    levels = centred(mechanism.participant_input(values, ring, rng), ring)
    np.testing.assert_array_equal(levels, [5, 0, 0, 1, 0, 0, 0, 0, -7])
    ((variance, size, used),) = drawn
    assert variance == mechanism.share_variance and size == 9 and used is rng


def test_the_noise_comes_from_the_generator_given_or_else_os_entropy(monkeypatch) -> None:
    mechanism = _mechanism()
    ring = mechanism.ring()
    values = np.zeros(9)
    first = mechanism.participant_input(values, ring, np.random.default_rng(4))
    again = mechanism.participant_input(values, ring, np.random.default_rng(4))
    np.testing.assert_array_equal(first, again)  # a given generator is used
    assert np.any(centred(first, ring) != 0)  # and it adds noise
    drawn = _plain(monkeypatch, mechanism)
    os_rng = np.random.default_rng(5)
    monkeypatch.setattr(distributed_dp, "secure_rng", lambda: os_rng)
    mechanism.participant_input(values, ring)
    assert drawn[0][2] is os_rng


@pytest.mark.parametrize("other", [{"step": 0.5}, {"dimension": 8}])
def test_a_ring_of_another_step_or_dimension_is_refused(other) -> None:
    mechanism = _mechanism()
    ring = _mechanism(**other).ring()
    with pytest.raises(ValueError, match="the ring's step or dimension differs"):
        mechanism.participant_input(np.zeros(mechanism.dimension), ring)


def test_epsilon_is_dp_accountings_conversion_of_the_skellam_bound_at_q_1() -> None:
    from dp_accounting.rdp import rdp_privacy_accountant

    mechanism = _mechanism(noise_multiplier=3.0)
    v, d1, d2 = mechanism.central_variance, mechanism.l1_sensitivity, mechanism.l2_sensitivity
    orders = np.array(SKELLAM_ORDERS, dtype=float)
    one = orders * d2**2 / (2 * v) + np.minimum(
        ((2 * orders - 1) * d2**2 + 6 * d1) / (4 * v**2), 3 * d1 / (2 * v)
    )
    for rounds in (1, 7):
        expected, _ = rdp_privacy_accountant.compute_epsilon(orders, one * rounds, 1e-6)
        assert mechanism.epsilon(rounds=rounds, delta=1e-6) == pytest.approx(expected, rel=1e-12)


def test_the_noise_is_added_exactly_to_levels_beyond_float_precision(monkeypatch) -> None:
    # clip_norm / step = 2^55: the levels pass 2^53, where float64 has no odd integers.
    mechanism = _mechanism(step=2.0**-55, clip_norm=1.0, dimension=1, noise_multiplier=1e-9)
    ring = mechanism.ring()
    _plain(monkeypatch, mechanism, np.array([1], dtype=np.int64))
    levels = int(centred(mechanism.participant_input(np.array([4.0]), ring), ring)[0])
    expected = round(1.0 * (1 - 1e-12) * 2**55) + 1  # the clipped value's level, plus the noise
    assert levels == expected and levels % 2 == 1
