"""Schedules ``p_t``: the probability that a participant uses its own model at BO iteration t.

With probability ``p_t`` a participant runs local Thompson sampling; otherwise it maximizes the
function built from the newest broadcast (FTS, Algorithm 1 line 4-6; DP-FTS-DE, Algorithm 2
line 5-8). ``t = 1`` is the first BO iteration after the initial design. The papers' choices:

- ``"1-1/t"``: DP-FTS-DE's real-world experiments (``p_1 = 0``: the first BO iteration always
  uses the broadcast, as in the authors' code);
- ``"1-1/sqrt(t)"``: DP-FTS-DE's synthetic experiments;
- ``"1-1/t^2"``: the faster decay recommended for heterogeneous agents;
- ``"fts"``: FTS's real-world experiments, ``p_t = 1 - 1/t^2`` with ``p_1 = p_2 = 0.75``.
"""

from __future__ import annotations

from collections.abc import Callable
import math

Schedule = Callable[[int], float]

SCHEDULES: dict[str, Schedule] = {
    "1-1/t": lambda t: 1.0 - 1.0 / t,
    "1-1/sqrt(t)": lambda t: 1.0 - 1.0 / math.sqrt(t),
    "1-1/t^2": lambda t: 1.0 - 1.0 / (t * t),
    "fts": lambda t: 1.0 - 1.0 / (max(t, 2) ** 2),
}


def check_schedule_name(name: str) -> str:
    """Return ``name`` if it names a schedule of :data:`SCHEDULES`.

    Raises:
        ValueError: For an unknown name.
    """
    if name not in SCHEDULES:
        raise ValueError(
            f"Unknown schedule {name!r}; use one of {sorted(SCHEDULES)} or a callable."
        )
    return name


def resolve_schedule(schedule: str | Schedule) -> Schedule:
    """The schedule function of a name of :data:`SCHEDULES`, or the callable itself."""
    if isinstance(schedule, str):
        return SCHEDULES[check_schedule_name(schedule)]
    if not callable(schedule):
        raise ValueError(f"schedule must be a name or a callable t -> p_t, got {schedule!r}.")
    return schedule


def local_probability(schedule: Schedule, iteration: int) -> float:
    """Evaluate ``p_t`` at a BO iteration ``t >= 1`` and check it is a probability.

    Raises:
        ValueError: If the schedule returns something outside ``[0, 1]`` or not a number.
    """
    if iteration < 1:
        raise ValueError(f"BO iterations start at t = 1, got {iteration}.")
    value = schedule(iteration)
    try:
        probability = float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"The schedule returned {value!r} at t = {iteration}, not a number."
        ) from None
    if not 0.0 <= probability <= 1.0:
        raise ValueError(
            f"The schedule returned p_t = {probability} at t = {iteration}; it must lie in [0, 1]."
        )
    return probability
