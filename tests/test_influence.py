"""Without differential privacy one participant's weight in a broadcast is bounded from the first
contributor on, a broadcast is never one participant's upload alone, and the original FTS's
relay order is secret to the server (issue 26, item 4)."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
import pytest
from scipy.stats import chi2

from optuna_fedbo.core.influence import capped_by_others
from optuna_fedbo.core.influence import vector_norm_bound
from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.pooling import PoolingChoice
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.simulation import simulate

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
M = 20
TARGET = np.array([[0.1, 0.9]])  # where the attacker wants the broadcast's maximum
_names = itertools.count()


@pytest.fixture(autouse=True)
def _propagate_optuna_logs(propagate):
    """caplog sees optuna-fedbo's records at every level (the ``propagate`` fixture)."""
    yield


def _federation(n_clients: int = 2, **protocol) -> Federation:
    config = FTSConfig(**{"n_features": M, "n_init": 1, "aggregation": "weighted", **protocol})
    fed = Federation.create(
        f"influence-{next(_names)}", search_space=SPACE, n_clients=n_clients, protocol=config
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def _statistics(features, x: np.ndarray, y: np.ndarray) -> SufficientStatistics:
    statistics = SufficientStatistics(features.n_features)
    statistics.add(features(x), y)
    return statistics


def _honest(seed: int, n: int = 15) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).uniform(size=(n, 2))
    return x, -np.sum((x - [0.7, 0.3]) ** 2, axis=1)


def _argmax(features, omega: np.ndarray) -> np.ndarray:
    grid = np.stack(np.meshgrid(*[np.linspace(0, 1, 51)] * 2), -1).reshape(-1, 2)
    return grid[int(np.argmax(features(grid) @ omega))]


# ------------------------------------------------------------------------------ math core
def test_the_norm_bound_is_the_chi_quantile_that_honest_prior_draws_stay_under() -> None:
    assert vector_norm_bound(100) == pytest.approx(np.sqrt(chi2.isf(1e-6, 100)))
    assert 13.0 < vector_norm_bound(100) < 14.0
    draws = np.random.default_rng(0).standard_normal((100_000, 100))
    assert np.sum(np.linalg.norm(draws, axis=1) > vector_norm_bound(100)) <= 1
    with pytest.raises(ValueError, match="n_features >= 1"):
        vector_norm_bound(0)


def test_nobody_is_capped_above_the_largest_other() -> None:
    np.testing.assert_array_equal(capped_by_others([3.0, 1e9, 5.0]), [3.0, 5.0, 5.0])
    np.testing.assert_array_equal(capped_by_others([2.0, 1e9]), [2.0, 2.0])
    np.testing.assert_array_equal(capped_by_others([4.0, 4.0, 1.0]), [4.0, 4.0, 1.0])
    np.testing.assert_array_equal(capped_by_others([7.0]), [7.0])


# ------------------------------------------------------------------------ lone contributor
@pytest.mark.parametrize("aggregation", ["weighted", "pooled", "sample"])
def test_a_lone_contributor_is_never_published(aggregation, caplog) -> None:
    fed = _federation(aggregation=aggregation)
    server = FederationServer(fed)
    if aggregation == "pooled":
        x, y = _honest(0)
        upload = pack_blocks([_statistics(f, x, 1e3 * y) for f in fed.pooling_features()])
    else:
        upload = np.full(M, 1e11)
    fed.upload("c0", upload, n_observations=15, iteration=0)
    with caplog.at_level(logging.WARNING):
        report = server.step(force=True)
    assert not report.published and report.reason == "withheld"
    assert report.contributors == ("c0",) and fed.latest_broadcast() is None
    assert any(
        "is not published: 1 distinct contributor" in r.getMessage() for r in caplog.records
    )
    assert server.step(force=True) is None  # reported once; still nothing published
    assert fed.latest_broadcast() is None and server.open_round == 0
    # A second contributor's upload completes the round: an aggregate of two is published.
    if aggregation == "pooled":
        x, y = _honest(1)
        fed.upload("c1", pack_blocks([_statistics(f, x, y) for f in fed.pooling_features()]),
                   n_observations=15, iteration=0)  # fmt: skip
    else:
        fed.upload("c1", np.ones(M), n_observations=15, iteration=0)
    report = server.step()
    assert report.published and report.n_contributors == 2
    assert fed.latest_broadcast().n_contributors == 2


def test_a_federation_that_could_never_publish_is_refused_and_exposures_warn() -> None:
    with pytest.raises(ValueError, match="n_clients=1 could never publish.*min_contributors=1"):
        _federation(n_clients=1)
    with pytest.raises(ValueError, match="min_contributors must be a positive integer"):
        FTSConfig(min_contributors=0)
    with pytest.warns(UserWarning, match="publishes every participant's vector as it is"):
        _federation(aggregation="sample")
    with pytest.warns(UserWarning, match="min_contributors=1 publishes a round of one"):
        fed = _federation(n_clients=1, min_contributors=1)
    server = FederationServer(fed)
    fed.upload("c0", np.ones(M), n_observations=1, iteration=0)
    assert server.step().published  # explicitly allowed


