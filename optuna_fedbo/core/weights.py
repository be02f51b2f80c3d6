"""Sub-region aggregation weights of distributed exploration (DP-FTS-DE, Section 3.2, App. B).

Every agent ``n`` is assigned one sub-region ``i_n`` at initialisation. For sub-region ``i`` the
server weighs agent ``n`` by the softmax

    phi_n^(i) = exp((a 1[i_n = i] + 1) / T_t) / sum_m exp((a 1[i_m = i] + 1) / T_t),

with ``a = 15`` and the temperature ``T_t = a / (a_t - 1)``. The exponent ``a_t`` starts at
``a + 1 = 16``, is held for some rounds, then decays linearly to 1, where ``T_t`` is infinite and
the weights are uniform. Multiplying numerator and denominator by ``exp(1 - 1/T_t)`` shows this is
the same softmax as ``exp(a_t)`` for the agents of the sub-region and ``exp(1)`` for the others,
which is how the authors' code builds it: both give the weight ratio ``exp(a_t - 1)``.

Schedules (``round_index`` is the server round ``t = 0, 1, ...`` of Algorithm 1, i.e. the authors'
``iter_fed``; the paper's text counts the same rounds from 1):

- real-world experiments (the paper's landmine preset, the default here): ``a_t = 16`` for rounds
  0-9, then ``linspace(16, 1, 30)`` over rounds 10-39, uniform from round 39 on;
- synthetic experiments: hold 5 rounds and decay over 5 (``a_t = 16, 12.25, 8.5, 4.75, 1`` for
  rounds 5-9, the paper's ``t = 6, ..., 10``), uniform from round 9 on.
"""

from __future__ import annotations

from dataclasses import dataclass
import math

import numpy as np


@dataclass(frozen=True)
class WeightSchedule:
    """The softmax temperature schedule of DP-FTS-DE's sub-region weights.

    Args:
        a: The paper's constant ``a`` (> 0); the exponent starts at ``a + 1``.
        hold_rounds: Number of rounds (from round 0) at the full exponent ``a + 1``.
        decay_rounds: Number of rounds over which the exponent goes linearly from ``a + 1`` to 1,
            endpoints included (``numpy.linspace(a + 1, 1, decay_rounds)``); 0 jumps straight to
            uniform weights after the hold.
    """

    a: float = 15.0
    hold_rounds: int = 10
    decay_rounds: int = 30

    def __post_init__(self) -> None:
        if isinstance(self.a, bool) or not (math.isfinite(self.a) and self.a > 0):
            raise ValueError(f"a must be a positive finite number, got {self.a!r}.")
        for name in ("hold_rounds", "decay_rounds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}.")
        object.__setattr__(self, "a", float(self.a))
        object.__setattr__(self, "hold_rounds", int(self.hold_rounds))
        object.__setattr__(self, "decay_rounds", int(self.decay_rounds))

    @classmethod
    def paper_real_world(cls) -> WeightSchedule:
        """Landmine / activity recognition / EMNIST: hold 10 rounds, decay over 30."""
        return cls(a=15.0, hold_rounds=10, decay_rounds=30)

    @classmethod
    def paper_synthetic(cls) -> WeightSchedule:
        """The paper's synthetic experiments: hold 5 rounds, decay over 5."""
        return cls(a=15.0, hold_rounds=5, decay_rounds=5)

    @property
    def uniform_from(self) -> int:
        """First round whose weights are exactly uniform."""
        if self.decay_rounds <= 1:
            # linspace(a + 1, 1, 1) is [a + 1]: a single decay round keeps the full exponent.
            return self.hold_rounds + self.decay_rounds
        return self.hold_rounds + self.decay_rounds - 1

    def exponent(self, round_index: int) -> float:
        """The exponent ``a_t`` of the agents inside the sub-region at a round (1 = uniform)."""
        round_index = _check_round(round_index)
        if round_index < self.hold_rounds:
            return self.a + 1.0
        step = round_index - self.hold_rounds
        if step < self.decay_rounds:
            return float(np.linspace(self.a + 1.0, 1.0, self.decay_rounds)[step])
        return 1.0

    def temperature(self, round_index: int) -> float:
        """The paper's temperature ``T_t = a / (a_t - 1)`` (``inf`` once weights are uniform)."""
        excess = self.exponent(round_index) - 1.0
        return math.inf if excess <= 0.0 else self.a / excess

    def weights(self, assignment: np.ndarray, n_subregions: int, round_index: int) -> np.ndarray:
        """The weights ``phi_n^(i)`` at a round; see :func:`subregion_weights`."""
        return subregion_weights(assignment, n_subregions, round_index=round_index, schedule=self)


