"""DPConfig, its place in the hashed federation configuration, and the ledger's epsilon curve."""

from __future__ import annotations

import math

from dp_accounting.pld import privacy_loss_distribution as dp_pld_lib
import numpy as np
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import presets
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.dp_config import PAPER_DELTA
from optuna_fedbo.privacy import compute_epsilon
from optuna_fedbo.privacy import SubsampledGaussianEvent
from optuna_fedbo.privacy._curve import EpsilonCurve

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}

# (N, q, z, T, published loss): DP-FTS-DE Fig. 2c/2d (synthetic, N = 200, T = 40) and the authors'
# landmine losses (N = 29, T = 60), all at delta = N^-1.1 with the moments accountant.
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


@pytest.mark.parametrize(("n_agents", "q", "z", "rounds", "published"), PAPER_LOSSES)
def test_the_papers_losses_through_dpconfig(
    n_agents: int, q: float, z: float, rounds: int, published: float
) -> None:
    config = DPConfig(
        noise_multiplier=z, sample_rate=q, clip_norm=22.0, delta=PAPER_DELTA, accountant="moments"
    )
    assert config.resolve(n_agents).delta == pytest.approx(n_agents**-1.1)
    assert config.epsilon(rounds, n_agents) == pytest.approx(published, abs=0.01)


def test_paper_preset_reproduces_the_landmine_default() -> None:
    privacy = presets.dp_fts_de_privacy()
    assert (privacy.noise_multiplier, privacy.sample_rate, privacy.clip_norm) == (1.0, 0.35, 22.0)
    assert (privacy.accountant, privacy.sampling, privacy.delta) == (
        "moments",
        "poisson",
        PAPER_DELTA,
    )
    assert privacy.epsilon(60, 29) == pytest.approx(15.17, abs=0.01)
    protocol = presets.fts_de()
    assert (protocol.n_features, protocol.n_subregions, protocol.n_init) == (100, 4, 10)
    assert protocol.schedule == "1-1/t" and protocol.aggregation == "weighted"
    assert presets.dp_fts_de_privacy(epsilon_budget=8.0).epsilon_budget == 8.0
    with pytest.raises(ValueError, match="sample_rate"):
        presets.dp_fts_de_privacy(sample_rate=1.5)


def test_every_ledger_of_one_event_reads_one_curve_and_another_event_its_own() -> None:
    config = DPConfig(1.0, 0.25, 5.0)
    first, second = config.curve(50), DPConfig(1, 0.25, 5.0).curve(50)  # (an int z: the same)
    assert first is second and first.delta == config.resolve(50).delta
    assert config.curve(49) is first  # another N, the same Poisson event and delta
    for other in (
        DPConfig(1.0, 0.5, 5.0).curve(50),
        DPConfig(1.0, 0.25, 5.0, delta=1e-6).curve(50),
    ):
        assert other is not first
    moments = DPConfig(1.0, 0.25, 5.0, accountant="moments").curve(50)
    assert moments is not first and moments.accountant == "moments"
    expected = compute_epsilon(noise_multiplier=1.0, sample_rate=0.25, rounds=3, delta=first.delta)
    assert first.epsilon(3) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("accountant", ["moments", "rdp", "pld"])
@pytest.mark.parametrize("z", [1, np.float64(1.0), np.float32(1.0), np.int64(1)])
def test_int_and_numpy_noise_multipliers_give_the_float_epsilon(
    accountant: str, z: object
) -> None:
    reference = DPConfig(1.0, 0.25, 11.0, accountant=accountant).epsilon(40, 200)
    config = DPConfig(z, 0.25, 11.0, accountant=accountant)  # type: ignore[arg-type]
    assert type(config.noise_multiplier) is float
    assert config.epsilon(40, 200) == pytest.approx(reference, rel=1e-12)
    # dp_accounting itself under-counts an int multiplier in a composed Poisson event (FACTS):
    # through the federation API the value is the float one, far above that one-round value.
    assert reference > 2 * compute_epsilon(
        noise_multiplier=1.0, sample_rate=0.25, rounds=1, delta=200**-1.1, accountant=accountant
    )


@pytest.mark.parametrize("accountant", ["moments", "rdp", "pld"])
def test_accountants_are_ordered_and_pld_is_tightest(accountant: str) -> None:
    values = {
        kind: DPConfig(1.0, 0.25, 11.0, accountant=kind).epsilon(40, 200)
        for kind in ("moments", "rdp", "pld")
    }
    assert values["pld"] < values["rdp"] < values["moments"]
    assert DPConfig(1.0, 0.25, 11.0).accountant == "pld"  # the default


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"noise_multiplier": -1.0}, "noise_multiplier"),
        ({"noise_multiplier": float("inf")}, "noise_multiplier"),
        ({"noise_multiplier": True}, "noise_multiplier"),
        ({"noise_multiplier": "one"}, "noise_multiplier"),
        ({"sample_rate": 0.0}, "sample_rate"),
        ({"sample_rate": 1.01}, "sample_rate"),
        ({"sample_rate": float("nan")}, "sample_rate"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"accountant": "gdp"}, "accountant"),
        ({"sampling": "shuffle"}, "sampling"),
        ({"sampling": "fixed_size", "accountant": "pld"}, "Renyi"),
        ({"epsilon_budget": 0.0}, "epsilon_budget"),
        ({"epsilon_budget": -3.0}, "epsilon_budget"),
    ],
)
def test_validation(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"noise_multiplier": 1.0, "sample_rate": 0.35, "clip_norm": 22.0}
    with pytest.raises(ValueError, match=message):
        DPConfig(**{**base, **kwargs})  # type: ignore[arg-type]


