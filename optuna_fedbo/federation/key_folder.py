"""What the key folder holds, federation by federation, and deleting a federation with its keys.

Every file a federation keeps in the key folder (see :mod:`.keys` for the layout) is named by its
random federation id, so that it can be found and deleted whole:

* ``servers/<federation id>.json`` and whatever sits beside it as ``servers/<federation id>.*``
  (the server's marks and pins);
* ``participants/<federation id>/`` (the credentials of this machine's participants, and their
  marks);
* the pins ``joined/<digest>.json`` whose record names the federation id.

A new kind of file a federation keeps in the key folder follows the same rule, and asks
:func:`~optuna_fedbo.federation.location.persists_keys` before it writes anything.

Deleting (:func:`delete_federation`) removes the federation's studies from the storage (its main
study and its ``<name>:fedbo:*`` studies; never the participants' own studies), then its files.
Which key files belong to it is read from this key folder's pin of that storage and name, never
from the storage (which anyone can write): a storage cannot make ``delete`` remove the keys of
another federation.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
from dataclasses import dataclass
from dataclasses import field
import json
import os
from pathlib import Path
import shutil
import sqlite3
from typing import Any

from optuna.storages import BaseStorage

from optuna_fedbo.federation._damage import FederationNotFoundError
from optuna_fedbo.federation.keys import forget
from optuna_fedbo.federation.keys import key_home
from optuna_fedbo.federation.keys import KeyFileError
from optuna_fedbo.federation.keys import PARTICIPANT_KEY_TYPE
from optuna_fedbo.federation.keys import ServerIdentity
from optuna_fedbo.federation.location import storage_location
from optuna_fedbo.federation.location import url_location
from optuna_fedbo.federation.pinning import JOINED_TYPE
from optuna_fedbo.federation.pinning import pin_file
from optuna_fedbo.federation.records import CONFIG_KEY
from optuna_fedbo.federation.storages import resolve_storage

KeyDir = str | os.PathLike[str] | None


@dataclass
class KeyFolderEntry:
    """One federation this key folder holds files of.

    Attributes:
        federation_id: The federation's random id (names its files).
        name: Its name (from its files; ``None`` if none says).
        fingerprint: Its server's fingerprint (``None`` if no file says).
        server: Whether this machine holds the server's private keys (it is the operator).
        participants: Ids of the participants whose credentials are here.
        storages: Where it lives (the storages pinned, by location) and whether that storage
            still has it: ``"present"``, ``"missing"`` (the file is gone), ``"no federation"``
            (the file has no federation of that name) or ``"not checked"`` (not a local file).
        files: Its files and folders in the key folder.
        unreadable: Files that could not be read (what is wrong with each).
    """

    federation_id: str
    name: str | None = None
    fingerprint: str | None = None
    server: bool = False
    participants: list[str] = field(default_factory=list)
    storages: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    @property
    def orphaned(self) -> bool:
        """Whether every storage it was pinned in is gone or no longer has it."""
        return bool(self.storages) and all(
            state in ("missing", "no federation") for state in self.storages.values()
        )


def _record(path: Path) -> dict[str, Any]:
    """A key file's JSON record (the inventory reads names and ids only, never keys)."""
    record = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    return record


def _pins(home: Path) -> Iterator[tuple[Path, dict[str, Any] | None]]:
    for path in sorted((home / "joined").glob("*.json")):
        try:
            record = _record(path)
        except (OSError, ValueError):
            yield path, None
            continue
        yield path, record if record.get("type") == JOINED_TYPE else None


def federation_files(federation_id: str, key_dir: KeyDir = None) -> list[Path]:
    """Every file and folder of federation ``federation_id`` in the key folder."""
    home = key_home(key_dir)
    servers = home / "servers"
    files = sorted(servers.glob(f"{federation_id}.*")) if servers.is_dir() else []
    if (home / "participants" / federation_id).is_dir():
        files.append(home / "participants" / federation_id)
    files += [p for p, pin in _pins(home) if pin and pin.get("federation_id") == federation_id]
    return files


