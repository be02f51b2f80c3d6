"""High-water marks: where the privacy ledger stood, kept outside the storage that can go back.

The storage is an untrusted relay that anyone with its URL can roll back (restore an old copy of
the SQLite file, delete the newest rounds, delete the ledger study). The ledger is a hash chain
(:mod:`optuna_fedbo.federation._chain`), so an edit *inside* it shows, but a whole older copy is
consistent in itself. So what must never go backwards is also kept outside the storage:

* **The server** keeps a signed mark of the ledger's head (releases, head digest, round) beside
  its key file (``servers/<federation id>.mark``, mode 0600), moved after each ledger entry is
  written and before the payload it accounts becomes readable. A server whose storage's ledger
  is behind the mark, or does not hold the mark's head, fails closed before it writes anything
  (:class:`LedgerRollbackError`; ``optuna-fedbo serve`` exits 2). A missing, corrupt or foreign
  mark is the same one-line error, naming the fix. A federation without releases and without a
  mark (just created) starts at zero.
* **An operator who really restored a backup** runs ``optuna-fedbo restore-ledger``
  (:func:`restore_ledger`): a signed restore entry carries the releases the restored ledger lacks
  forward from the mark, so epsilon and the budget count every release ever made.
* **Participants** keep their own mark (the newest verified ledger head and round) in their key
  folder (``participants/<federation id>/ledger.mark``) and refuse to upload into a federation
  that went backwards (:func:`check_participant`), with a warning naming it; a restore entry
  written by the operator is the one way back.

In an in-memory storage (one process) the marks are kept in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import json
import os
from pathlib import Path
import stat
import threading
import time
from typing import Any
from typing import TYPE_CHECKING

from optuna_fedbo.federation._chain import Chain
from optuna_fedbo.federation._chain import LedgerHead
from optuna_fedbo.federation._chain import LedgerIntegrityError
from optuna_fedbo.federation._durable import replace_durably
from optuna_fedbo.federation.keys import key_home
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.ledger import LedgerEntry
from optuna_fedbo.federation.location import persists_keys
from optuna_fedbo.federation.trust import UntrustedRecordError

if TYPE_CHECKING:
    from optuna_fedbo.federation.federation import Federation

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: marks are written without a file lock
    fcntl = None  # type: ignore[assignment]

MARK_TYPE = "optuna-fedbo-ledger-mark"
MARK_VERSION = 1

_memory_lock = threading.Lock()
#: Marks of federations in in-memory storages, by (federation id, "server" or "participants").
_MEMORY: dict[tuple[str, str], LedgerHead] = {}


class LedgerRollbackError(LedgerIntegrityError):
    """The storage's ledger is behind or diverges from a high-water mark, or the mark itself is
    missing, corrupt or another federation's: nothing is published or uploaded."""


# ---------------------------------------------------------------------------- the files
@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock beside ``path`` (processes of one machine move a mark in turn)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if fcntl is None:
        yield
        return
    descriptor = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _read(path: Path, what: str, fix: str) -> dict[str, Any] | None:
    """The JSON object of a mark file, ``None`` if there is none.

    Raises:
        LedgerRollbackError: If it is accessible by others, corrupt or not a mark file.
    """
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise LedgerRollbackError(f"{what} {path} cannot be read ({error}): {fix}") from None
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise LedgerRollbackError(
            f"{what} {path} is accessible by other users (mode {stat.S_IMODE(mode):04o}): run "
            f"`chmod 600 {path}`."
        )
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if (
        not isinstance(record, dict)
        or record.get("type") != MARK_TYPE
        or record.get("version") != MARK_VERSION
    ):
        raise LedgerRollbackError(f"{what} {path} is corrupt (not a ledger mark): {fix}")
    return record


def _head(record: Any) -> LedgerHead:
    """The head a mark record holds (``ValueError`` if malformed)."""
    if not isinstance(record, dict):
        raise ValueError("malformed")
    head = LedgerHead(
        int(record["releases"]),
        str(record["digest"]),
        int(record["round"]),
        int(record["restores"]),
    )
    if head.releases < 0 or head.restores < 0:
        raise ValueError("malformed")
    return head


def _newer(head: LedgerHead, than: LedgerHead | None) -> bool:
    """Whether ``head`` is further than the mark ``than`` (more releases, or a restore since)."""
    return than is None or (head.releases, head.restores) > (than.releases, than.restores)


def _order(head: LedgerHead) -> tuple[int, int, int]:
    return head.restores, head.releases, head.round


def _body(head: LedgerHead) -> dict[str, Any]:
    return {
        "releases": head.releases,
        "digest": head.digest,
        "round": head.round,
        "restores": head.restores,
    }


