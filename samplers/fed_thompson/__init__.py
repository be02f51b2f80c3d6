"""OptunaHub package: federated Thompson sampling (FTS, FTS-DE) over an Optuna storage."""

from __future__ import annotations

from optuna_fedbo import FedSampler
from optuna_fedbo import FedThompsonSampler
from optuna_fedbo import FedTransferSampler
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import presets
from optuna_fedbo.federation import simulate

__all__ = [
    "FTSConfig",
    "FedThompsonSampler",
    "FedTransferSampler",
    "FedSampler",
    "Federation",
    "FederationServer",
    "presets",
    "simulate",
]
