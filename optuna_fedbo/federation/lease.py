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
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
import math
import os
import socket
import threading
import time
from typing import Any
from typing import TYPE_CHECKING

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import InMemoryStorage
from optuna.study import StudyDirection

from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.lease_record import LeaseRecord
from optuna_fedbo.federation.lease_record import open_private
from optuna_fedbo.federation.lease_record import process_token
from optuna_fedbo.federation.lease_record import sign_lease
from optuna_fedbo.federation.lease_record import verify_lease
from optuna_fedbo.federation.trust import UntrustedRecordError

if TYPE_CHECKING:
    from optuna_fedbo.federation.federation import Federation

_logger = optuna.logging.get_logger(__name__)

#: Default seconds after the last heartbeat at which a participant's lease expires.
DEFAULT_LEASE_TTL = 60.0
LEASE_PREFIX = "l:"
#: The key of the record in an epoch's study.
EPOCH_RECORD_KEY = "lease"
#: Seconds a claimer waits for the record of a process that claimed the same epoch first.
_CLAIM_WAIT = 2.0
#: Claims lost in a row (someone else kept creating the next epoch's study) before giving up.
_CLAIM_ATTEMPTS = 20
#: Verified records kept per reader, by stored text (re-reads cost no signature check).
_CACHE = 4096


class ParticipantBusyError(ValueError):
    """Another live process already runs this participant id."""


@dataclass(frozen=True)
class ParticipantState:
    """A participant's lifecycle as seen from its verified lease record.

    Attributes:
        client_id: The participant's id.
        status: ``"active"`` (a live lease), ``"finished"`` (ended its study) or ``"lost"``
            (the process stopped without finishing: its lease expired, e.g. after a hard
            crash, or it ended on an unhandled exception).
        host: Host of the process that holds (or held) the lease (sealed to the server:
            ``None`` unless this process holds the server's keys).
        pid: Its process id (likewise).
        heartbeat: Wall-clock time of the last heartbeat.
        ttl: Seconds after the heartbeat at which the lease expires.
        epoch: How many times the id has been claimed.
        counts: Trials by kind: ``initial``, ``local``, ``federated`` (sealed to the server:
            ``None`` unless this process holds the server's keys).
        trial_seconds: The participant's typical (median) trial duration, if known (likewise).
    """

    client_id: str
    status: str
    host: str | None
    pid: int | None
    heartbeat: float
    ttl: float
    epoch: int
    counts: dict[str, int] | None = field(default=None)
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
            "counts": None if self.counts is None else dict(self.counts),
            "trial_seconds": self.trial_seconds,
        }


def _checked_private(fields: dict[str, Any]) -> dict[str, Any]:
    """The sealed fields that are well-formed (anything else is left out)."""
    out: dict[str, Any] = {}
    if isinstance(fields.get("host"), str):
        out["host"] = fields["host"][:255]
    pid = fields.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        out["pid"] = pid
    counts = fields.get("counts")
    if isinstance(counts, dict) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()
    ):
        out["counts"] = {str(k): int(v) for k, v in counts.items()}
    seconds = fields.get("trial_seconds")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        if math.isfinite(seconds) and seconds >= 0:
            out["trial_seconds"] = float(seconds)
    return out


@dataclass
class _Track:
    """What a reader knows of one participant: its newest verified record, since when it has
    been the newest (monotonic), and whether the reader has seen the participant live."""

    record: LeaseRecord
    since: float
    seen_live: bool


