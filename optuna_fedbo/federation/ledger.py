"""The privacy ledger of a differentially private federation: every released round, counted.

The ledger lives in the federation's storage (study ``NAME:fedbo:ledger``, one record per round),
is written by the server only and is readable by everyone. Its invariant: **a round is in the
ledger before its broadcast exists anywhere in the storage** -- the server accounts, then stages
the broadcast, then publishes it. A crash at any point can therefore leave a round accounted but
not yet published (the restarted server publishes the staged broadcast, or aggregates the round
again if nothing was staged: records are keyed by round, so re-accounting a round is a no-op),
and never a readable broadcast that is not accounted.

Every round releases the same subsampled Gaussian event (``z`` and ``q`` are fixed; the noise
scales with the round's largest weight ``phi_max``), so the spend after ``T`` accounted rounds is
``eps(T)`` of the configured accountant (:class:`~optuna_fedbo.privacy._curve.EpsilonCurve`).
The records hold nothing that depends on the agents' data -- no selection, no clipped count, no
number of contributors -- only the round, the mechanism's public parameters and the running
epsilon.
"""

from __future__ import annotations

from dataclasses import asdict
from dataclasses import dataclass
import threading
import time
from typing import Any
from typing import Final

import optuna

from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.privacy._curve import EpsilonCurve

_logger = optuna.logging.get_logger(__name__)

#: A server with a budget precomputes ``eps(T)`` for the rounds the budget allows (so that each
#: round is a table lookup), spending at most this many seconds when it starts; the rounds
#: beyond are computed when they come (one PLD convolution each).
PRECOMPUTE_SECONDS: Final[float] = 2.0

LEDGER_FORMAT: Final[int] = 1


@dataclass(frozen=True)
class LedgerEntry:
    """One accounted round.

    Attributes:
        round: The round index.
        n_accounted: Rounds accounted so far, this one included.
        epsilon: Epsilon spent after this round (at ``delta``).
        delta: The target delta.
        accountant: The accountant that computed ``epsilon``.
        noise_multiplier: ``z``.
        sample_rate: ``q``.
        clip_norm: ``S``.
        sampling: ``"poisson"`` or ``"fixed_size"``.
        noise_std: Noise standard deviation per coordinate, ``z phi_max S / q``.
        phi_max: The round's largest sub-region weight (public: the weight schedule).
        accounted_at: Server clock when the round was accounted.
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
        self._curve = self._privacy.curve(n_clients)
        self._lock = threading.RLock()
        self._accounted: set[int] | None = None  # server side: rounds known to be accounted

    @property
    def privacy(self) -> DPConfig:
        """The privacy configuration (``delta`` resolved)."""
        return self._privacy

    @property
    def curve(self) -> EpsilonCurve:
        """Epsilon as a function of the number of accounted rounds."""
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
    def entries(self) -> list[LedgerEntry]:
        """Every accounted round, by round index."""
        records = self._store.read_ledger()
        return [LedgerEntry.from_dict(records[key]) for key in sorted(records)]

    def n_accounted(self) -> int:
        """Number of accounted rounds."""
        return len(self._store.read_ledger())

    def spent(self) -> tuple[float, float]:
        """``(epsilon, delta)`` after every accounted round."""
        return self._curve.epsilon(self.n_accounted()), self.delta

    def exhausted(self) -> dict[str, Any] | None:
        """The server's budget-exhausted record, or ``None`` while the budget lasts."""
        return self._store.budget_exhausted()

    def summary(self) -> dict[str, Any]:
        """The ledger at a glance, as a JSON object."""
        privacy = self._privacy
        rounds = self.n_accounted()
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
            "epsilon": self._curve.epsilon(rounds),
            "epsilon_budget": privacy.epsilon_budget,
            "budget_exhausted": self.exhausted(),
        }

    # --------------------------------------------------------------------- server side
    def reload(self) -> None:
        """Read the accounted rounds from storage (the server, at start and after an error)."""
        with self._lock:
            self._accounted = set(self._store.read_ledger())

    def _rounds(self) -> set[int]:
        if self._accounted is None:
            self.reload()
        assert self._accounted is not None
        return self._accounted

    def is_accounted(self, round_index: int) -> bool:
        """Whether a round is already in the ledger."""
        with self._lock:
            return round_index in self._rounds()

    def prepare(self, seconds: float = PRECOMPUTE_SECONDS) -> int:
        """Precompute epsilon for the rounds the budget allows (server start).

        Walks forward from the ledger's count, one round at a time (a lookup-table fill: one
        PLD convolution per round, or a closed form for the Renyi accountants), until epsilon
        exceeds the budget or ``seconds`` have passed. Afterwards accounting those rounds is a
        table lookup. Without a budget nothing is precomputed.

        Returns:
            The last round count whose epsilon is now known (the ledger's count if nothing).
        """
        count = len(self._rounds())
        budget = self.budget
        if budget is None:
            return count
        start = time.perf_counter()
        while self._curve.epsilon(count) <= budget and time.perf_counter() - start < seconds:
            count += 1
        _logger.debug(
            f"Precomputed epsilon up to round count {count} for the budget {budget:g} "
            f"({self._privacy.accountant}, {time.perf_counter() - start:.2f} s)."
        )
        return count

    def would_exceed(self, round_index: int) -> bool:
        """Whether publishing ``round_index`` would take epsilon above the budget.

        A round already accounted (a crash before its publication) has been paid for: False.
        """
        budget = self.budget
        with self._lock:
            if budget is None or round_index in self._rounds():
                return False
            return self._curve.epsilon(len(self._rounds()) + 1) > budget

    def account(self, round_index: int, *, noise_std: float, phi_max: float) -> LedgerEntry:
        """Compose one round into the persistent ledger (idempotent per round).

        Must be called, and must return, before the round's broadcast is written anywhere.

        Args:
            round_index: The round being released.
            noise_std: Its noise standard deviation per coordinate.
            phi_max: Its largest sub-region weight.

        Returns:
            The round's entry (the stored one if the round was already accounted).
        """
        with self._lock:
            rounds = self._rounds()
            if round_index in rounds:
                stored = self._store.read_ledger().get(round_index)
                if stored is not None:
                    return LedgerEntry.from_dict(stored)
                rounds.discard(round_index)  # the cache was wrong: account it again
            privacy = self._privacy
            n_accounted = len(rounds) + 1
            entry = LedgerEntry(
                round=int(round_index),
                n_accounted=n_accounted,
                epsilon=self._curve.epsilon(n_accounted),
                delta=self.delta,
                accountant=privacy.accountant,
                noise_multiplier=privacy.noise_multiplier,
                sample_rate=privacy.sample_rate,
                clip_norm=privacy.clip_norm,
                sampling=privacy.sampling,
                noise_std=float(noise_std),
                phi_max=float(phi_max),
                accounted_at=time.time(),
            )
            self._store.write_ledger_entry(round_index, entry.to_dict())
            rounds.add(round_index)
            return entry

    def mark_exhausted(self, round_index: int) -> dict[str, Any]:
        """Record that ``round_index`` is not published because of the budget."""
        with self._lock:
            spent_rounds = len(self._rounds())
            record = {
                "round": int(round_index),
                "rounds_accounted": spent_rounds,
                "epsilon": self._curve.epsilon(spent_rounds),
                "epsilon_next": self._curve.epsilon(spent_rounds + 1),
                "epsilon_budget": self.budget,
                "delta": self.delta,
                "at": time.time(),
            }
            self._store.mark_budget_exhausted(record)
            return record


__all__ = ["LedgerEntry", "PrivacyLedger"]
