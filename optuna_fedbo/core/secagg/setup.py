"""The public setup of one secure-aggregation round, to which every key and message is bound.

Every participant and the server build the same :class:`RoundSetup` (federation id, round,
participants, threshold, ring, graph); its SHA-256 :attr:`RoundSetup.digest` enters every key
derivation (HKDF ``info``), every share's associated data and every message, so nothing made for
one round, federation or participant set is accepted in another.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
import hashlib
import json
from typing import Any

from optuna_fedbo.core.secagg.graph import check_degree
from optuna_fedbo.core.secagg.graph import full_graph
from optuna_fedbo.core.secagg.graph import harary_graph
from optuna_fedbo.core.secagg.graph import majority
from optuna_fedbo.core.secagg.ring import RingSpec


def canonical_bytes(value: Any) -> bytes:
    """JSON with sorted keys and no whitespace, as UTF-8 (stable input to hashes and HKDF)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


@dataclass(frozen=True)
class RoundSetup:
    """What every party of a round agrees on before it starts.

    Attributes:
        federation_id: The federation (its public identity).
        round_index: The round (or refresh) number.
        participants: The enrolled participants admitted to the round (sorted, unique).
        threshold: ``t``: the fewest participants whose inputs may be summed and published; a
            strict majority of ``participants`` (``2 t > N``).
        ring: The ring and fixed-point encoding of the inputs.
        degree: ``None`` for SecAgg's complete graph; an even ``k`` for SecAgg+'s Harary graph.
    """

    federation_id: str
    round_index: int
    participants: tuple[str, ...]
    threshold: int
    ring: RingSpec
    degree: int | None = None

    def __post_init__(self) -> None:
        ids = self.participants
        if not isinstance(self.federation_id, str) or not self.federation_id:
            raise ValueError("federation_id must be a non-empty string.")
        if isinstance(self.round_index, bool) or not isinstance(self.round_index, int):
            raise ValueError(f"round_index must be an integer, got {self.round_index!r}.")
        if not all(isinstance(p, str) and p for p in ids) or len(set(ids)) != len(ids):
            raise ValueError("participants must be distinct non-empty strings.")
        object.__setattr__(self, "participants", tuple(sorted(ids)))
        n = len(ids)
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, int):
            raise ValueError(f"threshold must be an integer, got {t!r}.")
        if n < 3:
            raise ValueError(f"Secure aggregation needs at least 3 participants, got {n}.")
        if t > n:
            raise ValueError(
                f"threshold {t} exceeds the {n} participants: enroll more participants or lower "
                "the threshold."
            )
        if 2 * t <= n:
            raise ValueError(
                f"threshold {t} is not a strict majority of the {n} participants: use at least "
                f"{majority(n)}."
            )
        if self.degree is not None:
            check_degree(n, self.degree)

    @cached_property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical setup."""
        return hashlib.sha256(canonical_bytes(self.to_dict())).hexdigest()

    @cached_property
    def graph(self) -> dict[str, tuple[str, ...]]:
        """Every participant's neighbours (placement seeded by the setup's own digest)."""
        if self.degree is None:
            return full_graph(self.participants)
        seed = hashlib.sha256(b"secagg+ graph" + self.digest.encode()).digest()
        return harary_graph(self.participants, self.degree, seed)

    @property
    def share_threshold(self) -> int:
        """Shares needed to rebuild one participant's secret: ``t``, or a majority of ``k + 1``."""
        return self.threshold if self.degree is None else majority(self.degree + 1)

    def neighbours(self, participant: str) -> tuple[str, ...]:
        return self.graph[participant]

    @cached_property
    def _holders(self) -> dict[str, tuple[str, ...]]:
        return {p: tuple(sorted((*near, p))) for p, near in self.graph.items()}

    @cached_property
    def _share_indices(self) -> dict[str, dict[str, int]]:
        return {p: {h: i + 1 for i, h in enumerate(hs)} for p, hs in self._holders.items()}

    @cached_property
    def _held(self) -> dict[str, frozenset[str]]:
        held: dict[str, set[str]] = {p: set() for p in self.participants}
        for owner, holders in self._holders.items():
            for holder in holders:
                held[holder].add(owner)
        return {p: frozenset(owners) for p, owners in held.items()}

    def held_by(self, holder: str) -> frozenset[str]:
        """Whose secrets ``holder`` holds shares of (itself included): the owners ``o`` with
        ``holder in holders(o)``."""
        return self._held.get(holder, frozenset())

    def holders(self, participant: str) -> tuple[str, ...]:
        """Who holds shares of ``participant``'s secrets (its neighbours and itself), sorted;
        the Shamir index of holder ``h`` is ``holders.index(h) + 1``."""
        return self._holders[participant]

    def share_index(self, owner: str, holder: str) -> int:
        """The Shamir index of ``holder``'s share of ``owner``'s secrets.

        Raises:
            ValueError: If ``holder`` holds none of them.
        """
        index = self._share_indices[owner].get(holder)
        if index is None:
            raise ValueError(f"{holder!r} holds no share of {owner!r}'s secrets.")
        return index

    def info(self, purpose: str, **fields: Any) -> bytes:
        """Binding context for a key derivation or associated data."""
        return canonical_bytes({"purpose": purpose, "setup": self.digest, **fields})

    def to_dict(self) -> dict[str, Any]:
        return {
            "federation": self.federation_id,
            "round": self.round_index,
            "participants": list(self.participants),
            "threshold": self.threshold,
            "ring": self.ring.to_dict(),
            "degree": self.degree,
        }

    @classmethod
    def from_dict(cls, record: Any) -> RoundSetup:
        keys = {"federation", "round", "participants", "threshold", "ring", "degree"}
        if not isinstance(record, dict) or set(record) != keys:
            raise ValueError(f"a round setup must have exactly the keys {sorted(keys)}.")
        if not isinstance(record["participants"], list):
            raise ValueError("a round setup's participants must be a list.")
        return cls(
            federation_id=record["federation"],
            round_index=record["round"],
            participants=tuple(record["participants"]),
            threshold=record["threshold"],
            ring=RingSpec.from_dict(record["ring"]),
            degree=record["degree"],
        )
