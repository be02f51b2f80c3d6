"""The lease book: a federation's lease records, verified, and the newest one of each participant.

Readers (the server, ``optuna-fedbo status``, participants) see participants through a
:class:`LeaseBook` (one per federation handle, :func:`lease_book`): it keeps only records that
verify against the participant's enrolled key (:mod:`.lease_record`), warns once per participant
and problem about any other, and remembers the newest record it verified of each participant, so
that an older record written back (a replay) changes nothing for it. See :mod:`.lease` for what
the records are for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
import math
import threading
import time
from typing import Any
from typing import TYPE_CHECKING

from optuna.exceptions import DuplicatedStudyError
from optuna.study import StudyDirection

from optuna_fedbo.federation.lease_record import LeaseRecord
from optuna_fedbo.federation.lease_record import open_private
from optuna_fedbo.federation.lease_record import verify_lease
from optuna_fedbo.federation.trust import UntrustedRecordError

if TYPE_CHECKING:
    from optuna_fedbo.federation.federation import Federation

LEASE_PREFIX = "l:"
#: The key of the record in an epoch's study.
EPOCH_RECORD_KEY = "lease"
#: Verified records kept per reader, by stored text (re-reads cost no signature check).
_CACHE = 4096


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

    def _looks_departed(self, client_id: str) -> bool:
        with self._lock:
            return self._tracks[client_id].record.status(time.time()) != "active"

    def states(self) -> dict[str, ParticipantState]:
        """Every participant's lifecycle state, by id, from the newest verified records
        (participants never seen are absent).

        A participant whose record in the leases study does not verify, is older than one seen
        before (overwritten by someone else) or shows it finished or lost (maybe an old copy) is
        looked up in the studies of its epoch and the next ones.
        """
        roster = set(self.federation.participants())
        for client_id, text in self.records().items():
            if client_id not in roster:
                self.store.warn_once(
                    "lease:not-enrolled",
                    f"Ignoring lease records of ids not enrolled in federation {self.name!r} "
                    f"(e.g. {client_id!r}).",
                )
            elif not self._read(client_id, text) or self._looks_departed(client_id):
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

        Each one's newest verified record shows it finished or lost (confirmed in the epoch
        studies, see :meth:`states`), and that cannot be an old copy: this reader saw the
        participant live before, or the record has been the newest for half its ``ttl`` (a live
        participant heartbeats every quarter).
        """
        self.states()
        now, clock = time.time(), time.monotonic()
        with self._lock:
            for client_id in client_ids:
                track = self._tracks.get(client_id)
                if track is None or track.record.status(now) == "active":
                    return False
                if not (track.seen_live or clock - track.since >= track.record.ttl / 2):
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


__all__ = ["LeaseBook", "ParticipantState", "lease_book"]
