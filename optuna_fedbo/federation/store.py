"""The federation's records inside an Optuna storage, read and written by :class:`FederationStore`.

The storage is an untrusted relay: everyone who holds its URL can read and write everything, so
nothing is trusted because of where it is (:mod:`optuna_fedbo.federation.trust`). The layout of
the records (studies, attribute keys) is described in :mod:`optuna_fedbo.federation.records`;
opening a storage from a URL is :mod:`optuna_fedbo.federation.storages`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
import threading
import time
from typing import Any

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.federation._damage import FederationNotFoundError
from optuna_fedbo.federation._damage import missing_config
from optuna_fedbo.federation._damage import missing_main_study
from optuna_fedbo.federation._fresh import Freshness
from optuna_fedbo.federation._server_epochs import ServerEpochs
from optuna_fedbo.federation.records import BROADCAST_KEY
from optuna_fedbo.federation.records import BUDGET_EXHAUSTED_KEY
from optuna_fedbo.federation.records import check_client_id
from optuna_fedbo.federation.records import CLIENT_KEY
from optuna_fedbo.federation.records import CONFIG_HASH_KEY
from optuna_fedbo.federation.records import CONFIG_KEY
from optuna_fedbo.federation.records import CONFIG_SIGNATURE_KEY
from optuna_fedbo.federation.records import ENROLLMENT_KEY
from optuna_fedbo.federation.records import LATEST_KEY
from optuna_fedbo.federation.records import ledger_key
from optuna_fedbo.federation.records import LEDGER_PREFIX
from optuna_fedbo.federation.records import loads_object
from optuna_fedbo.federation.records import OPENED_KEY
from optuna_fedbo.federation.records import PURGED
from optuna_fedbo.federation.records import ROUND_KEY
from optuna_fedbo.federation.records import SERVER_KEY
from optuna_fedbo.federation.records import UPLOAD_PREFIX
from optuna_fedbo.federation.storages import resolve_storage
from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.federation.trust import UntrustedRecordError

_logger = optuna.logging.get_logger(__name__)


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


class FederationStore(ServerEpochs):
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


__all__ = [
    "FederationStore",
    "ServerSupersededError",
    "StoredBroadcast",
    # Kept importable from here (they moved to records.py, storages.py and _damage.py):
    "FederationNotFoundError",
    "check_client_id",
    "loads_object",
    "resolve_storage",
]
