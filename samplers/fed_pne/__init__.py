"""OptunaHub package: Fed-PNE and DP-Fed-PNE (federated X-armed bandit) over an Optuna storage."""

from __future__ import annotations

from optuna_fedbo import FedPNEPhaseTimeout
from optuna_fedbo import FedPNESampler
from optuna_fedbo import FedSampler
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import simulate_fedpne

__all__ = [
    "FedPNEConfig",
    "FedPNEPhaseTimeout",
    "FedPNESampler",
    "FedSampler",
    "Federation",
    "FederationServer",
    "simulate_fedpne",
]
