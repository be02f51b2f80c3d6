"""optuna-fedbo: federated and differentially private Bayesian optimization for Optuna."""

from __future__ import annotations

from optuna_fedbo.federation import delete_federation
from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import list_federations
from optuna_fedbo.federation import presets
from optuna_fedbo.federation import ProtocolConfig
from optuna_fedbo.federation import RoundReport
from optuna_fedbo.privacy import LaplaceMechanism
from optuna_fedbo.privacy import privatize_objective
from optuna_fedbo.samplers import FedPNEPhaseTimeout
from optuna_fedbo.samplers import FedPNESampler
from optuna_fedbo.samplers import FedSampler
from optuna_fedbo.samplers import FedThompsonSampler
from optuna_fedbo.samplers import FedTransferSampler
from optuna_fedbo.samplers import LDPUCBSampler
from optuna_fedbo.samplers import LocalGPSampler
from optuna_fedbo.samplers import RFFThompsonSampler
from optuna_fedbo.samplers import TrialCounts
from optuna_fedbo.simulation import simulate
from optuna_fedbo.simulation import simulate_fedpne

__version__ = "0.1.0"

__all__ = [
    "DPConfig",
    "FTSConfig",
    "FedPNEConfig",
    "FedPNEPhaseTimeout",
    "FedPNESampler",
    "FedSampler",
    "FedThompsonSampler",
    "FedTransferSampler",
    "Federation",
    "LDPUCBSampler",
    "LaplaceMechanism",
    "LocalGPSampler",
    "FederationServer",
    "ProtocolConfig",
    "RFFThompsonSampler",
    "RoundReport",
    "TrialCounts",
    "__version__",
    "delete_federation",
    "list_federations",
    "presets",
    "privatize_objective",
    "simulate",
    "simulate_fedpne",
]
