"""Participant leases: one lease per worker process, and the participants' lifecycle.

A participant (a *site*: a ``client_id`` and its Optuna study) runs in one or more worker
processes (on one or more hosts, as Optuna's parallelization guide runs a study). Each worker
holds a *lease* while it runs: a record signed with the participant's enrolled key
(:mod:`.lease_record`: heartbeat time, time to live, the worker's epoch, a sequence number,
whether it has *finished*; host, pid and its progress sealed to the server), written by that
worker only, in two places: ``l:<client_id>`` in the study ``NAME:fedbo:leases`` (the record a
participant's workers wrote last, where readers find every participant in one read) and the study
of its epoch ``NAME:fedbo:lease:EEEEEE:<client_id>`` (each worker's own, so that an older record
written back into the first place cannot hide a newer one). The participant is alive while any of
its workers is (:meth:`~.lease_book.LeaseBook.site_state`).

* Every process that starts claims a new epoch: a second worker of a running participant is
  welcome. Within one process the lease is shared (``n_jobs`` threads, or a restarted sampler
  object, are not a second worker).
* A worker may be given a name (``worker=``): a second process under the same name while the
  named one is live is refused with :class:`ParticipantBusyError` (a one-line message naming the
  fix), unless its process is dead on this host.
* A worker that starts reads this host's notes of the participant's workers
  (:mod:`.site_workers`): the lease of a worker whose process is dead is taken over at once
  (marked lost), whatever killed it (SIGKILL, SIGTERM); elsewhere a crashed worker's lease
  expires ``ttl`` seconds after its last heartbeat.
* A lease is claimed by creating the study of the next epoch: creating a study is the storage's one
  write that a single writer wins, so two processes starting at the same moment cannot both hold
  one epoch. Anyone can create such a study; only a signed record in it counts.
* A worker that ends its study releases its lease as ``finished``; the participant shows as its
  last worker to end; ``serve`` ends when every registered participant has finished (or is
  lost).

**Forged and replayed records.** Readers (the server, ``status``, participants) use only records
that verify against the participant's enrolled key; any other is ignored with a warning (once per
participant and problem). Each reader keeps the newest record it verified of each participant
(by epoch and sequence number) and ignores older ones: a genuine old record written back (a
replay) changes nothing for it. So, whoever writes the storage:

* nobody is locked out: only a verified live record refuses a claim, and an old copy of one has
  expired (its heartbeat time is signed);
* rounds are not stalled: the trial durations the server's round timeout uses are verified;
* ``serve`` does not end early: a departure counts only from a verified record that is the newest
  in both places, and one this server did not see happen (first seen as finished or lost: maybe an
  old copy) only after it stayed the newest for half its ``ttl``, time in which a live participant
  writes a newer heartbeat (every quarter ``ttl``).

What no record can prevent: someone who keeps erasing a live participant's new records makes it
look stopped, as if its process had crashed (the storage is untrusted for availability).

Times are wall-clock (``time.time()``) so that processes on several hosts compare them; hosts
should keep their clocks synchronized (NTP) to within a small fraction of the ``ttl``.
"""

from __future__ import annotations

from collections.abc import Callable
import os
import socket
import threading
import time
from typing import Any
from typing import TYPE_CHECKING

import optuna
from optuna.storages import InMemoryStorage

from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.lease_book import lease_book
from optuna_fedbo.federation.lease_book import LeaseBook
from optuna_fedbo.federation.lease_book import ParticipantState
from optuna_fedbo.federation.lease_record import LeaseRecord
from optuna_fedbo.federation.lease_record import process_token
from optuna_fedbo.federation.lease_record import sign_lease
from optuna_fedbo.federation.site_workers import pid_alive
from optuna_fedbo.federation.site_workers import WorkerNotes

if TYPE_CHECKING:
    from optuna_fedbo.federation.federation import Federation

_logger = optuna.logging.get_logger(__name__)

#: Default seconds after the last heartbeat at which a participant's lease expires.
DEFAULT_LEASE_TTL = 60.0
#: Seconds a claimer waits for the record of a process that claimed the same epoch first.
_CLAIM_WAIT = 2.0
#: Claims lost in a row (someone else kept creating the next epoch's study) before giving up.
_CLAIM_ATTEMPTS = 20


class ParticipantBusyError(ValueError):
    """Another live process already runs this participant id."""


def _busy_message(name: str, client_id: str, record: LeaseRecord, here: int | None) -> str:
    where = "on another host" if here is None else f"on this host (pid {here})"
    return (
        f"Worker {record.worker!r} of participant {client_id!r} of federation {name!r} is "
        f"already running {where}, last heartbeat {max(time.time() - record.time, 0):.0f} s "
        f"ago: stop it first, or start this process under another worker name (worker=...) "
        f"or none (its lease expires {record.ttl:g} s after its last heartbeat)."
    )