# ---------------------------------------------------------------------------- server
class ServerMark:
    """The server's signed high-water mark of its ledger head, beside its key file.

    Args:
        federation: The federation (this process holds its server keys).
    """

    def __init__(self, federation: Federation) -> None:
        self._federation = federation
        self._name = federation.name
        self._trust = federation.trust
        self._memory = not persists_keys(federation.storage)
        self.path = ServerKeys.path(federation.federation_id, federation.key_dir).with_suffix(
            ".mark"
        )
        self._lock = threading.Lock()
        self._head: LedgerHead | None = None
        self._what = f"The ledger high-water mark {self.path}"
        self._fix = (
            "restore it from the backup of your key directory; if it is lost for good and the "
            "storage was not rolled back, rebuild it from the ledger with `optuna-fedbo "
            f"restore-ledger --storage URL --name {self._name} --trust-storage`."
        )

    def read(self) -> LedgerHead | None:
        """The mark (the furthest signed line of the file), or ``None`` if there is none.

        Raises:
            LedgerRollbackError: If the file is corrupt, not signed by this federation's
                server, or belongs to another federation.
        """
        if self._memory:
            with _memory_lock:
                return _MEMORY.get((self._trust.federation_id, "server"))
        return self._read()[0]

    def _read(self) -> tuple[LedgerHead | None, int]:
        """``(the furthest head, number of lines)`` of the file (see :meth:`read`)."""
        try:
            mode = self.path.stat().st_mode
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return None, 0
        except OSError as error:
            raise LedgerRollbackError(
                f"{self._what} cannot be read ({error}): {self._fix}"
            ) from None
        if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise LedgerRollbackError(
                f"{self._what} is accessible by other users (mode {stat.S_IMODE(mode):04o}): "
                f"run `chmod 600 {self.path}`."
            )
        heads = []
        for number, line in enumerate(lines):
            try:
                record = json.loads(line)
            except ValueError:
                if number == len(lines) - 1 and heads:
                    continue  # the last line, torn by a crash: the one before it holds
                record = None
            if not isinstance(record, dict) or record.get("type") != MARK_TYPE:
                raise LedgerRollbackError(
                    f"{self._what} is corrupt (not a ledger mark): {self._fix}"
                )
            if record.get("federation_id") != self._trust.federation_id:
                raise LedgerRollbackError(
                    f"{self._what} belongs to another federation ({record.get('federation')!r}, "
                    f"id {record.get('federation_id')!r}), not {self._name!r}: {self._fix}"
                )
            try:
                heads.append(_head(self._trust.verify("ledger-mark", record.get("mark"))))
            except (UntrustedRecordError, KeyError, TypeError, ValueError) as error:
                raise LedgerRollbackError(
                    f"{self._what} is corrupt ({error}): {self._fix}"
                ) from None
        if not heads:
            raise LedgerRollbackError(f"{self._what} is corrupt (empty): {self._fix}")
        return max(heads, key=_order), len(lines)

    def _line(self, head: LedgerHead) -> str:
        body = {**_body(head), "federation_id": self._trust.federation_id, "at": time.time()}
        record = {
            "type": MARK_TYPE,
            "version": MARK_VERSION,
            "federation": self._name,
            "federation_id": self._trust.federation_id,
            "mark": self._trust.sign("ledger-mark", body),
        }
        return json.dumps(record, sort_keys=True) + "\n"

    def write(self, head: LedgerHead) -> None:
        """Replace the mark with ``head``, whatever it was (a new file: the start of a new
        federation, the restore command)."""
        if self._memory:
            with _memory_lock:
                _MEMORY[(self._trust.federation_id, "server")] = head
        else:
            with _locked(self.path):
                replace_durably(self.path, self._line(head))
        with self._lock:
            self._head = head

    def open(self) -> LedgerHead:
        """Read the mark at the server's start; a federation without releases (just created)
        starts at zero.

        Raises:
            LedgerRollbackError: If the mark is missing (and the storage shows releases),
                corrupt or another federation's.
        """
        if self._memory:
            head = self.read()
        else:
            with _locked(self.path):
                head, lines = self._read()
                if head is not None and lines > 1:  # keep the file small: the furthest line
                    replace_durably(self.path, self._line(head))
        if head is None:
            ledger = self._federation.privacy_ledger()
            entries, problems = self._federation.store.read_ledger()
            if entries or problems or ledger.floor() > 0:
                raise LedgerRollbackError(
                    f"The ledger high-water mark of federation {self._name!r} ({self.path}) is "
                    f"missing, but its storage holds releases: {self._fix}"
                )
            head = LedgerHead()
            self.write(head)
        with self._lock:
            self._head = head
        return head

    def check(self, chain: Chain) -> None:
        """Raise :class:`LedgerRollbackError` if the ledger is behind or diverges from the mark;
        move the mark forward if the ledger is ahead (an entry written before a crash)."""
        with self._lock:
            mark = self._head
        if mark is None:
            mark = self.open()
        head = chain.head
        fix = (
            "the storage was rolled back (an older copy restored, or records deleted); the "
            "server refuses to publish. Put the newest storage back or, if you restored a "
            f"backup on purpose, run `optuna-fedbo restore-ledger --storage URL --name "
            f"{self._name}` (the privacy spent is carried forward)."
        )
        if head.releases < mark.releases:
            raise LedgerRollbackError(
                f"The privacy ledger of federation {self._name!r} is behind the server's "
                f"high-water mark {self._where()}: it holds {head.releases} release(s), the "
                f"server accounted {mark.releases}: {fix}"
            )
        if mark.digest and mark.digest not in chain.digests:
            raise LedgerRollbackError(
                f"The privacy ledger of federation {self._name!r} diverges from the server's "
                f"high-water mark {self._where()}: it does not hold the entry the server wrote "
                f"last (round {mark.round}, {mark.releases} releases): {fix}"
            )
        if _newer(head, mark):
            self.advance(head)

    def _where(self) -> str:
        return "(in memory)" if self._memory else f"({self.path})"

    def advance(self, head: LedgerHead) -> None:
        """Move the mark to ``head`` if it is further: one signed line appended to the file
        (a few microseconds with the signature's ~0.2 ms; the furthest line counts, so lines
        appended by two racing servers never move it back)."""
        with self._lock:
            if not _newer(head, self._head):
                return
            self._head = head
        if self._memory:
            with _memory_lock:
                key = (self._trust.federation_id, "server")
                if _newer(head, _MEMORY.get(key)):
                    _MEMORY[key] = head
            return
        line = self._line(head).encode("utf-8")
        with _locked(self.path):
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(descriptor, line)
                os.fsync(descriptor)  # on disk before the release it accounts is readable
            finally:
                os.close(descriptor)


