"""A federation is the identity its participants joined: which stored configuration is loaded.

Anyone with the storage URL can replace what a name stands for: restore another SQLite file with
a federation of the same name, or copy another federation's (validly signed) configuration into
this one's study. Three checks, each on something the storage cannot change, refuse that:

* the signed configuration binds the federation's **name** (and, through the server identity,
  its random id): a configuration stored under another name is a copy;
* the server's **key file** names the one configuration its keys serve: a server refuses any
  other (even one signed by its own keys under another name);
* the **key directory pins**, per storage and federation name, the configuration hash it created
  or joined (``joined/<digest>.json``, mode 0600, outside the storage): a federation of that name
  in that storage with another configuration is refused, also on one machine whose key
  directory holds the keys of both, and for a site enrolled in several federations.

Every refusal is a one-line ``ValueError`` naming what happened and the fix; nothing is written
to the storage.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from optuna_fedbo.federation._codec import digest
from optuna_fedbo.federation._damage import FederationDamagedError
from optuna_fedbo.federation._damage import FederationNotFoundError
from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.keys import _read_private
from optuna_fedbo.federation.keys import _write_private
from optuna_fedbo.federation.keys import check_fingerprint
from optuna_fedbo.federation.keys import check_key_folders
from optuna_fedbo.federation.keys import find_server_keys
from optuna_fedbo.federation.keys import KEY_FILE_VERSION
from optuna_fedbo.federation.keys import key_home
from optuna_fedbo.federation.keys import pinned_fingerprint
from optuna_fedbo.federation.keys import ServerIdentity
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.location import storage_location
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.federation.trust import UntrustedRecordError

JOINED_TYPE = "optuna-fedbo-joined"

KeyDir = str | os.PathLike[str] | None


def pin_file(location: str, name: str, key_dir: KeyDir) -> Path:
    """Where the key directory pins federation ``name`` of the storage at ``location``."""
    digest_ = hashlib.sha256(f"{location}\n{name}".encode()).hexdigest()[:32]
    return key_home(key_dir) / "joined" / f"{digest_}.json"


def pin_path(store: FederationStore, key_dir: KeyDir) -> Path | None:
    """Where the key directory pins the federation ``store.name`` of this storage (or ``None``)."""
    location = storage_location(store.storage)
    return None if location is None else pin_file(location, store.name, key_dir)


def _pinned(store: FederationStore, key_dir: KeyDir) -> tuple[Path, dict[str, Any]] | None:
    """``(path, record)`` of the pin of this federation, or ``None``."""
    path = pin_path(store, key_dir)
    if path is None:
        return None
    check_key_folders(path.parent, key_home(key_dir))
    if not path.exists():
        return None
    return path, _read_private(path, JOINED_TYPE)


def _mismatch(store: FederationStore, path: Path, record: dict[str, Any], config_hash: str) -> str:
    return (
        f"Federation {store.name!r} in this storage is not the one this key directory joined: it "
        f"holds configuration {config_hash[:12]}..., the one joined there is "
        f"{str(record.get('config'))[:12]}... (pinned in {path}); the storage was replaced, or "
        "another federation's configuration was copied into it. Use the storage of the "
        f"federation you joined; only if its operator re-created it on purpose, remove {path} "
        "and join again."
    )


def check_joined(store: FederationStore, config_hash: str, key_dir: KeyDir) -> None:
    """Refuse a configuration other than the one this key directory joined under that name.

    Raises:
        ValueError: If another configuration is pinned (or the pin cannot be used).
    """
    pinned = _pinned(store, key_dir)
    if pinned is not None and pinned[1].get("config") != config_hash:
        raise ValueError(_mismatch(store, *pinned, config_hash))


def lost_message(store: FederationStore, key_dir: KeyDir) -> str | None:
    """The error for a pinned federation this storage no longer holds (``None``: not pinned)."""
    pinned = _pinned(store, key_dir)
    if pinned is None:
        return None
    path, record = pinned
    return (
        f"No federation {store.name!r} in this storage, but this key directory created or "
        f"joined it there (configuration {str(record.get('config'))[:12]}..., pinned in {path}): "
        "the storage was replaced or the federation deleted. Restore it from a backup; only to "
        f"start a new federation of that name there on purpose, remove {path} first."
    )


def pin_joined(store: FederationStore, trust: Trust, key_dir: KeyDir) -> Path | None:
    """Pin the configuration of ``trust`` as the one joined under ``store.name`` in this storage.

    Returns:
        The pin's path if it was written now, ``None`` if it was there already (or in memory).

    Raises:
        ValueError: If another configuration is pinned there.
    """
    path = pin_path(store, key_dir)
    if path is None:
        return None
    record = {
        "type": JOINED_TYPE,
        "version": KEY_FILE_VERSION,
        "federation": store.name,
        "storage": storage_location(store.storage),
        "federation_id": trust.federation_id,
        "fingerprint": trust.identity.fingerprint,
        "config": trust.config_hash,
    }
    if path.exists():
        check_joined(store, trust.config_hash, key_dir)
        return None
    # Written whole under a temporary name, then linked into place (which fails if another
    # process pinned first): readers never see a half-written pin.
    draft = path.with_name(f".{path.stem}.{os.urandom(6).hex()}.tmp")
    _write_private(draft, record, exclusive=True, home=key_home(key_dir))
    try:
        os.link(draft, path)
    except FileExistsError:
        check_joined(store, trust.config_hash, key_dir)
        return None
    finally:
        draft.unlink()
    return path


def verify_stored_config(
    store: FederationStore, *, wait: float, server_fingerprint: str | None, key_dir: KeyDir
) -> tuple[FederationConfig, str, Trust]:
    """The stored configuration of ``store.name``, verified: ``(config, hash, trust)``.

    It must be signed by the pinned server (``server_fingerprint``, else the one found in the key
    directory), name this federation, be the one the server's key file serves (when this is the
    operator) and the one this key directory joined under that name in this storage.

    Raises:
        FederationNotFoundError: If there is no federation of that name.
        ValueError: If any check fails (one line, with the fix).
    """
    name = store.name
    pin = None if server_fingerprint is None else check_fingerprint(server_fingerprint)
    try:
        text, signature = store.read_config(wait=wait)
    except FederationDamagedError as error:  # names what was deleted
        pinned = _pinned(store, key_dir)
        if pinned is None:
            raise
        raise FederationDamagedError(
            f"{error} This key directory created or joined it there (configuration "
            f"{str(pinned[1].get('config'))[:12]}..., pinned in {pinned[0]}): remove that pin "
            "only to start a new federation of that name there on purpose."
        ) from None
    except FederationNotFoundError as error:
        raise FederationNotFoundError(lost_message(store, key_dir) or error.args[0]) from None
    try:
        identity = ServerIdentity.from_dict(json.loads(text).get("server"))
    except (ValueError, AttributeError, TypeError):
        raise ValueError(
            f"Federation {name!r} has no valid server identity in its configuration (made by "
            "an older optuna-fedbo, or tampered with): create it again."
        ) from None
    server_keys = find_server_keys(identity.federation_id, key_dir)
    if pin is None:
        pin = pinned_fingerprint(identity.federation_id, key_dir)
    if pin is None:
        raise ValueError(
            f"No server fingerprint is pinned for federation {name!r} on this machine: pass "
            "server_fingerprint= (the operator prints it with `optuna-fedbo fingerprint`), "
            "or install your credential with `optuna-fedbo import-credential FILE`."
        )
    if identity.fingerprint != pin:
        raise ValueError(
            f"The configuration of federation {name!r} is signed by server "
            f"{identity.fingerprint[:16]}..., not by the pinned {pin[:16]}...: the storage "
            "was tampered with, or the fingerprint is wrong (check it with the operator: "
            "`optuna-fedbo fingerprint`)."
        )
    config_hash = digest(text)
    trust = Trust(identity, config_hash, server_keys)
    try:
        trust.verify_config(text, signature)
    except UntrustedRecordError as error:
        raise ValueError(
            f"The stored configuration of federation {name!r} does not verify ({error}): it "
            "was modified in the storage. Restore it from a backup or create the "
            "federation again."
        ) from None
    config = FederationConfig.from_json(text)
    if server_keys is not None:
        _check_server_keys(server_keys, name, config_hash, key_dir)
    if config.name != name:
        raise ValueError(
            f"The configuration stored as federation {name!r} is that of federation "
            f"{config.name!r} (config {config_hash[:12]}...): it was copied from another "
            f"federation. Restore the storage of {name!r}; load {config.name!r} by its own name."
        )
    check_joined(store, config_hash, key_dir)
    return config, config_hash, trust


def _check_server_keys(keys: ServerKeys, name: str, config_hash: str, key_dir: KeyDir) -> None:
    """Refuse a configuration other than the one the server's key file was made for."""
    if keys.made_for == (name, config_hash):
        return
    path = ServerKeys.path(keys.identity.federation_id, key_dir)
    if keys.made_for is None:
        raise ValueError(
            f"The server key file {path} does not name the configuration it serves (made by an "
            "older optuna-fedbo): create the federation again."
        )
    made_name, made_hash = keys.made_for
    raise ValueError(
        f"The server key file {path} was made for federation {made_name!r} (config "
        f"{made_hash[:12]}...), not for the configuration stored as {name!r} (config "
        f"{config_hash[:12]}...): this storage holds another federation's configuration, which "
        f"this server refuses to serve. Restore the storage of {name!r}."
    )


__all__ = ["check_joined", "pin_joined", "storage_location", "verify_stored_config"]
