"""Deleted records: what is recreated, and what is one line naming what is missing.

Anyone with the storage URL can delete a study. The open round's uploads study holds nothing the
federation cannot do without (its uploads are re-sent by their participants), so whoever finds it
missing while its round is open -- the server, or a participant writing its upload -- creates it
again and the round goes on. The main study (configuration, broadcasts, the ``latest`` pointer)
cannot be recreated by anyone but the operator from a backup: a missing main study or
configuration is :class:`FederationDamagedError`, one line naming what is missing and the fix,
never retried by a server (``optuna-fedbo serve`` exits with status 2).
"""

from __future__ import annotations

from collections.abc import Iterable
import threading
import time
from typing import Any

import optuna

from optuna_fedbo.federation.records import CONFIG_KEY

_logger = optuna.logging.get_logger(__name__)


class FederationNotFoundError(KeyError):
    """No federation of that name in the storage."""

    def __str__(self) -> str:  # the message itself, not KeyError's quoted repr
        return str(self.args[0]) if self.args else ""


class FederationDamagedError(FederationNotFoundError):
    """A record the federation cannot go on without was deleted from the storage."""


def _fix(name: str) -> str:
    return (
        "the operator restores the storage from a backup (or creates a new federation); "
        f"nothing more is published or uploaded in {name!r} until then."
    )


def missing_main_study(store: Any) -> FederationNotFoundError:
    """The error for a federation whose main study is not in the storage: damaged if its other
    studies remain (it was deleted), not found otherwise."""
    name = store.name
    try:
        store.storage.get_study_id_from_name(store.participants_study_name)
    except KeyError:
        return FederationNotFoundError(f"No federation named {name!r} in this storage.")
    return FederationDamagedError(
        f"Federation {name!r} is damaged: its main study {name!r} (configuration, broadcasts, "
        f"the latest pointer) was deleted from the storage while its other studies remain; "
        + _fix(name)
    )


def missing_config(store: Any) -> FederationNotFoundError:
    """The error for a main study without a configuration: damaged if the federation's other
    studies exist (it was deleted), not a federation otherwise."""
    name = store.name
    try:
        store.storage.get_study_id_from_name(store.participants_study_name)
    except KeyError:
        return FederationNotFoundError(
            f"The study {name!r} exists but is not an optuna-fedbo federation (no configuration "
            "stored)."
        )
    return FederationDamagedError(
        f"Federation {name!r} is damaged: its configuration (system attribute 'fedbo:config' of "
        f"study {name!r}) was deleted from the storage; " + _fix(name)
    )


def check_intact(store: Any) -> None:
    """Raise :class:`FederationDamagedError` if the main study or its configuration is gone.

    A server calls it when a step fails: a storage hiccup is retried, a deleted main study is
    not (it would fail every retry with a bare ``KeyError``).
    """
    try:
        study_id = store.storage.get_study_id_from_name(store.name)
        attrs = store.storage.get_study_system_attrs(study_id)
    except KeyError:
        raise missing_main_study(store) from None
    if CONFIG_KEY not in attrs:
        raise missing_config(store)


def reopen_uploads(store: Any, round_index: int, *, warn: bool = True) -> bool:
    """Create the uploads study of the open round ``round_index`` again if it was deleted.

    Args:
        store: The federation's store.
        round_index: The open round.
        warn: Log a warning (the server) rather than an info line (a participant).

    Returns:
        Whether it was missing (and is now created again).
    """
    try:
        store.storage.get_study_id_from_name(store.uploads_study_name(round_index))
        return False
    except KeyError:
        pass
    store.open_uploads(round_index)
    message = (
        f"The uploads study of the open round {round_index} of federation {store.name!r} was "
        "deleted from the storage: it is created again, and the participants whose uploads "
        "were lost send them again."
    )
    if warn:
        store.warn_once(f"reopened:{round_index}", message)
    else:
        _logger.info(message)
    return True


class ErasureCheck:
    """Whether a participant's uploads to its open round are still there, while it waits for
    the round's broadcast: every ``study_every`` seconds whether the round's uploads study
    exists (one cheap read), every ``upload_every`` seconds whether it holds the participant's
    own signed upload (a read of the round's uploads, so rarely).

    Args:
        study_every: Seconds between the checks of the uploads study.
        upload_every: Seconds between the checks of the uploads themselves.
    """

    def __init__(self, study_every: float = 1.0, upload_every: float = 10.0) -> None:
        self._every = (study_every, upload_every)
        self._checked = [float("-inf"), time.monotonic()]
        self._lock = threading.Lock()

    def erased(self, federation: Any, round_index: int, client_ids: Iterable[str]) -> list[str]:
        """The participants among ``client_ids`` whose upload to ``round_index`` is gone (all
        of them if its uploads study was deleted); empty between checks."""
        now = time.monotonic()
        with self._lock:
            if now - self._checked[0] < self._every[0]:
                return []
            self._checked[0] = now
            full = now - self._checked[1] >= self._every[1]
            if full:
                self._checked[1] = now
        store = federation.store
        try:
            store.storage.get_study_id_from_name(store.uploads_study_name(round_index))
        except KeyError:
            return list(client_ids)
        return [c for c in client_ids if full and not federation.has_sent(c, round_index)]


__all__ = [
    "ErasureCheck",
    "FederationDamagedError",
    "FederationNotFoundError",
    "check_intact",
    "reopen_uploads",
]
