"""Secure aggregation in a federation: the server learns only the sum of the pooled statistics.

In-process: participants and the server share a storage (SQLite, or in-memory), the tests poll
the participants and step the server in turn (no background thread), and dropouts are injected
by no longer polling a participant from a given step on.
"""

from __future__ import annotations

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
import pytest

import optuna_fedbo as fb
from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.fts import secure
from optuna_fedbo.federation.fts.secure import driver_of
from optuna_fedbo.federation.fts.secure import pooled_from_sum
from optuna_fedbo.federation.fts.secure import secure_input
from optuna_fedbo.federation.secagg.relay import Relay

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
M = 6


@pytest.fixture(autouse=True)
def _propagate_optuna_logs():
    optuna.logging.enable_propagation()
    yield
    optuna.logging.disable_propagation()


def _statistics(features: RandomFourierFeatures, x: np.ndarray, y: np.ndarray):
    statistics = SufficientStatistics(features.n_features)
    statistics.add(features(x), y)
    return statistics


def _packed(fed: Federation, seed: int, n: int = 6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 2))
    y = np.sin(3 * x[:, 0]) + x[:, 1] ** 2 + seed + 0.01 * rng.standard_normal(n)
    return pack_blocks([_statistics(f, x, y) for f in fed.pooling_features()])


def _federation(storage=None, n_clients: int = 4, **secagg) -> Federation:
    fed = Federation.create(
        "secure",
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=FTSConfig(n_features=M, n_init=2),
        secure_aggregation=fb.SecureAggregation(**{"step_timeout": 0.0, **secagg}),
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    driver_of(fed.channel).background = False
    return fed


class _Round:
    """Drives one round: participants poll (unless dropped at their step), the server steps."""

    def __init__(self, fed: Federation, server: FederationServer) -> None:
        self.fed, self.server = fed, server
        self.driver = driver_of(fed.channel)
        self.sums: list[np.ndarray] = []

    def upload(self, clients: list[str], n: int = 6) -> dict[str, np.ndarray]:
        inputs = {}
        for c in clients:
            packed = _packed(self.fed, seed=int(c[1:]), n=n)
            self.fed.upload(c, packed, n_observations=n, iteration=0)
            inputs[c] = secure_input(packed, M, self.fed.secure_aggregation.max_observations)
        return inputs

    def run(self, *, drop_after: dict[str, int] | None = None, steps: int = 12):
        """Poll and step until a report; ``drop_after[c] = k``: ``c`` answers only its first
        ``k`` steps (1: keys only, 2: and shares, 3: and its masked input, ...)."""
        drop_after = drop_after or {}
        for _ in range(steps):
            for c, participant in self.driver._participants.items():
                sent = self._sent(c)
                if c not in drop_after or sent < drop_after[c]:
                    participant.poll()
            report = self.server.step()
            if report is not None:
                return report
        return None

    def _sent(self, client: str) -> int:
        entries = Relay(self.fed.store).entries(self.fed.open_round())
        return sum(
            1
            for k in entries
            if k.startswith("secagg:") and k.endswith(f":{client}") and ":msg:" in k
        )


@pytest.fixture
def capture_sum(monkeypatch):
    sums: list[np.ndarray] = []

    def spy(values, n_features, round_index):
        sums.append(np.array(values))
        return pooled_from_sum(values, n_features, round_index)

    monkeypatch.setattr(secure, "pooled_from_sum", spy)
    return sums


def test_a_round_over_sqlite_publishes_the_posterior_of_the_plain_sum(tmp_path, capture_sum):
    fed = _federation(f"sqlite:///{tmp_path / 'f.db'}")
    server = FederationServer(fed)
    driven = _Round(fed, server)
    inputs = driven.upload([f"c{i}" for i in range(4)])
    report = driven.run()
    assert report is not None and report.published and report.n_contributors == 4
    assert report.n_recovered == 0
    plain = sum(inputs.values())
    step = fed.secure_aggregation.step
    (summed,) = capture_sum
    assert np.max(np.abs(summed - plain)) <= 4 * step / 2 + 1e-9
    broadcast = fed.latest_broadcast()
    expected, block = pooled_from_sum(plain, M, 0)
    assert broadcast.round == 0 and broadcast.feature_block == block
    np.testing.assert_allclose(broadcast.vectors, expected, atol=1e-4)
    assert broadcast.n_contributors == 4


def test_read_upload_raises_there_is_no_single_upload() -> None:
    fed = _federation()
    FederationServer(fed)
    _Round(fed, None).upload(["c0"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no single upload to read"):
        fed.read_upload(0, "c0")