def test_resolve_fills_delta_and_checks_the_federation_size() -> None:
    config = DPConfig(1.0, 0.35, 22.0)
    assert config.delta is None
    assert config.resolve(100).delta == 1e-5  # min(1e-5, 0.01 / N)
    assert config.resolve(10_000).delta == pytest.approx(1e-6)
    assert DPConfig(1.0, 0.35, 22.0, delta=1e-6).resolve(100).delta == 1e-6
    assert DPConfig(1.0, 0.35, 22.0, delta=PAPER_DELTA).resolve(100).delta == 100**-1.1
    with pytest.raises(ValueError, match="N >= 2"):
        DPConfig(1.0, 0.35, 22.0, delta=PAPER_DELTA).resolve(1)
    assert DPConfig(1.0, 0.35, 22.0, delta=1e-3).resolve(1).delta == 1e-3
    with pytest.raises(ValueError, match="round"):
        DPConfig(1.0, 0.1, 22.0, sampling="fixed_size", accountant="rdp").resolve(4)


def test_round_trip_and_tagging() -> None:
    config = DPConfig(2, 0.25, 8, delta=1e-4, accountant="rdp", epsilon_budget=5)
    record = config.to_dict()
    assert record["kind"] == "subsampled_gaussian"
    assert record["noise_multiplier"] == 2.0 and isinstance(record["epsilon_budget"], float)
    assert DPConfig.from_dict(record) == config
    with pytest.raises(ValueError, match="DPConfig"):
        DPConfig.from_dict({"noise_multiplier": 1.0})
    with pytest.raises(ValueError, match="Unknown"):
        DPConfig.from_dict({**record, "noise": 3})


def test_neighbouring_relations_are_documented() -> None:
    assert DPConfig(1.0, 0.35, 22.0).neighbouring_relation == "add/remove-one"
    fixed = DPConfig(1.0, 0.35, 22.0, sampling="fixed_size", accountant="moments")
    assert fixed.neighbouring_relation == "replace-one"
    event = fixed.event(29)
    assert event.sample_size == round(29 * 0.35) and event.sampling == "fixed_size"
    # Replace-one with z / 2 costs far more than Poisson add/remove-one (not a preset).
    assert fixed.epsilon(60, 29) > 5 * DPConfig(1.0, 0.35, 22.0, accountant="moments").epsilon(
        60, 29
    )
    assert fixed.mechanism().sampling == "fixed_size"


# ------------------------------------------------------------------ in the federation config
def test_privacy_is_part_of_the_hashed_configuration() -> None:
    protocol = FTSConfig(n_features=8, n_subregions=2)
    plain = Federation.create("a", search_space=SPACE, n_clients=5, protocol=protocol)
    private = Federation.create(
        "b",
        search_space=SPACE,
        n_clients=5,
        protocol=protocol,
        privacy=DPConfig(1, 0.5, 3.0),
    )
    assert plain.privacy is None and plain.config.privacy is None
    assert private.privacy == DPConfig(1.0, 0.5, 3.0, delta=1e-5)
    assert private.config.privacy == private.privacy.to_dict()
    loaded = Federation.load("b", private.storage)
    assert loaded.privacy == private.privacy and loaded.config_hash == private.config_hash
    # A participant can check the guarantee before joining.
    assert Federation.load("b", private.storage, privacy=DPConfig(1.0, 0.5, 3.0)).privacy
    with pytest.raises(ValueError, match="privacy"):
        Federation.load("b", private.storage, privacy=DPConfig(1.0, 0.25, 3.0))
    with pytest.raises(ValueError, match="privacy"):
        Federation.load("a", plain.storage, privacy=DPConfig(1.0, 0.5, 3.0))
    # An explicit delta equal to the default hashes the same; anything else differs.
    same = Federation.create(
        "b",
        search_space=SPACE,
        n_clients=5,
        protocol=protocol,
        privacy=DPConfig(1.0, 0.5, 3.0, delta=1e-5),
        storage=private.storage,
        load_if_exists=True,
    )
    assert same.config_hash == private.config_hash
    with pytest.raises(ValueError, match="privacy"):
        Federation.create(
            "b",
            search_space=SPACE,
            n_clients=5,
            protocol=protocol,
            privacy=DPConfig(1.0, 0.5, 3.0, epsilon_budget=4.0),
            storage=private.storage,
            load_if_exists=True,
        )
    with pytest.raises(ValueError, match="privacy"):
        Federation.create(
            "b",
            search_space=SPACE,
            n_clients=5,
            protocol=protocol,
            storage=private.storage,
            load_if_exists=True,
        )


