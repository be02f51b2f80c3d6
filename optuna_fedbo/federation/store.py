"""The federation's state inside an Optuna storage.

Layout (``NAME`` is the federation name; every write has a single writer, because Optuna's
attribute writes are last-writer-wins):

* study ``NAME`` -- what every participant reads. Study system attributes ``fedbo:config``
  (canonical JSON) and ``fedbo:config_hash`` (written once at creation), ``fedbo:latest``
  (pointer to the newest broadcast) and ``fedbo:server`` (the server's heartbeat), both written
  by the server only. Each trial is one published broadcast: system attributes
  ``fedbo:round`` and ``fedbo:broadcast`` (the payload), state ``COMPLETE`` once published
  (``RUNNING`` while staged), value = number of contributors.
* study ``NAME:fedbo:participants`` -- one trial per join, created atomically with the
  participant's id; the roster is the first ``N`` distinct ids in trial-number order, so a
  participant's index never changes once it has joined.
* study ``NAME:fedbo:uploads:RRRRRR`` per open round -- the raw uploads, read only by the
  server: one system attribute ``u:<client_id>`` per participant (a second upload in the same
  round overwrites the first, so it cannot count twice). The server deletes the study once the
  round is published, so a late upload fails and raw uploads do not outlive their round.
  Keeping uploads in studies of their own is what allows sealing them (encryption to the
  server's key) later without changing the layout.
* studies ``NAME:fedbo:server:EEEEEE`` -- one per server start (its *epoch*): a server claims
  the next free epoch by creating the study, which only one writer can do, and stops publishing
  as soon as the next epoch exists (see :meth:`FederationStore.claim_server_epoch`).
* study ``NAME:fedbo:ledger`` -- the privacy ledger of a differentially private federation,
  written by the server only and readable by everyone: one system attribute ``r:RRRRRR`` per
  accounted round (written before the round's broadcast exists anywhere). When the privacy
  budget is exhausted the server writes ``fedbo:budget_exhausted`` to the main study.
"""

from __future__ import annotations

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

_logger = optuna.logging.get_logger(__name__)

CONFIG_KEY = "fedbo:config"
CONFIG_HASH_KEY = "fedbo:config_hash"
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
            rdb = RDBStorage(storage, engine_kwargs={"connect_args": {"timeout": SQLITE_TIMEOUT}})
            return optuna.storages.get_storage(rdb)
        return optuna.storages.get_storage(storage)
    except (FederationNotFoundError, ValueError):
        raise
    except Exception as error:
        text = str(error).strip().splitlines()
        raise ValueError(
            f"Cannot open storage {storage!r}: {type(error).__name__}: "
            f"{text[0] if text else 'no details'}"
        ) from None


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


class FederationNotFoundError(KeyError):
    """No federation of that name in the storage."""


class ServerSupersededError(RuntimeError):
    """Another server has started on the federation: this one must not publish any more."""


