"""Epsilon after ``T`` releases of the distributed Skellam mechanism, as a ledger asks for it.

Every round of a federation under secure aggregation with distributed DP releases the same
event: a sum carrying ``Sk(V)`` noise or more on every coordinate, with fixed sensitivities
``D1`` and ``D2`` and **no subsampling** (:mod:`optuna_fedbo.core.secagg.distributed_dp`). Renyi
DP composes by addition, so ``eps(T)`` is ``dp_accounting``'s conversion of ``T`` times the
one-round bound (:func:`~optuna_fedbo.privacy._skellam.skellam_epsilon`), at the same cost for
every ``T``. :class:`SkellamCurve` is an :class:`~optuna_fedbo.privacy._curve.EpsilonCurve`
(cache, ``extend``, ``max_rounds``) with that accountant in place of the subsampled Gaussian's.
"""

from __future__ import annotations

import threading
from typing import Final

from optuna_fedbo.privacy._checks import check_delta
from optuna_fedbo.privacy._curve import EpsilonCurve
from optuna_fedbo.privacy._skellam import skellam_epsilon

#: The accountant's name in ledger entries: the Skellam RDP bound, no subsampling.
SKELLAM_ACCOUNTANT: Final[str] = "skellam-rdp"


class _SkellamAccountant:
    """What :class:`EpsilonCurve` asks of its accountant, for the Skellam bound."""

    accountant = SKELLAM_ACCOUNTANT
    per_round_pld = None  # Renyi DP only: no privacy loss distribution to compose

    def __init__(self, variance: float, l1: float, l2: float, delta: float) -> None:
        self.variance, self.l1, self.l2, self.delta = float(variance), float(l1), float(l2), delta

    def epsilon(self, rounds: int) -> float:
        if rounds == 0:
            return 0.0
        return skellam_epsilon(
            variance=self.variance, l1=self.l1, l2=self.l2, rounds=rounds, delta=self.delta
        )


class SkellamCurve(EpsilonCurve):
    """``eps(T)`` of ``T`` Skellam releases (no subsampling), cached. Thread-safe.

    Args:
        variance: ``V``: the per-coordinate noise variance of each released sum (at least).
        l1: ``D1``: the L1 sensitivity of one participant's integer input.
        l2: ``D2``: its L2 sensitivity.
        delta: Target delta in ``(0, 1)``.
    """

    def __init__(self, *, variance: float, l1: float, l2: float, delta: float) -> None:
        self._accountant = _SkellamAccountant(variance, l1, l2, check_delta(delta))  # type: ignore[assignment]
        self._one = None
        self._values: dict[int, float] = {0: 0.0}
        self._horizon = 0
        self._frontier = None
        self._ahead = None
        self._lock = threading.RLock()

    @property
    def event(self) -> None:  # type: ignore[override]
        """No ``dp_accounting`` event describes the Skellam mechanism (``None``)."""
        return None

    def __repr__(self) -> str:
        accountant = self._accountant
        return (
            f"SkellamCurve(variance={accountant.variance:g}, l1={accountant.l1:g}, "  # type: ignore[attr-defined]
            f"l2={accountant.l2:g}, delta={self.delta}, horizon={self.horizon})"  # type: ignore[attr-defined]
        )


__all__ = ["SKELLAM_ACCOUNTANT", "SkellamCurve"]
