"""Epsilon after every number of rounds, computed once: what a privacy ledger asks each round.

A federation with fixed ``(z, q, delta)`` releases the same subsampled Gaussian event every
round, so its spend after ``T`` rounds is a function ``eps(T)`` of ``T`` alone. A ledger needs
``eps(T + 1)`` once per round (to check the budget before a release, and to record it);
:class:`EpsilonCurve` answers from a table that it fills at constant or low cost:

- Renyi accountants (``"moments"``, ``"rdp"``): ``eps(T)`` is the conversion of ``T`` times the
  per-round Renyi DP, which :class:`PrivacyAccountant` computes once; each new ``T`` costs the
  same at round 1 and round 100,000.
- ``"pld"``: ``eps(T)`` needs the ``T``-fold composition of the one-round privacy loss
  distribution, whose support grows with ``T``, so no method evaluates it at constant cost. The
  curve keeps the composed distribution of its furthest round and moves it forward one round at
  a time (one convolution with the one-round distribution, cheaper than a fresh
  ``self_compose(T)``); a jump ahead (e.g. a server restarted at round 500) is seeded by one
  ``self_compose``. :meth:`EpsilonCurve.extend` precomputes every ``T`` up to a horizon, after
  which ``eps(T)`` is a table lookup; a ledger with a budget precomputes up to the budget's
  horizon when its server starts, so that each round costs a lookup.

Every value is the same number as ``compute_epsilon`` for that ``T`` (composition is exact up to
floating point; the PLD tail truncation is the library's default in both paths).
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Final
from typing import TYPE_CHECKING

from optuna_fedbo.privacy._accounting import AccountantKind
from optuna_fedbo.privacy._accounting import PrivacyAccountant
from optuna_fedbo.privacy._accounting import SubsampledGaussianEvent
from optuna_fedbo.privacy._checks import check_budget
from optuna_fedbo.privacy._checks import check_delta
from optuna_fedbo.privacy._checks import check_rounds

if TYPE_CHECKING:
    from dp_accounting.pld import privacy_loss_distribution as dp_pld_lib

#: Default largest number of rounds :meth:`EpsilonCurve.max_rounds` looks at.
MAX_ROUNDS_LIMIT: Final[int] = 100_000


class EpsilonCurve:
    """``eps(T)`` for ``T = 0, 1, 2, ...`` releases of one event, cached. Thread-safe.

    Args:
        event: The per-round event (the same every round).
        delta: Target delta in ``(0, 1)``.
        accountant: ``"moments"``, ``"rdp"`` or ``"pld"``.
    """

    def __init__(
        self,
        event: SubsampledGaussianEvent,
        delta: float,
        *,
        accountant: AccountantKind = "pld",
    ) -> None:
        self._accountant = PrivacyAccountant.from_event(
            event, check_delta(delta), accountant=accountant
        )
        self._one: dp_pld_lib.PrivacyLossDistribution | None = self._accountant.per_round_pld
        self._values: dict[int, float] = {0: 0.0}
        self._horizon = 0  # every T <= horizon is in _values
        # PLD only: the composed distribution at the horizon (None: nothing composed yet), and
        # the one at the furthest round reached by a jump past the horizon, if any.
        self._frontier: dp_pld_lib.PrivacyLossDistribution | None = None
        self._ahead: tuple[int, dp_pld_lib.PrivacyLossDistribution] | None = None
        self._lock = threading.RLock()

    @property
    def event(self) -> SubsampledGaussianEvent:
        """The per-round event."""
        return self._accountant.event

    @property
    def delta(self) -> float:
        """The target delta."""
        return self._accountant.delta

    @property
    def accountant(self) -> AccountantKind:
        """The accountant kind."""
        return self._accountant.accountant

    @property
    def horizon(self) -> int:
        """Largest ``T`` such that every ``eps(0..T)`` is already in the table."""
        with self._lock:
            return self._horizon

    def epsilon(self, rounds: int) -> float:
        """Epsilon after ``rounds`` releases (``0.0`` for none)."""
        rounds = check_rounds(rounds)
        with self._lock:
            value = self._values.get(rounds)
            if value is None:
                value = self._compute(rounds)
            return value

    def extend(self, rounds: int) -> None:
        """Precompute ``eps(T)`` for every ``T <= rounds`` (afterwards each is a lookup)."""
        rounds = check_rounds(rounds)
        with self._lock:
            if rounds <= self._horizon:
                return
            one = self._one
            if one is None:
                for count in range(self._horizon + 1, rounds + 1):
                    if count not in self._values:
                        self._compute(count)
                return
            # Walk forward from the horizon, one convolution per round.
            running = self._frontier
            if self._horizon > 0 and running is None:
                running = self._seed(self._horizon)
            for count in range(self._horizon + 1, rounds + 1):
                running = one if running is None else running.compose(one)
                self._values[count] = float(running.get_epsilon_for_delta(self.delta))
            self._horizon, self._frontier = rounds, running
            self._skip_known()

    def max_rounds(self, budget: float, *, limit: int = MAX_ROUNDS_LIMIT) -> int:
        """The largest ``T <= limit`` with ``eps(T) <= budget``.

        ``eps`` is non-decreasing in ``T``: a doubling search then a bisection take
        ``O(log T)`` evaluations (each cached).
        """
        budget = check_budget(budget)
        limit = check_rounds(limit)
        low, high = 0, 1  # eps(low) <= budget
        while high <= limit and self.epsilon(high) <= budget:
            low, high = high, 2 * high
        if high > limit:
            if low == limit or self.epsilon(limit) <= budget:
                return limit
            high = limit  # eps(limit) > budget
        while high - low > 1:  # eps(low) <= budget < eps(high)
            middle = (low + high) // 2
            if self.epsilon(middle) <= budget:
                low = middle
            else:
                high = middle
        return low

    # ------------------------------------------------------------------------ internals
    def _compute(self, rounds: int) -> float:
        if self._one is None:
            value = self._accountant.epsilon(rounds)
        else:
            value = self._pld_epsilon(rounds)
        if not (value >= 0.0 or math.isinf(value)):
            raise RuntimeError(f"dp_accounting returned epsilon {value!r} after {rounds} rounds.")
        self._values[rounds] = value
        if rounds == self._horizon + 1:
            self._horizon = rounds
            self._skip_known()
        return value

    def _skip_known(self) -> None:
        """Move the horizon over values already known (from jumps ahead)."""
        while self._horizon + 1 in self._values:
            self._horizon += 1
            self._frontier = None  # not the distribution at the new horizon: re-seed if needed

    def _pld_epsilon(self, rounds: int) -> float:
        one = self._one
        assert one is not None
        if rounds == self._horizon + 1 and (self._horizon == 0 or self._frontier is not None):
            # The common case: the round after the horizon, one convolution.
            composed = one if self._frontier is None else self._frontier.compose(one)
            self._frontier = composed
        elif self._ahead is not None and rounds == self._ahead[0] + 1:
            composed = self._ahead[1].compose(one)
            self._ahead = (rounds, composed)
        else:
            composed = self._seed(rounds)
            if rounds == self._horizon + 1:
                self._frontier = composed
            elif rounds > self._horizon + 1 and (self._ahead is None or rounds > self._ahead[0]):
                self._ahead = (rounds, composed)
        return float(composed.get_epsilon_for_delta(self.delta))

    def _seed(self, rounds: int) -> dp_pld_lib.PrivacyLossDistribution:
        assert self._one is not None
        return self._one if rounds == 1 else self._one.self_compose(rounds)

    def __repr__(self) -> str:
        event = self.event
        return (
            f"EpsilonCurve(noise_multiplier={event.noise_multiplier}, "
            f"sample_rate={event.sample_rate}, sampling={event.sampling!r}, "
            f"delta={self.delta}, accountant={self.accountant!r}, horizon={self.horizon})"
        )


@functools.lru_cache(maxsize=16)
def shared_curve(
    event: SubsampledGaussianEvent, delta: float, accountant: AccountantKind
) -> EpsilonCurve:
    """The process's one :class:`EpsilonCurve` of ``(event, delta, accountant)``.

    ``eps(T)`` is a function of these alone, so every ledger of every federation with them (a
    server, its participants, a test's many federations) reads and extends one table instead of
    computing the one-round accounting again (about 80 ms with PLD).
    """
    return EpsilonCurve(event, delta, accountant=accountant)
