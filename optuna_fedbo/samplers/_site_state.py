"""A site's workers share its study: what a worker reads from it instead of keeping in memory.

A site is a participant's ``client_id`` and one Optuna study, run by any number of workers
(threads, processes, hosts) with :class:`~optuna_fedbo.FedSampler`. What a worker needs comes
from the study's trials (and their system attributes) and the federation:

* **Whose trial.** Each trial carries the lease epoch of the worker that runs it
  (:data:`WORKER_ATTR`, written first thing in ``before_trial``). A running trial of a worker
  whose lease is lost or finished (its process died: taken over at once on the same host, after
  the lease's ``ttl`` elsewhere) is failed, as Optuna's heartbeat fails stale trials, so it
  neither waits for ever nor misleads the model. A worker killed between Optuna's creating a
  trial and its tag leaves a running trial of no worker: it is failed once it has run for
  :data:`ORPHAN_AGE` seconds while a worker of the site is lost (a live worker's trial is
  untagged for milliseconds only).
* **Which point.** The point a trial was given is stored and claimed when it is chosen
  (:mod:`._running_points`), so other workers treat the running trials as GPSampler does and
  parallel workers do not suggest the same point.
* **The one-step ranking.** Each finished transfer trial stores how its two models ordered it
  (:data:`ONE_STEP_ATTR`); the ranking is read from the latest of them, whoever ran them.
* **Which site.** The study is marked as the study of its site (:data:`SITE_ATTR`), and the
  federation holds the site's binding to its study (signed with the participant's key; the study
  is recognized by its name, id and first trial, which every worker reads alike). A study
  of another site, or a second study of a site whose workers run another one, is refused with a
  one-line error naming the fix; the worker's first trial is marked failed, nothing is removed.
"""

from __future__ import annotations

import datetime
import hashlib
import threading
import time
from typing import Any
from typing import TYPE_CHECKING

import numpy as np
import optuna
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.core.transfer import misordered_fraction
from optuna_fedbo.core.transfer import OneStepRanking
from optuna_fedbo.federation.lease_book import lease_book
from optuna_fedbo.federation.trust import UntrustedRecordError

if TYPE_CHECKING:
    from optuna_fedbo.samplers._fed import FedSampler

_logger = optuna.logging.get_logger(__name__)

#: Trial system attribute: the lease epoch of the worker that runs the trial.
WORKER_ATTR = "fedbo:worker"
#: Trial system attribute: ``[own, transfer]`` misordered fractions of a finished trial.
ONE_STEP_ATTR = "fedbo:one_step"
#: Study system attribute: ``{"federation", "client"}`` of the site the study is.
SITE_ATTR = "fedbo:site"
#: Purpose of the signed binding of a site to its study, and its key in the leases study.
_SITE_PURPOSE = "site"
_SITE_PREFIX = "s:"
#: Seconds between a worker's checks of the other workers (stale trials, the site binding).
CHECK_INTERVAL = 2.0
#: Seconds after which a running trial without a worker tag, while a worker of the site is
#: lost, is taken for one its worker was killed before tagging (workers tag a trial first thing
#: in ``before_trial``, milliseconds after Optuna creates it) and failed.
ORPHAN_AGE = 60.0


class SiteMismatchError(ValueError):
    """A worker's study belongs to another site, or its site's workers run another study."""


