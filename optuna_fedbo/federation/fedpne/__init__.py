"""Fed-PNE and DP-Fed-PNE (Li et al., "Federated X-Armed Bandit") as a federation protocol.

Its configuration (:class:`FedPNEConfig`), messages (node means up, phases down), the
participants' channel (:class:`FedPNEChannel`) and the server round (:class:`FedPNEServer`, one
phase per round). The simulation entry point lives above the samplers, in
:mod:`optuna_fedbo.simulation.fedpne`.
"""

from __future__ import annotations

from optuna_fedbo.federation.fedpne.channel import FedPNEChannel
from optuna_fedbo.federation.fedpne.channel import FedPNEStatus
from optuna_fedbo.federation.fedpne.config import FedPNEConfig
from optuna_fedbo.federation.fedpne.server import FedPNEServer
from optuna_fedbo.federation.fedpne.server import PhaseRoundReport
from optuna_fedbo.federation.protocol import Protocol
from optuna_fedbo.federation.protocol import register_protocol

register_protocol(
    Protocol(
        kind=FedPNEConfig.kind,
        config=FedPNEConfig,
        server=FedPNEServer,
        channel=FedPNEChannel,
    )
)

__all__ = ["FedPNEChannel", "FedPNEConfig", "FedPNEServer", "FedPNEStatus", "PhaseRoundReport"]
