"""What the trust tests (releases, rollback) share: a small federation of enrolled participants,
their uploads, and published rounds."""

from __future__ import annotations

import itertools
import os

import numpy as np
from optuna.distributions import FloatDistribution

from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.store import FederationStore

M = 6
SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
DP = DPConfig(noise_multiplier=1.0, sample_rate=1.0, clip_norm=5.0)
_names = itertools.count()


def federation(storage: object = None, *, privacy: object = DP, n_clients: int = 3) -> Federation:
    """A new federation (weighted FTS, ``M`` features) with participants ``c0``, ``c1``, ..."""
    fed = Federation.create(
        f"trust-{os.getpid()}-{next(_names)}",
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted"),
        privacy=privacy,
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def small_store(prefix: str) -> FederationStore:
    """The store of a new two-participant, one-parameter FTS federation (nobody joined)."""
    fed = Federation.create(
        f"{prefix}-{os.getpid()}-{next(_names)}",
        search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=2,
        protocol=FTSConfig(n_features=4, n_init=1),
        seed=5,
    )
    return fed.store


def upload_all(fed: Federation) -> None:
    """Every participant uploads a vector to the open round."""
    for i in range(fed.n_clients):
        fed.upload(f"c{i}", np.linspace(-1, 1, M) * (i + 1), n_observations=3, iteration=0)


def publish(fed: Federation, rounds: int) -> FederationServer:
    """A new server publishes ``rounds`` rounds, each of everyone's uploads; the server."""
    server = FederationServer(fed)
    for _ in range(rounds):
        upload_all(fed)
        assert server.step() is not None
    return server
