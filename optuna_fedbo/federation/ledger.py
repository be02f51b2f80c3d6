"""The privacy ledger of a differentially private federation: every readable payload, counted.

The ledger lives in the federation's storage (study ``NAME:fedbo:ledger``), is written by the
server only, signed by it, and readable by everyone. It is append-only: one entry per *payload*
(a noisy release), keyed by the round and the payload's digest and bound to the epoch of the
server that drew it. Its invariant: **a payload is in the ledger before it exists anywhere
readable in the storage** -- the server draws the noise, accounts the payload, then stages it
(signed), then publishes it. Two servers racing on a slow database may each release a payload
for the same round; both are accounted, so epsilon counts every release, never fewer.

A crash can leave a payload accounted but never staged: the entry also holds the payload sealed
to the server's own key, so the restarted server publishes that very payload (already paid for)
instead of drawing new noise. A crash after staging leaves a staged payload, which the restarted
server publishes.

**A hash chain.** Each entry binds the digest of the ledger's head when it was written (the
previous entry), the number of releases accounted so far (``n_accounted``, itself included)
and the epsilon they spent, so an entry deleted from the middle breaks the chain, one deleted
from the end leaves fewer releases than a later record counted, and the *head* (the entry of
most releases) names the whole ledger. Two servers racing on a slow database may both extend
the same head (a fork); both entries count. The server also keeps the head outside the storage
(:mod:`optuna_fedbo.federation.watermark`), so a storage rolled back to an older copy, whose
ledger is internally consistent but behind, is recognised as well. An operator who really
restored a backup writes a *restore* entry (``optuna-fedbo restore-ledger``) that carries the
releases the restored ledger lacks forward from that high-water mark: the count of releases is
the release entries plus what restore entries carried.

**Fail closed.** The server re-reads the ledger before every release; an entry that does not
verify (forged, tampered with, copied under another key), a broken chain or fewer releases than
the chain, the signed broadcasts or the server's high-water mark say were accounted (entries
deleted, the storage rolled back) raises :class:`LedgerIntegrityError`: the server refuses to
publish and says why. It never counts from zero. Participants and ``status`` ignore entries that
do not verify, with a warning, and say "ledger missing" or "rolled back" (with the epsilon of
the releases the signed broadcasts prove) when the ledger holds fewer releases than those count.

Every release is the same subsampled Gaussian event (``z`` and ``q`` are fixed; the noise scales
with the round's largest weight ``phi_max``), so the spend after ``T`` accounted payloads is
``eps(T)`` of the configured accountant (:class:`~optuna_fedbo.privacy._curve.EpsilonCurve`).
The entries hold nothing readable that depends on the agents' data -- no selection, no clipped
count, no number of contributors -- only the round, the mechanism's public parameters, the
running epsilon and the sealed payload.
"""

from __future__ import annotations

from dataclasses import asdict
from dataclasses import dataclass
import json
import threading
import time
from typing import Any
from typing import Final

import optuna

from optuna_fedbo.federation._chain import Chain
from optuna_fedbo.federation._chain import entry_digest
from optuna_fedbo.federation._chain import HighWaterMark
from optuna_fedbo.federation._chain import LedgerHead
from optuna_fedbo.federation._chain import LedgerIntegrityError
from optuna_fedbo.federation._chain import read_chain
from optuna_fedbo.federation._chain import RELEASE
from optuna_fedbo.federation._chain import RESTORE
from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.records import ledger_key
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.federation.trust import UntrustedRecordError
from optuna_fedbo.privacy._curve import EpsilonCurve

_logger = optuna.logging.get_logger(__name__)

#: A server with a budget precomputes ``eps(T)`` for the rounds the budget allows (so that each
#: round is a table lookup), spending at most this many seconds when it starts; the rounds
#: beyond are computed when they come (one PLD convolution each).
PRECOMPUTE_SECONDS: float = 2.0

LEDGER_FORMAT: Final[int] = 3


