"""The lease book: a federation's lease records, verified, and the newest one of each participant.

Readers (the server, ``optuna-fedbo status``, participants) see participants through a
:class:`LeaseBook` (one per federation handle, :func:`lease_book`): it keeps only records that
verify against the participant's enrolled key (:mod:`.lease_record`), warns once per participant
and problem about any other, and remembers the newest record it verified of each *worker* of a
participant (a worker is one process; each claims its own epoch), so that an older record written
back (a replay) changes nothing for it. A participant (a site) is active while any of its workers
is; otherwise it shows as its last worker to end did (finished or lost). See :mod:`.lease` for
what the records are for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
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
        workers: How many of its workers (processes) hold a live lease.
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
    workers: int = 0

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
            "workers": self.workers,
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
    """What a reader knows of one worker of a participant: its newest verified record, since
    when it has been the newest (monotonic), and whether the reader has seen it live."""

    record: LeaseRecord
    since: float
    seen_live: bool
    #: Whether the record was found in its epoch's study (not only in the leases study).
    confirmed: bool = False


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
        self._tracks: dict[str, dict[int, _Track]] = {}
        #: Epoch studies read at least once, by participant.
        self._read_epochs: dict[str, set[int]] = {}
        self._verified: dict[str, LeaseRecord] = {}
        self._opened: dict[tuple[str, int, str], dict[str, Any]] = {}

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
        """Keep ``record`` if it is its worker's newest verified one (a worker is an epoch);
        an older one (a replay) is ignored."""
        live = record.status(now) == "active"
        with self._lock:
            tracks = self._tracks.setdefault(record.client_id, {})
            track = tracks.get(record.epoch)
            if track is None:
                tracks[record.epoch] = _Track(record, time.monotonic(), live)
                return
            if record.mark > track.record.mark:
                track.record, track.since = record, time.monotonic()
                track.confirmed = False
            if record.mark >= track.record.mark:
                track.seen_live = track.seen_live or live

    def _private(self, record: LeaseRecord) -> dict[str, Any]:
        """The sealed fields of ``record`` if this process holds the server's keys, else ``{}``."""
        trust = self.federation.trust
        if trust.server_keys is None:
            return {}
        # Keyed by what the sealed fields are bound to as well: a participant's record carrying
        # another's sealed fields (copied) must fail to open, not find them in the cache.
        key = (record.client_id, record.epoch, record.sealed)
        with self._lock:
            cached = self._opened.get(key)
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
            self._opened[key] = fields
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
            workers=int(record.status(now) == "active"),
        )

    def workers(self, client_id: str) -> dict[int, LeaseRecord]:
        """The newest verified record of each worker (epoch) of ``client_id`` seen so far."""
        with self._lock:
            return {e: t.record for e, t in self._tracks.get(client_id, {}).items()}

    def live_workers(self, client_id: str) -> int:
        """How many of ``client_id``'s workers this reader last saw live (no storage read)."""
        now = time.time()
        return sum(r.status(now) == "active" for r in self.workers(client_id).values())

    def site_state(self, client_id: str, now: float | None = None) -> ParticipantState | None:
        """A participant's state over its workers: active while any worker is (the newest
        heartbeat; the counts summed over every worker); else as its last worker to end."""
        now = time.time() if now is None else now
        records = list(self.workers(client_id).values())
        if not records:
            return None
        live = [r for r in records if r.status(now) == "active"]
        shown = max(live or records, key=lambda r: (r.time, r.mark))
        state = self.state_of(shown, now)
        counts: dict[str, int] | None = None
        durations = []
        for record in records:
            private = self._private(record)
            if private.get("counts") is not None:
                counts = counts or {}
                for kind, n in private["counts"].items():
                    counts[kind] = counts.get(kind, 0) + n
            if record in live and private.get("trial_seconds") is not None:
                durations.append(private["trial_seconds"])
        return replace(
            state,
            counts=counts,
            trial_seconds=max(durations) if durations else state.trial_seconds,
            workers=len(live),
        )

    def _read(self, client_id: str, text: Any) -> None:
        """Verify and keep a record read from the leases study."""
        record = self._verify(client_id, text)
        if record is not None:
            self._observe(record, time.time())

    def states(self) -> dict[str, ParticipantState]:
        """Every participant's lifecycle state over its workers, by id, from the newest
        verified records (participants never seen are absent).

        The leases study holds the record a participant's workers wrote last; each worker's
        own records are read from the study of its epoch (from the lowest epoch that was live
        or not yet confirmed there on).
        """
        roster = set(self.federation.participants())
        for client_id, text in self.records().items():
            if client_id not in roster:
                self.store.warn_once(
                    "lease:not-enrolled",
                    f"Ignoring lease records of ids not enrolled in federation {self.name!r} "
                    f"(e.g. {client_id!r}).",
                )
                continue
            self._read(client_id, text)
            self._scan_epochs(client_id)
        now = time.time()
        with self._lock:
            clients = list(self._tracks)
        states = {c: self.site_state(c, now) for c in clients}
        return {c: s for c, s in states.items() if s is not None}

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

    def scan(self, client_id: str, *, wait: float = 0.0) -> tuple[dict[int, LeaseRecord], int]:
        """The newest verified record of each of the participant's workers (by epoch), looking
        in both places, and the highest epoch whose study exists (0 if none).

        Args:
            client_id: The participant.
            wait: Seconds to wait for the record of the highest epoch's study if it has none
                yet (its claimer writes it right after creating the study).
        """
        text = self.records().get(client_id)
        if text is not None:
            self._read(client_id, text)
        top = self._scan_epochs(client_id, wait)
        return self.workers(client_id), top

    def _scan_epochs(self, client_id: str, wait: float = 0.0) -> int:
        """Read the epoch studies from the lowest epoch whose worker was live or is not yet
        confirmed there, on; the highest that exists."""
        now = time.time()
        with self._lock:
            tracks = self._tracks.get(client_id, {})
            read = self._read_epochs.setdefault(client_id, set())
            open_epochs = [
                e for e, t in tracks.items() if not t.confirmed or t.record.status(now) == "active"
            ]
            unread = [e for e in range(1, max(tracks, default=1)) if e not in read]
            epoch = max(min(open_epochs + unread, default=max(tracks, default=1)), 1)
        start, top = epoch, 0
        while (attrs := self._epoch_attrs(client_id, epoch)) is not None or epoch <= start:
            epoch += 1
            if attrs is None:
                continue  # the known epoch's study is gone (deleted): look on
            top = epoch - 1
            value = attrs.get(EPOCH_RECORD_KEY)
            if value is None and wait > 0 and self._epoch_attrs(client_id, top + 1) is None:
                value = self._await_record(client_id, top, wait)
            record = None if value is None else self._verify(client_id, value)
            with self._lock:
                read.add(top)
            if record is not None and record.epoch == top:
                self._observe(record, time.time())
                with self._lock:
                    track = self._tracks[client_id][top]
                    track.confirmed = track.confirmed or record.mark >= track.record.mark
        return top

    def departed(self, client_ids: Iterable[str]) -> bool:
        """Whether every one of the participants has departed beyond doubt (to end ``serve``).

        Each one's workers' newest verified records show them finished or lost (confirmed in
        the epoch studies, see :meth:`states`), and none can be an old copy: this reader saw
        the worker live before, or the record has been the newest for half its ``ttl`` (a
        live worker heartbeats every quarter).
        """
        self.states()
        now, clock = time.time(), time.monotonic()
        with self._lock:
            for client_id in client_ids:
                tracks = self._tracks.get(client_id)
                if not tracks:
                    return False
                for track in tracks.values():
                    if track.record.status(now) == "active":
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