class LeaseBook:
    """Reads and writes a federation's lease records (verified; see the module docstring).

    One book per federation handle (:func:`lease_book`), so that what it has verified (the newest
    record of every participant) is remembered across reads.

    Args:
        federation: The federation.
    """

    def __init__(self, federation: Federation) -> None:
        self.federation = federation
        self.store = federation.store
        self.storage = self.store.storage
        self.name = self.store.name
        self._study_id: int | None = None
        self._lock = threading.Lock()
        self._tracks: dict[str, _Track] = {}
        self._verified: dict[str, LeaseRecord] = {}
        self._opened: dict[str, dict[str, Any]] = {}

    @property
    def study_name(self) -> str:
        return f"{self.name}:fedbo:leases"

    def epoch_study_name(self, client_id: str, epoch: int) -> str:
        return f"{self.name}:fedbo:lease:{epoch:06d}:{client_id}"

    def _id(self) -> int:
        if self._study_id is None:
            self._study_id = self.store._create_study(self.study_name)
        return self._study_id

    def records(self) -> dict[str, Any]:
        """Every stored lease record (as stored: unverified), by participant id."""
        try:
            study_id = self.storage.get_study_id_from_name(self.study_name)
        except KeyError:
            return {}
        attrs = self.storage.get_study_system_attrs(study_id)
        return {
            key[len(LEASE_PREFIX) :]: value
            for key, value in attrs.items()
            if key.startswith(LEASE_PREFIX)
        }

    # ----------------------------------------------------------------------- verification
    def _verify(self, client_id: str, text: Any) -> LeaseRecord | None:
        """The verified record stored as ``text``, or ``None`` (warned once per problem)."""
        if isinstance(text, str):
            with self._lock:
                cached = self._verified.get(text)
            if cached is not None and cached.client_id == client_id:
                return cached
        try:
            record = verify_lease(
                self.federation.trust, client_id, self.federation.public_key_of(client_id), text
            )
        except UntrustedRecordError as error:
            self.store.warn_once(
                f"lease:{client_id}:{error}",
                f"Ignoring a lease record of {client_id!r} in federation {self.name!r}: {error}.",
            )
            return None
        with self._lock:
            if len(self._verified) >= _CACHE:
                self._verified.clear()
            self._verified[text] = record
        return record

    def _observe(self, record: LeaseRecord, now: float) -> None:
        """Keep ``record`` if it is the participant's newest verified one; an older one (a
        replay, or a record of a superseded process) is ignored."""
        live = record.status(now) == "active"
        with self._lock:
            track = self._tracks.get(record.client_id)
            if track is None:
                self._tracks[record.client_id] = _Track(record, time.monotonic(), live)
                return
            newest = track.record
            if record.mark > newest.mark:
                track.record, track.since = record, time.monotonic()
            if record.mark >= newest.mark:
                track.seen_live = track.seen_live or live
                return
        if record.epoch < newest.epoch:  # (within an epoch, two places are written in turn)
            self.store.warn_once(
                f"lease:{record.client_id}:older",
                f"Ignoring an older lease record of {record.client_id!r} in federation "
                f"{self.name!r} (epoch {record.epoch}, found after one of epoch "
                f"{newest.epoch}): a copy written back, or a superseded process; the newest "
                "verified record counts.",
            )

    def _private(self, record: LeaseRecord) -> dict[str, Any]:
        """The sealed fields of ``record`` if this process holds the server's keys, else ``{}``."""
        trust = self.federation.trust
        if trust.server_keys is None:
            return {}
        with self._lock:
            cached = self._opened.get(record.sealed)
        if cached is not None:
            return cached
        try:
            fields = _checked_private(open_private(trust, record))
        except UntrustedRecordError as error:
            self.store.warn_once(
                f"lease:{record.client_id}:{error}",
                f"Ignoring the sealed fields of {record.client_id!r}'s lease record in federation "
                f"{self.name!r}: {error}.",
            )
            fields = {}
        with self._lock:
            if len(self._opened) >= _CACHE:
                self._opened.clear()
            self._opened[record.sealed] = fields
        return fields

    def state_of(self, record: LeaseRecord, now: float | None = None) -> ParticipantState:
        """The lifecycle state a verified record shows (at ``now``)."""
        now = time.time() if now is None else now
        private = self._private(record)
        return ParticipantState(
            client_id=record.client_id,
            status=record.status(now),
            host=private.get("host"),
            pid=private.get("pid"),
            heartbeat=record.time,
            ttl=record.ttl,
            epoch=record.epoch,
            counts=private.get("counts"),
            trial_seconds=private.get("trial_seconds"),
        )

    def _read(self, client_id: str, text: Any) -> bool:
        """Verify and keep a record read from the leases study; whether it is the newest."""
        record = self._verify(client_id, text)
        if record is None:
            return False
        self._observe(record, time.time())
        with self._lock:
            return self._tracks[client_id].record.mark == record.mark

    def states(self) -> dict[str, ParticipantState]:
        """Every participant's lifecycle state, by id, from the newest verified records
        (participants never seen are absent).

        A participant whose record in the leases study does not verify or is older than one
        seen before (overwritten by someone else) is looked up in its epoch's study.
        """
        roster = set(self.federation.participants())
        for client_id, text in self.records().items():
            if client_id not in roster:
                self.store.warn_once(
                    "lease:not-enrolled",
                    f"Ignoring lease records of ids not enrolled in federation {self.name!r} "
                    f"(e.g. {client_id!r}).",
                )
            elif not self._read(client_id, text):
                self._scan_epochs(client_id)
        now = time.time()
        with self._lock:
            newest = [t.record for t in self._tracks.values()]
        return {r.client_id: self.state_of(r, now) for r in newest}

    # ------------------------------------------------------------------------ epochs
    def _epoch_attrs(self, client_id: str, epoch: int) -> dict[str, Any] | None:
        try:
            study_id = self.storage.get_study_id_from_name(self.epoch_study_name(client_id, epoch))
        except KeyError:
            return None
        return self.storage.get_study_system_attrs(study_id)

    def _await_record(self, client_id: str, epoch: int, wait: float) -> Any:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            time.sleep(0.05)
            value = (self._epoch_attrs(client_id, epoch) or {}).get(EPOCH_RECORD_KEY)
            if value is not None:
                return value
        return None

    def scan(self, client_id: str, *, wait: float = 0.0) -> tuple[LeaseRecord | None, int]:
        """The participant's newest verified record, looking in both places, and the highest
        epoch whose study exists (0 if none).

        Args:
            client_id: The participant.
            wait: Seconds to wait for the record of the highest epoch's study if it has none
                yet (its claimer writes it right after creating the study).
        """
        text = self.records().get(client_id)
        if text is not None:
            self._read(client_id, text)
        top = self._scan_epochs(client_id, wait)
        with self._lock:
            track = self._tracks.get(client_id)
        return (None if track is None else track.record), top

    def _scan_epochs(self, client_id: str, wait: float = 0.0) -> int:
        """Read the epoch studies from the newest known epoch on; the highest that exists."""
        with self._lock:
            track = self._tracks.get(client_id)
            epoch = 1 if track is None else max(track.record.epoch, 1)
        start, top = epoch, 0
        while (attrs := self._epoch_attrs(client_id, epoch)) is not None or epoch == start:
            epoch += 1
            if attrs is None:
                continue  # the known epoch's study is gone (deleted): look on
            top = epoch - 1
            value = attrs.get(EPOCH_RECORD_KEY)
            if value is None and wait > 0 and self._epoch_attrs(client_id, top + 1) is None:
                value = self._await_record(client_id, top, wait)
            record = None if value is None else self._verify(client_id, value)
            if record is not None and record.epoch == top:
                self._observe(record, time.time())
        return top

    def departed(self, client_ids: Iterable[str]) -> bool:
        """Whether every one of the participants has departed beyond doubt (to end ``serve``).

        Each one's newest verified record, in both places, shows it finished or lost, and that
        cannot be an old copy: this reader saw the participant live before, or the record has
        been the newest for half its ``ttl`` (a live participant heartbeats every quarter).
        """
        records = self.records()
        for client_id in client_ids:
            if client_id in records:
                self._read(client_id, records[client_id])
            self._scan_epochs(client_id)
            with self._lock:
                track = self._tracks.get(client_id)
            if track is None or track.record.status(time.time()) == "active":
                return False
            if not (track.seen_live or time.monotonic() - track.since >= track.record.ttl / 2):
                return False
        return True

    def claim(self, client_id: str, epoch: int, text: str) -> bool:
        """Create the study of ``epoch`` for ``client_id`` and write the signed claimer's
        record ``text`` into it (and the leases study); False if someone created it first."""
        try:
            study_id = self.storage.create_new_study(
                [StudyDirection.MINIMIZE], self.epoch_study_name(client_id, epoch)
            )
        except DuplicatedStudyError:
            return False
        self.storage.set_study_system_attr(study_id, EPOCH_RECORD_KEY, text)
        self.storage.set_study_system_attr(self._id(), LEASE_PREFIX + client_id, text)
        return True

    def write(self, client_id: str, epoch: int, text: str) -> None:
        """Write a signed record of ``epoch`` in both places."""
        self.storage.set_study_system_attr(self._id(), LEASE_PREFIX + client_id, text)
        study_id = self.store._study_id(self.epoch_study_name(client_id, epoch))
        self.storage.set_study_system_attr(study_id, EPOCH_RECORD_KEY, text)


_BOOKS_LOCK = threading.Lock()


def lease_book(federation: Federation) -> LeaseBook:
    """The lease book of a federation handle (one per handle: it remembers what it verified)."""
    with _BOOKS_LOCK:
        book = getattr(federation, "_lease_book", None)
        if book is None:
            book = LeaseBook(federation)
            federation._lease_book = book  # type: ignore[attr-defined]
        return book


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
