"""The generic federation server: one server per federation, whatever its protocol.

``FederationServer(federation, ...)`` builds the server class of the federation's protocol, looked
up in the protocol registry (:mod:`optuna_fedbo.federation.protocol`): the FTS family's
:class:`~optuna_fedbo.federation.fts.server.FTSServer` (collect -> privatize -> account ->
publish, DP-FTS-DE's Algorithm 1) or Fed-PNE's
:class:`~optuna_fedbo.federation.fedpne.server.FedPNEServer` (one phase per round). This module
holds what every protocol's server shares: the constructor arguments, the server *epoch*, the
heartbeat and the report of a closed round.

One server at a time: each server claims a new *epoch* when it starts
(:meth:`~optuna_fedbo.federation.store.FederationStore.claim_server_epoch`), and a server whose
epoch has been superseded -- someone started another server, e.g. a restart while the old
process still runs -- raises :class:`~optuna_fedbo.federation.store.ServerSupersededError` at its
next step and before it stages anything, so two servers never keep publishing side by side.
``serve()`` stops on that error. The newest server always wins, so restarting a crashed server
needs no clean-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import KW_ONLY
import os
import socket
import threading
import time
from typing import Any

from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.protocol import get_protocol
from optuna_fedbo.federation.store import ServerSupersededError
from optuna_fedbo.privacy._rng import INSECURE_NOISE_SEED
from optuna_fedbo.privacy._rng import refuse_insecure_noise_seed


@dataclass(frozen=True)
class RoundReport:
    """What the server did when it closed a round.

    Attributes:
        round: The round index.
        n_contributors: Number of vectors aggregated.
        contributors: Their participants' ids (server-side information, not published).
        rejected: ``(participant, reason)`` of every upload that was refused.
        reason: Why the round closed: ``"complete"`` (all ``N`` in), ``"forced"``,
            ``"timeout"``, or ``"resumed"`` (a publication interrupted by a crash, finished).
        published_at: Server clock at publication.
        published: False for the round the server refused to publish because of the privacy
            budget (then ``budget_exhausted`` is true and nothing was released).
        epsilon: With differential privacy, epsilon spent after this round (``None``
            otherwise).
        delta: With differential privacy, the ledger's delta.
        n_selected: With differential privacy, agents selected by subsampling (server-side).
        n_clipped: With differential privacy, contributing vectors longer than ``S / sqrt(P)``
            (server-side; the papers tune ``S`` so that few are).
        noise_std: With differential privacy, the noise standard deviation per coordinate.
        budget_exhausted: True on the report of the round refused for the budget.
        upload_norms: L2 norms of the valid uploaded vectors (server-side information, not
            published), from which a researcher chooses the clip norm ``S`` the papers' way:
            so that a small fraction of the vectors is clipped.
    """

    round: int
    n_contributors: int
    contributors: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...]
    reason: str
    published_at: float
    _: KW_ONLY
    published: bool = True
    epsilon: float | None = None
    delta: float | None = None
    n_selected: int | None = None
    n_clipped: int | None = None
    noise_std: float | None = None
    budget_exhausted: bool = False
    upload_norms: tuple[float, ...] = ()


class FederationServer:
    """The trusted aggregator of a federation; the constructor builds the protocol's server.

    Args:
        federation: The federation.
        round_timeout: Seconds after the first valid upload of a round after which the round is
            closed with the uploads that arrived (stragglers are left out); ``None`` waits for
            all ``N`` participants (or ``step(force=True)``).
        min_uploads: Fewest valid uploads with which a timeout closes a round.
        discard_uploads: Delete a round's raw uploads once it is published.
        heartbeat_interval: Seconds between the server's heartbeat writes.

    A server never takes a noise seed (``insecure_noise_seed=...`` raises ``ValueError``): its
    differential-privacy noise comes from the operating system's entropy. Only the one-process
    research driver :func:`~optuna_fedbo.simulation.simulate` can seed it.

    Every protocol's server subclasses this class and takes the same arguments; see
    :class:`~optuna_fedbo.federation.fts.server.FTSServer` and
    :class:`~optuna_fedbo.federation.fedpne.server.FedPNEServer` for ``step()`` and
    ``serve()``.
    """

    federation: Federation

    def __new__(cls, federation: Federation, *args: Any, **kwargs: Any) -> FederationServer:
        if INSECURE_NOISE_SEED in kwargs:
            refuse_insecure_noise_seed("FederationServer")
        if cls is FederationServer:
            cls = get_protocol(federation.protocol.kind).server
        return super().__new__(cls)

    def _start(
        self,
        federation: Federation,
        *,
        round_timeout: float | None,
        min_uploads: int,
        discard_uploads: bool,
        heartbeat_interval: float,
    ) -> None:
        """Check the shared arguments, keep them, and claim a new server epoch."""
        if round_timeout is not None and not round_timeout >= 0:
            raise ValueError(f"round_timeout must be None or >= 0, got {round_timeout}.")
        if min_uploads < 1:
            raise ValueError(f"min_uploads must be at least 1, got {min_uploads}.")
        self.federation = federation
        self._store = federation.store
        self._round_timeout = round_timeout
        self._min_uploads = min_uploads
        self._discard = discard_uploads
        self._heartbeat_interval = heartbeat_interval
        self._lock = threading.RLock()
        self._epoch = self._store.claim_server_epoch()
        self._last_heartbeat = float("-inf")

    @property
    def open_round(self) -> int:
        """The round currently collecting uploads."""
        raise NotImplementedError

    @property
    def epoch(self) -> int:
        """This server's epoch: how many servers had started on the federation before it, + 1."""
        return self._epoch

    def _ensure_current(self) -> None:
        """Raise :class:`ServerSupersededError` if a newer server has started."""
        if self._store.has_server_epoch(self._epoch + 1):
            raise ServerSupersededError(
                f"Another server (epoch {self._epoch + 1}) has started on federation "
                f"{self.federation.name!r}; this server (epoch {self._epoch}) stops publishing. "
                "Run one server per federation."
            )

    def _heartbeat(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_heartbeat < self._heartbeat_interval:
            return
        self._last_heartbeat = now
        self._store.write_server_status(
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "epoch": self._epoch,
                "heartbeat": time.time(),
                "open_round": self.open_round,
            }
        )


__all__ = ["FederationServer", "RoundReport"]
