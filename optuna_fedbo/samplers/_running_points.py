"""The points of a site's running trials: stored for the other workers, and claimed.

The point a trial was given (encoded, :data:`POINT_ATTR`) is stored when it is chosen, so that
the site's other workers treat the running trials as GPSampler does: the acquisition is maximized
given them (:mod:`optuna_fedbo.core.believer`). Two workers in two processes may still choose
at the same moment, each before it could read the other's point, and land on the same point (the
same corner of the space, say). So a chosen point is claimed (:func:`claim_point`): the trial
keeps it unless another running trial of the site holds the same point with an earlier claim;
the loser chooses again, now given the winner's point. A claim nobody contests costs one write
and one read; contested claims are settled by Lamport's bakery (:mod:`._bakery`), with
``0`` as the ticket of an uncontested claim (every drawn ticket is larger).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import optuna
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.samplers._bakery import keeps_choice

_logger = optuna.logging.get_logger(__name__)

#: Trial system attribute: the trial's point in the federation's encoded space.
POINT_ATTR = "fedbo:point"
#: Trial system attribute: ``{"point", "ticket"}``, the ticket of the trial's claim on its point
#: (``0``: no rival when it was claimed).
POINT_TICKET_ATTR = "fedbo:point_ticket"
#: Ticket of a claim that saw no rival (smaller than every ticket drawn from the storage).
UNCONTESTED = 0


def _running(study: Study) -> list[FrozenTrial]:
    return study._get_trials(deepcopy=False, states=(TrialState.RUNNING,), use_cache=False)


def running_points(study: Study, trial: FrozenTrial, n_columns: int) -> np.ndarray:
    """The points of the study's other running trials, shape ``(m, n_columns)``."""
    rows = []
    for other in _running(study):
        point = other.system_attrs.get(POINT_ATTR)
        if other._trial_id == trial._trial_id or not isinstance(point, list):
            continue
        if len(point) == n_columns:
            rows.append(point)
    return np.asarray(rows, dtype=float).reshape(-1, n_columns)


def _rival_tickets(study: Study, trial: FrozenTrial, point: list[float]) -> list[int | None]:
    """The tickets of the other running trials holding ``point`` (``None``: not drawn yet)."""
    tickets: list[int | None] = []
    for other in _running(study):
        if other._trial_id == trial._trial_id or other.system_attrs.get(POINT_ATTR) != point:
            continue
        claim = other.system_attrs.get(POINT_TICKET_ATTR)
        ticket = claim.get("ticket") if isinstance(claim, dict) else None
        valid = isinstance(ticket, int) and claim.get("point") == point
        tickets.append(ticket if valid else None)
    return tickets


def claim_point(
    study: Study,
    trial: FrozenTrial,
    point: np.ndarray,
    draw_ticket: Callable[[], int],
    poll_interval: float = 0.02,
) -> bool:
    """Store ``trial``'s chosen (encoded) point and claim it against the site's other workers.

    Args:
        study: The site's study.
        trial: The running trial the point was chosen for.
        point: The point, encoded.
        draw_ticket: Draws a ticket (increasing across all the site's workers, larger than 0).
        poll_interval: Seconds between reads while waiting for a rival's ticket.

    Returns:
        Whether the trial keeps the point: ``False`` if another running trial holds it with an
        earlier claim (choose again). ``True`` also where the storage refuses the write (a
        detached trial): there is nothing to claim against.
    """
    encoded = [float(v) for v in np.asarray(point).ravel()]
    storage, trial_id = study._storage, trial._trial_id
    try:
        storage.set_trial_system_attr(trial_id, POINT_ATTR, encoded)  # the intent
    except Exception:
        _logger.debug("Could not store the trial's point.", exc_info=True)
        return True
    ticket = UNCONTESTED if not _rival_tickets(study, trial, encoded) else draw_ticket()
    claim = {"point": encoded, "ticket": ticket}
    storage.set_trial_system_attr(trial_id, POINT_TICKET_ATTR, claim)
    if ticket == UNCONTESTED:
        return True
    return keeps_choice(lambda: _rival_tickets(study, trial, encoded), ticket, poll_interval)


__all__ = ["POINT_ATTR", "POINT_TICKET_ATTR", "claim_point", "running_points"]
