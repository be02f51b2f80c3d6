"""Privacy accounting: the DP-FTS-DE paper's numbers, the three accountants, calibration."""

from __future__ import annotations

import logging
import math

import dp_accounting
from dp_accounting import rdp as dp_rdp
import numpy as np
import pytest

from optuna_fedbo.privacy import _accounting
from optuna_fedbo.privacy import calibrate_noise_multiplier
from optuna_fedbo.privacy import classic_rdp_to_epsilon
from optuna_fedbo.privacy import compute_epsilon
from optuna_fedbo.privacy import default_delta
from optuna_fedbo.privacy import MOMENTS_ORDERS
from optuna_fedbo.privacy import MomentsAccountant
from optuna_fedbo.privacy import PrivacyAccountant
from optuna_fedbo.privacy import SubsampledGaussianEvent

# (N, q, z, T, published privacy loss): DP-FTS-DE Fig. 2c/2d (synthetic) and Fig. 3a (landmine).
PAPER_LOSSES = [
    (200, 0.15, 1.0, 40, 5.93),
    (200, 0.25, 1.0, 40, 9.91),
    (200, 0.50, 1.0, 40, 20.12),
    (200, 0.25, 1.2, 40, 7.39),
    (200, 0.25, 1.5, 40, 5.22),
    (29, 0.10, 1.0, 60, 3.75),
    (29, 0.15, 1.0, 60, 5.98),
    (29, 0.20, 1.0, 60, 7.69),
    (29, 0.25, 1.0, 60, 9.82),
    (29, 0.35, 1.0, 60, 15.17),
    (29, 0.35, 1.6, 60, 7.12),
    (29, 0.35, 2.0, 60, 5.14),
    (29, 0.35, 3.0, 60, 3.05),
    (29, 0.35, 4.0, 60, 2.16),
]

# (q, z, RDP with the library's conversion, PLD) at N = 200, delta = 200^-1.1, T = 40 (FACTS.md).
FACTS_SYNTHETIC = [
    (0.15, 1.0, 4.88, 3.96),
    (0.25, 1.0, 8.41, 7.05),
    (0.50, 1.0, 18.40, 15.71),
    (0.25, 1.2, 6.18, 5.15),
    (0.25, 1.5, 4.27, 3.60),
]


@pytest.mark.parametrize(("n_agents", "q", "z", "rounds", "published"), PAPER_LOSSES)
def test_moments_reproduces_the_papers_losses(
    n_agents: int, q: float, z: float, rounds: int, published: float
) -> None:
    epsilon = compute_epsilon(
        noise_multiplier=z,
        sample_rate=q,
        rounds=rounds,
        delta=n_agents**-1.1,
        accountant="moments",
    )
    assert epsilon == pytest.approx(published, abs=0.01)


@pytest.mark.parametrize(("q", "z", "rdp_value", "pld_value"), FACTS_SYNTHETIC)
def test_rdp_and_pld_match_measured_values(
    q: float, z: float, rdp_value: float, pld_value: float
) -> None:
    delta = 200**-1.1
    kwargs = {"noise_multiplier": z, "sample_rate": q, "rounds": 40, "delta": delta}
    rdp_epsilon = compute_epsilon(accountant="rdp", **kwargs)
    pld_epsilon = compute_epsilon(accountant="pld", **kwargs)
    moments_epsilon = compute_epsilon(accountant="moments", **kwargs)
    assert rdp_epsilon == pytest.approx(rdp_value, abs=0.02)
    assert pld_epsilon == pytest.approx(pld_value, abs=0.02)
    assert pld_epsilon < rdp_epsilon < moments_epsilon


def test_landmine_default_with_pld() -> None:
    epsilon = compute_epsilon(
        noise_multiplier=1.0, sample_rate=0.35, rounds=60, delta=29**-1.1, accountant="pld"
    )
    assert epsilon == pytest.approx(10.38, abs=0.02)


@pytest.mark.parametrize(
    ("q", "z", "rounds"), [(0.01, 0.8, 1000), (0.05, 2.0, 200), (0.35, 4.0, 60), (1.0, 5.0, 10)]
)
def test_accountant_ordering(q: float, z: float, rounds: int) -> None:
    kwargs = {"noise_multiplier": z, "sample_rate": q, "rounds": rounds, "delta": 1e-5}
    moments = compute_epsilon(accountant="moments", **kwargs)
    rdp = compute_epsilon(accountant="rdp", **kwargs)
    pld = compute_epsilon(accountant="pld", **kwargs)
    assert 0 < pld <= rdp + 1e-9
    assert rdp <= moments + 1e-9


