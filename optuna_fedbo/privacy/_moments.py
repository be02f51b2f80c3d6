"""The moments accountant of the DP-FTS-DE paper as a ``dp_accounting`` accountant.

Kept apart from :mod:`optuna_fedbo.privacy._accounting` because it subclasses a
``dp_accounting`` class, so importing it imports ``dp_accounting`` (slow); it takes its orders
and conversion from :mod:`optuna_fedbo.privacy._renyi`, never from the accounting module (which
imports it lazily).
"""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting import rdp as dp_rdp
import numpy as np

from optuna_fedbo.privacy._renyi import classic_rdp_to_epsilon
from optuna_fedbo.privacy._renyi import MOMENTS_ORDERS


class MomentsAccountant(dp_rdp.RdpAccountant):
    """``dp_accounting`` RDP accountant with the moments accountant's classic conversion.

    Composes exactly like :class:`dp_accounting.rdp.RdpAccountant` at the integer orders
    :data:`MOMENTS_ORDERS`, and converts with ``eps = min_a [rdp(a) + log(1/delta) / (a - 1)]``
    (Abadi et al. 2016; Mironov 2017, Proposition 3) instead of the library's improved bound,
    as the DP-FTS-DE paper did. Being a ``PrivacyAccountant``, it plugs into
    ``dp_accounting.calibrate_dp_mechanism``.

    Args:
        neighboring_relation: The neighbouring relation of the composed events.
    """

    def __init__(
        self,
        neighboring_relation: dp_accounting.NeighboringRelation = (
            dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
        ),
    ) -> None:
        super().__init__(orders=MOMENTS_ORDERS, neighboring_relation=neighboring_relation)

    def get_epsilon_and_optimal_order(self, target_delta: float) -> tuple[float, float]:
        """Classic conversion to ``(epsilon, optimal order)``."""
        return classic_rdp_to_epsilon(self.orders, self.rdp, target_delta)

    def get_epsilon(self, target_delta: float) -> float:
        """Classic conversion to epsilon at ``target_delta``."""
        return classic_rdp_to_epsilon(self.orders, self.rdp, target_delta)[0]

    def get_delta_and_optimal_order(self, target_epsilon: float) -> tuple[float, float]:
        """Inverse classic conversion: ``delta = min_a exp(-(a - 1) (eps - rdp(a)))``."""
        orders, rdp = self.orders, self.rdp
        with np.errstate(over="ignore", invalid="ignore"):
            log_deltas = -(orders - 1.0) * (target_epsilon - rdp)
        log_deltas = np.where(np.isnan(log_deltas), np.inf, log_deltas)
        best = int(np.argmin(log_deltas))
        return min(math.exp(min(float(log_deltas[best]), 0.0)), 1.0), float(orders[best])

    def get_delta(self, target_epsilon: float) -> float:
        """Inverse classic conversion to delta at ``target_epsilon``."""
        return self.get_delta_and_optimal_order(target_epsilon)[0]


__all__ = ["MomentsAccountant"]
