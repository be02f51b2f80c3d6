"""Fed-PNE and DP-Fed-PNE math core (Li et al., "Federated X-Armed Bandit").

numpy/scipy only: no Optuna, no storage. Everything lives on the unit cube ``[0, 1]^D``.

* :mod:`.partition` -- the k-ary hierarchical partition, nodes, cells, representative points.
* :mod:`.schedule` -- ``tau_h``, pulls per client, confidence widths, the expansion loop.
* :mod:`.params` -- :class:`FedPNEParams` (the paper's experimental defaults, the theory's
  constants, and :meth:`FedPNEParams.tuning` for tuning budgets).
* :mod:`.elimination` -- global means and the elimination rule of Eqn. (1).
* :mod:`.protocol` -- :class:`FedPNEServerState`, the server's phase state machine.
* :mod:`.client` -- the client side: pull plan and local node means.
* :mod:`.privacy` -- DP-Fed-PNE noise calibration and its federated DP guarantee.
* :mod:`.simulate` -- a lock-step simulator; :mod:`.synthetic` -- Garland, DoubleSine and
  Bumps2D.
"""

from __future__ import annotations

from optuna_fedbo.core.fedpne.client import local_node_means
from optuna_fedbo.core.fedpne.client import pull_plan
from optuna_fedbo.core.fedpne.elimination import eliminate
from optuna_fedbo.core.fedpne.elimination import Elimination
from optuna_fedbo.core.fedpne.elimination import global_means
from optuna_fedbo.core.fedpne.params import FedPNEParams
from optuna_fedbo.core.fedpne.partition import Node
from optuna_fedbo.core.fedpne.partition import Partition
from optuna_fedbo.core.fedpne.privacy import federated_dp_guarantee
from optuna_fedbo.core.fedpne.privacy import FederatedDPGuarantee
from optuna_fedbo.core.fedpne.privacy import gaussian_mechanism_epsilon
from optuna_fedbo.core.fedpne.privacy import gaussian_sigma
from optuna_fedbo.core.fedpne.privacy import privatize_rewards
from optuna_fedbo.core.fedpne.privacy import RewardPrivacy
from optuna_fedbo.core.fedpne.protocol import FedPNEServerState
from optuna_fedbo.core.fedpne.protocol import Phase
from optuna_fedbo.core.fedpne.protocol import PhaseReport
from optuna_fedbo.core.fedpne.schedule import confidence_width
from optuna_fedbo.core.fedpne.schedule import pulls_per_client
from optuna_fedbo.core.fedpne.schedule import threshold
from optuna_fedbo.core.fedpne.simulate import simulate_fedpne
from optuna_fedbo.core.fedpne.simulate import SimulationResult

__all__ = [
    "Elimination",
    "FedPNEParams",
    "FedPNEServerState",
    "FederatedDPGuarantee",
    "Node",
    "Partition",
    "Phase",
    "PhaseReport",
    "RewardPrivacy",
    "SimulationResult",
    "confidence_width",
    "eliminate",
    "federated_dp_guarantee",
    "gaussian_mechanism_epsilon",
    "gaussian_sigma",
    "global_means",
    "local_node_means",
    "privatize_rewards",
    "pull_plan",
    "pulls_per_client",
    "simulate_fedpne",
    "threshold",
]