def storage_state(location: str, name: str) -> str:
    """Whether the storage at ``location`` still has federation ``name`` (local files only)."""
    kind, _, path = location.partition(":")
    if kind not in ("sqlite", "journal") or path.startswith("file:"):
        return "not checked"
    if not os.path.exists(path):
        return "missing"
    if kind == "journal":
        return "present"
    try:  # read-only: never creates or migrates anything
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0) as connection:
            found = connection.execute(
                "SELECT 1 FROM studies WHERE study_name = ?", (name,)
            ).fetchone()
    except sqlite3.Error:
        return "not checked"
    return "present" if found else "no federation"


def list_federations(key_dir: KeyDir = None) -> list[KeyFolderEntry]:
    """The federations this key folder holds files of (server keys, credentials, pins).

    Reads only names, ids and fingerprints, and checks whether a SQLite or journal file they
    were pinned in still has them (read-only); nothing is written.

    Returns:
        One entry per federation id, by name.
    """
    home = key_home(key_dir)
    entries: dict[str, KeyFolderEntry] = {}

    def entry(federation_id: str) -> KeyFolderEntry:
        return entries.setdefault(federation_id, KeyFolderEntry(federation_id))

    for path in sorted((home / "servers").glob("*.json")):
        if "." in path.stem:  # another file beside a server's keys, not its key file
            continue
        item = entry(path.stem)
        item.server = True
        try:
            record = _record(path)
            item.name = item.name or record.get("federation")
            item.fingerprint = item.fingerprint or record.get("fingerprint")
        except (OSError, ValueError) as error:
            item.unreadable.append(f"{path}: {type(error).__name__}")
    participants = home / "participants"
    for folder in sorted(participants.iterdir()) if participants.is_dir() else []:
        item = entry(folder.name)
        for path in sorted(folder.glob("*.json")):
            try:
                record = _record(path)
                if record.get("type") != PARTICIPANT_KEY_TYPE:
                    raise ValueError("not a credential")
                item.participants.append(str(record.get("client_id")))
                item.name = item.name or record.get("federation")
                item.fingerprint = item.fingerprint or record.get("server_fingerprint")
            except (OSError, ValueError) as error:
                item.unreadable.append(f"{path}: {error}")
    for path, pin in _pins(home):
        if pin is None or not isinstance(pin.get("federation_id"), str):
            entry(f"unreadable pin {path.name}").files.append(path)
            continue
        item = entry(pin["federation_id"])
        item.name = item.name or pin.get("federation")
        item.fingerprint = item.fingerprint or pin.get("fingerprint")
        location, name = pin.get("storage"), pin.get("federation")
        if isinstance(location, str) and isinstance(name, str):
            item.storages[location] = storage_state(location, name)
    for item in entries.values():
        item.participants.sort()
        if not item.files:
            item.files = federation_files(item.federation_id, home)
    return sorted(entries.values(), key=lambda e: (e.name or "", e.federation_id))


@dataclass
class Deletion:
    """What :func:`delete_federation` deletes (see :meth:`describe`), then does (:meth:`run`).

    Attributes:
        name: The federation's name.
        location: Its storage's location (``None``: in memory).
        storage: The open storage, or ``None`` if its file is gone.
        studies: The federation's studies in the storage.
        federation_id: Its id, from this key folder's pin (or from an in-memory storage).
        files: Its files and folders in the key folder.
    """

    name: str
    location: str | None
    storage: BaseStorage | None
    studies: list[str]
    federation_id: str | None
    files: list[Path]

    def describe(self) -> str:
        """One line: what will be deleted."""
        where = "in memory" if self.location is None else self.location
        studies = (
            f"{len(self.studies)} studies in {where}"
            if self.storage is not None
            else f"no studies ({where} is gone)"
        )
        keys = (
            f"{len(self.files)} key files/folders of federation id {self.federation_id}"
            if self.files
            else "no key files"
        )
        return f"federation {self.name!r}: {studies}, {keys}"

    def run(self) -> None:
        """Delete the studies (the main study last), then the files (the pins last) and the
        folders they leave empty."""
        if self.storage is not None:
            order = sorted(self.studies, key=lambda s: (s == self.name, s))
            for study in order:
                try:
                    study_id = self.storage.get_study_id_from_name(study)
                except KeyError:  # deleted meanwhile
                    continue
                self.storage.delete_study(study_id)
        for path in sorted(self.files, key=lambda p: p.parent.name == "joined"):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        for folder in {path.parent for path in self.files}:
            with contextlib.suppress(OSError):  # not empty: other federations' files
                folder.rmdir()
        if self.federation_id is not None:
            forget(self.federation_id)


