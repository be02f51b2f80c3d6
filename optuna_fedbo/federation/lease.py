"""Participant leases: one live process per participant id, and the participants' lifecycle.

A participant (a sampler) holds a *lease* on its id while it runs: a record in the study
``NAME:fedbo:leases`` (system attribute ``l:<client_id>``, written by the holder only) with its
host, pid, a heartbeat time and a time to live, its public progress (how many trials were
initial, local and federated, its typical trial duration) and whether it has *finished*.

* A second process that asks for the same id while the lease is live (heartbeat younger than its
  ``ttl``, not finished) is refused with :class:`ParticipantBusyError`. Within one process the
  lease is shared (a restarted sampler object in the same process is not a second participant).
* A lease is claimed by creating the study ``NAME:fedbo:lease:EEEEEE:<client_id>`` for the next
  epoch: creating a study is the storage's one write that a single writer wins, so two processes
  starting at the same moment cannot both hold the id.
* A process that crashes stops renewing: its lease expires ``ttl`` seconds after the last
  heartbeat, the participant shows as ``lost``, and the id can be claimed again.
* A participant that ends its study releases the lease as ``finished``; ``serve`` ends when every
  registered participant has finished (or is lost).

Times are wall-clock (``time.time()``) so that processes on several hosts compare them; hosts
should keep their clocks synchronized (NTP) to within a small fraction of the ``ttl``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
import os
import socket
import threading
import time
from typing import Any
import uuid

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import InMemoryStorage
from optuna.study import StudyDirection

from optuna_fedbo.federation.store import FederationStore

_logger = optuna.logging.get_logger(__name__)

#: Default seconds after the last heartbeat at which a participant's lease expires.
DEFAULT_LEASE_TTL = 60.0
#: This process's identity in lease records (a process may hold the same id several times).
PROCESS_TOKEN = uuid.uuid4().hex
LEASE_PREFIX = "l:"
#: Seconds a claimer waits for the record of a process that claimed the same epoch first.
_CLAIM_WAIT = 2.0


class ParticipantBusyError(ValueError):
    """Another live process already runs this participant id."""


@dataclass(frozen=True)
class ParticipantState:
    """A participant's lifecycle as seen from its lease record.

    Attributes:
        client_id: The participant's id.
        status: ``"active"`` (a live lease), ``"finished"`` (ended its study) or ``"lost"``
            (the process stopped without finishing: its lease expired, e.g. after a hard
            crash, or it ended on an unhandled exception).
        host: Host of the process that holds (or held) the lease.
        pid: Its process id.
        heartbeat: Wall-clock time of the last heartbeat.
        ttl: Seconds after the heartbeat at which the lease expires.
        epoch: How many times the id has been claimed.
        counts: Trials by kind: ``initial``, ``local``, ``federated``.
        trial_seconds: The participant's typical (median) trial duration, if known.
    """

    client_id: str
    status: str
    host: str | None
    pid: int | None
    heartbeat: float
    ttl: float
    epoch: int
    counts: dict[str, int] = field(default_factory=dict)
    trial_seconds: float | None = None

    @property
    def departed(self) -> bool:
        """Whether the participant has finished or is lost (it will not upload any more)."""
        return self.status in ("finished", "lost")

    @property
    def age(self) -> float:
        """Seconds since the last heartbeat."""
        return max(time.time() - self.heartbeat, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """The state as a JSON object."""
        return {
            "client_id": self.client_id,
            "status": self.status,
            "host": self.host,
            "pid": self.pid,
            "last_seen_seconds_ago": round(self.age, 1),
            "epoch": self.epoch,
            "counts": dict(self.counts),
            "trial_seconds": self.trial_seconds,
        }


def _state(client_id: str, record: dict[str, Any], now: float) -> ParticipantState:
    heartbeat = float(record.get("heartbeat", 0.0))
    ttl = float(record.get("ttl", DEFAULT_LEASE_TTL))
    if record.get("finished"):
        status = "finished"
    elif record.get("abandoned") or now - heartbeat >= ttl:
        status = "lost"
    else:
        status = "active"
    counts = record.get("counts")
    seconds = record.get("trial_seconds")
    return ParticipantState(
        client_id=client_id,
        status=status,
        host=record.get("host"),
        pid=record.get("pid"),
        heartbeat=heartbeat,
        ttl=ttl,
        epoch=int(record.get("epoch", 0)),
        counts=dict(counts) if isinstance(counts, dict) else {},
        trial_seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
    )


class LeaseBook:
    """Reads and writes a federation's lease records.

    Args:
        store: The federation's store.
    """

    def __init__(self, store: FederationStore) -> None:
        self.store = store
        self.storage = store.storage
        self.name = store.name
        self._study_id: int | None = None

    @property
    def study_name(self) -> str:
        return f"{self.name}:fedbo:leases"

    def _id(self) -> int:
        if self._study_id is None:
            self._study_id = self.store._create_study(self.study_name)
        return self._study_id

    def records(self) -> dict[str, dict[str, Any]]:
        """Every lease record, by participant id."""
        try:
            study_id = self.storage.get_study_id_from_name(self.study_name)
        except KeyError:
            return {}
        attrs = self.storage.get_study_system_attrs(study_id)
        return {
            key[len(LEASE_PREFIX) :]: value
            for key, value in attrs.items()
            if key.startswith(LEASE_PREFIX) and isinstance(value, dict)
        }

    def record(self, client_id: str) -> dict[str, Any] | None:
        return self.records().get(client_id)

    def write(self, client_id: str, record: dict[str, Any]) -> None:
        self.storage.set_study_system_attr(self._id(), LEASE_PREFIX + client_id, record)

    def claim_epoch(self, client_id: str, epoch: int) -> bool:
        """Create the study of ``epoch`` for ``client_id``; False if someone else did first."""
        try:
            self.storage.create_new_study(
                [StudyDirection.MINIMIZE], f"{self.name}:fedbo:lease:{epoch:06d}:{client_id}"
            )
        except DuplicatedStudyError:
            return False
        return True

    def states(self) -> dict[str, ParticipantState]:
        """Every participant's lifecycle state, by id (participants never seen are absent)."""
        now = time.time()
        return {c: _state(c, r, now) for c, r in self.records().items()}