@pytest.mark.parametrize("accountant", ["moments", "rdp", "pld"])
def test_noise_multiplier_type_does_not_matter(accountant: str) -> None:
    kwargs = {"sample_rate": 0.25, "rounds": 40, "delta": 200**-1.1, "accountant": accountant}
    reference = compute_epsilon(noise_multiplier=1.0, **kwargs)
    assert compute_epsilon(noise_multiplier=1, **kwargs) == reference
    assert compute_epsilon(noise_multiplier=np.int64(1), **kwargs) == reference
    assert compute_epsilon(noise_multiplier=np.float32(1.0), **kwargs) == reference
    reference = compute_epsilon(noise_multiplier=1.5, **kwargs)
    assert compute_epsilon(noise_multiplier=np.float32(1.5), **kwargs) == reference
    ledger = PrivacyAccountant(np.float32(1.5), 0.25, 200**-1.1, accountant=accountant)
    assert isinstance(ledger.event.noise_multiplier, float)
    assert ledger.epsilon(40) == pytest.approx(reference, rel=1e-9)


def test_event_converts_to_python_float() -> None:
    event = SubsampledGaussianEvent(np.float32(2.0), np.float64(0.5))
    assert type(event.noise_multiplier) is float
    assert type(event.sample_rate) is float
    dp_event = event.to_dp_event()
    assert isinstance(dp_event, dp_accounting.PoissonSampledDpEvent)
    assert type(dp_event.event.noise_multiplier) is float


def test_zero_rounds_cost_nothing() -> None:
    for accountant in ("moments", "rdp", "pld"):
        kwargs = {"noise_multiplier": 1.0, "sample_rate": 0.3, "delta": 1e-5}
        assert compute_epsilon(rounds=0, accountant=accountant, **kwargs) == 0.0
        assert PrivacyAccountant(1.0, 0.3, 1e-5, accountant=accountant).epsilon(0) == 0.0


def test_full_participation_matches_closed_form() -> None:
    # q = 1: plain Gaussian, RDP a / (2 z^2) per round; classic conversion by hand.
    z, rounds, delta = 3.0, 25, 1e-6
    orders = np.array(MOMENTS_ORDERS, dtype=float)
    expected = np.min(rounds * orders / (2 * z**2) + math.log(1 / delta) / (orders - 1))
    epsilon = compute_epsilon(
        noise_multiplier=z, sample_rate=1.0, rounds=rounds, delta=delta, accountant="moments"
    )
    assert epsilon == pytest.approx(expected, rel=1e-12)


def test_fixed_size_uses_replace_one_with_doubled_sensitivity() -> None:
    # Drawing all N agents without replacement is the plain Gaussian mechanism; under replace-one
    # the sensitivity doubles, so the per-round RDP is a / (2 (z/2)^2) = 2 a / z^2.
    z, rounds, delta, n_agents = 4.0, 10, 1e-5, 20
    orders = np.array(MOMENTS_ORDERS, dtype=float)
    expected = np.min(rounds * 2 * orders / z**2 + math.log(1 / delta) / (orders - 1))
    epsilon = compute_epsilon(
        noise_multiplier=z,
        sample_rate=1.0,
        rounds=rounds,
        delta=delta,
        accountant="moments",
        sampling="fixed_size",
        n_agents=n_agents,
    )
    assert epsilon == pytest.approx(expected, rel=1e-12)


def test_fixed_size_matches_direct_library_accounting() -> None:
    n_agents, q, z, rounds, delta = 29, 0.35, 1.0, 60, 29**-1.1
    event = SubsampledGaussianEvent(z, q, "fixed_size", n_agents)
    assert event.sample_size == 10
    assert event.neighboring_relation is dp_accounting.NeighboringRelation.REPLACE_ONE
    library = dp_rdp.RdpAccountant(
        orders=_accounting.RDP_ORDERS,
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
    )
    library.compose(
        dp_accounting.SampledWithoutReplacementDpEvent(
            n_agents, 10, dp_accounting.GaussianDpEvent(z / 2)
        ),
        rounds,
    )
    ours = compute_epsilon(
        noise_multiplier=z,
        sample_rate=q,
        rounds=rounds,
        delta=delta,
        accountant="rdp",
        sampling="fixed_size",
        n_agents=n_agents,
    )
    assert ours == pytest.approx(library.get_epsilon(delta), rel=1e-12)
    moments = compute_epsilon(
        noise_multiplier=z,
        sample_rate=q,
        rounds=rounds,
        delta=delta,
        accountant="moments",
        sampling="fixed_size",
        n_agents=n_agents,
    )
    assert ours <= moments


