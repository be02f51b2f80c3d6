"""The federation over an Optuna storage: the machinery every protocol shares (configuration,
store, keys and sealing, ledger, uploads, polling, server, CLI) and one package per protocol
(:mod:`.fts`, :mod:`.fedpne`), registered in :mod:`.protocol` when imported here (Python
imports this package before any of its modules, so every built-in protocol is registered
whenever the registry is used).

The simulation drivers (``simulate``, ``simulate_fedpne``) build participants' samplers, so they
live above the samplers in :mod:`optuna_fedbo.simulation`; they are re-exported here lazily.
"""

from __future__ import annotations

from typing import Any

from optuna_fedbo.federation._damage import FederationDamagedError
from optuna_fedbo.federation._damage import FederationNotFoundError
from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fedpne import FedPNEConfig
from optuna_fedbo.federation.fedpne import FedPNEServer
from optuna_fedbo.federation.fedpne import FedPNEStatus
from optuna_fedbo.federation.fedpne import PhaseRoundReport
from optuna_fedbo.federation.fts import Broadcast
from optuna_fedbo.federation.fts import FTSConfig
from optuna_fedbo.federation.fts import FTSServer
from optuna_fedbo.federation.fts import presets
from optuna_fedbo.federation.key_folder import delete_federation
from optuna_fedbo.federation.key_folder import list_federations
from optuna_fedbo.federation.keys import import_credential
from optuna_fedbo.federation.keys import KeyFileError
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.lease import ParticipantBusyError
from optuna_fedbo.federation.lease import ParticipantState
from optuna_fedbo.federation.ledger import LedgerEntry
from optuna_fedbo.federation.ledger import LedgerIntegrityError
from optuna_fedbo.federation.ledger import PrivacyLedger
from optuna_fedbo.federation.lifecycle import FederationSummary
from optuna_fedbo.federation.lifecycle import Lifecycle
from optuna_fedbo.federation.membership import Participant
from optuna_fedbo.federation.preset import Preset
from optuna_fedbo.federation.protocol import get_protocol
from optuna_fedbo.federation.protocol import Protocol
from optuna_fedbo.federation.protocol import register_protocol
from optuna_fedbo.federation.server import FederationServer
from optuna_fedbo.federation.server import RoundReport
from optuna_fedbo.federation.status import FederationStatus
from optuna_fedbo.federation.storages import resolve_storage
from optuna_fedbo.federation.store import ServerSupersededError
from optuna_fedbo.federation.trust import UntrustedRecordError
from optuna_fedbo.federation.watermark import LedgerRollbackError

#: Names re-exported from the simulation entry points, imported on first access.
_LAZY = {
    "simulate": "optuna_fedbo.simulation.fts",
    "SimulationResult": "optuna_fedbo.simulation.fts",
    "simulate_fedpne": "optuna_fedbo.simulation.fedpne",
    "FedPNESimulationResult": "optuna_fedbo.simulation.fedpne",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Broadcast",
    "DPConfig",
    "FTSConfig",
    "FTSServer",
    "FedPNEConfig",
    "FedPNEServer",
    "FedPNESimulationResult",
    "FedPNEStatus",
    "Federation",
    "FederationConfig",
    "FederationDamagedError",
    "FederationNotFoundError",
    "FederationServer",
    "FederationStatus",
    "FederationSummary",
    "KeyFileError",
    "LedgerEntry",
    "LedgerIntegrityError",
    "LedgerRollbackError",
    "Lifecycle",
    "Participant",
    "ParticipantBusyError",
    "ParticipantKey",
    "ParticipantState",
    "PhaseRoundReport",
    "Preset",
    "PrivacyLedger",
    "Protocol",
    "ProtocolConfig",
    "RoundReport",
    "ServerSupersededError",
    "SimulationResult",
    "UntrustedRecordError",
    "delete_federation",
    "get_protocol",
    "import_credential",
    "list_federations",
    "presets",
    "register_protocol",
    "resolve_storage",
    "simulate",
    "simulate_fedpne",
]