def _busy_message(name: str, client_id: str, state: ParticipantState) -> str:
    return (
        f"Participant {client_id!r} of federation {name!r} is already running (host "
        f"{state.host}, pid {state.pid}, last heartbeat {state.age:.0f} s ago). Run each "
        "participant id in one process only: stop the other one, or pick another client_id. "
        f"(A lease whose process died expires {state.ttl:g} s after its last heartbeat.)"
    )


class Lease:
    """This process's lease on a participant id (see the module docstring).

    Args:
        store: The federation's store.
        client_id: The participant's id.
        ttl: Seconds without a heartbeat after which the lease expires.
        public: Called at every heartbeat for the public progress fields of the record.

    Raises:
        ParticipantBusyError: If another live process holds the id.
    """

    def __init__(
        self,
        store: FederationStore,
        client_id: str,
        *,
        ttl: float = DEFAULT_LEASE_TTL,
        public: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"lease_ttl must be > 0, got {ttl!r}.")
        self.book = LeaseBook(store)
        self.client_id = client_id
        self.ttl = float(ttl)
        self._public = public
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.superseded = False
        self.epoch = self._claim()
        self.renew()
        if not isinstance(store.storage, InMemoryStorage):
            self._thread = threading.Thread(
                target=self._beat, args=(self._stop,), name=f"fedbo-lease-{client_id}", daemon=True
            )
            self._thread.start()

    def _claim(self) -> int:
        name, client_id = self.book.name, self.client_id
        record = self.book.record(client_id)
        if record is not None and record.get("token") == PROCESS_TOKEN:
            return int(record.get("epoch", 1))  # this process already holds it: share
        epoch = 1 if record is None else int(record.get("epoch", 0)) + 1
        while True:
            if record is not None and record.get("token") != PROCESS_TOKEN:
                state = _state(client_id, record, time.time())
                if state.status == "active":
                    raise ParticipantBusyError(_busy_message(name, client_id, state))
            if self.book.claim_epoch(client_id, epoch):
                return epoch
            # Another process claimed this epoch first: wait for its record.
            deadline = time.monotonic() + _CLAIM_WAIT
            while time.monotonic() < deadline:
                record = self.book.record(client_id)
                if record is not None and int(record.get("epoch", 0)) >= epoch:
                    break
                time.sleep(0.05)
            else:
                epoch += 1  # it died before writing its record: claim the next epoch
                continue
            epoch = int(record.get("epoch", 0)) + 1

    def _record(self, finished: bool, abandoned: bool = False) -> dict[str, Any]:
        record: dict[str, Any] = {
            "token": PROCESS_TOKEN,
            "epoch": self.epoch,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "heartbeat": time.time(),
            "ttl": self.ttl,
            "finished": finished,
            "abandoned": abandoned,
        }
        if self._public is not None:
            try:
                record.update(self._public())
            except Exception:
                _logger.debug("Could not compute the lease's public fields.", exc_info=True)
        return record

    def _check_current(self) -> bool:
        record = self.book.record(self.client_id)
        if record is None or (
            record.get("token") == PROCESS_TOKEN or int(record.get("epoch", 0)) <= self.epoch
        ):
            return True
        if not self.superseded:
            self.superseded = True
            _logger.warning(
                f"{self.client_id}: another process has taken over this participant id of "
                f"federation {self.book.name!r} (its lease had expired: no heartbeat for "
                f"{self.ttl:g} s); this process stops renewing it."
            )
        return False

    def renew(self) -> None:
        """Write a heartbeat (and the public progress fields); the lease is active again."""
        with self._lock:
            if self.superseded or not self._check_current():
                return
            self.book.write(self.client_id, self._record(finished=False))

    def release(self, *, finished: bool = True) -> None:
        """Stop the heartbeat and mark the participant finished, or lost at once.

        Args:
            finished: ``False`` when the process ends without finishing its study (an
                unhandled exception): the participant is lost now, not after the ttl.
        """
        self._stop.set()
        with self._lock:
            if self.superseded or not self._check_current():
                return
            self.book.write(self.client_id, self._record(finished, abandoned=not finished))

    def _beat(self, stop: threading.Event) -> None:
        interval = self.ttl / 4.0
        while not stop.wait(interval):
            try:
                self.renew()
            except Exception:
                _logger.debug("Lease heartbeat failed; retrying.", exc_info=True)
            if self.superseded:
                return

    def resume(self) -> None:
        """Start renewing again after :meth:`release` (the participant runs more trials)."""
        if not self._stop.is_set():
            return
        self._stop = threading.Event()
        self.renew()
        if self._thread is not None and not self.superseded:
            self._thread = threading.Thread(
                target=self._beat,
                args=(self._stop,),
                name=f"fedbo-lease-{self.client_id}",
                daemon=True,
            )
            self._thread.start()


__all__ = [
    "DEFAULT_LEASE_TTL",
    "Lease",
    "LeaseBook",
    "ParticipantBusyError",
    "ParticipantState",
]