def test_privacy_needs_the_weighted_fts_protocol() -> None:
    with pytest.raises(ValueError, match="weighted"):
        Federation.create(
            "f",
            search_space=SPACE,
            n_clients=5,
            protocol=presets.fts(),
            privacy=DPConfig(1.0, 0.5, 3.0),
        )
    with pytest.raises(ValueError, match="DPConfig"):
        Federation.create("f", search_space=SPACE, n_clients=5, privacy={"noise_multiplier": 1.0})
    with pytest.raises(ValueError, match="N >= 2"):
        Federation.create(
            "f",
            search_space=SPACE,
            n_clients=1,
            privacy=DPConfig(1.0, 0.5, 3.0, delta=PAPER_DELTA),
        )


def test_privacy_spent_without_any_round_is_zero() -> None:
    fed = Federation.create("f", search_space=SPACE, n_clients=4, privacy=DPConfig(1.0, 0.5, 3.0))
    assert fed.privacy_spent() == (0.0, pytest.approx(1e-5))
    assert fed.ledger_entries() == [] and fed.budget_exhausted() is None
    plain = Federation.create("g", search_space=SPACE, n_clients=4, storage=fed.storage)
    assert math.isinf(plain.privacy_spent()[0]) and plain.ledger_entries() == []
    with pytest.raises(ValueError, match="no differential privacy"):
        plain.privacy_ledger()


# ------------------------------------------------------------------------ the epsilon curve
@pytest.mark.parametrize("accountant", ["moments", "rdp", "pld"])
def test_curve_matches_fresh_composition(accountant: str) -> None:
    event = SubsampledGaussianEvent(1.0, 0.35)
    curve = EpsilonCurve(event, 29**-1.1, accountant=accountant)
    curve.extend(12)
    assert curve.horizon == 12
    for rounds in (0, 1, 2, 7, 12, 13, 60, 61):
        expected = compute_epsilon(
            noise_multiplier=1.0,
            sample_rate=0.35,
            rounds=rounds,
            delta=29**-1.1,
            accountant=accountant,
        )
        assert curve.epsilon(rounds) == pytest.approx(expected, rel=1e-6, abs=1e-9)
    values = [curve.epsilon(t) for t in range(0, 14)]
    assert values == sorted(values) and values[0] == 0.0


def test_pld_curve_moves_forward_by_one_convolution_per_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The per-round cost of the ledger never re-composes all past rounds."""
    calls: list[tuple[str, int]] = []
    original_self = dp_pld_lib.PrivacyLossDistribution.self_compose
    original_compose = dp_pld_lib.PrivacyLossDistribution.compose

    def self_compose(pld: object, count: int, *args: object, **kwargs: object) -> object:
        calls.append(("self_compose", count))
        return original_self(pld, count, *args, **kwargs)  # type: ignore[arg-type]

    def compose(pld: object, other: object, *args: object, **kwargs: object) -> object:
        calls.append(("compose", 1))
        return original_compose(pld, other, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(dp_pld_lib.PrivacyLossDistribution, "self_compose", self_compose)
    monkeypatch.setattr(dp_pld_lib.PrivacyLossDistribution, "compose", compose)
    curve = EpsilonCurve(SubsampledGaussianEvent(1.0, 0.25), 200**-1.1, accountant="pld")
    for rounds in range(1, 21):  # a ledger asking for the next round, round after round
        curve.epsilon(rounds)
    assert calls == [("compose", 1)] * 19
    calls.clear()
    assert curve.epsilon(20) > curve.epsilon(7) > 0.0  # lookups: nothing composed
    assert calls == []
    curve.epsilon(500)  # a jump (a server restarted late): one self_compose seeds it
    curve.epsilon(501)
    assert calls == [("self_compose", 500), ("compose", 1)]
    calls.clear()
    curve.extend(25)  # precomputation walks forward from the contiguous horizon (20)
    assert calls == [("compose", 1)] * 5 and curve.horizon == 25


@pytest.mark.parametrize("accountant", ["moments", "rdp", "pld"])
def test_curve_max_rounds(accountant: str) -> None:
    curve = EpsilonCurve(SubsampledGaussianEvent(1.0, 0.35), 29**-1.1, accountant=accountant)
    budget = 8.0
    rounds = curve.max_rounds(budget)
    assert curve.epsilon(rounds) <= budget < curve.epsilon(rounds + 1)
    assert curve.max_rounds(1e9, limit=50) == 50
    assert curve.max_rounds(0.0) == 0
    assert curve.max_rounds(curve.epsilon(rounds)) == rounds  # the boundary is inclusive
    with pytest.raises(ValueError, match="budget"):
        curve.max_rounds(-1.0)


def test_dpconfig_max_rounds() -> None:
    assert DPConfig(1.0, 0.35, 22.0).max_rounds(29) is None
    config = DPConfig(
        1.0, 0.35, 22.0, delta=PAPER_DELTA, accountant="moments", epsilon_budget=15.17
    )
    assert config.max_rounds(29) == 60  # the landmine setting spends 15.17 in 60 rounds