def guard_server(federation: Federation) -> None:
    """Check, at a server's start and before it writes anything, that the storage's ledger is
    not behind the server's high-water mark; the ledger then checks it before every release.

    Raises:
        LedgerIntegrityError: If the ledger does not verify, is behind or diverges from the
            mark, or the mark is missing, corrupt or another federation's.
    """
    mark = ServerMark(federation)
    mark.open()
    federation.privacy_ledger().guard(mark)


def restore_ledger(federation: Federation, *, trust_storage: bool = False) -> LedgerEntry | None:
    """Continue a federation whose storage was restored from a backup (the operator only).

    Writes a signed restore entry that carries the releases the restored ledger lacks forward
    from the server's high-water mark, so epsilon and the budget count every release ever made,
    never from the restored ledger. With ``trust_storage`` (a lost mark, and a storage that was
    *not* rolled back) the mark is rebuilt from the storage's ledger instead.

    Returns:
        The restore entry (``None`` with ``trust_storage``).

    Raises:
        LedgerIntegrityError: If the ledger does not verify in itself, is not behind the mark,
            or the mark is missing (without ``trust_storage``), corrupt or another federation's.
        ValueError: If this process does not hold the server's keys, or the federation has no
            differential privacy.
    """
    if not federation.is_operator:
        raise ValueError(
            f"Only the operator of federation {federation.name!r} can restore its ledger: the "
            "server's keys are not on this machine."
        )
    ledger = federation.privacy_ledger()
    mark = ServerMark(federation)
    if trust_storage:
        entries = ledger.verified()  # in itself: signatures, chain, the signed broadcasts
        mark.write(ledger.chain(entries).head)
        return None
    head = mark.read()
    if head is None:
        raise LedgerRollbackError(
            f"The ledger high-water mark of federation {federation.name!r} ({mark.path}) is "
            "missing: there is nothing to carry forward. Restore it from the backup of your "
            "key directory, or pass --trust-storage if the storage was not rolled back."
        )
    chain = ledger.chain()
    if chain.head.releases >= head.releases and (not head.digest or head.digest in chain.digests):
        raise LedgerIntegrityError(
            f"The privacy ledger of federation {federation.name!r} is not behind the server's "
            f"high-water mark ({chain.head.releases} releases, the mark {head.releases}): "
            "there is nothing to restore."
        )
    # A ledger behind the mark is a prefix of what the mark counted; one that diverges may
    # share none of it: all of the mark's releases are carried (an over-count, never under).
    carried = head.releases - chain.head.releases
    if carried <= 0:
        carried = head.releases
    return ledger.carry_forward(mark, head, federation.open_round(), carried)


