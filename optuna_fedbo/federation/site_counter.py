"""Upload counters of a participant whose workers run in several processes.

Every upload is signed with a counter (:meth:`~optuna_fedbo.federation.trust.Trust.seal_upload`);
the server keeps the newest counter of each participant in the open round and rejects an older
one as a replay (:class:`~optuna_fedbo.federation._uploads.UploadCollector`), unchanged. A
participant's workers (processes, hosts) all upload into its one slot of the round, so their
counters must never repeat and must grow in the order they are handed out, whatever the workers'
clocks say. They are allocated by the storage: each counter is the id of a new trial in the study
``NAME:fedbo:seq:<client_id>`` -- the storage hands out trial ids atomically and increasing, to
every process alike (SQLite, PostgreSQL, MySQL, journal, in memory).

Handing out in order is not writing in order: a worker that drew a counter may write after one
that drew a later one. The threads of one process write one at a time (the federation handle's
upload lock); across processes, a worker does not write over a newer upload, and after writing it
reads the slot back and writes again if it holds an older counter than its own
(:func:`write_newest`), so the slot ends with the newest upload but in a window of a few
milliseconds; an upload the server still missed is re-sent when its round's broadcast lacks its
receipt.

Someone with write access to the storage can draw counters too (the slot's counters only grow
faster) or delete the study (counters may then repeat, as erasing the uploads would do anyway):
neither makes a forged upload count; signatures and openings are checked as before.
"""

from __future__ import annotations

from collections.abc import Callable
import threading

from optuna_fedbo.federation._openings import write_to_open_round
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import MAX_UPLOAD_CHARS
from optuna_fedbo.federation.trust import Trust

#: Times a worker writes its upload again after finding an older one in its slot.
_REWRITES = 3


def _sequence_name(store: FederationStore, client_id: str) -> str:
    return f"{store.name}:fedbo:seq:{client_id}"


def next_counter(store: FederationStore, client_id: str, floor: int = 0) -> int:
    """A counter for ``client_id``'s next upload: larger than every one handed out before to
    any of its workers (the storage's next trial id), and than ``floor``."""
    name = _sequence_name(store, client_id)
    try:
        trial_id = store.storage.create_new_trial(store._study_id(name))
    except KeyError:
        store._forget(name)
        trial_id = store.storage.create_new_trial(store._create_study(name))
    return max(int(trial_id), floor + 1)


def write_newest(
    store: FederationStore,
    trust: Trust,
    public_key: bytes,
    round_index: int,
    client_id: str,
    counter: int,
    write: Callable[[], None],
    own: tuple[tuple[str, int], ...] = (),
) -> None:
    """Call ``write`` (the upload with ``counter``) unless the round's slot holds a newer upload
    of the participant already, then again while the slot holds an older one (another worker's,
    written later). Skipping costs nothing lasting: the worker's next upload counts.

    ``own`` holds ``(text, counter)`` of texts this process sealed: a slot holding one of them
    exactly is not checked again (a pooled upload is hundreds of kilobytes: parsing and
    verifying it twice took a fifth of a participant's trial; they are compared, never hashed
    as dictionary keys, which is another pass over each)."""

    def stored() -> int | None:
        text = store.read_uploads(round_index).get(client_id)
        if text is None:
            return None
        for sealed, sealed_counter in own:
            if text == sealed:
                return sealed_counter
        try:
            return trust.check_upload(
                text, client_id=client_id, public_key=public_key, round_index=round_index
            )[0]
        except UploadRejected:
            return None  # not the participant's own (a forgery): write over it

    newest = stored()
    if newest is not None and newest > counter:
        return
    for _ in range(_REWRITES + 1):
        write()
        newest = stored()
        if newest is None or newest >= counter:
            return


class UploadSender:
    """Seals and writes a process's uploads: the counter drawn, the upload sealed and written
    under one lock (the threads of a process write in the order they drew).

    Args:
        store: The federation's store.
        trust: The federation's trust (seals to the server, checks the slot's counter).
    """

    def __init__(self, store: FederationStore, trust: Trust) -> None:
        self._store = store
        self._trust = trust
        self._lock = threading.Lock()
        self._floor = 0
        # Each participant's newest sealed upload: (client, round) -> (text, counter).
        self._sealed: dict[tuple[str, int], tuple[str, int]] = {}

    def send(
        self, key: ParticipantKey, round_index: int, payload: str | bytes, opening: str
    ) -> tuple[str, str]:
        """Seal ``payload`` as ``key``'s upload to ``round_index`` and write it: ``(sealed text,
        receipt)`` (:func:`~optuna_fedbo.federation.trust.upload_receipt`).

        Raises:
            ValueError: If the sealed upload is over the bound (nothing is written).
            KeyError: If the round closed meanwhile.
        """
        client_id = key.client_id
        with self._lock:
            counter = next_counter(self._store, client_id, self._floor)
            self._floor = max(self._floor, counter)
            sealed, receipt = self._trust.seal_upload_with_receipt(
                key, round_index, counter, payload, opening
            )
            if len(sealed) > MAX_UPLOAD_CHARS:
                raise ValueError(
                    f"The upload of {client_id!r} has {len(sealed):,} characters sealed, over "
                    f"the bound of {MAX_UPLOAD_CHARS:,}; it is not sent."
                )
            # The slot holds this process's previous upload or this one, usually.
            previous = self._sealed.get((client_id, round_index))
            own = ((sealed, counter),) if previous is None else ((sealed, counter), previous)
            write_newest(
                self._store,
                self._trust,
                key.public_key,
                round_index,
                client_id,
                counter,
                lambda: write_to_open_round(self._store, round_index, client_id, sealed),
                own,
            )
            self._sealed = {(client_id, round_index): (sealed, counter)} | {
                k: v for k, v in self._sealed.items() if k[0] != client_id
            }
        return sealed, receipt


__all__ = ["UploadSender", "next_counter", "write_newest"]
