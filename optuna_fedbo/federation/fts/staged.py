"""A broadcast the FTS server has staged (signed, written as a ``RUNNING`` trial) and not yet
published, with what the round's report needs: shared by the plain and the secure rounds."""

from __future__ import annotations

from dataclasses import dataclass

from optuna_fedbo.federation.ledger import LedgerEntry
from optuna_fedbo.privacy._gaussian import AggregationResult


@dataclass
class Staged:
    """A staged broadcast of round ``round`` (trial ``trial_id``) and its round's facts."""

    trial_id: int
    round: int
    n_contributors: int
    contributors: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...]
    reason: str
    payload: str
    private: AggregationResult | None = None
    entry: LedgerEntry | None = None
    upload_norms: tuple[float, ...] = ()


__all__ = ["Staged"]