class FederationStore:
    """Reads and writes the federation's records in an Optuna storage (see the module doc).

    Args:
        storage: The storage.
        name: The federation name.
    """

    def __init__(self, storage: BaseStorage, name: str) -> None:
        self.storage = storage
        self.name = name
        self._study_ids: dict[str, int] = {}
        self._lock = threading.Lock()

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
    def create(self, config_json: str, config_hash: str) -> None:
        """Create the federation's studies; the configuration is written last.

        Raises:
            optuna.exceptions.DuplicatedStudyError: If a study named like the federation exists.
        """
        main_id = self.storage.create_new_study([StudyDirection.MINIMIZE], self.name)
        with self._lock:
            self._study_ids[self.name] = main_id
        self._create_study(self.participants_study_name)
        self.open_uploads(0)
        self.storage.set_study_system_attr(main_id, CONFIG_HASH_KEY, config_hash)
        self.storage.set_study_system_attr(main_id, CONFIG_KEY, config_json)

    def read_config(self, wait: float = 0.0) -> tuple[str, str]:
        """The stored ``(config_json, config_hash)``.

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
            if attrs is not None and CONFIG_KEY in attrs and CONFIG_HASH_KEY in attrs:
                return attrs[CONFIG_KEY], attrs[CONFIG_HASH_KEY]
            if time.monotonic() >= deadline:
                if attrs is None:
                    raise FederationNotFoundError(
                        f"No federation named {self.name!r} in this storage."
                    )
                raise FederationNotFoundError(
                    f"The study {self.name!r} exists but is not an optuna-fedbo federation "
                    "(no configuration stored)."
                )
            time.sleep(0.05)

    def main_attrs(self) -> dict[str, Any]:
        """The main study's system attributes (a copy)."""
        try:
            return dict(self.storage.get_study_system_attrs(self._study_id(self.name)))
        except KeyError:
            self._forget(self.name)
            raise

    # ---------------------------------------------------------------------- participants
    def register(self, client_id: str, info: dict[str, Any]) -> None:
        """Append a join record (atomically created with the id)."""
        now = time.time()
        template = FrozenTrial(
            number=-1,
            state=TrialState.COMPLETE,
            value=0.0,
            datetime_start=datetime.now(),
            datetime_complete=datetime.now(),
            params={},
            distributions={},
            user_attrs={},
            system_attrs={CLIENT_KEY: client_id, "fedbo:info": {**info, "joined_at": now}},
            intermediate_values={},
            trial_id=-1,
        )
        self.storage.create_new_trial(self._study_id(self.participants_study_name), template)

    def roster(self) -> list[str]:
        """All distinct participant ids in order of first join."""
        trials = self.storage.get_all_trials(
            self._study_id(self.participants_study_name), deepcopy=False
        )
        seen: dict[str, None] = {}
        for trial in sorted(trials, key=lambda t: t.number):
            client = trial.system_attrs.get(CLIENT_KEY)
            if isinstance(client, str) and client not in seen:
                seen[client] = None
        return list(seen)

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
        """The pointer to the newest published broadcast, or ``None`` before the first."""
        value = self.main_attrs().get(LATEST_KEY)
        return value if isinstance(value, dict) else None

    def read_broadcast(self, trial_id: int) -> tuple[int, str]:
        """``(round, payload)`` of a broadcast trial."""
        trial = self.storage.get_trial(trial_id)
        return int(trial.system_attrs[ROUND_KEY]), trial.system_attrs[BROADCAST_KEY]

    def broadcast_trials(self) -> list[FrozenTrial]:
        """All broadcast trials (staged and published), by trial number."""
        trials = self.storage.get_all_trials(self._study_id(self.name), deepcopy=False)
        return sorted((t for t in trials if ROUND_KEY in t.system_attrs), key=lambda t: t.number)

    def stage_broadcast(self, round_index: int, payload: str) -> int:
        """Write a broadcast as a ``RUNNING`` trial (not yet visible to participants)."""
        template = FrozenTrial(
            number=-1,
            state=TrialState.RUNNING,
            value=None,
            datetime_start=datetime.now(),
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs={},
            system_attrs={ROUND_KEY: round_index, BROADCAST_KEY: payload},
            intermediate_values={},
            trial_id=-1,
        )
        return self.storage.create_new_trial(self._study_id(self.name), template)

    def commit_broadcast(self, trial_id: int, round_index: int, n_contributors: int) -> None:
        """Publish a staged broadcast: complete its trial, then move the ``latest`` pointer."""
        trial = self.storage.get_trial(trial_id)
        if trial.state == TrialState.RUNNING:
            self.storage.set_trial_state_values(
                trial_id, TrialState.COMPLETE, [float(n_contributors)]
            )
        self.storage.set_study_system_attr(
            self._study_id(self.name),
            LATEST_KEY,
            {"round": round_index, "trial_id": trial_id, "published_at": time.time()},
        )

    def fail_broadcast(self, trial_id: int) -> None:
        """Mark a staged broadcast as abandoned."""
        self.storage.set_trial_state_values(trial_id, TrialState.FAIL)

    # ---------------------------------------------------------------------------- ledger
    @property
    def ledger_study_name(self) -> str:
        return f"{self.name}:fedbo:ledger"

    def write_ledger_entry(self, round_index: int, record: dict[str, Any]) -> None:
        """Write (or rewrite, idempotently) the privacy ledger's entry of a round."""
        study_name = self.ledger_study_name
        try:
            study_id = self._study_id(study_name)
        except KeyError:
            self._forget(study_name)
            study_id = self._create_study(study_name)
        self.storage.set_study_system_attr(
            study_id, f"{LEDGER_PREFIX}{round_index:06d}", dict(record)
        )

    def read_ledger(self) -> dict[int, dict[str, Any]]:
        """The privacy ledger's entries by round (empty if nothing was accounted)."""
        study_name = self.ledger_study_name
        try:
            attrs = dict(self.storage.get_study_system_attrs(self._study_id(study_name)))
        except KeyError:
            self._forget(study_name)
            return {}
        return {
            int(key[len(LEDGER_PREFIX) :]): value
            for key, value in attrs.items()
            if key.startswith(LEDGER_PREFIX) and isinstance(value, dict)
        }

    def mark_budget_exhausted(self, record: dict[str, Any]) -> None:
        """Record that the server stopped publishing because of the privacy budget."""
        self.storage.set_study_system_attr(
            self._study_id(self.name), BUDGET_EXHAUSTED_KEY, dict(record)
        )

    def budget_exhausted(self) -> dict[str, Any] | None:
        """The server's budget-exhausted record, or ``None``."""
        value = self.main_attrs().get(BUDGET_EXHAUSTED_KEY)
        return value if isinstance(value, dict) else None

    # ---------------------------------------------------------------------------- server
    def server_epoch_study_name(self, epoch: int) -> str:
        return f"{self.name}:fedbo:server:{epoch:06d}"

    def has_server_epoch(self, epoch: int) -> bool:
        """Whether a server has claimed ``epoch``."""
        try:
            self.storage.get_study_id_from_name(self.server_epoch_study_name(epoch))
        except KeyError:
            return False
        return True

    def claim_server_epoch(self) -> int:
        """Claim the next server epoch: ``1 +`` the newest claimed one.

        Creating a study is the storage's one write that a single writer wins (a second create
        of the same name raises ``DuplicatedStudyError``), so two servers starting at once get
        different epochs. Epochs are claimed in order, so a server of epoch ``e`` has been
        superseded exactly when epoch ``e + 1`` exists: one lookup by name.
        """
        epoch = 1
        while True:
            while self.has_server_epoch(epoch):
                epoch += 1
            try:
                self.storage.create_new_study(
                    [StudyDirection.MINIMIZE], self.server_epoch_study_name(epoch)
                )
            except DuplicatedStudyError:
                continue  # another server claimed it first: try the next one
            return epoch

    def write_server_status(self, status: dict[str, Any]) -> None:
        self.storage.set_study_system_attr(self._study_id(self.name), SERVER_KEY, status)

    def server_status(self) -> dict[str, Any] | None:
        value = self.main_attrs().get(SERVER_KEY)
        return value if isinstance(value, dict) else None


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