# ------------------------------------------------------------------------ participants
class ParticipantMark:
    """A participant's high-water mark of a federation: the newest ledger head and round it
    verified, in its key folder (mode 0600).

    Args:
        federation: The federation.
    """

    def __init__(self, federation: Federation) -> None:
        self._federation_id = federation.federation_id
        self._name = federation.name
        self._memory = not persists_keys(federation.storage)
        self.path = (
            key_home(federation.key_dir) / "participants" / self._federation_id / "ledger.mark"
        )
        self._fix = (
            "restore it from the backup of your key folder, or delete it to trust the "
            "federation's storage as it is now."
        )

    def read(self) -> LedgerHead | None:
        """The mark, or ``None``.

        Raises:
            LedgerRollbackError: If the file is corrupt or another federation's.
        """
        if self._memory:
            with _memory_lock:
                return _MEMORY.get((self._federation_id, "participants"))
        record = _read(self.path, "The participant's ledger mark", self._fix)
        if record is None:
            return None
        if record.get("federation_id") != self._federation_id:
            raise LedgerRollbackError(
                f"The participant's ledger mark {self.path} belongs to another federation: "
                f"{self._fix}"
            )
        try:
            return _head(record)
        except (KeyError, TypeError, ValueError):
            raise LedgerRollbackError(
                f"The participant's ledger mark {self.path} is corrupt: {self._fix}"
            ) from None

    def update(self, head: LedgerHead, expected: LedgerHead | None) -> None:
        """Write ``head`` unless another process moved the mark since it read ``expected``
        further than ``head``."""
        if self._memory:
            with _memory_lock:
                _MEMORY[(self._federation_id, "participants")] = head
            return
        with _locked(self.path):
            current = self.read()
            if current not in (expected, None) and _order(current) >= _order(head):
                return  # another process of this key folder moved it as far meanwhile
            record = {
                "type": MARK_TYPE,
                "version": MARK_VERSION,
                "federation": self._name,
                "federation_id": self._federation_id,
                **_body(head),
            }
            replace_durably(self.path, json.dumps(record, sort_keys=True))


def check_participant(federation: Federation) -> None:
    """Refuse to upload into a federation that went backwards (a participant, before an upload).

    Compares the ledger head and the newest published round with this key folder's mark and
    with the signed newest broadcast, then moves the mark forward.

    Raises:
        LedgerRollbackError: If the ledger holds fewer releases than the mark or the newest
            broadcast counted, or the newest round is older than the mark's (without a restore
            entry written by the operator since), or older than the ledger says was published.
    """
    store = federation.store
    chain = federation.privacy_ledger().chain()
    latest = store.latest()
    newest = -1 if latest is None else int(latest["round"])
    counted = chain.counted
    if latest is not None:
        with contextlib.suppress(UntrustedRecordError, KeyError):
            newest_broadcast = store.read_verified_broadcast(int(latest["trial_id"]))
            counted = max(counted, newest_broadcast.ledger_count)
    mark = ParticipantMark(federation)
    seen = mark.read()
    head = chain.head
    problem = None
    holds = f"its ledger holds {head.releases} release(s)"
    if head.releases < counted or chain.broken:
        problem = f"{holds} but its signed records count {counted}"
    elif seen is not None and head.releases < seen.releases:
        problem = f"{holds} but this participant saw {seen.releases}"
    elif seen is not None and newest < seen.round and head.restores <= seen.restores:
        problem = f"its newest round is {newest} but this participant saw round {seen.round}"
    elif newest < head.round - 1:
        problem = f"its newest round is {newest} but its ledger accounted round {head.round}"
    if problem is not None:
        message = (
            f"Federation {federation.name!r} went backwards ({problem}): its storage was rolled "
            "back or records were deleted. Nothing is uploaded into it until its operator "
            "puts the newest storage back or restores the ledger (`optuna-fedbo "
            "restore-ledger`)."
        )
        store.warn_once(f"rolled-back:{problem}", message)
        raise LedgerRollbackError(message)
    if seen is not None and head.restores > seen.restores and newest < seen.round:
        store.warn_once(
            f"restored:{head.digest}",
            f"Federation {federation.name!r} was restored from a backup by its operator (round "
            f"{newest}, {head.releases} releases carried forward); uploads go on.",
        )
    now = LedgerHead(
        head.releases,
        head.digest,
        newest if seen is None or head.restores > seen.restores else max(newest, seen.round),
        head.restores,
    )
    if now != seen:
        mark.update(now, seen)


__all__ = [
    "LedgerRollbackError",
    "ParticipantMark",
    "ServerMark",
    "check_participant",
    "guard_server",
    "restore_ledger",
]