def _open(storage: str | BaseStorage) -> tuple[str | None, BaseStorage | None]:
    """``(location, storage)``; the storage is ``None`` if its file does not exist."""
    if isinstance(storage, BaseStorage):
        return storage_location(storage), storage
    if not isinstance(storage, str) or not storage:
        raise ValueError(f"storage must be a URL or a BaseStorage, got {storage!r}.")
    location = url_location(storage)
    try:
        return location, resolve_storage(storage, must_exist=True)
    except FederationNotFoundError:
        return location, None


def plan_deletion(name: str, storage: str | BaseStorage, key_dir: KeyDir = None) -> Deletion:
    """What deleting federation ``name`` of ``storage`` removes (nothing is deleted yet).

    Raises:
        ValueError: If ``name`` in that storage is a study that is not a federation, or there
            is neither a federation nor key files of it.
    """
    location, opened = _open(storage)
    studies: list[str] = []
    federation_id = None
    if opened is not None:
        names = [s.study_name for s in opened.get_all_studies()]
        if name in names:
            attrs = opened.get_study_system_attrs(opened.get_study_id_from_name(name))
            if CONFIG_KEY not in attrs:
                raise ValueError(
                    f"Study {name!r} in this storage is not a federation: nothing deleted "
                    "(delete an ordinary study with optuna's `delete_study`)."
                )
            if location is None:  # in memory: this process made it, its keys are in memory
                federation_id = _stored_id(attrs[CONFIG_KEY])
        studies = [s for s in names if s == name or s.startswith(f"{name}:fedbo:")]
    if location is not None:
        pin = pin_file(location, name, key_dir)
        if pin.exists():
            try:
                federation_id = str(_record(pin)["federation_id"])
            except (OSError, ValueError, KeyError) as error:
                raise KeyFileError(
                    f"The pin {pin} of federation {name!r} cannot be read ({error!r}); remove "
                    "it by hand."
                ) from None
    files = [] if federation_id is None else federation_files(federation_id, key_dir)
    if not studies and not files and federation_id is None:
        raise FederationNotFoundError(
            f"No federation {name!r} in {location or 'this in-memory storage'} and no keys of "
            f"it in {key_home(key_dir)}: nothing to delete (`optuna-fedbo list` shows the "
            "federations this machine has keys of)."
        )
    return Deletion(name, location, opened, studies, federation_id, files)


def _stored_id(text: Any) -> str | None:
    try:
        return ServerIdentity.from_dict(json.loads(text)["server"]).federation_id
    except (TypeError, ValueError, KeyError):
        return None


def delete_federation(
    name: str, storage: str | BaseStorage, *, key_dir: KeyDir = None
) -> Deletion:
    """Delete federation ``name``: its studies in ``storage`` and its files in the key folder.

    The participants' own studies are kept. The key files deleted are those of the federation
    this key folder pinned under that storage and name (a federation whose SQLite or journal
    file is gone is found by its URL all the same). There is no undo: the server's keys are
    gone, and a federation of that name can be created there anew.

    Args:
        name: The federation's name.
        storage: Its storage (a URL or a ``BaseStorage``).
        key_dir: The key folder (default: the per-user one).

    Returns:
        What was deleted.

    Raises:
        ValueError: If there is nothing to delete, or ``name`` is an ordinary study.
    """
    deletion = plan_deletion(name, storage, key_dir)
    deletion.run()
    return deletion


__all__ = [
    "Deletion",
    "KeyFolderEntry",
    "delete_federation",
    "federation_files",
    "list_federations",
    "plan_deletion",
]