@dataclass(frozen=True)
class LedgerEntry:
    """One accounted payload.

    Attributes:
        round: The round index.
        n_accounted: Payloads accounted so far by the writing server, this one included.
        epsilon: Epsilon spent after this round (at ``delta``).
        delta: The target delta.
        accountant: The accountant that computed ``epsilon``.
        noise_multiplier: ``z``.
        sample_rate: ``q``.
        clip_norm: ``S``.
        sampling: ``"poisson"`` or ``"fixed_size"``.
        noise_std: Noise standard deviation per coordinate, ``z phi_max S / q``.
        phi_max: The round's largest sub-region weight (public: the weight schedule).
        accounted_at: Server clock when the payload was accounted.
        payload: SHA-256 of the accounted payload (a restore: the digest of the head it
            carries forward).
        epoch: The epoch of the server that accounted it.
        prev: Digest of the ledger's head when this entry was written (``""``: none).
        kind: :data:`RELEASE` or :data:`RESTORE`.
        carried: A restore's releases carried forward from the server's high-water mark.
    """

    round: int
    n_accounted: int
    epsilon: float
    delta: float
    accountant: str
    noise_multiplier: float
    sample_rate: float
    clip_norm: float
    sampling: str
    noise_std: float
    phi_max: float
    accounted_at: float
    payload: str = ""
    epoch: int = 0
    prev: str = ""
    kind: str = RELEASE
    carried: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The entry as a JSON object."""
        return {"format": LEDGER_FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> LedgerEntry:
        """Rebuild an entry from :meth:`to_dict`'s output.

        Raises:
            ValueError: If the record is malformed.
        """
        if record.get("format") != LEDGER_FORMAT:
            raise ValueError(f"Unknown ledger record format {record.get('format')!r}.")
        try:
            return cls(
                round=int(record["round"]),
                n_accounted=int(record["n_accounted"]),
                epsilon=float(record["epsilon"]),
                delta=float(record["delta"]),
                accountant=str(record["accountant"]),
                noise_multiplier=float(record["noise_multiplier"]),
                sample_rate=float(record["sample_rate"]),
                clip_norm=float(record["clip_norm"]),
                sampling=str(record["sampling"]),
                noise_std=float(record["noise_std"]),
                phi_max=float(record["phi_max"]),
                accounted_at=float(record["accounted_at"]),
                payload=str(record["payload"]),
                epoch=int(record["epoch"]),
                prev=str(record["prev"]),
                kind=str(record["kind"]),
                carried=int(record["carried"]),
            )
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"Malformed ledger record {record!r}.") from None


class PrivacyLedger:
    """Reads (anyone) and writes (the server) a federation's privacy ledger.

    Args:
        store: The federation's store.
        privacy: The federation's privacy configuration.
        n_clients: Registered participants ``N``.
    """

    def __init__(self, store: FederationStore, privacy: DPConfig, n_clients: int) -> None:
        self._store = store
        self._privacy = privacy.resolve(n_clients)
        self._n_clients = n_clients
        self._curve: EpsilonCurve | None = None  # on first use (see curve)
        self._lock = threading.RLock()
        self._mark: HighWaterMark | None = None
        # Entry digests by key, with the (cached, unchanged) body they were computed from.
        self._digests: dict[str, tuple[dict[str, Any], str]] = {}
        self._memo: tuple[tuple[int, ...], tuple[Any, ...], Chain] | None = None  # last read

    def guard(self, mark: HighWaterMark) -> None:
        """Check the ledger against the server's high-water mark from now on (the server).

        Raises:
            LedgerIntegrityError: If the ledger does not verify, or is behind or diverges from
                the mark (nothing is written).
        """
        with self._lock:
            self._mark = mark
            self.verified()

    @property
    def privacy(self) -> DPConfig:
        """The privacy configuration (``delta`` resolved)."""
        return self._privacy

    @property
    def curve(self) -> EpsilonCurve:
        """Epsilon as a function of the number of accounted payloads (computed on first use: a
        participant that only checks the ledger's chain before an upload never loads
        dp-accounting, whose import takes seconds)."""
        with self._lock:
            if self._curve is None:
                self._curve = self._privacy.curve(self._n_clients)
            return self._curve

    @property
    def delta(self) -> float:
        """The target delta."""
        assert self._privacy.delta is not None
        return self._privacy.delta

    @property
    def budget(self) -> float | None:
        """The epsilon budget, or ``None``."""
        return self._privacy.epsilon_budget

    # -------------------------------------------------------------------------- reading
    def _read(self) -> dict[str, dict[str, Any]]:
        """Verified entries; those that do not verify are warned about and left out."""
        entries, problems = self._store.read_ledger()
        for problem in problems:
            self._store.warn_once(
                f"ledger:{problem}",
                f"Ignoring a privacy ledger record of federation {self._store.name!r} that does "
                f"not verify ({problem}); the epsilon shown may be too low.",
            )
        return entries

    def entries(self) -> list[LedgerEntry]:
        """Every entry that verifies (releases and restores), in the order of the chain."""
        entries = [LedgerEntry.from_dict(body) for body in self._read().values()]
        return sorted(entries, key=lambda e: (e.n_accounted, e.accounted_at, e.round))

    def chain(self, entries: dict[str, dict[str, Any]] | None = None) -> Chain:
        """The ledger (``entries``, default: those that verify) read as a hash chain.

        The entries' bodies are the store's cached objects while unchanged, so the chain is
        computed again only when an entry was written (or changed) since the last call.
        """
        entries = self._read() if entries is None else entries
        bodies = tuple(entries.values())  # held by the memo: their ids are not reused
        identity = tuple(map(id, bodies))
        with self._lock:
            if self._memo is not None and self._memo[0] == identity:
                return self._memo[2]
        chain = read_chain(entries, self._digests)
        with self._lock:
            self._memo = (identity, bodies, chain)
        return chain

    def floor(self) -> int:
        """The most releases the server's signed records (broadcasts, budget record) counted."""
        floor = max((b.ledger_count for b in self._store.broadcasts()), default=0)
        exhausted = self._store.budget_exhausted()
        if exhausted is not None:
            floor = max(floor, int(exhausted.get("rounds_accounted", 0)))
        return floor

    def standing(self) -> tuple[int, str]:
        """``(releases known, state)``: the releases the ledger and the signed records prove,
        and ``"ok"``, ``"missing"`` (signed broadcasts count releases, the ledger has none) or
        ``"rolled back"`` (it has fewer, or its chain is broken). Warns once when not ok."""
        chain = self.chain()
        known = max(chain.head.releases, chain.counted, self.floor())
        state = "ok"
        if chain.head.releases == 0 and known > 0:
            state = "missing"
        elif chain.head.releases < known or chain.broken:
            state = "rolled back"
        if state != "ok":
            self._store.warn_once(
                f"ledger-{state}:{chain.head.releases}:{known}",
                f"The privacy ledger of federation {self._store.name!r} is {state}: it holds "
                f"{chain.head.releases} release(s) but the server's signed records count "
                f"{known}; epsilon is shown for {known} (at least). The storage was rolled back "
                "or the ledger deleted: the server refuses to publish until its operator "
                "restores it (`optuna-fedbo restore-ledger`).",
            )
        return known, state

    def n_released(self) -> int:
        """Releases of the verified ledger (the server's count; fails closed like
        :meth:`verified`)."""
        return self.chain(self.verified()).head.releases

    def n_accounted(self) -> int:
        """Number of accounted releases (entries that verify, and releases restores carried)."""
        return self.chain().head.releases

    def spent(self) -> tuple[float, float]:
        """``(epsilon, delta)`` after every release known: those of the ledger, or more if the
        server's signed records prove more (a deleted or rolled-back ledger: warned)."""
        return self.curve.epsilon(self.standing()[0]), self.delta

    def exhausted(self) -> dict[str, Any] | None:
        """The server's budget-exhausted record, or ``None`` while the budget lasts."""
        return self._store.budget_exhausted()

    def summary(self) -> dict[str, Any]:
        """The ledger at a glance, as a JSON object."""
        privacy = self._privacy
        entries, problems = self._store.read_ledger()
        rounds, state = self.standing()
        return {
            "mechanism": privacy.kind,
            "accountant": privacy.accountant,
            "noise_multiplier": privacy.noise_multiplier,
            "sample_rate": privacy.sample_rate,
            "clip_norm": privacy.clip_norm,
            "sampling": privacy.sampling,
            "neighbouring_relation": privacy.neighbouring_relation,
            "delta": self.delta,
            "rounds_accounted": rounds,
            "epsilon": self.curve.epsilon(rounds),
            "epsilon_budget": privacy.epsilon_budget,
            "budget_exhausted": self.exhausted(),
            "unverified_entries": len(problems),
            "ledger": state,
            "ledger_releases": self.chain(entries).head.releases,
        }

    # --------------------------------------------------------------------- server side
    def verified(self) -> dict[str, dict[str, Any]]:
        """The server's view: every entry, all verified, none missing.

        Raises:
            LedgerIntegrityError: If an entry does not verify, the chain is broken, the ledger
                holds fewer releases than its entries, the signed broadcasts or the budget
                record counted, or it is behind or diverges from the server's high-water mark.
        """
        entries, problems = self._store.read_ledger()
        name = self._store.name
        if problems:
            raise LedgerIntegrityError(
                f"The privacy ledger of federation {name!r} does not verify ({problems[0]}"
                + (f", and {len(problems) - 1} more" if len(problems) > 1 else "")
                + "): the server refuses to publish, since it cannot count the privacy spent. "
                "Restore the ledger study from a backup, or create a new federation."
            )
        chain = self.chain(entries)
        floor = max(chain.counted, self.floor())
        if chain.broken or chain.head.releases < floor:
            found = chain.broken[0] if chain.broken else f"{chain.head.releases} releases"
            raise LedgerIntegrityError(
                f"The privacy ledger of federation {name!r} holds {found} but the server's "
                f"signed records counted {max(floor, chain.head.releases + 1)}: entries were "
                "deleted. The server refuses to publish rather than count from a lower total. "
                "Restore the ledger study from a backup (then `optuna-fedbo restore-ledger`), "
                "or create a new federation."
            )
        if self._mark is not None:
            self._mark.check(chain)
        return entries

    def reload(self) -> None:
        """Check the ledger (the server, at start and after an error): fails closed."""
        self.verified()

    def prepare(self, seconds: float | None = None) -> int:
        """Precompute epsilon for the payloads the budget allows (server start).

        Walks forward from the ledger's count, one payload at a time (a lookup-table fill: one
        PLD convolution per step, or a closed form for the Renyi accountants), until epsilon
        exceeds the budget or ``seconds`` have passed. Afterwards accounting those payloads is
        a table lookup. Without a budget nothing is precomputed.

        Args:
            seconds: The time box (``None``: :data:`PRECOMPUTE_SECONDS`, read at call time).

        Returns:
            The last count whose epsilon is now known (the ledger's count if nothing).
        """
        seconds = PRECOMPUTE_SECONDS if seconds is None else seconds
        count = self.n_released()
        budget = self.budget
        if budget is None:
            return count
        curve = self.curve  # (built before the time box starts)
        start = time.perf_counter()
        while curve.epsilon(count) <= budget and time.perf_counter() - start < seconds:
            count += 1
        _logger.debug(
            f"Precomputed epsilon up to count {count} for the budget {budget:g} "
            f"({self._privacy.accountant}, {time.perf_counter() - start:.2f} s)."
        )
        return count

    def would_exceed(self) -> bool:
        """Whether releasing one more payload would take epsilon above the budget."""
        budget = self.budget
        if budget is None:
            return False
        return self.curve.epsilon(self.n_released() + 1) > budget

    def is_accounted(self, payload_digest: str) -> bool:
        """Whether a payload (by digest) is in the ledger."""
        return any(
            body.get("payload") == payload_digest and body.get("kind") == RELEASE
            for body in self.verified().values()
        )

    def unreleased(
        self, round_index: int, released: set[str]
    ) -> tuple[str, tuple[str, ...]] | None:
        """A payload of ``round_index`` accounted but never staged (a crash in between), with
        the receipts of the uploads it aggregated, or ``None``: the server publishes it rather
        than drawing (and paying for) new noise."""
        candidates = [
            body
            for body in self.verified().values()
            if body.get("round") == round_index
            and body.get("kind") == RELEASE
            and body.get("payload") not in released
        ]
        for body in sorted(candidates, key=lambda b: -float(b.get("accounted_at", 0.0))):
            try:
                sealed = self._store._trust().open_private("ledger-payload", body.get("sealed"))
                record = json.loads(sealed)
                return str(record["payload"]), tuple(str(r) for r in record["receipts"])
            except (UntrustedRecordError, ValueError, KeyError, TypeError):
                continue
        return None

    def account(
        self,
        round_index: int,
        payload: str,
        *,
        epoch: int,
        noise_std: float,
        phi_max: float,
        receipts: tuple[str, ...] = (),
    ) -> LedgerEntry:
        """Compose one payload into the persistent ledger (idempotent per payload).

        Must be called, and must return, before the payload is written anywhere readable: it
        writes the entry (chained to the head), then moves the server's high-water mark.

        Args:
            round_index: The round being released.
            payload: The payload text (its digest is bound; it is stored sealed to the server).
            epoch: The epoch of the server releasing it.
            noise_std: Its noise standard deviation per coordinate.
            phi_max: Its largest sub-region weight.
            receipts: Receipts of the uploads it aggregates (sealed with the payload, so that a
                round recovered from the ledger after a crash carries them).

        Returns:
            The payload's entry (the stored one if it was already accounted).

        Raises:
            LedgerIntegrityError: If the ledger does not verify (nothing is written).
        """
        digest = text_digest(payload)
        key = ledger_key(int(round_index), digest)
        with self._lock:
            entries = self.verified()
            if key in entries:
                return LedgerEntry.from_dict(entries[key])
            head = self.chain(entries).head
            privacy = self._privacy
            n_accounted = head.releases + 1
            entry = LedgerEntry(
                round=int(round_index),
                n_accounted=n_accounted,
                epsilon=self.curve.epsilon(n_accounted),
                delta=self.delta,
                accountant=privacy.accountant,
                noise_multiplier=privacy.noise_multiplier,
                sample_rate=privacy.sample_rate,
                clip_norm=privacy.clip_norm,
                sampling=privacy.sampling,
                noise_std=float(noise_std),
                phi_max=float(phi_max),
                accounted_at=time.time(),
                payload=digest,
                epoch=int(epoch),
                prev=head.digest,
            )
            sealed = self._store._trust().seal_private(
                "ledger-payload", canonical_json({"payload": payload, "receipts": list(receipts)})
            )
            self._append(key, {**entry.to_dict(), "sealed": sealed}, head, self._mark)
            return entry

    def carry_forward(
        self, mark: HighWaterMark, carried_head: LedgerHead, round_index: int, carried: int
    ) -> LedgerEntry:
        """Write a restore entry carrying ``carried`` releases forward from the server's
        high-water mark (whose head is ``carried_head``), then move the mark to it: after a
        backup was restored (:func:`optuna_fedbo.federation.watermark.restore_ledger`).

        Raises:
            LedgerIntegrityError: If the ledger does not verify in itself (nothing is written).
        """
        with self._lock:
            entries, problems = self._store.read_ledger()
            chain = self.chain(entries)
            if problems or chain.broken:
                raise LedgerIntegrityError(
                    f"The privacy ledger of federation {self._store.name!r} does not verify in "
                    f"itself ({(problems or list(chain.broken))[0]}): restore a complete backup "
                    "of the storage (an older one is fine) before carrying the privacy spent "
                    "forward."
                )
            head = chain.head
            n_accounted = head.releases + int(carried)
            entry = LedgerEntry(
                round=int(round_index),
                n_accounted=n_accounted,
                epsilon=self.curve.epsilon(n_accounted),
                delta=self.delta,
                accountant=self._privacy.accountant,
                noise_multiplier=self._privacy.noise_multiplier,
                sample_rate=self._privacy.sample_rate,
                clip_norm=self._privacy.clip_norm,
                sampling=self._privacy.sampling,
                noise_std=0.0,
                phi_max=0.0,
                accounted_at=time.time(),
                payload=carried_head.digest or "0" * 64,
                epoch=0,
                prev=head.digest,
                kind=RESTORE,
                carried=int(carried),
            )
            self._append(ledger_key(entry.round, entry.payload), entry.to_dict(), head, mark)
            return entry

    def _append(
        self,
        key: str,
        body: dict[str, Any],
        head: LedgerHead,
        mark: HighWaterMark | None,
    ) -> None:
        """Write an entry extending ``head``, then move the high-water mark to it."""
        self._store.write_ledger_entry(key, body)
        if mark is not None:
            restore = body["kind"] == RESTORE
            mark.advance(
                LedgerHead(
                    head.releases + (int(body["carried"]) if restore else 1),
                    entry_digest(body),
                    int(body["round"]),
                    head.restores + restore,
                )
            )

    def mark_exhausted(self, round_index: int) -> dict[str, Any]:
        """Record that ``round_index`` is not published because of the budget."""
        with self._lock:
            spent = self.n_released()
            record = {
                "round": int(round_index),
                "rounds_accounted": spent,
                "epsilon": self.curve.epsilon(spent),
                "epsilon_next": self.curve.epsilon(spent + 1),
                "epsilon_budget": self.budget,
                "delta": self.delta,
                "at": time.time(),
            }
            self._store.mark_budget_exhausted(record)
            return record


__all__ = [
    "Chain",
    "LedgerEntry",
    "LedgerHead",
    "LedgerIntegrityError",
    "PrivacyLedger",
    "entry_digest",
]
