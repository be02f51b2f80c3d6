"""``FedSampler``: the participant's sampler, whatever the federation's protocol.

``FedSampler(federation, client_id=..., seed=...)`` builds the sampler that the federation's
protocol registered (:class:`~optuna_fedbo.FedTransferSampler` or
:class:`~optuna_fedbo.FedThompsonSampler` for the FTS family, as ``FTSConfig.transfer`` says;
:class:`~optuna_fedbo.FedPNESampler` for Fed-PNE); all subclass :class:`FedSampler`, which holds
what every participant does the same way: its lease on the participant id (one live process per
id), its lifecycle (finished when its study ends), the count of its trials by kind, the
fallback for parameters outside the federation's search space, and the warnings that keep a
federation from silently doing nothing.
"""

from __future__ import annotations

import atexit
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
import statistics
import sys
import threading
import time
from typing import Any
from typing import ClassVar
import weakref

import optuna
from optuna.distributions import BaseDistribution
from optuna.storages import InMemoryStorage
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.finished import finished_message
from optuna_fedbo.federation.finished import finished_record
from optuna_fedbo.federation.lease import DEFAULT_LEASE_TTL
from optuna_fedbo.federation.lifecycle import COUNT_KINDS
from optuna_fedbo.federation.site_counter import next_counter
from optuna_fedbo.samplers._common import FallbackSampler
from optuna_fedbo.samplers._site_checks import SiteChecks
from optuna_fedbo.samplers._site_state import SiteState

_logger = optuna.logging.get_logger(__name__)

#: Seconds between a participant's reads of the federation's lifecycle (problems).
_CHECK_INTERVAL = 5.0
#: Seconds between lease renewals from ``after_trial`` (a heartbeat thread renews as well).
_RENEW_INTERVAL = 1.0
#: A participant's uploads in a row into a round that stays open before it calls rounds stalled.
STALL_UPLOADS = 3
#: Seconds of waiting for a round after which a participant calls rounds stalled.
STALL_SECONDS = 30.0


@dataclass(frozen=True)
class TrialCounts:
    """A participant's trials by how their point was chosen.

    Attributes:
        initial: Initial design (before the protocol's model or first broadcast is used).
        local: Local steps (the participant's own model; also when no broadcast was usable).
        federated: Points chosen from a published broadcast (FTS) or phase (Fed-PNE).
    """

    initial: int = 0
    local: int = 0
    federated: int = 0

    @property
    def total(self) -> int:
        return self.initial + self.local + self.federated

    def to_dict(self) -> dict[str, int]:
        return {"initial": self.initial, "local": self.local, "federated": self.federated}


_LIVE: weakref.WeakSet[FedSampler] = weakref.WeakSet()

#: The participant class of each protocol kind (filled in by :class:`FedSampler` subclasses).
_PARTICIPANTS: dict[str, type[FedSampler]] = {}


@atexit.register
def _finish_at_exit() -> None:
    """Mark every participant of this process finished when the process ends normally, and
    lost when it ends on an unhandled exception (the interpreter sets ``sys.last_value`` before
    it runs the exit handlers; an interactive session sets it at any error, so there call
    :meth:`FedSampler.finish` yourself)."""
    crashed = getattr(sys, "last_value", None) is not None
    for sampler in list(_LIVE):
        try:
            if crashed:
                sampler._abandon()
            else:
                sampler.finish()
        except Exception:
            pass