class SiteState:
    """One worker's view of its site (thread-safe).

    Args:
        sampler: The worker's sampler (joined, with its lease).
    """

    def __init__(self, sampler: FedSampler) -> None:
        self._sampler = sampler
        self._lock = threading.Lock()
        self._bound: dict[int, str] = {}
        self._last_check = -float("inf")

    # ------------------------------------------------------------------------ trials
    def start_trial(self, study: Study, trial: FrozenTrial) -> None:
        """Bind the study, tag the trial with this worker, fail stale trials of dead ones.

        Raises:
            SiteMismatchError: If the study is not this site's (the trial is marked failed).
        """
        sampler = self._sampler
        try:  # first: a trial is untagged only from its creation to this write
            study._storage.set_trial_system_attr(
                trial._trial_id, WORKER_ATTR, sampler._lease.epoch
            )
        except Exception:
            _logger.debug("Could not tag the trial with its worker.", exc_info=True)
        try:
            self._bind(study)
        except SiteMismatchError:
            _fail(study, trial._trial_id)
            raise
        self.check(study, trial)

    def check(self, study: Study, trial: FrozenTrial) -> None:
        """Fail the running trials of departed workers and check the binding again, at most
        every :data:`CHECK_INTERVAL` seconds (also while a trial waits: a dead worker's
        trial may hold what it waits for)."""
        now = time.monotonic()
        with self._lock:
            due = now - self._last_check >= CHECK_INTERVAL
            if due:
                self._last_check = now
        if due:
            self._check_others(study, trial)

    def _check_others(self, study: Study, trial: FrozenTrial) -> None:
        """Fail the running trials of departed workers; check the binding again."""
        try:
            self._check_binding(study, self._bound.get(id(study)))
        except SiteMismatchError:
            _fail(study, trial._trial_id)
            raise
        except Exception:
            _logger.debug("Could not read the site's binding.", exc_info=True)
        try:
            book = lease_book(self._sampler.federation)
            workers, _ = book.scan(self._sampler.client_id)
        except Exception:
            _logger.debug("Could not read the site's workers.", exc_info=True)
            return
        now, own = time.time(), self._sampler._lease.epoch
        lost = any(record.status(now) == "lost" for record in workers.values())
        oldest = datetime.datetime.now() - datetime.timedelta(seconds=ORPHAN_AGE)
        for stale in study._get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            epoch = stale.system_attrs.get(WORKER_ATTR)
            if epoch is None and lost and _started_before(stale, oldest):
                if _fail(study, stale._trial_id):
                    _logger.warning(
                        f"{self._sampler.client_id}: trial {stale.number} failed (running for "
                        f"over {ORPHAN_AGE:.0f} s without a worker: its worker was killed "
                        "before it could tag it)."
                    )
                continue
            record = workers.get(epoch) if isinstance(epoch, int) else None
            if epoch == own or record is None or record.status(now) == "active":
                continue
            if _fail(study, stale._trial_id):
                _logger.warning(
                    f"{self._sampler.client_id}: trial {stale.number} of worker {epoch} failed "
                    f"(the worker is {record.status(now)}: its process ended mid-trial)."
                )

    # ----------------------------------------------------------------------- binding
    def _bind(self, study: Study) -> None:
        key = id(study)
        with self._lock:
            if key in self._bound:
                return
        sampler = self._sampler
        federation = sampler.federation
        storage, study_id = study._storage, study._study_id
        mark = storage.get_study_system_attrs(study_id).get(SITE_ATTR)
        owner = (federation.federation_id, sampler.client_id)
        if isinstance(mark, dict):
            if (mark.get("federation"), mark.get("client")) != owner:
                raise SiteMismatchError(_other_site(study, mark, sampler))
        else:  # every worker writes the same mark: no race between them
            storage.set_study_system_attr(
                study_id, SITE_ATTR, {"federation": owner[0], "client": owner[1]}
            )
        uid = _study_uid(study)
        self._check_binding(study, uid)
        with self._lock:
            self._bound[key] = uid

    def _binding(self) -> dict[str, Any] | None:
        """The site's verified binding in the federation, or ``None``."""
        sampler = self._sampler
        federation = sampler.federation
        book = lease_book(federation)
        try:
            study_id = book.storage.get_study_id_from_name(book.study_name)
        except KeyError:
            return None
        text = book.storage.get_study_system_attrs(study_id).get(_SITE_PREFIX + sampler.client_id)
        public_key = federation.public_key_of(sampler.client_id)
        if text is None or public_key is None:
            return None
        try:
            body = federation.trust.verify_by(public_key, _SITE_PURPOSE, text)
        except UntrustedRecordError:
            return None  # a forgery binds nothing: the first worker writes a genuine one
        if body.get("client") != sampler.client_id or not isinstance(body.get("study"), str):
            return None
        return body

    def _check_binding(self, study: Study, uid: str | None) -> None:
        """Refuse a second study while other live workers of the site run the one it is bound
        to; else bind the site to this study (signed with the participant's key)."""
        if uid is None:
            return
        sampler = self._sampler
        bound = self._binding()
        if bound is not None and bound["study"] == uid:
            return
        if bound is not None:
            workers, _ = lease_book(sampler.federation).scan(sampler.client_id)
            now, own = time.time(), sampler._lease.epoch
            if any(e != own and r.status(now) == "active" for e, r in workers.items()):
                raise SiteMismatchError(_second_study(study, bound, sampler))
        federation = sampler.federation
        key = federation._participant_key(sampler.client_id)
        body = {"client": sampler.client_id, "study": uid, "name": study.study_name}
        record = federation.trust.sign_as(key, _SITE_PURPOSE, body)
        book = lease_book(federation)
        book.storage.set_study_system_attr(book._id(), _SITE_PREFIX + sampler.client_id, record)


