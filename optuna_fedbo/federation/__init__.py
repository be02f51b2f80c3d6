"""The federation protocol over an Optuna storage: configuration, state, server, simulation."""

from __future__ import annotations

from optuna_fedbo.federation import presets
from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.config import FTSConfig
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.federation import FederationStatus
from optuna_fedbo.federation.federation import Participant
from optuna_fedbo.federation.messages import Broadcast
from optuna_fedbo.federation.server import FederationServer
from optuna_fedbo.federation.server import RoundReport
from optuna_fedbo.federation.simulate import simulate
from optuna_fedbo.federation.simulate import SimulationResult
from optuna_fedbo.federation.store import FederationNotFoundError
from optuna_fedbo.federation.store import resolve_storage

__all__ = [
    "Broadcast",
    "FTSConfig",
    "Federation",
    "FederationConfig",
    "FederationNotFoundError",
    "FederationServer",
    "FederationStatus",
    "Participant",
    "ProtocolConfig",
    "RoundReport",
    "SimulationResult",
    "presets",
    "resolve_storage",
    "simulate",
]