class FedSampler(FallbackSampler):
    """The sampler of a federation's participant; the protocol comes from the federation.

    ``FedSampler(federation, client_id="site-3", seed=3)`` returns the sampler of the
    federation's protocol: a :class:`~optuna_fedbo.FedTransferSampler` (the FTS family's
    default, ``FTSConfig.transfer="prior"``), a :class:`~optuna_fedbo.FedThompsonSampler` (the
    papers' FTS, FTS-DE, DP-FTS-DE participant, ``transfer="schedule"``) or a
    :class:`~optuna_fedbo.FedPNESampler` (Fed-PNE, DP-Fed-PNE); further keyword arguments go to
    that class. All are ``FedSampler`` instances, so ``isinstance(s, FedSampler)`` holds for
    every participant sampler.

    What every participant does:

    * **A site is a client_id and a study.** Any number of workers (threads, processes, hosts)
      run ``study.optimize`` on the site's study, each with its own ``FedSampler``; each worker
      process holds its own lease (a heartbeat every ``lease_ttl / 4`` seconds from a
      background thread), the site is alive while any worker is, and each worker reads what it
      needs from the study's trials (:mod:`optuna_fedbo.samplers._site_state`). A worker whose
      process died on the same host is taken over at once by the next one that starts there
      (its running trials failed); elsewhere its lease expires ``lease_ttl`` seconds after its
      last heartbeat. A named worker (``worker=``) live elsewhere refuses a second process
      under its name with :class:`~optuna_fedbo.federation.lease.ParticipantBusyError`.
    * **A visible lifecycle.** :meth:`finish` (called automatically when the process exits)
      marks the participant finished (lost, when the process ends on an unhandled exception);
      ``optuna-fedbo serve`` ends when every participant has finished or is lost.
      :attr:`counts` tells how many trials were initial, local and federated; the counts and
      the typical trial duration go into the lease sealed to the server, renewed on the
      heartbeat's schedule (the operator's ``optuna-fedbo status`` shows them, and the server's
      default round timeout derives from the trial durations).
    * **No silent no-ops.** The participant warns once (an Optuna warning) when no server has
      been seen, when the server is down, when too few participants run for any round to
      close, and, at :meth:`finish`, when its study used no broadcast at all.

    Args:
        federation: The federation to take part in.
        client_id: This participant's id.
        seed: Seed of this participant's own randomness.
        **kwargs: Arguments of the protocol's sampler class.
    """

    federation: Federation

    #: The protocol kind whose participant this class is: a subclass that sets it is the class
    #: ``FedSampler(federation, ...)`` builds for that protocol (the first one defined).
    protocol_kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.protocol_kind:
            _PARTICIPANTS.setdefault(cls.protocol_kind, cls)

    def __new__(cls, federation: Federation, *args: Any, **kwargs: Any) -> FedSampler:
        if not isinstance(federation, Federation):
            raise ValueError(f"federation must be a Federation, got {federation!r}.")
        if cls is FedSampler:
            kind = federation.protocol.kind
            if kind not in _PARTICIPANTS:
                raise ValueError(
                    f"No participant sampler for protocol {kind!r} of federation "
                    f"{federation.name!r}: import the module of its FedSampler subclass (one "
                    f"with protocol_kind = {kind!r}) first."
                )
            cls = _PARTICIPANTS[kind]
        sampler = super().__new__(cls._sampler_for(federation))
        if not isinstance(sampler, cls):  # Python initializes only an instance of ``cls``
            sampler.__init__(federation, *args, **kwargs)
        return sampler

    @classmethod
    def _sampler_for(cls, federation: Federation) -> type[FedSampler]:
        """The class that ``cls(federation, ...)`` builds (a protocol with several
        participant classes picks one from the federation's configuration)."""
        return cls

    # ------------------------------------------------------------------ participation
    def _participate(
        self,
        federation: Federation,
        client_id: str,
        lease_ttl: float,
        worker: str | None = None,
    ) -> None:
        """Join the federation and take this worker's lease of ``client_id`` (subclasses call
        this)."""
        self.federation = federation
        self.participant = federation.join(client_id)
        self._life_lock = threading.Lock()
        self._counts = dict.fromkeys(COUNT_KINDS, 0)
        self._categories: dict[int, str] = {}
        self._started: dict[int, float] = {}
        self._durations: deque[float] = deque(maxlen=25)
        self._upload_rounds: deque[int] = deque(maxlen=STALL_UPLOADS)
        self._warned: set[str] = set()
        self._last_check = -float("inf")
        self._last_renew = time.monotonic()
        self._finished = False
        self._lease = federation.lease(
            client_id, ttl=lease_ttl, public=self._public, worker=worker
        )
        if not isinstance(federation.storage, InMemoryStorage):
            _LIVE.add(self)
        self._site = SiteChecks(self)
        self._workers = SiteState(self)
        over = finished_record(federation)
        #: Whether the federation had finished when this participant started: it then runs
        #: locally (no broadcast is waited for or used, nothing is uploaded).
        self.federation_finished = over is not None
        if over is not None and self._first("finished"):
            _logger.warning(
                f"{client_id}: {finished_message(federation, over)}. This site runs locally: "
                "it neither waits for a broadcast nor uploads."
            )

    def _sample_outside(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
        *,
        warn: bool = True,
    ) -> Any:
        """Sample a parameter the federation does not choose (with one warning per name)."""
        warn = warn and self._warn_independent_sampling and self._first(f"outside:{param_name}")
        reason = f"the parameter is not in the search space of federation {self.federation.name!r}"
        return self._sample_independently(
            study, trial, param_name, param_distribution, warning_reason=reason if warn else None
        )

    def _first(self, key: str) -> bool:
        """Whether ``key`` is seen for the first time (for warnings given once)."""
        with self._life_lock:
            first = key not in self._warned
            self._warned.add(key)
        return first

    def _check_study(self, study: Study) -> None:
        """Refuse a multi-objective study, or one whose direction is not the federation's."""
        self._site.check_study(study)

    def _start_trial(self, study: Study, trial: FrozenTrial) -> None:
        """At ``before_trial``: bind the site's study, tag the trial with this worker, fail the
        running trials of dead workers (:mod:`._site_state`)."""
        self._workers.start_trial(study, trial)

    def _note_params(self, trial: FrozenTrial, complete: bool) -> None:
        """Warn once, by name, about federation parameters a completed trial did not suggest."""
        self._site.note_params(trial, complete)

    @property
    def client_id(self) -> str:
        """This participant's id."""
        return self.participant.client_id

    @property
    def counts(self) -> TrialCounts:
        """How many of the trials this sampler chose were initial, local and federated."""
        with self._life_lock:
            return TrialCounts(**self._counts)

    def _count(self, trial_id: int, kind: str) -> None:
        """Count a trial once, under the kind its point was chosen by."""
        with self._life_lock:
            if trial_id in self._categories:
                return
            self._categories[trial_id] = kind
            self._counts[kind] += 1
            self._started.setdefault(trial_id, time.monotonic())

    def _uncount(self, trial_id: int) -> None:
        """Take back a trial's count (its point is chosen again, and counted again)."""
        with self._life_lock:
            kind = self._categories.pop(trial_id, None)
            if kind is not None:
                self._counts[kind] -= 1

    def _draw_ticket(self) -> int:
        """A ticket for a claim among the site's workers (:mod:`._bakery`): larger than every
        ticket drawn before by any of them."""
        return next_counter(self.federation.store, self.client_id)

    def _public(self) -> dict[str, Any]:
        with self._life_lock:
            durations = list(self._durations)
            counts = dict(self._counts)
        seconds = statistics.median(durations) if durations else None
        return {"counts": counts, "trial_seconds": seconds}

    def _trial_done(self, trial_id: int) -> None:
        """Bookkeeping at ``after_trial``: the trial's duration, the lease."""
        now = time.monotonic()
        with self._life_lock:
            self._categories.pop(trial_id, None)
            started = self._started.pop(trial_id, None)
            if started is not None:
                self._durations.append(now - started)
            finished, self._finished = self._finished, False
            renew = finished or now - self._last_renew >= _RENEW_INTERVAL
            if renew:
                self._last_renew = now
        try:
            if finished:
                self._lease.resume()
            elif renew and not self._lease.beats:
                # Only where no heartbeat thread renews: a write at the end of every trial
                # would tell anyone watching the storage when this participant's trials end.
                self._lease.renew()
        except Exception:
            _logger.debug("Could not renew the participant's lease.", exc_info=True)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._trial_done(trial._trial_id)
        super().after_trial(study, trial, state, values)

    def _uploaded_to(self, round_index: int) -> None:
        with self._life_lock:
            self._upload_rounds.append(round_index)

    def _stalled(self, open_round: int) -> bool:
        """Whether this participant's last uploads all went to the still open round."""
        with self._life_lock:
            rounds = list(self._upload_rounds)
        return len(rounds) == STALL_UPLOADS and all(r == open_round for r in rounds)

    # ---------------------------------------------------------------------- warnings
    def _check_progress(self, *, stalled: bool = False, force: bool = False) -> None:
        """Warn once about each problem that keeps the federation from publishing rounds.

        Args:
            stalled: Whether this participant sees rounds not closing (then a server that is
                down or too few running participants are reported; otherwise it may be a
                start-up or shut-down moment, and only a server never seen is).
            force: Read the federation's state even if it was read recently.
        """
        now = time.monotonic()
        if not force and not stalled and now - self._last_check < _CHECK_INTERVAL:
            return
        self._last_check = now
        try:
            problems = self.federation.lifecycle().problems
        except Exception:
            _logger.debug("Could not read the federation's lifecycle.", exc_info=True)
            return
        for problem in problems:
            if problem.kind != "no-server" and not stalled:
                continue  # may be a start-up (or shut-down) moment: warn only when stalled
            if problem.kind in self._warned:
                continue
            self._warned.add(problem.kind)
            _logger.warning(f"{self.client_id}: {problem.text}.")

    # ---------------------------------------------------------------------- lifecycle
    def finish(self) -> None:
        """Mark this participant finished (its study has ended); warn if it used no broadcast.

        Called automatically when the process exits normally; call it yourself when the
        process goes on after the study (e.g. in a notebook). A later trial makes the
        participant active again. ``optuna-fedbo serve`` ends when every participant has
        finished.
        """
        counts = self._release(finished=True)
        if counts is None:
            return
        if counts.total == 0 or counts.federated > 0 or self.federation_finished:
            return
        if "no-broadcast" in self._warned:
            return
        self._warned.add("no-broadcast")
        try:
            reasons = [p.text for p in self.federation.lifecycle().problems]
        except Exception:
            reasons = []
        missing = self._site.missing_text()
        if missing:
            why = missing
        elif counts.local == 0:
            why = "it ended during its initial design, before any broadcast could be used"
        elif self._only_own_broadcasts():
            why = (
                "every broadcast it could use had this participant as its only contributor, and "
                "a broadcast of its own trials would only count them twice (no other site's "
                "upload reached those rounds: a one-site federation, or the other sites not "
                "running)"
            )
        elif reasons:
            why = "; ".join(reasons)
        else:
            why = (
                "no round was published in time for its trials (fast trials and a slow server "
                "poll: use synchronous=True, more trials, or a shorter --poll-interval)"
            )
        _logger.warning(
            f"{self.client_id}: the study ended after {counts.total} trials ({counts.initial} "
            f"initial, {counts.local} local, 0 federated): no broadcast of federation "
            f"{self.federation.name!r} was used, so this participant ran as plain local "
            f"optimization. Why: {why}."
        )

    def _only_own_broadcasts(self) -> bool:
        """Whether broadcasts came but each was left out for holding only this participant's
        own data (subclasses that leave such broadcasts out say so)."""
        return False

    def _abandon(self) -> None:
        """Mark this participant lost at once: its process ends without finishing its study."""
        self._release(finished=False)

    def _release(self, *, finished: bool) -> TrialCounts | None:
        """Release the lease (finished, or lost at once) and return the trial counts; ``None``
        if it was released already."""
        with self._life_lock:
            if self._finished:
                return None
            self._finished = True
            counts = TrialCounts(**self._counts)
        try:
            self._lease.release(finished=finished)
        except Exception:
            _logger.debug("Could not release the participant's lease.", exc_info=True)
        return counts


__all__ = ["DEFAULT_LEASE_TTL", "FedSampler", "TrialCounts"]