def test_fixed_size_with_pld_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="fixed-size sampling"):
        compute_epsilon(
            noise_multiplier=1.0,
            sample_rate=0.35,
            rounds=60,
            delta=1e-3,
            accountant="pld",
            sampling="fixed_size",
            n_agents=29,
        )
    with pytest.raises(ValueError, match="fixed-size sampling"):
        PrivacyAccountant(1.0, 0.35, 1e-3, accountant="pld", sampling="fixed_size", n_agents=29)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sample_rate": 0.0}, "sample_rate"),
        ({"sample_rate": 1.5}, "sample_rate"),
        ({"sample_rate": float("nan")}, "sample_rate"),
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"noise_multiplier": -1.0}, "noise_multiplier"),
        ({"noise_multiplier": float("inf")}, "noise_multiplier"),
        ({"noise_multiplier": "one"}, "noise_multiplier"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"rounds": -1}, "rounds"),
        ({"rounds": 2.5}, "rounds"),
        ({"rounds": True}, "rounds"),
        ({"accountant": "gdp"}, "accountant"),
        ({"sampling": "shuffle"}, "sampling"),
        ({"sampling": "fixed_size"}, "n_agents"),
        ({"sampling": "fixed_size", "n_agents": 3, "sample_rate": 0.1}, "0 agents"),
        ({"n_agents": 0}, "n_agents"),
    ],
)
def test_validation(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "noise_multiplier": 1.0,
        "sample_rate": 0.25,
        "rounds": 10,
        "delta": 1e-5,
        "accountant": "moments",
    }
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        compute_epsilon(**arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("accountant", "sampling"),
    [("moments", "poisson"), ("rdp", "poisson"), ("pld", "poisson"), ("moments", "fixed_size")],
)
def test_calibration_round_trips(accountant: str, sampling: str) -> None:
    kwargs = {
        "sample_rate": 0.25,
        "rounds": 60,
        "delta": 200**-1.1,
        "accountant": accountant,
        "sampling": sampling,
        "n_agents": 200,
    }
    z = calibrate_noise_multiplier(target_epsilon=3.0, tol=1e-3, **kwargs)
    assert isinstance(z, float)
    achieved = compute_epsilon(noise_multiplier=z, **kwargs)
    assert achieved <= 3.0
    assert achieved == pytest.approx(3.0, abs=0.03)
    # Optimal within tol: a visibly smaller multiplier overshoots the target.
    assert compute_epsilon(noise_multiplier=z - 0.01, **kwargs) > 3.0


def test_calibration_is_monotone_in_target() -> None:
    kwargs = {"sample_rate": 0.25, "rounds": 60, "delta": 200**-1.1, "accountant": "moments"}
    zs = [calibrate_noise_multiplier(target_epsilon=eps, **kwargs) for eps in (1.0, 3.0, 8.0)]
    assert zs[0] > zs[1] > zs[2] > 0.1


def test_calibration_validation() -> None:
    kwargs = {"sample_rate": 0.25, "rounds": 60, "delta": 1e-5, "accountant": "moments"}
    with pytest.raises(ValueError, match="target_epsilon"):
        calibrate_noise_multiplier(target_epsilon=0.0, **kwargs)
    with pytest.raises(ValueError, match="rounds"):
        calibrate_noise_multiplier(target_epsilon=1.0, **{**kwargs, "rounds": 0})
    with pytest.raises(ValueError, match="below"):
        calibrate_noise_multiplier(target_epsilon=1e7, **kwargs)
    with pytest.raises(ValueError, match="tol"):
        calibrate_noise_multiplier(target_epsilon=1.0, tol=0.0, **kwargs)


@pytest.mark.parametrize("accountant", ["moments", "rdp", "pld"])
def test_ledger_matches_fresh_composition(accountant: str) -> None:
    ledger = PrivacyAccountant(1.0, 0.35, 29**-1.1, accountant=accountant)
    for rounds in (1, 7, 60, 500):
        expected = compute_epsilon(
            noise_multiplier=1.0,
            sample_rate=0.35,
            rounds=rounds,
            delta=29**-1.1,
            accountant=accountant,
        )
        assert ledger.epsilon(rounds) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("accountant", ["moments", "rdp"])
