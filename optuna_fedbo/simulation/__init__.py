"""One-process simulations of whole federations (entry points above the samplers)."""

from __future__ import annotations

from optuna_fedbo.simulation.fedpne import FedPNESimulationResult
from optuna_fedbo.simulation.fedpne import simulate_fedpne
from optuna_fedbo.simulation.fts import simulate
from optuna_fedbo.simulation.fts import SimulationResult

__all__ = ["FedPNESimulationResult", "SimulationResult", "simulate", "simulate_fedpne"]
