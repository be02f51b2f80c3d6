"""The privacy ledger read as a hash chain: its head, and what a high-water mark compares.

Each ledger entry (:mod:`optuna_fedbo.federation.ledger`) binds ``prev``, the digest of the
ledger's head when it was written, and ``n_accounted``, the releases counted so far itself
included. The *head* is the entry of most releases (ties, from two servers racing: the larger
digest). The releases of a ledger are its release entries plus what its restore entries carried
forward from the server's high-water mark (:mod:`optuna_fedbo.federation.watermark`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from typing import Final
from typing import Protocol

from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation._codec import digest as json_digest
from optuna_fedbo.federation.trust import UntrustedRecordError

#: Entry kinds: a payload made readable, or a restore that carries releases forward.
RELEASE: Final[str] = "release"
RESTORE: Final[str] = "restore"


class LedgerIntegrityError(UntrustedRecordError):
    """The privacy ledger does not verify, or went backwards: the server refuses to publish
    (fails closed)."""


def entry_digest(body: dict[str, Any]) -> str:
    """The digest of a verified entry's body: what the next entry and the marks bind."""
    return json_digest(canonical_json(body))


@dataclass(frozen=True)
class LedgerHead:
    """Where a ledger stands: what a high-water mark keeps.

    Attributes:
        releases: Releases accounted (release entries plus what restore entries carried).
        digest: Digest of the head entry (``""`` for an empty ledger).
        round: The head entry's round (``-1`` for an empty ledger).
        restores: Number of restore entries.
    """

    releases: int = 0
    digest: str = ""
    round: int = -1
    restores: int = 0


@dataclass(frozen=True)
class Chain:
    """A ledger read as a hash chain.

    Attributes:
        head: Where it stands.
        digests: Digest of every entry, and of every head a restore entry carried forward.
        broken: Problems of the chain (an entry whose predecessor is missing).
        counted: The most releases an entry counted (a lower bound for ``head.releases``).
    """

    head: LedgerHead
    digests: frozenset[str]
    broken: tuple[str, ...]
    counted: int


class HighWaterMark(Protocol):
    """The server's record of its ledger head, kept outside the storage
    (:class:`optuna_fedbo.federation.watermark.ServerMark`)."""

    def check(self, chain: Chain) -> None:
        """Raise :class:`LedgerIntegrityError` if the ledger is behind or diverges."""

    def advance(self, head: LedgerHead) -> None:
        """Record a newer head (before the release it accounts becomes readable)."""


def read_chain(
    entries: dict[str, dict[str, Any]], cache: dict[str, tuple[dict[str, Any], str]]
) -> Chain:
    """Read verified entries (key -> body) as a chain.

    Args:
        entries: The verified entries.
        cache: Digests by key with the body they were computed from (reused while the reader
            returns the same body object), updated here.
    """
    digests: dict[str, dict[str, Any]] = {}
    carried: set[str] = set()
    releases = counted = restores = 0
    for key, body in entries.items():
        cached = cache.get(key)
        if cached is None or cached[0] is not body:
            cached = (body, entry_digest(body))
            cache[key] = cached
        digests[cached[1]] = body
        counted = max(counted, int(body.get("n_accounted", 0)))
        if body.get("kind") == RESTORE:
            restores += 1
            releases += int(body.get("carried", 0))
            carried.add(str(body.get("payload")))
        else:
            releases += 1
    broken = tuple(
        f"the predecessor of the entry of round {body.get('round')} is missing"
        for body in digests.values()
        if body.get("prev") and body.get("prev") not in digests
    )
    head = LedgerHead()
    if digests:
        top = max(digests, key=lambda d: (int(digests[d].get("n_accounted", 0)), d))
        head = LedgerHead(releases, top, int(digests[top].get("round", -1)), restores)
    return Chain(head, frozenset(digests) | carried, broken, counted)


__all__ = [
    "Chain",
    "HighWaterMark",
    "LedgerHead",
    "LedgerIntegrityError",
    "RELEASE",
    "RESTORE",
    "entry_digest",
    "read_chain",
]
