"""The federation's state inside an Optuna storage: an untrusted relay.

Everyone who holds the storage URL can read and write everything here, so nothing is trusted
because of where it is: uploads are sealed to the server and signed by their participant, and
every record the server writes is signed by it and verified by whoever reads it
(:mod:`optuna_fedbo.federation.trust`). Layout (``NAME`` is the federation name; every write has
a single writer, because Optuna's attribute writes are last-writer-wins):

* study ``NAME`` -- what every participant reads. Study system attributes ``fedbo:config``
  (canonical JSON, holding the server's public keys), ``fedbo:config_signature`` and
  ``fedbo:config_hash`` (written once at creation), ``fedbo:latest`` (signed pointer to the
  newest broadcast) and ``fedbo:server`` (the server's signed heartbeat). Each trial is one
  broadcast: system attributes ``fedbo:round`` and ``fedbo:broadcast`` (the signed payload),
  state ``COMPLETE`` once published (``RUNNING`` while staged, ``FAIL`` with the payload erased
  once abandoned), value = number of contributors.
* study ``NAME:fedbo:participants`` -- one trial per enrollment, signed by the server (the
  participant's id and public signing key); the roster is the first ``N`` distinct enrolled ids
  in trial-number order, so a participant's index never changes once it is enrolled.
* study ``NAME:fedbo:uploads:RRRRRR`` per open round -- the sealed uploads, which only the
  server can open: one system attribute ``u:<client_id>`` per participant (a second upload in
  the same round overwrites the first, so it cannot count twice). The server deletes the study
  once the round is published, so a late upload fails and uploads do not outlive their round.
* studies ``NAME:fedbo:server:EEEEEE`` -- one per server start (its *epoch*): a server claims
  the next free epoch by creating the study, which only one writer can do, signs the claim,
  and stops publishing as soon as a later signed claim exists.
* study ``NAME:fedbo:ledger`` -- the privacy ledger of a differentially private federation,
  written by the server only and readable by everyone: one signed, append-only entry
  ``r:RRRRRR:<digest>`` per payload that ever becomes readable (written before the payload is).
  When the privacy budget is exhausted the server writes a signed ``fedbo:budget_exhausted``
  to the main study.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
import json
import os
import threading
import time
from typing import Any

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage
from optuna.storages import InMemoryStorage
from optuna.storages import RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal import JournalStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.federation._damage import FederationNotFoundError
from optuna_fedbo.federation._damage import missing_config
from optuna_fedbo.federation._damage import missing_main_study
from optuna_fedbo.federation._fresh import Freshness
from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.federation.trust import UntrustedRecordError

_logger = optuna.logging.get_logger(__name__)

CONFIG_KEY = "fedbo:config"
CONFIG_HASH_KEY = "fedbo:config_hash"
CONFIG_SIGNATURE_KEY = "fedbo:config_signature"
ENROLLMENT_KEY = "fedbo:enrollment"
EPOCH_KEY = "fedbo:epoch"
PURGED = "purged"
LATEST_KEY = "fedbo:latest"
SERVER_KEY = "fedbo:server"
ROUND_KEY = "fedbo:round"
BROADCAST_KEY = "fedbo:broadcast"
CLIENT_KEY = "fedbo:client"
OPENED_KEY = "fedbo:opened_at"
UPLOAD_PREFIX = "u:"
LEDGER_PREFIX = "r:"
BUDGET_EXHAUSTED_KEY = "fedbo:budget_exhausted"

#: Longest accepted participant id (RDB attribute keys are limited to 512 characters).
MAX_CLIENT_ID_LENGTH = 128

#: Seconds SQLite waits on a locked database before failing (the default 5 s is too short for
#: a few processes writing at once).
SQLITE_TIMEOUT = 60.0


def resolve_storage(storage: str | BaseStorage | None, *, must_exist: bool = False) -> BaseStorage:
    """Turn a storage argument into an Optuna storage.

    Args:
        storage: ``None`` (a new in-memory storage: one process only), a storage object, an RDB
            URL (``sqlite:///fed.db``, ``postgresql://user:pw@host/db``, ...), or a journal file
            as ``journal:PATH`` or any path ending in ``.log`` / ``.jsonl``.
        must_exist: Refuse a SQLite or journal file that does not exist (loading a federation
            never creates a file at a mistyped path).

    Returns:
        The storage.

    Raises:
        FederationNotFoundError: With ``must_exist``, for a file that does not exist.
        ValueError: For a malformed URL, a missing directory, or a storage that cannot be
            opened (one line, naming the URL).
    """
    if storage is None:
        return InMemoryStorage()
    if isinstance(storage, BaseStorage):
        return storage
    if not isinstance(storage, str) or not storage:
        raise ValueError(f"storage must be None, a URL or a BaseStorage, got {storage!r}.")
    journal = None
    if storage.startswith("journal:"):
        journal = storage[len("journal:") :]
    elif "://" not in storage and storage.endswith((".log", ".jsonl")):
        journal = storage
    if journal is not None:
        _check_file(storage, journal, must_exist)
        return JournalStorage(JournalFileBackend(journal))
    if "://" not in storage:
        raise ValueError(
            f"Cannot open storage {storage!r}: not a URL (e.g. sqlite:///fed.db, "
            "postgresql://user:password@host/db) nor a journal file (journal:PATH or PATH.log)."
        )
    try:
        if storage.startswith("sqlite"):
            from sqlalchemy.engine import make_url

            database = make_url(storage).database
            if database and database != ":memory:" and not database.startswith("file:"):
                _check_file(storage, database, must_exist)
            return _open_rdb(
                lambda: RDBStorage(
                    storage, engine_kwargs={"connect_args": {"timeout": SQLITE_TIMEOUT}}
                )
            )
        return _open_rdb(lambda: optuna.storages.get_storage(storage))
    except (FederationNotFoundError, ValueError):
        raise
    except Exception as error:
        text = str(error).strip().splitlines()
        raise ValueError(
            f"Cannot open storage {storage!r}: {type(error).__name__}: "
            f"{text[0] if text else 'no details'}"
        ) from None


def _open_rdb(open_storage: Callable[[], BaseStorage]) -> BaseStorage:
    """Open an RDB storage, retrying while another process is creating the same fresh schema.

    Optuna creates the tables and stamps the schema version on first use without a lock, so two
    processes opening one new database at the same moment (a server and its participants started
    together) can collide: "table ... already exists" or a duplicate schema-version row. The
    loser's retry finds the schema complete.
    """
    import sqlalchemy.exc

    attempt = 1
    while True:
        try:
            return optuna.storages.get_storage(open_storage())
        except sqlalchemy.exc.DBAPIError as error:
            concurrent_creation = isinstance(error, sqlalchemy.exc.IntegrityError) or (
                "already exists" in str(error)
            )
            if not concurrent_creation or attempt == _SCHEMA_RACE_ATTEMPTS:
                raise
        time.sleep(0.05 * attempt)
        attempt += 1


_SCHEMA_RACE_ATTEMPTS = 6


def _check_file(storage: str, path: str, must_exist: bool) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(
            f"Cannot open storage {storage!r}: directory {directory!r} does not exist."
        )
    if must_exist and not os.path.exists(path):
        raise FederationNotFoundError(
            f"No federation in storage {storage!r}: the file {path!r} does not exist."
        )


def check_client_id(client_id: Any) -> str:
    """Validate a participant id: a non-empty printable string of at most 128 characters."""
    if not isinstance(client_id, str) or not client_id:
        raise ValueError(f"client_id must be a non-empty string, got {client_id!r}.")
    if len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise ValueError(
            f"client_id must have at most {MAX_CLIENT_ID_LENGTH} characters, got {len(client_id)}."
        )
    if not client_id.isprintable():
        raise ValueError(f"client_id must be printable, got {client_id!r}.")
    return client_id


class ServerSupersededError(RuntimeError):
    """Another server has started on the federation: this one must not publish any more."""


@dataclass(frozen=True)
class StoredBroadcast:
    """A broadcast trial whose server signature verifies.

    Attributes:
        trial_id: Its trial.
        state: ``RUNNING`` (staged), ``COMPLETE`` (published) or ``FAIL`` (abandoned).
        round: The round (signed).
        payload: The protocol's broadcast text (signed).
        digest: SHA-256 of ``payload``: what the privacy ledger binds.
        epoch: The epoch of the server that staged it.
        receipts: Digests of the uploads the server received in time for the round.
        ledger_count: Ledger entries when it was staged (0 without differential privacy).
        value: The trial's value (number of contributors once published; ``-1`` withheld).
    """

    trial_id: int
    state: TrialState
    round: int
    payload: str
    digest: str
    epoch: int
    receipts: tuple[str, ...]
    ledger_count: int
    value: float | None


class FederationStore:
    """Reads and writes the federation's records in an Optuna storage (see the module doc).

    Every record that matters is signed by the server and verified here when read (with
    :attr:`trust`, set once the configuration verified): a record that does not verify is left
    out with a warning (logged once per record), never used.

    Args:
        storage: The storage.
        name: The federation name.
    """

    def __init__(self, storage: BaseStorage, name: str) -> None:
        self.storage = storage
        self.name = name
        self._study_ids: dict[str, int] = {}
        self._lock = threading.Lock()
        self.trust: Trust | None = None
        self._warned: set[str] = set()
        self._enrollments: dict[int, tuple[str, bytes] | None] = {}
        self._fresh = Freshness(self)  # the newest pointer and heartbeat: never backwards
        self._ledger_cache: dict[str, tuple[Any, dict[str, Any]]] = {}

    def _trust(self) -> Trust:
        if self.trust is None:
            raise RuntimeError("The federation's configuration has not been verified yet.")
        return self.trust

    def warn_once(self, key: str, message: str) -> None:
        """Log a warning about an untrusted record once per record."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        _logger.warning(message)

    # ----------------------------------------------------------------------------- names
    @property
    def participants_study_name(self) -> str:
        return f"{self.name}:fedbo:participants"

    def uploads_study_name(self, round_index: int) -> str:
        return f"{self.name}:fedbo:uploads:{round_index:06d}"

    def _study_id(self, study_name: str) -> int:
        with self._lock:
            if study_name in self._study_ids:
                return self._study_ids[study_name]
        study_id = self.storage.get_study_id_from_name(study_name)
        with self._lock:
            self._study_ids[study_name] = study_id
        return study_id

    def _forget(self, study_name: str) -> None:
        with self._lock:
            self._study_ids.pop(study_name, None)

    def _create_study(self, study_name: str) -> int:
        try:
            study_id = self.storage.create_new_study([StudyDirection.MINIMIZE], study_name)
        except DuplicatedStudyError:
            study_id = self.storage.get_study_id_from_name(study_name)
        with self._lock:
            self._study_ids[study_name] = study_id
        return study_id

    # ------------------------------------------------------------------------ creation
    def create(self, config_json: str, config_hash: str, signature: str) -> None:
        """Create the federation's studies; the (signed) configuration is written last.

        Raises:
            optuna.exceptions.DuplicatedStudyError: If a study named like the federation exists.
        """
        main_id = self.storage.create_new_study([StudyDirection.MINIMIZE], self.name)
        with self._lock:
            self._study_ids[self.name] = main_id
        self._create_study(self.participants_study_name)
        self.open_uploads(0)
        self.storage.set_study_system_attr(main_id, CONFIG_HASH_KEY, config_hash)
        self.storage.set_study_system_attr(main_id, CONFIG_SIGNATURE_KEY, signature)
        self.storage.set_study_system_attr(main_id, CONFIG_KEY, config_json)

    def read_config(self, wait: float = 0.0) -> tuple[str, Any]:
        """The stored ``(config_json, signature)`` (unverified: see ``Federation.load``).

        Args:
            wait: Seconds to wait for a federation being created by another process.

        Raises:
            FederationNotFoundError: If there is no federation of that name.
        """
        deadline = time.monotonic() + wait
        while True:
            try:
                attrs = self.main_attrs()
            except KeyError:
                attrs = None
            if attrs is not None and CONFIG_KEY in attrs:
                return attrs[CONFIG_KEY], attrs.get(CONFIG_SIGNATURE_KEY)
            if time.monotonic() >= deadline:
                raise missing_main_study(self) if attrs is None else missing_config(self)
            time.sleep(0.05)

    def main_attrs(self) -> dict[str, Any]:
        """The main study's system attributes (a copy); ``FederationNotFoundError`` if the
        main study is missing (``FederationDamagedError`` if it was deleted)."""
        try:
            return dict(self.storage.get_study_system_attrs(self._study_id(self.name)))
        except KeyError:
            self._forget(self.name)
            raise missing_main_study(self) from None

    # ---------------------------------------------------------------------- participants
    def register(self, client_id: str, enrollment: str) -> None:
        """Append a server-signed enrollment (atomically created with the id)."""
        template = FrozenTrial(
            number=-1,
            state=TrialState.COMPLETE,
            value=0.0,
            datetime_start=datetime.now(),
            datetime_complete=datetime.now(),
            params={},
            distributions={},
            user_attrs={},
            system_attrs={CLIENT_KEY: client_id, ENROLLMENT_KEY: enrollment},
            intermediate_values={},
            trial_id=-1,
        )
        self.storage.create_new_trial(self._study_id(self.participants_study_name), template)

    def roster(self) -> dict[str, bytes]:
        """Enrolled participants (id -> public key) in order of enrollment.

        Only enrollments signed by the server count (the first one of each id); anything else
        in the participants study is ignored with a warning.
        """
        trust = self._trust()
        trials = self.storage.get_all_trials(
            self._study_id(self.participants_study_name), deepcopy=False
        )
        roster: dict[str, bytes] = {}
        for trial in sorted(trials, key=lambda t: t.number):
            if trial.number not in self._enrollments:
                client = trial.system_attrs.get(CLIENT_KEY)
                try:
                    key = trust.verify_enrollment(trial.system_attrs.get(ENROLLMENT_KEY), client)
                    entry: tuple[str, bytes] | None = (client, key)
                except UntrustedRecordError as error:
                    self.warn_once(
                        f"enroll:{trial.number}",
                        f"Ignoring participant record #{trial.number} ({client!r}) of federation "
                        f"{self.name!r}: {error}.",
                    )
                    entry = None
                self._enrollments[trial.number] = entry
            entry = self._enrollments[trial.number]
            if entry is not None and entry[0] not in roster:
                roster[entry[0]] = entry[1]
        return roster

    # -------------------------------------------------------------------------- uploads
    def open_uploads(self, round_index: int) -> None:
        """Create the uploads study of a round (idempotent) and stamp its opening time."""
        study_id = self._create_study(self.uploads_study_name(round_index))
        attrs = self.storage.get_study_system_attrs(study_id)
        if OPENED_KEY not in attrs:
            self.storage.set_study_system_attr(study_id, OPENED_KEY, time.time())
            self.storage.set_study_system_attr(study_id, ROUND_KEY, round_index)

    def write_upload(self, round_index: int, client_id: str, payload: str) -> None:
        """Write (or overwrite) a participant's upload for a round.

        Raises:
            KeyError: If the round's uploads study does not exist (closed and discarded).
        """
        study_name = self.uploads_study_name(round_index)
        try:
            study_id = self._study_id(study_name)
            self.storage.set_study_system_attr(study_id, UPLOAD_PREFIX + client_id, payload)
        except KeyError:
            self._forget(study_name)
            raise

    def read_uploads(self, round_index: int) -> dict[str, str]:
        """The raw uploads of a round, by participant id (empty if the study is gone)."""
        study_name = self.uploads_study_name(round_index)
        try:
            attrs = dict(self.storage.get_study_system_attrs(self._study_id(study_name)))
        except KeyError:
            self._forget(study_name)
            return {}
        return {
            key[len(UPLOAD_PREFIX) :]: value
            for key, value in attrs.items()
            if key.startswith(UPLOAD_PREFIX)
        }

    def upload_keys(self, round_index: int) -> list[str]:
        """Ids of the participants with an upload in a round (for status displays)."""
        return sorted(self.read_uploads(round_index))

    def discard_uploads(self, round_index: int) -> None:
        """Delete a closed round's uploads study (no-op if it is already gone)."""
        study_name = self.uploads_study_name(round_index)
        try:
            self.storage.delete_study(self._study_id(study_name))
        except KeyError:
            pass
        self._forget(study_name)

    # ------------------------------------------------------------------------ broadcasts
    def latest(self) -> dict[str, Any] | None:
        """The server-signed pointer to the newest published broadcast (``None`` before it).

        A pointer that does not verify is ignored with a warning, and so is one older than the
        newest this process has seen (a rollback or a replay); a process starts from the newest
        verified published broadcast (:class:`~optuna_fedbo.federation._fresh.Freshness`).
        """
        return self._fresh.latest(self.main_attrs().get(LATEST_KEY))

    def sign_broadcast(
        self,
        round_index: int,
        payload: str,
        *,
        epoch: int,
        receipts: tuple[str, ...] = (),
        ledger_count: int = 0,
    ) -> str:
        """The server-signed broadcast record of ``payload`` (what :meth:`stage_broadcast`
        writes)."""
        return self._trust().sign(
            "broadcast",
            {
                "round": int(round_index),
                "payload": payload,
                "epoch": int(epoch),
                "receipts": sorted(receipts),
                "ledger_count": int(ledger_count),
            },
        )

    def _verified(self, trial: FrozenTrial) -> StoredBroadcast | None:
        stored = trial.system_attrs.get(BROADCAST_KEY)
        if stored == PURGED:
            return None
        try:
            body = self._trust().verify("broadcast", stored)
            payload = body["payload"]
            if not isinstance(payload, str) or body["round"] != trial.system_attrs.get(ROUND_KEY):
                raise UntrustedRecordError("the broadcast record is malformed")
            return StoredBroadcast(
                trial_id=trial._trial_id,
                state=trial.state,
                round=int(body["round"]),
                payload=payload,
                digest=text_digest(payload),
                epoch=int(body["epoch"]),
                receipts=tuple(str(r) for r in body["receipts"]),
                ledger_count=int(body["ledger_count"]),
                value=trial.value,
            )
        except (UntrustedRecordError, KeyError, TypeError, ValueError) as error:
            self.warn_once(
                f"broadcast:{trial._trial_id}:{text_digest(str(stored))}",
                f"Ignoring broadcast trial #{trial.number} of federation {self.name!r}: {error}.",
            )
            return None

    def read_broadcast(self, trial_id: int) -> tuple[int, str]:
        """``(round, payload)`` of a broadcast trial, verified.

        Raises:
            UntrustedRecordError: If it does not verify.
        """
        broadcast = self.read_verified_broadcast(trial_id)
        return broadcast.round, broadcast.payload

    def read_verified_broadcast(self, trial_id: int) -> StoredBroadcast:
        """The verified broadcast of a trial.

        Raises:
            UntrustedRecordError: If it does not verify.
        """
        broadcast = self._verified(self.storage.get_trial(trial_id))
        if broadcast is None:
            raise UntrustedRecordError(f"broadcast trial {trial_id} does not verify")
        return broadcast

    def broadcast_trials(self) -> list[FrozenTrial]:
        """All broadcast trials as stored (staged, published, abandoned; unverified)."""
        trials = self.storage.get_all_trials(self._study_id(self.name), deepcopy=False)
        return sorted((t for t in trials if ROUND_KEY in t.system_attrs), key=lambda t: t.number)

    def broadcasts(self) -> list[StoredBroadcast]:
        """Every broadcast whose signature verifies, by trial number (others: warned, left out)."""
        verified = (self._verified(t) for t in self.broadcast_trials())
        return [b for b in verified if b is not None]

    def stage_broadcast(self, round_index: int, signed: str) -> int:
        """Write a signed broadcast (:meth:`sign_broadcast`) as a ``RUNNING`` trial.

        It is readable by anyone from now on: with differential privacy its payload must be
        in the privacy ledger already.
        """
        template = FrozenTrial(
            number=-1,
            state=TrialState.RUNNING,
            value=None,
            datetime_start=datetime.now(),
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs={},
            system_attrs={ROUND_KEY: round_index, BROADCAST_KEY: signed},
            intermediate_values={},
            trial_id=-1,
        )
        return self.storage.create_new_trial(self._study_id(self.name), template)

    def commit_broadcast(self, trial_id: int, round_index: int, n_contributors: int) -> None:
        """Publish a staged broadcast: complete its trial, then move the signed ``latest``
        pointer."""
        trial = self.storage.get_trial(trial_id)
        if trial.state == TrialState.RUNNING:
            self.storage.set_trial_state_values(
                trial_id, TrialState.COMPLETE, [float(n_contributors)]
            )
        pointer = {
            "round": int(round_index),
            "trial_id": int(trial_id),
            "digest": text_digest(str(trial.system_attrs.get(BROADCAST_KEY))),
            "published_at": time.time(),
        }
        self.storage.set_study_system_attr(
            self._study_id(self.name), LATEST_KEY, self._trust().sign("latest", pointer)
        )

    def purge_broadcast(self, trial_id: int) -> None:
        """Abandon a staged broadcast: erase its payload, then mark the trial failed."""
        trial = self.storage.get_trial(trial_id)
        if trial.state == TrialState.RUNNING:
            self.storage.set_trial_system_attr(trial_id, BROADCAST_KEY, PURGED)
            self.storage.set_trial_state_values(trial_id, TrialState.FAIL)

    # ---------------------------------------------------------------------------- ledger
    @property
    def ledger_study_name(self) -> str:
        return f"{self.name}:fedbo:ledger"

    def write_ledger_entry(self, key: str, body: dict[str, Any]) -> None:
        """Write a ledger entry under ``key`` (``r:RRRRRR:<payload digest>``), signed."""
        study_name = self.ledger_study_name
        try:
            study_id = self._study_id(study_name)
        except KeyError:
            self._forget(study_name)
            study_id = self._create_study(study_name)
        self.storage.set_study_system_attr(study_id, key, self._trust().sign("ledger", body))

    def read_ledger(self) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """The ledger entries whose signature verifies (key -> body, by key) and the problems of
        those that do not (empty if nothing was accounted)."""
        study_name = self.ledger_study_name
        try:
            attrs = dict(self.storage.get_study_system_attrs(self._study_id(study_name)))
        except KeyError:
            self._forget(study_name)
            return {}, []
        entries: dict[str, dict[str, Any]] = {}
        problems: list[str] = []
        for key in sorted(attrs):
            if not key.startswith(LEDGER_PREFIX):
                continue
            cached = self._ledger_cache.get(key)
            if cached is not None and cached[0] == attrs[key]:
                entries[key] = cached[1]
                continue
            try:
                body = self._trust().verify("ledger", attrs[key])
                if ledger_key(body.get("round"), body.get("payload")) != key:
                    raise UntrustedRecordError("it is stored under another key (a copy)")
            except (UntrustedRecordError, TypeError, ValueError) as error:
                problems.append(f"entry {key!r}: {error}")
                continue
            self._ledger_cache[key] = (attrs[key], body)
            entries[key] = body
        return entries, problems

    def mark_budget_exhausted(self, record: dict[str, Any]) -> None:
        """Record (signed) that the server stopped publishing because of the privacy budget."""
        self.storage.set_study_system_attr(
            self._study_id(self.name), BUDGET_EXHAUSTED_KEY, self._trust().sign("budget", record)
        )

    def budget_exhausted(self) -> dict[str, Any] | None:
        """The server's budget-exhausted record, or ``None`` (a forged one: warned, ignored)."""
        value = self.main_attrs().get(BUDGET_EXHAUSTED_KEY)
        if value is None:
            return None
        try:
            return self._trust().verify("budget", value)
        except UntrustedRecordError as error:
            self.warn_once(
                f"budget:{text_digest(str(value))}",
                f"Ignoring the budget-exhausted record of federation {self.name!r}: {error}.",
            )
            return None

    # ---------------------------------------------------------------------------- server
    def server_epoch_study_name(self, epoch: int) -> str:
        return f"{self.name}:fedbo:server:{epoch:06d}"

    def has_server_epoch(self, epoch: int) -> bool:
        """Whether a study of ``epoch`` exists (claimed, or being claimed)."""
        try:
            self.storage.get_study_id_from_name(self.server_epoch_study_name(epoch))
        except KeyError:
            return False
        return True

    def _signed_epoch(self, epoch: int) -> bool:
        """Whether ``epoch`` was claimed by a server holding the federation's keys."""
        try:
            study_id = self.storage.get_study_id_from_name(self.server_epoch_study_name(epoch))
            value = self.storage.get_study_system_attrs(study_id).get(EPOCH_KEY)
        except KeyError:
            return False
        if value is None:
            return False  # being claimed: its server signs it right after creating it
        try:
            return self._trust().verify("epoch", value).get("epoch") == epoch
        except UntrustedRecordError as error:
            self.warn_once(
                f"epoch:{epoch}",
                f"Ignoring server epoch {epoch} of federation {self.name!r}: {error}.",
            )
            return False

    def superseded(self, epoch: int) -> int | None:
        """The newer epoch a server-signed claim made after ``epoch``, or ``None``.

        Epoch studies anyone may create; only signed claims count, so a forged one cannot stop
        the server.
        """
        newer = epoch + 1
        while self.has_server_epoch(newer):
            if self._signed_epoch(newer):
                return newer
            newer += 1
        return None

    def claim_server_epoch(
        self, start: int = 1, reserve: Callable[[int], bool] | None = None
    ) -> int:
        """Claim the next server epoch from ``start`` on: ``1 +`` the newest claimed one (and
        reserved by ``reserve``, see :mod:`.epoch_pin`), then sign the claim.

        Creating a study is the storage's one write that a single writer wins (a second create
        of the same name raises ``DuplicatedStudyError``), so two servers starting at once get
        different epochs. Epochs are claimed in order, so a server of epoch ``e`` has been
        superseded exactly when a later epoch holds a signed claim.
        """
        epoch = start
        while True:
            while self.has_server_epoch(epoch):
                epoch += 1
            if reserve is not None and not reserve(epoch):
                epoch += 1
                continue
            try:
                study_id = self.storage.create_new_study(
                    [StudyDirection.MINIMIZE], self.server_epoch_study_name(epoch)
                )
            except DuplicatedStudyError:
                epoch += 1  # another server claimed it first: try the next one
                continue
            claim = {"epoch": epoch, "claimed_at": time.time()}
            self.storage.set_study_system_attr(
                study_id, EPOCH_KEY, self._trust().sign("epoch", claim)
            )
            return epoch

    def write_server_status(self, status: dict[str, Any]) -> None:
        self.storage.set_study_system_attr(
            self._study_id(self.name), SERVER_KEY, self._trust().sign("heartbeat", status)
        )

    def server_status(self) -> dict[str, Any] | None:
        """The server's signed heartbeat, or ``None`` (a forged or older one: warned, ignored)."""
        value = self.main_attrs().get(SERVER_KEY)
        if value is None:
            return None
        try:
            status = self._trust().verify("heartbeat", value)
        except UntrustedRecordError as error:
            self.warn_once(
                f"heartbeat:{text_digest(str(value))}",
                f"Ignoring the server heartbeat of federation {self.name!r}: {error}.",
            )
            return None
        return self._fresh.heartbeat(status)  # an older one (replayed): warned, ignored


def ledger_key(round_index: Any, payload_digest: Any) -> str:
    """The ledger key of the entry accounting one payload of a round."""
    if isinstance(round_index, bool) or not isinstance(round_index, int):
        raise ValueError("malformed round")
    if not isinstance(payload_digest, str) or len(payload_digest) != 64:
        raise ValueError("malformed payload digest")
    return f"{LEDGER_PREFIX}{round_index:06d}:{payload_digest[:32]}"


def loads_object(text: Any) -> dict[str, Any]:
    """Parse a JSON object stored as a string.

    Raises:
        ValueError: If ``text`` is not a string holding a JSON object.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a JSON string, got {type(text).__name__}")
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError("not valid JSON") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value
