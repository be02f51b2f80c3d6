"""A participant's own count of the noisy sums its input can be in (distributed DP), kept in its
key folder.

Under secure aggregation with distributed DP the ledger in the storage is the server's: a server
that deviates from the protocol (it unmasks an attempt's sum, then says the attempt failed and
starts the round over) obtains sums it never accounts. So each participant also counts its own
releases, outside the storage, and stops before its own count would exceed the federation's
budget (``epsilon_budget`` of the signed configuration).

**What is counted, and when.** A participant's input can be unmasked without the participant:
once its masked input is in the storage, the self-mask shares of ``t`` of its holders and the
survivor signatures of ``t`` participants suffice (it need not sign the survivor list or answer
the unmask request). The last moment at which it decides whether its input may be in a sum is
therefore the one before it sends its masked input: every masked input is recorded here first
(:meth:`OwnLedger.record`), and refused if one more release would take the participant's
epsilon above the budget. Every masked input carries noise drawn for that masking alone (an
input masked again in a later attempt is noised afresh), so the sums the server can get are
independent releases of the Skellam mechanism, and ``k`` recorded maskings are ``k`` releases
on the federation's curve (``dp_accounting``'s conversion of the Skellam Renyi DP bound, the one
the server's ledger uses). An honest run in which every attempt the participant masked in is
published counts exactly the server's releases; an attempt that fails after the participant
masked (fewer than ``t`` survivors) counts here and not in the server's ledger (the participant
cannot tell whether its masked input was unmasked).

**Never the same attempt twice.** Every masking adds an entry, and only for a (round, attempt)
after the newest one recorded: the entries are the participant's high-water mark as well. A
setup at or below it (a storage rolled back, or a server that publishes an attempt's setup
again, once the participant's claims of it are gone) is refused before the participant joins
(:meth:`OwnLedger.check_newer`) and again at the masking itself (:class:`ReplayedAttemptError`,
logged; the participant takes no part in that attempt). An honest server only moves forward:
rounds, and attempts within a round, are numbered upwards. The one way back is the operator's
restore of a backup (``optuna-fedbo restore-ledger``, a restore entry in the ledger signed by the
server, which carries every release forward): the mark is ``(restores, round, attempt)``, with
the restores of the verified ledger, so that the restored federation's rounds are taken part in
again (and counted again). Anyone else who rolls the storage back holds no newer restore entry;
a server that writes one gets maskings that are all counted.

**Where.** ``participants/<federation id>/<id digest>.secagg/releases.json`` in the key folder
(mode 0600, replaced atomically and durably (synced to disk, with its directory) under a file
lock, before the masked input is sent, and only ever extended): a restarted process, or another
worker of the site on this host, reads the same count, and a storage rolled back or recreated
does not reset it. Workers of one site on several hosts keep one count per key folder, and
nothing adds them up. Federations in in-memory storages keep it in memory (under a lock: every
handle of the federation in the process shares it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import stat
import threading
from typing import Any

from optuna_fedbo.federation._durable import replace_durably
from optuna_fedbo.federation.secagg.claims import _folder
from optuna_fedbo.federation.secagg.claims import _memory
from optuna_fedbo.federation.secagg.distributed_dp import DistributedDPConfig
from optuna_fedbo.federation.watermark import _locked

RELEASES_TYPE = "optuna-fedbo-secagg-releases"
RELEASES_VERSION = 1


#: Guards the in-memory counts (federations in in-memory storages).
_memory_lock = threading.Lock()


class OwnLedgerError(ValueError):
    """A participant's own count of releases is unreadable, corrupt or another's."""


class ReplayedAttemptError(OwnLedgerError):
    """A (round, attempt) at or below the newest one the participant masked an input into."""


class OwnLedger:
    """One participant's own count of the masked inputs it sent under distributed DP.

    Args:
        federation: The federation (with secure aggregation and a ``DistributedDPConfig``).
        client_id: The participant.
    """

    def __init__(self, federation: Any, client_id: str) -> None:
        self._federation = federation
        self.client_id = client_id
        ledger = federation.privacy_ledger()
        self._curve = ledger.curve
        self.budget: float | None = ledger.budget
        self.delta = ledger.delta
        folder = _folder(federation, client_id)
        self.path: Path | None = None if folder is None else folder / "releases.json"

    # -------------------------------------------------------------------------- reading
    def releases(self) -> int:
        """Masked inputs recorded so far (each a release of the distributed mechanism).

        Raises:
            OwnLedgerError: If the file is unreadable, accessible by others, corrupt or another
                participant's.
        """
        return len(self._read())

    def epsilon(self, releases: int | None = None) -> float:
        """Epsilon after ``releases`` (by default those recorded) at the federation's delta."""
        return self._curve.epsilon(self.releases() if releases is None else releases)

    def would_exceed(self) -> bool:
        """Whether one more release would take epsilon above the budget (never without one)."""
        return self.budget is not None and self.epsilon(self.releases() + 1) > self.budget

    def newest(self) -> tuple[int, int, int] | None:
        """The participant's high-water mark: ``(restores, round, attempt)`` of the newest
        masking recorded (``restores``: the operator's restores of the federation's ledger
        seen then)."""
        releases = self._read()
        return releases[-1] if releases else None

    def check_newer(self, round_index: int, attempt: int) -> None:
        """Refuse an attempt at or below the high-water mark (before joining it).

        Raises:
            ReplayedAttemptError: If ``(round_index, attempt)`` is not after the newest
                (round, attempt) recorded, without a restore by the operator since.
            OwnLedgerError: If the kept count is unreadable or corrupt.
        """
        self._refuse_replay(self._key(round_index, attempt), self._read())

    def _key(self, round_index: int, attempt: int) -> tuple[int, int, int]:
        """``(restores, round, attempt)``: an operator who restored a backup of the storage
        (``optuna-fedbo restore-ledger``: a restore entry signed by the server, carrying every
        release forward) starts the rounds over, and participants take part again; a storage
        rolled back by anyone else holds no newer restore entry."""
        restores = self._federation.privacy_ledger().chain().head.restores
        return int(restores), int(round_index), int(attempt)

    def _refuse_replay(
        self, key: tuple[int, int, int], releases: list[tuple[int, int, int]]
    ) -> None:
        if releases and key <= releases[-1]:
            newest = releases[-1]
            raise ReplayedAttemptError(
                f"round {key[1]} attempt {key[2]} is not after round {newest[1]} attempt "
                f"{newest[2]}, the newest it masked an input into (counted {self.where()}), and "
                "the federation's ledger shows no restore by its operator since: the storage "
                "was rolled back or the server runs an attempt again, and an input is never "
                "masked twice into one attempt"
            )

    def where(self) -> str:
        """Where the count is kept (for messages): ``"in memory"`` or ``"in <path>"``."""
        return "in memory" if self.path is None else f"in {self.path}"

    def _read(self) -> list[tuple[int, int, int]]:
        """The recorded (restores, round, attempt) of each masking, oldest first (strictly
        increasing)."""
        if self.path is None:
            with _memory_lock:
                return list(_memory(self._federation, "releases").get(self.client_id, []))
        fix = (
            "restore it from the backup of your key folder; the participant takes no part in "
            "secure aggregation until then"
        )
        try:
            mode = self.path.stat().st_mode
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as error:
            raise OwnLedgerError(f"{self.path} cannot be read ({error}): {fix}.") from None
        if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise OwnLedgerError(
                f"{self.path} is accessible by other users (mode {stat.S_IMODE(mode):04o}): run "
                f"`chmod 600 {self.path}`."
            )
        try:
            record = json.loads(raw)  # bytes that are not UTF-8 JSON: a ValueError
            valid = (
                record["type"] == RELEASES_TYPE
                and record["version"] == RELEASES_VERSION
                and record["federation_id"] == self._federation.federation_id
                and record["client_id"] == self.client_id
            )
            releases = (
                [(int(s), int(r), int(a)) for s, r, a in record["releases"]] if valid else None
            )
        except (ValueError, KeyError, TypeError):
            releases = None
        if releases is None or any(a >= b for a, b in zip(releases, releases[1:])):
            raise OwnLedgerError(
                f"{self.path} is corrupt or another participant's (not the count of releases "
                f"of {self.client_id!r} in this federation): {fix}."
            )
        return releases

    # -------------------------------------------------------------------------- writing
    def record(self, round_index: int, attempt: int) -> bool:
        """Count a masked input of ``(round, attempt)`` before it is sent: a new entry each
        time, on disk (synced) when this returns.

        Returns:
            ``True`` if it is counted, ``False`` if one more release would take epsilon above
            the budget (nothing is written: the input must not be sent).

        Raises:
            ReplayedAttemptError: If ``(round, attempt)`` is not after the newest recorded
                (nothing is written: the input must not be sent).
            OwnLedgerError: If the kept count is unreadable or corrupt (nothing is written).
        """
        key = self._key(round_index, attempt)
        if self.path is None:
            with _memory_lock:
                kept = _memory(self._federation, "releases").setdefault(self.client_id, [])
                self._refuse_replay(key, kept)
                if self._exceeds(len(kept) + 1):
                    return False
                kept.append(key)
            return True
        with _locked(self.path):
            releases = self._read()
            self._refuse_replay(key, releases)
            if self._exceeds(len(releases) + 1):
                return False
            record = {
                "type": RELEASES_TYPE,
                "version": RELEASES_VERSION,
                "federation_id": self._federation.federation_id,
                "client_id": self.client_id,
                "releases": [*releases, key],
            }
            replace_durably(self.path, json.dumps(record))
        return True

    def _exceeds(self, releases: int) -> bool:
        return self.budget is not None and self._curve.epsilon(releases) > self.budget


def own_ledger(federation: Any, client_id: str) -> OwnLedger | None:
    """The participant's own count if the federation runs distributed DP, else ``None``."""
    if not isinstance(federation.privacy, DistributedDPConfig):
        return None
    return OwnLedger(federation, client_id)


__all__ = ["OwnLedger", "OwnLedgerError", "ReplayedAttemptError", "own_ledger"]
