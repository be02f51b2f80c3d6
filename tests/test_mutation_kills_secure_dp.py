"""DP-FTS under secure aggregation (``federation/fts/secure_dp.py``), in process: a participant's
input is its vector clipped to ``S / sqrt(P)`` and weighed by ``phi / phi_max`` (norm at most
``S`` for every participant, the sensitivity the ledger accounts), with the weights of the
federation's own schedule, and a given generator is the noise source (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import math

import numpy as np
from optuna.distributions import FloatDistribution

import optuna_fedbo as fb
from optuna_fedbo.core.weights import subregion_weights
from optuna_fedbo.core.weights import WeightSchedule
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.fts import secure_dp

S = 5.0
WEIGHTS = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])  # P = 2 sub-regions, N = 3, phi_max 0.6


def test_an_input_is_its_clipped_vector_weighed_over_phi_max() -> None:
    omega = np.array([3.0, -4.0, 12.0, 0.0])  # norm 13: clipped to S / sqrt(2)
    clipped = omega / 13.0 * S / math.sqrt(2)
    for index in range(3):
        joint = secure_dp.weighted_input(omega, WEIGHTS, index, S)
        expected = np.concatenate([WEIGHTS[0, index] * clipped, WEIGHTS[1, index] * clipped])
        np.testing.assert_allclose(joint, expected / 0.6, rtol=1e-12)
        assert np.linalg.norm(joint) <= S * (1 + 1e-12)
    # Participant 0 holds phi_max: its input reaches S / sqrt(2) on sub-region 1 alone.
    joint = secure_dp.weighted_input(omega, WEIGHTS, 0, S)
    assert math.isclose(np.linalg.norm(joint[4:]), S / math.sqrt(2), rel_tol=1e-12)
    short = np.array([0.1, 0.0, 0.0, 0.2])  # within the clip: only weighed
    np.testing.assert_allclose(
        secure_dp.weighted_input(short, WEIGHTS, 2, S), np.concatenate([0.5 * short, 0.5 * short])
    )


def _federation(name: str) -> Federation:
    fed = Federation.create(
        name,
        search_space={"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)},
        n_clients=4,
        protocol=FTSConfig(
            n_features=6,
            n_init=2,
            n_subregions=2,
            weight_a=2.0,
            weight_hold_rounds=1,
            weight_decay_rounds=3,
        ),
        privacy=fb.DPConfig(noise_multiplier=1.0, sample_rate=1.0, clip_norm=S, accountant="rdp"),
        secure_aggregation=fb.SecureAggregation(step_timeout=0.0),
    )
    for i in range(4):
        fed.join(f"c{i}")
    return fed


def test_the_round_weights_follow_the_federations_own_schedule() -> None:
    fed = _federation("secure-dp-kills-schedule")
    schedule = WeightSchedule(a=2.0, hold_rounds=1, decay_rounds=3)
    for round_index in (0, 2):
        expected = subregion_weights(
            fed.assignment(), 2, round_index=round_index, schedule=schedule
        )
        default = subregion_weights(fed.assignment(), 2, round_index=round_index)
        np.testing.assert_allclose(secure_dp.round_weights(fed, round_index), expected)
        assert not np.allclose(expected, default)  # the default schedule would differ


def test_a_given_generator_is_the_noise_source_of_a_private_input() -> None:
    fed = _federation("secure-dp-kills-rng")
    omega = np.linspace(-1.0, 1.0, 6)
    first = secure_dp.private_input(fed, "c1", omega, 0, rng=np.random.default_rng(8))
    again = secure_dp.private_input(fed, "c1", omega, 0, rng=np.random.default_rng(8))
    np.testing.assert_array_equal(first, again)
