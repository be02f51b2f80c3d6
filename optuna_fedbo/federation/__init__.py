"""The federation protocol over an Optuna storage: configuration, state, server, simulation."""

from __future__ import annotations

from optuna_fedbo.federation import presets
from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.config import FTSConfig
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.federation import FederationStatus
from optuna_fedbo.federation.federation import Participant
from optuna_fedbo.federation.fedpne import FedPNEConfig
from optuna_fedbo.federation.fedpne_channel import FedPNEStatus
from optuna_fedbo.federation.fedpne_server import FedPNEServer
from optuna_fedbo.federation.fedpne_server import PhaseRoundReport
from optuna_fedbo.federation.fedpne_simulate import FedPNESimulationResult
from optuna_fedbo.federation.fedpne_simulate import simulate_fedpne
from optuna_fedbo.federation.ledger import LedgerEntry
from optuna_fedbo.federation.ledger import PrivacyLedger
from optuna_fedbo.federation.messages import Broadcast
from optuna_fedbo.federation.server import FederationServer
from optuna_fedbo.federation.server import RoundReport
from optuna_fedbo.federation.simulate import simulate
from optuna_fedbo.federation.simulate import SimulationResult
from optuna_fedbo.federation.store import FederationNotFoundError
from optuna_fedbo.federation.store import resolve_storage
from optuna_fedbo.federation.store import ServerSupersededError

__all__ = [
    "Broadcast",
    "DPConfig",
    "FTSConfig",
    "FedPNEConfig",
    "FedPNEServer",
    "FedPNESimulationResult",
    "FedPNEStatus",
    "Federation",
    "FederationConfig",
    "FederationNotFoundError",
    "FederationServer",
    "FederationStatus",
    "LedgerEntry",
    "Participant",
    "PhaseRoundReport",
    "PrivacyLedger",
    "ProtocolConfig",
    "RoundReport",
    "ServerSupersededError",
    "SimulationResult",
    "presets",
    "resolve_storage",
    "simulate",
    "simulate_fedpne",
]
