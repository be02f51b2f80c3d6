"""The distributed DP noise draw and its accounting (``privacy/_skellam.py``,
``privacy/_skellam_curve.py``): integer noise for the ring, only a positive finite variance, the
Renyi bound of the theorem, its conversion by ``dp_accounting``, the curve the ledger reads and
the ring's tail bound (written to kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optuna_fedbo.privacy._skellam import skellam_epsilon
from optuna_fedbo.privacy._skellam import skellam_noise
from optuna_fedbo.privacy._skellam import SKELLAM_ORDERS
from optuna_fedbo.privacy._skellam import skellam_rdp
from optuna_fedbo.privacy._skellam import skellam_tail_bound
from optuna_fedbo.privacy._skellam_curve import SkellamCurve


@pytest.mark.parametrize("variance", [0.0, -1.0, math.inf, math.nan])
def test_a_variance_that_is_not_positive_and_finite_is_refused(variance: float) -> None:
    with pytest.raises(ValueError, match="The Skellam variance must be a positive number"):
        skellam_noise(variance, 4, np.random.default_rng(0))


@pytest.mark.parametrize("variance", [0.5, 1.0, 40.0])
def test_the_noise_is_integers_with_the_variance_asked(variance: float) -> None:
    noise = skellam_noise(variance, 20_000, np.random.default_rng(3))
    assert noise.dtype == np.int64 and noise.shape == (20_000,)
    assert float(noise.var()) == pytest.approx(variance, rel=0.05)


# ------------------------------------------------------------- the accounting of the releases
def _rdp(orders: np.ndarray, v: float, d1: float, d2: float) -> np.ndarray:
    """Agarwal et al.'s bound (Theorem 3.5, variance form), written out here as the reference."""
    return orders * d2**2 / (2 * v) + np.minimum(
        ((2 * orders - 1) * d2**2 + 6 * d1) / (4 * v**2), 3 * d1 / (2 * v)
    )


@pytest.mark.parametrize(("v", "d1", "d2"), [(50.0, 30.0, 4.0), (2.0, 0.5, 1.5)])
def test_the_renyi_bound_is_the_theorem_at_every_order(v: float, d1: float, d2: float) -> None:
    # (50, 30, 4): the first branch of the minimum wins; (2, 0.5, 1.5): the second does.
    orders = np.array(SKELLAM_ORDERS, dtype=float)
    np.testing.assert_allclose(skellam_rdp(SKELLAM_ORDERS, v, d1, d2), _rdp(orders, v, d1, d2))
    np.testing.assert_array_equal(skellam_rdp((2, 3), 10.0, 0.0, 0.0), [0.0, 0.0])


@pytest.mark.parametrize("orders", [(1,), (2, 1), (2.5,), (2, 3.5)])
def test_the_renyi_bound_refuses_orders_below_2_or_not_integer(orders) -> None:
    with pytest.raises(ValueError, match="integer orders >= 2 only"):
        skellam_rdp(orders, 10.0, 1.0, 1.0)


@pytest.mark.parametrize(("l1", "l2"), [(-1e-9, 1.0), (1.0, -1e-9)])
def test_the_renyi_bound_refuses_a_negative_sensitivity(l1: float, l2: float) -> None:
    with pytest.raises(ValueError, match="Sensitivities must be non-negative"):
        skellam_rdp((2, 3), 10.0, l1, l2)


def test_epsilon_is_dp_accountings_conversion_of_t_times_the_bound() -> None:
    from dp_accounting.rdp import rdp_privacy_accountant

    orders = np.array(SKELLAM_ORDERS, dtype=float)
    one = _rdp(orders, 400.0, 60.0, 12.0)
    for rounds, delta in ((1, 1e-5), (9, 1e-3)):
        expected, _ = rdp_privacy_accountant.compute_epsilon(orders, one * rounds, delta)
        got = skellam_epsilon(variance=400.0, l1=60.0, l2=12.0, rounds=rounds, delta=delta)
        assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("rounds", "delta"), [(0, 1e-5), (-1, 1e-5), (1, 0.0), (1, 1.0)])
def test_epsilon_refuses_no_rounds_or_a_delta_outside_0_1(rounds: int, delta: float) -> None:
    with pytest.raises(ValueError, match="Need rounds >= 1 and 0 < delta < 1"):
        skellam_epsilon(variance=400.0, l1=60.0, l2=12.0, rounds=rounds, delta=delta)


def _log_tail(b: float, v: float) -> float:
    r = b / v
    return v * (math.sqrt(1.0 + r * r) - 1.0) - b * math.asinh(r)


@pytest.mark.parametrize(
    ("v", "d", "p"), [(0.5, 1, 0.25), (3.0, 1, 1e-3), (200.0, 7, 2.0**-40), (1e6, 50, 1e-9)]
)
def test_the_tail_bound_is_the_smallest_integer_the_chernoff_bound_allows(v, d, p) -> None:
    bound = skellam_tail_bound(v, d, p)
    chernoff = [2 * d * math.exp(_log_tail(b, v)) for b in (bound - 1, bound)]
    assert chernoff[1] <= p * (1 + 1e-9) and chernoff[0] > p, (bound, chernoff)


@pytest.mark.parametrize(("d", "p"), [(0, 0.5), (1, 0.0), (1, 1.0)])
def test_the_tail_bound_refuses_no_dimension_or_a_probability_outside_0_1(d, p) -> None:
    with pytest.raises(ValueError, match="Need dimension >= 1"):
        skellam_tail_bound(10.0, d, p)


def test_the_skellam_curve_is_the_bound_composed_cached_and_says_what_it_is() -> None:
    curve = SkellamCurve(variance=400.0, l1=60.0, l2=12.0, delta=1e-5)
    assert (curve.accountant, curve.event, curve.delta, curve.horizon) == (
        "skellam-rdp",
        None,
        1e-5,
        0,
    )
    assert curve.epsilon(0) == 0.0
    for rounds in (1, 4):
        expected = skellam_epsilon(variance=400.0, l1=60.0, l2=12.0, rounds=rounds, delta=1e-5)
        assert curve.epsilon(rounds) == expected
    assert curve.horizon == 1  # eps(1) was the next one; eps(4) a jump ahead
    curve.extend(5)
    assert curve.horizon == 5
    assert repr(curve) == "SkellamCurve(variance=400, l1=60, l2=12, delta=1e-05, horizon=5)"
    budget = curve.epsilon(3)
    assert curve.max_rounds(budget) == 3 and curve.epsilon(4) > budget


@pytest.mark.parametrize("delta", [0.0, 1.0])
def test_the_skellam_curve_refuses_a_delta_outside_0_1(delta: float) -> None:
    with pytest.raises(ValueError, match="delta"):
        SkellamCurve(variance=400.0, l1=60.0, l2=12.0, delta=delta)