class Lease:
    """This process's lease on a participant id (see the module docstring).

    Args:
        federation: The federation.
        client_id: The participant's id.
        key: The participant's credential (its private key signs the lease records).
        ttl: Seconds without a heartbeat after which the lease expires.
        public: Called at every heartbeat for the progress fields of the record (sealed to the
            server).
        worker: This worker's name (``None``: an anonymous worker, never refused).

    Raises:
        ParticipantBusyError: If a live process runs the worker of that name.
    """

    def __init__(
        self,
        federation: Federation,
        client_id: str,
        *,
        key: ParticipantKey,
        ttl: float = DEFAULT_LEASE_TTL,
        public: Callable[[], dict[str, Any]] | None = None,
        worker: str | None = None,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"lease_ttl must be > 0, got {ttl!r}.")
        if key.client_id != client_id or not key.has_private_key:
            raise ValueError(f"A lease of {client_id!r} needs that participant's private key.")
        self.book = lease_book(federation)
        self.client_id = client_id
        self.ttl = float(ttl)
        self._trust = federation.trust
        self._key = key
        self._token = process_token(client_id)
        self._public = public
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.superseded = False
        self.worker = worker
        self._notes = WorkerNotes(federation, client_id)
        #: Epochs of this participant's dead workers whose leases this one took over.
        self.taken_over: list[int] = []
        self.epoch = self._claim()
        self.renew()
        self._notes.add(self.epoch, self._token, worker)
        if not isinstance(federation.storage, InMemoryStorage):
            self._thread = threading.Thread(
                target=self._beat, args=(self._stop,), name=f"fedbo-lease-{client_id}", daemon=True
            )
            self._thread.start()

    @property
    def beats(self) -> bool:
        """Whether a background thread renews the lease (every storage but an in-memory one)."""
        return self._thread is not None

    def _claim(self) -> int:
        name, client_id = self.book.name, self.client_id
        for _ in range(_CLAIM_ATTEMPTS):
            records, top = self.book.scan(client_id, wait=_CLAIM_WAIT)
            mine = [e for e, r in records.items() if r.token == self._token]
            if mine:
                return max(mine)  # this process already holds one: share
            if self._take_over_dead(records):
                records, top = self.book.scan(client_id)
            if self.worker is not None:
                self._refuse_a_live_namesake(records)
            epoch = max(top, max(records, default=0)) + 1
            if self.book.claim(client_id, epoch, self._sign(epoch, "active")):
                return epoch
            # Another process created that epoch's study first: scan again (a process of this
            # participant has written its record there by then; a study without one is ignored).
        raise ParticipantBusyError(
            f"Could not claim a lease of participant {client_id!r} of federation {name!r}: "
            "someone keeps creating its lease studies first (is the storage being tampered "
            "with?)."
        )

    def _take_over_dead(self, records: dict[int, LeaseRecord]) -> bool:
        """Mark lost at once the live leases of this host's workers whose process is gone;
        whether there was any."""
        now, taken = time.time(), False
        for note in self._notes.notes():
            if note.pid == os.getpid() or pid_alive(note.pid):
                continue
            record = records.get(note.epoch)
            if (
                record is not None
                and record.status(now) == "active"
                and record.token == note.token
            ):
                text = self._sign(note.epoch, "lost", token=note.token, worker=record.worker)
                self.book.write(self.client_id, note.epoch, text)
                self.taken_over.append(note.epoch)
                taken = True
                _logger.info(
                    f"{self.client_id}: took over the lease of worker {note.epoch} (pid "
                    f"{note.pid} is gone from this host): marked lost."
                )
            self._notes.remove(note.epoch)
        return taken

    def _refuse_a_live_namesake(self, records: dict[int, LeaseRecord]) -> None:
        now = time.time()
        here = {n.epoch: n.pid for n in self._notes.notes()}
        for epoch, record in records.items():
            if record.worker == self.worker and record.status(now) == "active":
                raise ParticipantBusyError(
                    _busy_message(self.book.name, self.client_id, record, here.get(epoch))
                )

    def _sign(
        self, epoch: int, state: str, *, token: str | None = None, worker: str | None = None
    ) -> str:
        private: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
        if self._public is not None and token is None:
            try:
                private.update(self._public())
            except Exception:
                _logger.debug("Could not compute the lease's progress fields.", exc_info=True)
        return sign_lease(
            self._trust,
            self._key,
            epoch=epoch,
            state=state,
            ttl=self.ttl,
            private=private,
            token=token,
            worker=self.worker if token is None else worker,
        )

    def _check_current(self) -> bool:
        records, _ = self.book.scan(self.client_id)
        record = records.get(self.epoch)
        if record is None or record.token == self._token:
            return True
        if not self.superseded:
            self.superseded = True
            _logger.warning(
                f"{self.client_id}: another process has taken over this worker's lease of "
                f"federation {self.book.name!r} (it had no heartbeat for {self.ttl:g} s or its "
                "process looked dead); this process stops renewing it."
            )
        return False

    def renew(self) -> None:
        """Write a heartbeat (and the progress fields); the lease is active again (not after
        :meth:`release`: a heartbeat racing it never brings a finished lease back)."""
        with self._lock:
            if self._stop.is_set() or self.superseded or not self._check_current():
                return
            self.book.write(self.client_id, self.epoch, self._sign(self.epoch, "active"))

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
            state = "finished" if finished else "lost"
            self.book.write(self.client_id, self.epoch, self._sign(self.epoch, state))
            self._notes.remove(self.epoch)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.ttl)  # nothing of this lease is written after it returns

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
        if not self.superseded:
            self._notes.add(self.epoch, self._token, self.worker)
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
    "lease_book",
]
