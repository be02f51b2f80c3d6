"""Opening the Optuna storage a federation lives in, from a URL, a journal file or an object."""

from __future__ import annotations

from collections.abc import Callable
import os
import time

import optuna
from optuna.storages import BaseStorage
from optuna.storages import InMemoryStorage
from optuna.storages import RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal import JournalStorage

from optuna_fedbo.federation._damage import FederationNotFoundError

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


__all__ = ["SQLITE_TIMEOUT", "resolve_storage"]
