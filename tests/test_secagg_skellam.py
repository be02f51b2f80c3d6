"""Distributed DP under secure aggregation: the Skellam RDP bound against the exact Renyi
divergence, its (eps, delta) conversion, the noise tail bound, and noise shares that sum to at
least the central mechanism's noise once t participants survive."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.special import ive
from scipy.special import logsumexp

from optuna_fedbo.core.secagg import distributed_dp
from optuna_fedbo.core.secagg.distributed_dp import DistributedSkellam
from optuna_fedbo.core.secagg.local import run_local_round
from optuna_fedbo.core.secagg.setup import RoundSetup
from optuna_fedbo.privacy._skellam import skellam_epsilon
from optuna_fedbo.privacy._skellam import skellam_noise
from optuna_fedbo.privacy._skellam import SKELLAM_ORDERS
from optuna_fedbo.privacy._skellam import skellam_rdp
from optuna_fedbo.privacy._skellam import skellam_tail_bound


def _exact_renyi(variance: float, shifts: tuple[int, ...], orders: tuple[int, ...]) -> dict:
    """``{(s, a): D_a(Sk(V) + s || Sk(V))}`` from the pmf ``exp(-V) I_k(V) = ive(|k|, V)``."""
    width = int(np.ceil(30 * np.sqrt(variance))) + max(shifts) + 40
    k = np.arange(-width, width + 1)
    log_q = np.log(ive(np.abs(k), variance))
    out = {}
    for s in shifts:
        log_p = np.log(ive(np.abs(k - s), variance))
        for a in orders:
            out[s, a] = float(logsumexp(a * log_p + (1 - a) * log_q) / (a - 1))
    return out


@pytest.mark.parametrize("variance", [4.0, 20.0, 100.0, 2000.0])
def test_rdp_bound_dominates_the_exact_renyi_divergence(variance: float) -> None:
    # Integer shift vectors with L1 <= 4 and L2^2 <= 8 (sensitivities D1 = 4, D2 = sqrt(8)).
    d1, d2 = 4.0, np.sqrt(8.0)
    shifts = [
        s
        for s in itertools.product(range(-2, 3), repeat=3)
        if 0 < sum(map(abs, s)) <= d1 and sum(x * x for x in s) <= d2**2
    ]
    orders = (2, 3, 5, 10, 20)
    bound = skellam_rdp(orders, variance, d1, d2)
    # The divergence of a shift by -s equals that of +s (the Skellam is symmetric).
    one_dim = _exact_renyi(variance, (1, 2), orders)
    for shift in shifts:
        exact = [sum(one_dim[abs(x), a] for x in shift if x) for a in orders]
        assert np.all(np.array(exact) <= bound * (1 + 1e-9))
    # The bound is tight where the Skellam is close to a Gaussian (the worst shift (2, 2, 0)).
    exact = np.array([2 * one_dim[2, a] for a in orders])
    assert np.all(bound <= exact * (1.06 if variance >= 2000 else 6.0))


def test_epsilon_is_dp_accountings_conversion_and_approaches_the_gaussian() -> None:
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    z, delta, rounds = 1.5, 1e-5, 20
    d2 = 1e4  # a fine step: the Skellam is nearly Gaussian with sigma = z D2
    eps = skellam_epsilon(variance=(z * d2) ** 2, l1=d2, l2=d2, rounds=rounds, delta=delta)
    gaussian = rdp_privacy_accountant.RdpAccountant(orders=[float(a) for a in SKELLAM_ORDERS])
    gaussian.compose(dp_event.GaussianDpEvent(float(z)), rounds)
    eps_gaussian = gaussian.get_epsilon(delta)
    assert eps_gaussian <= eps <= eps_gaussian * 1.01
    # More rounds, more epsilon; more noise, less.
    assert skellam_epsilon(variance=(z * d2) ** 2, l1=d2, l2=d2, rounds=40, delta=delta) > eps
    assert skellam_epsilon(variance=(2 * z * d2) ** 2, l1=d2, l2=d2, rounds=20, delta=delta) < eps


def test_tail_bound_holds_empirically() -> None:
    rng = np.random.default_rng(5)
    for variance in (3.0, 50.0, 4000.0):
        bound = skellam_tail_bound(variance, 10, 1e-3)
        draws = skellam_noise(variance, 200_000, rng).reshape(-1, 10)
        assert np.mean(np.max(np.abs(draws), axis=1) > bound) <= 1e-3
        assert bound < 6 * np.sqrt(variance) + 20  # and it is not vacuous


def test_noise_shares_of_t_survivors_carry_the_central_variance() -> None:
    mechanism = DistributedSkellam(
        n_participants=10,
        threshold=6,
        clip_norm=1.0,
        step=0.01,
        dimension=4,
        noise_multiplier=1.0,
    )
    rng = np.random.default_rng(7)
    shares = skellam_noise(mechanism.share_variance, 6 * 200_000, rng).reshape(6, -1)
    total = shares.sum(axis=0)  # six survivors: exactly Sk(V)
    assert abs(total.var() / mechanism.central_variance - 1) < 0.02
    assert mechanism.central_variance == pytest.approx(
        (100 + 1) ** 2
    )  # (z (c/step + sqrt(d)/2))^2


def test_distributed_skellam_round_decodes_the_noisy_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = tuple(f"p{i}" for i in range(6))
    mechanism = DistributedSkellam(
        n_participants=6,
        threshold=4,
        clip_norm=1.0,
        step=1e-3,
        dimension=8,
        noise_multiplier=0.5,
    )
    ring = mechanism.ring()
    setup = RoundSetup("fed", 1, ids, 4, ring)
    rng = np.random.default_rng(11)
    values = {p: rng.normal(size=8) / 4 for p in ids}
    drawn: list[int] = []
    real_rng = distributed_dp.secure_rng

    def spy() -> np.random.Generator:
        drawn.append(1)
        return real_rng()

    monkeypatch.setattr(distributed_dp, "secure_rng", spy)
    encoded = {p: mechanism.participant_input(values[p], ring) for p in ids}
    assert len(drawn) == len(ids)  # the default noise source is OS entropy, once per share
    result = run_local_round(setup, encoded, drop_after={"p5": "share_keys"}).result
    plain = sum(values[p] for p in result.survivors)
    noise_std = np.sqrt(5 * mechanism.share_variance) * ring.step
    assert np.max(np.abs(result.values - plain)) < 6 * noise_std + 5 * ring.step
    assert np.max(np.abs(result.values - plain)) > 0  # noise is there


def test_a_mechanism_whose_noise_would_wrap_the_ring_is_refused() -> None:
    with pytest.raises(ValueError, match="would wrap the ring"):
        DistributedSkellam(
            n_participants=200,
            threshold=101,
            clip_norm=1e3,
            step=1e-15,
            dimension=10,
            noise_multiplier=1.0,
        ).ring()
