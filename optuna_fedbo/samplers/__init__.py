"""Optuna samplers of optuna-fedbo: thin adapters over :mod:`optuna_fedbo.core`."""

from __future__ import annotations

from optuna_fedbo.samplers._fed import FedSampler
from optuna_fedbo.samplers._fed import TrialCounts
from optuna_fedbo.samplers._fed_pne import FedPNEPhaseTimeout
from optuna_fedbo.samplers._fed_pne import FedPNESampler
from optuna_fedbo.samplers._fed_thompson import FedThompsonSampler
from optuna_fedbo.samplers._fed_transfer import FedTransferSampler
from optuna_fedbo.samplers._ldp_ucb import LDPUCBSampler
from optuna_fedbo.samplers._local_gp import LocalGPSampler
from optuna_fedbo.samplers._rff_thompson import RFFThompsonSampler

__all__ = [
    "FedPNEPhaseTimeout",
    "FedPNESampler",
    "FedSampler",
    "FedThompsonSampler",
    "FedTransferSampler",
    "LDPUCBSampler",
    "LocalGPSampler",
    "RFFThompsonSampler",
    "TrialCounts",
]
