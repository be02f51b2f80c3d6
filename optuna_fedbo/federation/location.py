"""Where a federation's storage lives, and the one rule for what is kept in the key folder.

A federation in an in-memory storage (Optuna's ``InMemoryStorage``, or SQLite's ``:memory:``)
lives and dies with one process: it keeps its keys, pins and marks in memory and never touches
the key folder. Every other storage outlives the process, so what its federations must keep
outside it (the server's keys, credentials, the configuration joined, high-water marks) goes to
the key folder. Every writer of the key folder asks :func:`persists_keys` first.
"""

from __future__ import annotations

import os

from optuna.storages import BaseStorage
from optuna.storages import InMemoryStorage
from optuna.storages import RDBStorage
from optuna.storages.journal import JournalStorage


def url_location(url: str) -> str | None:
    """The location of a storage URL (as :func:`resolve_storage` reads it), without opening it.

    A SQLite or journal file is named by its resolved path (``sqlite:/abs/fed.db``,
    ``journal:/abs/fed.log``), other RDB URLs without their password; ``None`` for an in-memory
    SQLite database.
    """
    journal = None
    if url.startswith("journal:"):
        journal = url[len("journal:") :]
    elif "://" not in url and url.endswith((".log", ".jsonl")):
        journal = url
    if journal is not None:
        return f"journal:{os.path.realpath(journal)}"
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return parsed.render_as_string(hide_password=True)
    database = parsed.database or ""
    if database in ("", ":memory:") or "mode=memory" in database:
        return None
    if database.startswith("file:"):
        return f"sqlite:{database}"
    return f"sqlite:{os.path.realpath(database)}"


def storage_location(storage: BaseStorage) -> str | None:
    """Where a storage lives, as pinned (``None``: in memory, one process, nothing to pin).

    A SQLite or journal file is named by its resolved path, so a file replaced at that path is
    the same location; other RDB URLs without their password.
    """
    backend = getattr(storage, "_backend", None)
    if isinstance(backend, RDBStorage):  # Optuna's cache in front of an RDB storage
        storage = backend
    if isinstance(storage, InMemoryStorage):
        return None
    if isinstance(storage, RDBStorage):
        return url_location(storage.url)
    path = getattr(getattr(storage, "_backend", None), "_file_path", None)
    if isinstance(storage, JournalStorage) and isinstance(path, str):
        return f"journal:{os.path.realpath(path)}"
    return f"{type(storage).__module__}.{type(storage).__qualname__}"


def persists_keys(storage: BaseStorage) -> bool:
    """Whether a federation in ``storage`` keeps its keys, pins and marks in the key folder.

    ``False`` for an in-memory storage (one process): everything stays in memory then, and the
    key folder is never read for writing, created or changed.
    """
    return storage_location(storage) is not None


__all__ = ["persists_keys", "storage_location", "url_location"]
