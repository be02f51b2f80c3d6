"""Differential privacy: DP-FTS-DE's subsampled Gaussian mechanism and its accounting; LDP-BO's
Laplace mechanism.

Noise and subsampling randomness come from :func:`secure_rng` (OS entropy) unless a test injects
a generator; accounting goes through ``dp_accounting`` only.
"""

from __future__ import annotations

from optuna_fedbo.privacy._accounting import AccountantKind
from optuna_fedbo.privacy._accounting import ACCOUNTANTS
from optuna_fedbo.privacy._accounting import calibrate_noise_multiplier
from optuna_fedbo.privacy._accounting import compute_epsilon
from optuna_fedbo.privacy._accounting import default_delta
from optuna_fedbo.privacy._accounting import make_dp_accountant
from optuna_fedbo.privacy._accounting import PLD_VALUE_DISCRETIZATION_INTERVAL
from optuna_fedbo.privacy._accounting import PrivacyAccountant
from optuna_fedbo.privacy._accounting import SamplingKind
from optuna_fedbo.privacy._accounting import SAMPLINGS
from optuna_fedbo.privacy._accounting import SubsampledGaussianEvent
from optuna_fedbo.privacy._curve import EpsilonCurve
from optuna_fedbo.privacy._gaussian import aggregate
from optuna_fedbo.privacy._gaussian import AggregationResult
from optuna_fedbo.privacy._gaussian import clip_to_norm
from optuna_fedbo.privacy._gaussian import subsampled_gaussian_aggregate
from optuna_fedbo.privacy._gaussian import SubsampledGaussianMechanism
from optuna_fedbo.privacy._laplace import LaplaceMechanism
from optuna_fedbo.privacy._laplace import privatize_objective
from optuna_fedbo.privacy._renyi import classic_rdp_to_epsilon
from optuna_fedbo.privacy._renyi import MOMENTS_ORDERS
from optuna_fedbo.privacy._renyi import RDP_ORDERS
from optuna_fedbo.privacy._rng import secure_rng


def __getattr__(name: str) -> object:
    # Subclasses a dp_accounting class, so it is imported on first use (dp_accounting is slow).
    if name == "MomentsAccountant":
        from optuna_fedbo.privacy._moments import MomentsAccountant

        return MomentsAccountant
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACCOUNTANTS",
    "AccountantKind",
    "AggregationResult",
    "EpsilonCurve",
    "LaplaceMechanism",
    "MOMENTS_ORDERS",
    "MomentsAccountant",
    "PLD_VALUE_DISCRETIZATION_INTERVAL",
    "PrivacyAccountant",
    "RDP_ORDERS",
    "SAMPLINGS",
    "SamplingKind",
    "SubsampledGaussianEvent",
    "SubsampledGaussianMechanism",
    "aggregate",
    "calibrate_noise_multiplier",
    "classic_rdp_to_epsilon",
    "clip_to_norm",
    "compute_epsilon",
    "default_delta",
    "make_dp_accountant",
    "privatize_objective",
    "secure_rng",
    "subsampled_gaussian_aggregate",
]