# -------------------------------------------------------------------------- bounded weight
def test_with_two_contributors_a_huge_vector_is_clipped_to_the_bound() -> None:
    fed = _federation()
    server = FederationServer(fed)
    crafted = fed.features()(TARGET)[0]
    honest = _statistics(fed.features(), *_honest(0)).posterior(fed.fts.noise_variance).mean
    fed.upload("c0", 1.2e11 * crafted, n_observations=15, iteration=0)
    fed.upload("c1", honest, n_observations=15, iteration=0)
    server.step()
    broadcast = fed.latest_broadcast().vectors[0]
    bound = vector_norm_bound(M)
    np.testing.assert_allclose(broadcast, (bound * crafted + honest) / 2, rtol=1e-9)
    assert np.linalg.norm(broadcast) <= (bound + np.linalg.norm(honest)) / 2 + 1e-9


@pytest.mark.parametrize("n_honest", [1, 2])
def test_a_pooled_participant_claiming_everything_weighs_as_one_other(n_honest: int) -> None:
    fed = _federation(n_clients=n_honest + 1, aggregation="pooled")
    server = FederationServer(fed)
    maps = fed.pooling_features()
    # 10,000 observations of +-1000: high at the attacker's point, low everywhere else.
    x = np.concatenate(
        [np.tile(TARGET, (5000, 1)), np.random.default_rng(1).uniform(size=(5000, 2))]
    )
    y = np.concatenate([np.full(5000, 1e3), np.full(5000, -1e3)])
    fed.upload("c0", pack_blocks([_statistics(f, x, y) for f in maps]), n_observations=10_000,
               iteration=0)  # fmt: skip
    for i in range(1, n_honest + 1):
        honest = pack_blocks([_statistics(f, *_honest(i)) for f in maps])
        fed.upload(f"c{i}", honest, n_observations=15, iteration=0)
    server.step()
    broadcast = fed.latest_broadcast()
    omega = broadcast.vectors[0]
    features = maps[broadcast.feature_block]
    assert np.linalg.norm(omega) <= vector_norm_bound(features.n_features) + 1e-9
    # The broadcast follows the honest participants' values, not the attacker's point.
    maximum = _argmax(features, omega)
    assert np.linalg.norm(maximum - TARGET[0]) > 0.5
    assert np.linalg.norm(maximum - [0.7, 0.3]) < 0.4


def test_the_pooled_broadcast_is_clipped_to_the_bound_whatever_the_posterior(monkeypatch) -> None:
    fed = _federation(aggregation="pooled")
    server = FederationServer(fed)
    huge = np.full(M, 1e6)  # a posterior mean the model's prior does not allow
    monkeypatch.setattr(
        "optuna_fedbo.core.pooling.choose_posterior",
        lambda participants, keep=None, **options: (PoolingChoice(0, 1e-2, 0.0), huge),
    )
    for i in range(2):
        upload = pack_blocks([_statistics(f, *_honest(i)) for f in fed.pooling_features()])
        fed.upload(f"c{i}", upload, n_observations=15, iteration=0)
    server.step()
    omega = fed.latest_broadcast().vectors[0]
    assert np.linalg.norm(omega) == pytest.approx(vector_norm_bound(M))
    np.testing.assert_allclose(omega / np.linalg.norm(omega), huge / np.linalg.norm(huge))


# --------------------------------------------------------------------- the sample protocol
def test_the_sample_order_is_secret_to_the_server() -> None:
    with pytest.warns(UserWarning, match="aggregation='sample'"):
        fed = _federation(n_clients=3, aggregation="sample")
    server = FederationServer(fed)
    vectors = [np.full(M, 0.1 * (i + 1)) for i in range(3)]  # within the bound
    predicted = 0
    for round_index in range(20):
        for i, vector in enumerate(vectors):
            fed.upload(f"c{i}", vector, n_observations=2, iteration=round_index)
        report = server.step()
        relayed = fed.latest_broadcast().vectors
        np.testing.assert_array_equal(np.sort(relayed[:, 0]), [v[0] for v in vectors])
        # What the public seed's permutation of the receipts' order says the order is.
        order = np.random.default_rng([fed.seed, round_index]).permutation(3)
        public = [vectors[int(report.contributors[j][1:])][0] for j in order]
        predicted += list(relayed[:, 0]) == public
    # By chance one round in six; derived from the public seed, all 20 (chance: 6^-20).
    assert predicted < 20


def test_a_research_simulation_repeats_the_sample_order_only_with_its_seed() -> None:
    def objective(trial: optuna.Trial) -> float:
        return -((trial.suggest_float("x", 0, 1) - 0.3) ** 2) - trial.suggest_float("y", 0, 1)

    def run(seed: int | None) -> list[float]:
        with pytest.warns(UserWarning, match="aggregation='sample'"):
            result = simulate(
                [objective] * 3,
                search_space=SPACE,
                n_rounds=3,
                protocol=FTSConfig(n_features=M, n_init=2, aggregation="sample"),
                seed=0,
                progress=False,
                insecure_noise_seed=seed,
            )
        return [t.value for study in result.studies for t in study.trials]

    assert run(5) == run(5)
