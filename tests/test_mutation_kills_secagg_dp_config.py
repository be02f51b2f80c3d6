"""DP under secure aggregation as a federation stores it (``federation/secagg/distributed_dp.py``),
in process: what creation refuses, the mechanism and epsilon every party derives from the stored
record, and which record loads as which configuration (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from optuna_fedbo.core.secagg.distributed_dp import DistributedSkellam
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.secagg.distributed_dp import distributed_privacy
from optuna_fedbo.federation.secagg.distributed_dp import DistributedDPConfig
from optuna_fedbo.federation.secagg.distributed_dp import privacy_from_dict
from optuna_fedbo.privacy._skellam import skellam_epsilon

FIELDS = {
    "noise_multiplier": 2.0,
    "sample_rate": 1.0,
    "clip_norm": 1.5,
    "delta": 1e-5,
    "epsilon_budget": 8.0,
    "n_participants": 5,
    "threshold": 3,
    "dimension": 12,
    "step": 0.01,
}


def _config(**changes) -> DistributedDPConfig:
    return DistributedDPConfig(**{**FIELDS, **changes})


def test_a_valid_configuration_is_normalised_to_floats_and_says_what_it_is() -> None:
    config = _config(sample_rate=1, delta="1e-5", epsilon_budget=8, noise_multiplier=2, step=1)
    assert config.sample_rate == 1.0 and isinstance(config.sample_rate, float)
    assert config.delta == 1e-5 and isinstance(config.delta, float)
    assert config.epsilon_budget == 8.0 and isinstance(config.epsilon_budget, float)
    assert config.noise_multiplier == 2.0 and isinstance(config.noise_multiplier, float)
    assert config.step == 1.0 and isinstance(config.step, float)
    assert _config(epsilon_budget=None).epsilon_budget is None  # no budget is allowed
    assert (config.accountant, config.sampling, config.kind) == (
        "skellam-rdp",
        "none",
        "distributed_skellam",
    )
    assert config.neighbouring_relation == "zero-out"
    smallest = _config(n_participants=1, threshold=1, dimension=1)  # 1 is a positive integer
    assert (smallest.n_participants, smallest.threshold, smallest.dimension) == (1, 1, 1)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sample_rate": 0.5}, "sample_rate 1.0"),
        ({"sample_rate": 2.0}, "sample_rate 1.0"),
        ({"sample_rate": "all"}, "sample_rate must be a number, got 'all'"),
        ({"delta": None}, "delta must be a number, got None"),
        ({"accountant": "rdp"}, "accountant 'skellam-rdp'"),
        ({"sampling": "poisson"}, "sampling 'none'"),
        ({"delta": 0.0}, "delta must lie in"),
        ({"delta": 1.0}, "delta must lie in"),
        ({"noise_multiplier": 0.0}, "noise_multiplier must be positive"),
        ({"clip_norm": math.inf}, "clip_norm must be positive"),
        ({"step": -1.0}, "step must be positive"),
        ({"epsilon_budget": 0.0}, "epsilon_budget must be positive"),
        ({"n_participants": 0}, "n_participants must be a positive integer"),
        ({"threshold": True}, "threshold must be a positive integer"),
        ({"dimension": 12.0}, "dimension must be a positive integer"),
        ({"threshold": 6}, "threshold must be in"),
    ],
)
def test_a_configuration_the_mechanism_cannot_honour_is_refused(changes, message) -> None:
    with pytest.raises(ValueError, match=message):
        _config(**changes)


def test_the_mechanism_and_the_curve_are_the_stored_parameters() -> None:
    config = _config()
    mechanism = config.mechanism()
    assert mechanism == DistributedSkellam(
        n_participants=5, threshold=3, clip_norm=1.5, step=0.01, dimension=12, noise_multiplier=2.0
    )
    curve = config.curve(5)
    for rounds in (1, 3):
        assert curve.epsilon(rounds) == mechanism.epsilon(rounds=rounds, delta=1e-5)
    assert curve.delta == 1e-5
    assert config.resolve(5) is config
    with pytest.raises(ValueError, match="for N = 5 participants, not 4"):
        config.curve(4)
    with pytest.raises(ValueError, match="no dp_accounting event"):
        config.event(5)


def _fts(n_subregions: int = 2, n_features: int = 6) -> SimpleNamespace:
    return SimpleNamespace(n_subregions=n_subregions, n_features=n_features)


def _dp(**changes) -> dict:
    values = {"noise_multiplier": 2.0, "sample_rate": 1.0, "clip_norm": 1.5, "delta": 1e-5}
    return DPConfig(**{**values, "accountant": "rdp", **changes}).to_dict()


def test_creation_stores_the_mechanism_of_n_t_the_dimension_and_the_step() -> None:
    stored = distributed_privacy(
        _dp(epsilon_budget=8.0), _fts(), {"threshold": 3, "step": 0.01}, n_clients=5
    )
    assert stored == _config().to_dict()
    loaded = privacy_from_dict(stored)
    assert isinstance(loaded, DistributedDPConfig) and loaded == _config()
    plain = privacy_from_dict(_dp())
    assert type(plain) is DPConfig and plain.accountant == "rdp"
    # Its epsilon: the Skellam bound of V = (z D2)^2 with D2 = S / step + sqrt(P M) / 2.
    d2 = 1.5 / 0.01 + math.sqrt(12) / 2
    expected = skellam_epsilon(
        variance=(2.0 * d2) ** 2, l1=math.sqrt(12) * d2, l2=d2, rounds=2, delta=1e-5
    )
    assert loaded.curve(5).epsilon(2) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sample_rate": 0.5}, "use sample_rate=1.0"),
        ({"accountant": "pld"}, "use DPConfig"),
        ({"accountant": "moments"}, "use DPConfig"),
        ({"sampling": "fixed_size"}, "use DPConfig"),
    ],
)
def test_creation_refuses_subsampling_or_another_accountant(changes, message) -> None:
    with pytest.raises(ValueError, match=message):
        distributed_privacy(_dp(**changes), _fts(), {"threshold": 3, "step": 0.01}, n_clients=5)


def test_a_step_that_more_than_doubles_the_sensitivity_is_refused() -> None:
    # D2 = S / step + sqrt(d) / 2 <= 2 S / step  <=>  step <= 2 S / sqrt(d) = 1.5 here (d = 4).
    secure = {"threshold": 3, "step": 1.5}
    stored = distributed_privacy(_dp(), _fts(2, 2), secure, n_clients=5)  # exactly double
    assert stored["step"] == 1.5 and stored["dimension"] == 4
    for step in (1.5 * (1 + 1e-9), 2.0):
        with pytest.raises(ValueError, match="too coarse for clip_norm"):
            distributed_privacy(_dp(), _fts(2, 2), {**secure, "step": step}, n_clients=5)


def test_a_mechanism_whose_summed_noise_could_wrap_the_ring_is_refused() -> None:
    with pytest.raises(ValueError, match="would wrap the ring"):
        distributed_privacy(
            _dp(noise_multiplier=1e6, clip_norm=1e3),
            _fts(),
            {"threshold": 3, "step": 1e-10},
            n_clients=5,
        )
