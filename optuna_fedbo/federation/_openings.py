"""When a round opens: uploads count only in the round that was open when they were written.

Round ``r >= 1`` opens when the server publishes round ``r - 1``: its *opening* is the digest of
the server-signed broadcast record of round ``r - 1`` (the ``digest`` of the signed ``latest``
pointer to it); round 0 opens at creation (its opening is ``""``). A participant binds the opening
it read into each upload's signature (:meth:`~optuna_fedbo.federation.trust.Trust.seal_upload`),
and the server counts an upload of round ``r`` only if it follows a broadcast of round ``r - 1``
that the server published. Nobody but the server can sign that record, and it exists only once the
round before is decided, so an upload prepared in advance for a later round -- by a participant
for itself, or by anyone pre-creating a later round's uploads study -- never counts, whichever
protocol runs (both servers open uploads through
:meth:`~optuna_fedbo.federation.server.FederationServer._open_upload_with_receipt`).
"""

from __future__ import annotations

from typing import Any

from optuna.trial import TrialState

from optuna_fedbo.federation._damage import reopen_uploads
from optuna_fedbo.federation.records import BROADCAST_KEY
from optuna_fedbo.federation.records import ROUND_KEY
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.federation.trust import UntrustedRecordError

#: The opening of round 0 (open from the federation's creation on).
FIRST_OPENING = ""


def open_round_and_opening(store: FederationStore) -> tuple[int, str]:
    """The open round and its opening, from one read of the ``latest`` pointer."""
    latest: dict[str, Any] | None = store.latest()
    if latest is None:
        return 0, FIRST_OPENING
    return int(latest["round"]) + 1, str(latest["digest"])


def opening_for(store: FederationStore, round_index: int) -> str:
    """The opening of ``round_index``, which must be the open round (a participant's side).

    Raises:
        KeyError: If the round is closed already (send to the open round instead).
        ValueError: If the round is not open yet: nothing is sent ahead of its round.
    """
    open_round, opening = open_round_and_opening(store)
    if round_index < open_round:
        raise KeyError(f"Round {round_index} of {store.name!r} is closed ({open_round} is open).")
    if round_index > open_round:
        raise ValueError(
            f"Round {round_index} of federation {store.name!r} is not open yet (round "
            f"{open_round} is): an upload goes to the open round only."
        )
    return opening


def write_to_open_round(
    store: FederationStore, round_index: int, client_id: str, sealed: str
) -> None:
    """Write a participant's sealed upload to the open round, creating the round's uploads study
    again if someone deleted it while the round is open.

    Raises:
        KeyError: If the round closed meanwhile (its uploads study was discarded by the server).
    """
    try:
        store.write_upload(round_index, client_id, sealed)
        return
    except KeyError:
        opening_for(store, round_index)  # KeyError if the server closed the round meanwhile
        # Missing: create it again. Present: the server created it again first, and the
        # failed write only dropped this process's cached id of the deleted one.
        reopen_uploads(store, round_index, warn=False)
    store.write_upload(round_index, client_id, sealed)


class RoundOpenings:
    """The server's side: the openings of a round, read once per round from the storage.

    Args:
        store: The federation's store (its trust set: the configuration verified).
    """

    def __init__(self, store: FederationStore) -> None:
        self._store = store
        self._known: tuple[int, frozenset[str]] | None = None

    def __call__(self, round_index: int) -> frozenset[str]:
        """Digests of the signed records of the published broadcast of ``round_index - 1``
        named by the signed ``latest`` pointer (else of every published one: two racing
        servers may have published two); ``{""}`` for round 0."""
        if round_index == 0:
            return frozenset({FIRST_OPENING})
        known = self._known
        if known is not None and known[0] == round_index:
            return known[1]
        previous = round_index - 1
        latest = self._store.latest()
        if latest is not None and int(latest["round"]) == previous:
            openings = {str(latest["digest"])}  # the signed pointer names the one published
        else:
            openings = self._scan(previous)
        if openings:  # the round is open: its openings never change
            self._known = (round_index, frozenset(openings))
        return frozenset(openings)

    def _scan(self, previous: int) -> set[str]:
        """Digests of the verified records of every published broadcast of ``previous``."""
        trust = self._store.trust
        assert trust is not None
        openings = set()
        for trial in self._store.broadcast_trials():
            record = trial.system_attrs.get(BROADCAST_KEY)
            if trial.state != TrialState.COMPLETE or trial.system_attrs[ROUND_KEY] != previous:
                continue
            try:
                if trust.verify("broadcast", record).get("round") == previous:
                    openings.add(text_digest(str(record)))
            except UntrustedRecordError:
                continue  # a forged broadcast opens nothing (the store warns when it reads it)
        return openings


__all__ = ["FIRST_OPENING", "RoundOpenings", "opening_for", "write_to_open_round"]