def round_robin_assignment(n_agents: int, n_subregions: int) -> np.ndarray:
    """Assign agent ``n`` to sub-region ``n mod P``, as the authors' code does.

    Args:
        n_agents: Number of registered agents ``N`` (>= 1).
        n_subregions: Number of sub-regions ``P`` (>= 1).

    Returns:
        Integer array of shape ``(N,)`` with values in ``[0, P)``.
    """
    if isinstance(n_agents, bool) or not isinstance(n_agents, (int, np.integer)) or n_agents < 1:
        raise ValueError(f"n_agents must be a positive integer, got {n_agents!r}.")
    n_subregions = _check_n_subregions(n_subregions)
    return np.arange(int(n_agents)) % n_subregions


def subregion_weights(
    assignment: np.ndarray,
    n_subregions: int,
    *,
    round_index: int,
    schedule: WeightSchedule | None = None,
) -> np.ndarray:
    """Softmax sub-region weights ``phi_n^(i)`` of DP-FTS-DE at one server round.

    With ``P = 1`` (DP-FTS, no distributed exploration) every agent is in the only sub-region and
    the weights are uniform ``1 / N`` at every round.

    Args:
        assignment: Integer array of shape ``(N,)``: the sub-region ``i_n`` in ``[0, P)`` that
            agent ``n`` explored at initialisation.
        n_subregions: Number of sub-regions ``P``.
        round_index: Server round ``t >= 0`` of Algorithm 1.
        schedule: Temperature schedule; ``None`` is :meth:`WeightSchedule.paper_real_world`.

    Returns:
        Array of shape ``(P, N)`` whose rows are non-negative and sum to 1.
    """
    schedule = WeightSchedule.paper_real_world() if schedule is None else schedule
    n_subregions = _check_n_subregions(n_subregions)
    assignment = np.asarray(assignment)
    if assignment.ndim != 1 or assignment.size == 0:
        raise ValueError(
            f"assignment must be a non-empty 1-D array of sub-region indices, got shape "
            f"{assignment.shape}."
        )
    if not np.issubdtype(assignment.dtype, np.integer):
        raise ValueError(f"assignment must hold integers, got dtype {assignment.dtype}.")
    if assignment.min() < 0 or assignment.max() >= n_subregions:
        raise ValueError(
            f"assignment values must lie in [0, {n_subregions}), got range "
            f"[{assignment.min()}, {assignment.max()}]."
        )
    exponent = schedule.exponent(round_index)
    inside = assignment[None, :] == np.arange(n_subregions)[:, None]
    logits = np.where(inside, exponent, 1.0)
    logits -= logits.max(axis=1, keepdims=True)
    unnormalised = np.exp(logits)
    return unnormalised / unnormalised.sum(axis=1, keepdims=True)


def _check_round(round_index: int) -> int:
    if (
        isinstance(round_index, bool)
        or not isinstance(round_index, (int, np.integer))
        or round_index < 0
    ):
        raise ValueError(f"round_index must be a non-negative integer, got {round_index!r}.")
    return int(round_index)


def _check_n_subregions(n_subregions: int) -> int:
    if (
        isinstance(n_subregions, bool)
        or not isinstance(n_subregions, (int, np.integer))
        or n_subregions < 1
    ):
        raise ValueError(f"n_subregions must be a positive integer, got {n_subregions!r}.")
    return int(n_subregions)