def _study_uid(study: Study) -> str:
    """What tells the study apart from any other, the same for every worker that reads it: its
    name and id and the id and start time of its first trial (every worker has one by then)."""
    storage = study._storage
    first = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study._study_id, 0))
    started = "" if first.datetime_start is None else first.datetime_start.isoformat()
    text = f"{study.study_name}\n{study._study_id}\n{first._trial_id}\n{started}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _other_site(study: Study, mark: dict[str, Any], sampler: FedSampler) -> str:
    federation = sampler.federation
    if mark.get("federation") == federation.federation_id:
        return (
            f"Study {study.study_name!r} is the study of participant {mark.get('client')!r} of "
            f"federation {federation.name!r}, not of {sampler.client_id!r}: run this worker "
            f"with client_id={mark.get('client')!r}, or give {sampler.client_id!r} a study of "
            "its own."
        )
    return (
        f"Study {study.study_name!r} belongs to a participant of another federation, not to "
        f"{sampler.client_id!r} of federation {federation.name!r}: create a new study for this "
        "federation (another study_name)."
    )


def _second_study(study: Study, bound: dict[str, Any], sampler: FedSampler) -> str:
    return (
        f"Participant {sampler.client_id!r} of federation {sampler.federation.name!r} runs "
        f"study {bound.get('name')!r} in a live worker, not {study.study_name!r}: every worker "
        f"of a site shares one study: load that one (optuna.load_study(study_name="
        f"{bound.get('name')!r}, storage=...)), or use another client_id."
    )


def _started_before(trial: FrozenTrial, moment: datetime.datetime) -> bool:
    started = trial.datetime_start
    return started is not None and started.replace(tzinfo=None) < moment


def _fail(study: Study, trial_id: int) -> bool:
    """Mark a running trial failed; whether this call did (another worker may have first)."""
    try:
        return bool(study._storage.set_trial_state_values(trial_id, TrialState.FAIL))
    except Exception:
        return False


# --------------------------------------------------------------- what trials carry
def score_one_step(
    study: Study,
    trial: FrozenTrial,
    prediction: tuple[float, float, tuple[float, float], np.ndarray],
    value: float,
) -> None:
    """Store how the two models ordered a finished trial (see :func:`one_step_ranking`):
    ``prediction`` is ``(own, transfer, (mean, std), earlier normalized values)``."""
    own, transfer, (mean, std), previous = prediction
    scaled = (value - mean) / std
    losses = [
        misordered_fraction(own, scaled, previous),
        misordered_fraction(transfer, scaled, previous),
    ]
    try:
        study._storage.set_trial_system_attr(trial._trial_id, ONE_STEP_ATTR, losses)
    except Exception:
        _logger.debug("Could not store the trial's one-step scores.", exc_info=True)


def one_step_ranking(study: Study, window: int = 10) -> OneStepRanking:
    """The one-step ranking over the study's latest ``window`` scored trials (any worker's)."""
    scored = []
    for trial in study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True):
        losses = trial.system_attrs.get(ONE_STEP_ATTR)
        if isinstance(losses, list) and len(losses) == 2:
            scored.append((trial.number, float(losses[0]), float(losses[1])))
    ranking = OneStepRanking(window)
    for _, own, transfer in sorted(scored)[-window:]:
        ranking.add_losses(own, transfer)
    return ranking


__all__ = [
    "ONE_STEP_ATTR",
    "SITE_ATTR",
    "WORKER_ATTR",
    "SiteMismatchError",
    "SiteState",
    "one_step_ranking",
    "score_one_step",
]