def test_ledger_does_not_recompose(accountant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = PrivacyAccountant(1.0, 0.25, 1e-5, accountant=accountant)

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("epsilon() must not compose events again")

    monkeypatch.setattr(dp_rdp.RdpAccountant, "compose", forbidden)
    monkeypatch.setattr(dp_rdp.RdpAccountant, "_maybe_compose", forbidden)
    values = [ledger.epsilon(rounds) for rounds in (1, 10, 100, 1000, 100_000)]
    assert values == sorted(values)


def test_pld_ledger_composes_once_per_round_count(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = PrivacyAccountant(1.0, 0.25, 1e-5, accountant="pld")
    per_round = ledger._pld_per_round
    assert per_round is not None
    calls: list[int] = []
    original = type(per_round).self_compose

    def counting(self: object, count: int, *args: object, **kwargs: object) -> object:
        calls.append(count)
        return original(self, count, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(type(per_round), "self_compose", counting)
    first = ledger.epsilon(50)
    assert ledger.epsilon(50) == first
    ledger.epsilon(51)
    assert calls == [50, 51]


def test_budget_helpers() -> None:
    ledger = PrivacyAccountant(1.0, 0.35, 29**-1.1, accountant="moments")
    budget = 8.0
    rounds = ledger.max_rounds(budget)
    assert ledger.epsilon(rounds) <= budget < ledger.epsilon(rounds + 1)
    assert not ledger.would_exceed(rounds, budget)
    assert ledger.would_exceed(rounds + 1, budget)
    assert ledger.max_rounds(1e9, limit=100) == 100
    assert ledger.max_rounds(0.0) == 0
    with pytest.raises(ValueError, match="budget"):
        ledger.would_exceed(3, -1.0)


def test_ledger_from_event_and_repr() -> None:
    event = SubsampledGaussianEvent(1.0, 0.35, "fixed_size", 29)
    ledger = PrivacyAccountant.from_event(event, 29**-1.1, accountant="moments")
    assert ledger.event == event
    assert ledger.accountant == "moments"
    assert "fixed_size" in repr(ledger)
    assert ledger.epsilon(60) == pytest.approx(
        compute_epsilon(
            noise_multiplier=1.0,
            sample_rate=0.35,
            rounds=60,
            delta=29**-1.1,
            accountant="moments",
            sampling="fixed_size",
            n_agents=29,
        ),
        rel=1e-12,
    )


def test_moments_accountant_delta_inverts_epsilon() -> None:
    accountant = MomentsAccountant()
    accountant.compose(
        dp_accounting.PoissonSampledDpEvent(0.25, dp_accounting.GaussianDpEvent(1.0)), 40
    )
    delta = 200**-1.1
    epsilon, order = accountant.get_epsilon_and_optimal_order(delta)
    assert order == 2.0
    assert accountant.get_delta(epsilon) == pytest.approx(delta, rel=1e-9)
    assert accountant.get_delta(epsilon + 1.0) < delta


def test_classic_conversion_by_hand() -> None:
    orders = np.array([2.0, 3.0, 4.0])
    rdp = np.array([0.5, 1.0, np.inf])
    epsilon, order = classic_rdp_to_epsilon(orders, rdp, math.exp(-3.0))
    assert (epsilon, order) == (pytest.approx(min(0.5 + 3.0, 1.0 + 1.5)), 3.0)
    assert classic_rdp_to_epsilon(orders, np.full(3, np.inf), 0.1)[0] == math.inf
    with pytest.raises(ValueError, match="> 1"):
        classic_rdp_to_epsilon(np.array([1.0]), np.array([0.0]), 0.1)


def test_no_warning_spam_from_fractional_orders(caplog: pytest.LogCaptureFixture) -> None:
    # Set the module logger's own level too: an earlier test (the CLI) may have raised
    # "optuna_fedbo" to WARNING, which caplog's root-level setting would not undo.
    with caplog.at_level(logging.DEBUG), caplog.at_level(logging.DEBUG, _accounting.__name__):
        compute_epsilon(
            noise_multiplier=1.0, sample_rate=0.35, rounds=60, delta=1e-5, accountant="rdp"
        )
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []
    notes = [r for r in caplog.records if r.name == _accounting.__name__]
    assert len(notes) == 1 and "fractional" in notes[0].getMessage()


def test_default_delta() -> None:
    assert default_delta(200) == 200**-1.1
    with pytest.raises(ValueError, match="n_agents"):
        default_delta(0)
    with pytest.raises(ValueError, match="at least 2"):
        default_delta(1)
