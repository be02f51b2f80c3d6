"""Participant leases: one live process per participant id, and the participants' lifecycle.

A participant (a sampler) holds a *lease* on its id while it runs: a record signed with its
enrolled key (:mod:`.lease_record`: heartbeat time, time to live, epoch, a sequence number, whether
it has *finished*; host, pid and its progress sealed to the server), written by the holder only, in
two places: ``l:<client_id>`` in the study ``NAME:fedbo:leases`` (where readers find every
participant's in one read) and the study of its epoch ``NAME:fedbo:lease:EEEEEE:<client_id>``
(so that an older record written back into the first place cannot hide a newer one).

* A second process that asks for the same id while the lease is live (heartbeat younger than its
  ``ttl``, not finished) is refused with :class:`ParticipantBusyError`. Within one process the
  lease is shared (a restarted sampler object in the same process is not a second participant).
* A lease is claimed by creating the study of the next epoch: creating a study is the storage's one
  write that a single writer wins, so two processes starting at the same moment cannot both hold
  the id. Anyone can create such a study; only a signed record in it counts.
* A process that crashes stops renewing: its lease expires ``ttl`` seconds after the last
  heartbeat, the participant shows as ``lost``, and the id can be claimed again by any process
  holding the participant's key (a restart).
* A participant that ends its study releases the lease as ``finished``; ``serve`` ends when every
  registered participant has finished (or is lost).

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
from optuna_fedbo.federation.lease_record import process_token
from optuna_fedbo.federation.lease_record import sign_lease

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


def _busy_message(name: str, client_id: str, state: ParticipantState) -> str:
    where = (
        f"host {state.host}, pid {state.pid}"
        if state.host is not None
        else "its host and pid are sealed to the server: `optuna-fedbo status` on the "
        "operator's machine shows them"
    )
    return (
        f"Participant {client_id!r} of federation {name!r} is already running (last heartbeat "
        f"{state.age:.0f} s ago; {where}). Run each participant id in one process only: stop "
        "the other one, or pick another client_id. (A lease whose process died expires "
        f"{state.ttl:g} s after its last heartbeat.)"
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

    Raises:
        ParticipantBusyError: If another live process holds the id.
    """

    def __init__(
        self,
        federation: Federation,
        client_id: str,
        *,
        key: ParticipantKey,
        ttl: float = DEFAULT_LEASE_TTL,
        public: Callable[[], dict[str, Any]] | None = None,
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
        self.epoch = self._claim()
        self.renew()
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
            record, top = self.book.scan(client_id, wait=_CLAIM_WAIT)
            if record is not None and record.token == self._token:
                return record.epoch  # this process already holds it: share
            if record is not None and record.status(time.time()) == "active":
                state = self.book.state_of(record)
                raise ParticipantBusyError(_busy_message(name, client_id, state))
            epoch = max(top, 0 if record is None else record.epoch) + 1
            if self.book.claim(client_id, epoch, self._sign(epoch, "active")):
                return epoch
            # Another process created that epoch's study first: scan again (a process of this
            # participant has written its record there by then; a study without one is ignored).
        raise ParticipantBusyError(
            f"Could not claim participant {client_id!r} of federation {name!r}: someone keeps "
            "creating its lease studies first (is the storage being tampered with?)."
        )

    def _sign(self, epoch: int, state: str) -> str:
        private: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
        if self._public is not None:
            try:
                private.update(self._public())
            except Exception:
                _logger.debug("Could not compute the lease's progress fields.", exc_info=True)
        return sign_lease(
            self._trust, self._key, epoch=epoch, state=state, ttl=self.ttl, private=private
        )

    def _check_current(self) -> bool:
        record, _ = self.book.scan(self.client_id)
        if record is None or record.token == self._token or record.epoch <= self.epoch:
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
        """Write a heartbeat (and the progress fields); the lease is active again."""
        with self._lock:
            if self.superseded or not self._check_current():
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
    "lease_book",
]
