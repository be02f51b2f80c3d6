"""The generic federation server: one server per federation, whatever its protocol.

``FederationServer(federation, ...)`` builds the server class of the federation's protocol, looked
up in the protocol registry (:mod:`optuna_fedbo.federation.protocol`): the FTS family's
:class:`~optuna_fedbo.federation.fts.server.FTSServer` (collect -> privatize -> account ->
publish, DP-FTS-DE's Algorithm 1) or Fed-PNE's
:class:`~optuna_fedbo.federation.fedpne.server.FedPNEServer` (one phase per round). This module
holds what every protocol's server shares: the constructor arguments, the server *epoch*, the
heartbeat and the report of a closed round.

One server at a time: each server claims a new *epoch* when it starts
(:mod:`~optuna_fedbo.federation.epoch_pin`: pinned beside its key file too, so that deleting
epoch records never lets two servers share one), and a server whose
epoch has been superseded -- someone started another server, e.g. a restart while the old
process still runs -- raises :class:`~optuna_fedbo.federation.store.ServerSupersededError` at its
next step and before it stages anything, so two servers never keep publishing side by side.
``serve()`` stops on that error. The newest server always wins, so restarting a crashed server
needs no clean-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import KW_ONLY
import math
import os
import socket
import statistics
import threading
import time
from typing import Any

import optuna

from optuna_fedbo.federation._damage import check_intact
from optuna_fedbo.federation._damage import reopen_uploads
from optuna_fedbo.federation._openings import RoundOpenings
from optuna_fedbo.federation._polling import poll_rounds
from optuna_fedbo.federation._serve_watch import DEFAULT_IDLE_TIMEOUT
from optuna_fedbo.federation._serve_watch import DEFAULT_LOG_INTERVAL
from optuna_fedbo.federation._serve_watch import ServeEnd
from optuna_fedbo.federation._serve_watch import ServeWatch
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.epoch_pin import claim_epoch
from optuna_fedbo.federation.epoch_pin import EpochPin
from optuna_fedbo.federation.epoch_pin import newer_epoch
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.finished import FederationFinishedError
from optuna_fedbo.federation.finished import finished_message
from optuna_fedbo.federation.finished import finished_record
from optuna_fedbo.federation.lease import lease_book
from optuna_fedbo.federation.lifecycle import FederationSummary
from optuna_fedbo.federation.protocol import get_protocol
from optuna_fedbo.federation.store import ServerSupersededError
from optuna_fedbo.federation.watermark import guard_server
from optuna_fedbo.privacy._rng import INSECURE_NOISE_SEED
from optuna_fedbo.privacy._rng import refuse_insecure_noise_seed

_logger = optuna.logging.get_logger(__name__)

#: ``round_timeout="auto"``: a round closes ``AUTO_TIMEOUT_FACTOR`` times the slowest running
#: participant's typical trial duration after its first upload (per trial of the round) ...
AUTO_TIMEOUT_FACTOR = 3.0
#: ... but never sooner than this many seconds ...
AUTO_TIMEOUT_FLOOR = 2.0
#: ... and with the slowest duration taken as at most this many times the median one (one
#: enrolled participant that reports a huge duration cannot stall every round).
AUTO_TIMEOUT_STRAGGLER_CAP = 10.0


def auto_min_uploads(n_clients: int) -> int:
    """``min_uploads="auto"``: half of the registered participants, rounded up."""
    return max(1, math.ceil(n_clients / 2))


@dataclass(frozen=True)
class RoundReport:
    """What the server did when it closed a round.

    Attributes:
        round: The round index.
        n_contributors: Number of vectors aggregated.
        contributors: Their participants' ids (server-side information, not published).
        rejected: ``(participant, reason)`` of every upload that was refused.
        reason: Why the round closed: ``"complete"`` (all ``N`` in), ``"forced"``,
            ``"timeout"``, or ``"resumed"`` (a publication interrupted by a crash, finished);
            ``"withheld"``: not published, too few contributors without differential privacy
            (``FTSConfig.min_contributors``), the round stays open.
        published_at: Server clock at publication.
        published: False for the round the server refused to publish because of the privacy
            budget (then ``budget_exhausted`` is true and nothing was released) or withheld.
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
            so that a small fraction of the vectors is clipped. Empty for pooled statistics.
        n_recovered: With secure aggregation, participants that dropped out after sharing
            their keys and whose masks the survivors' shares removed.
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
    n_recovered: int = 0


class FederationServer:
    """The trusted aggregator of a federation; the constructor builds the protocol's server.

    Args:
        federation: The federation.
        round_timeout: When a round closes without every participant. ``"auto"`` (default):
            :attr:`AUTO_TIMEOUT_FACTOR` (3) times the slowest running participant's typical
            trial duration per trial of the round (participants report it in their leases),
            and at least :attr:`AUTO_TIMEOUT_FLOOR` (2 s), after the round's first valid upload;
            a number: that many seconds after the first valid upload; ``None``: wait for all
            ``N`` participants (or ``step(force=True)``). A round with all ``N`` uploads closes
            at once in every case.
        min_uploads: Fewest valid uploads with which a timeout closes a round; ``"auto"``
            (default): half of ``N``, rounded up. So one crashed or slow participant never
            stalls the others, while a round is never closed with a lone upload by default.
        discard_uploads: Delete a round's raw uploads once it is published.
        heartbeat_interval: Seconds between the server's heartbeat writes.

    A federation that has finished (its ``serve`` ended after every participant finished its
    study) is refused with :class:`~optuna_fedbo.federation.finished.FederationFinishedError`,
    which says how to start over.

    A server never takes a noise seed (``insecure_noise_seed=...`` raises ``ValueError``): its
    differential-privacy noise comes from the operating system's entropy. Only the one-process
    research driver :func:`~optuna_fedbo.simulation.simulate` can seed it.

    Every protocol's server subclasses this class and takes the same arguments; see
    :class:`~optuna_fedbo.federation.fts.server.FTSServer` and
    :class:`~optuna_fedbo.federation.fedpne.server.FedPNEServer` for ``step()``.
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
        round_timeout: float | str | None,
        min_uploads: int | str,
        discard_uploads: bool,
        heartbeat_interval: float,
    ) -> None:
        """Check the shared arguments, keep them, and claim a new server epoch."""
        if round_timeout != "auto" and round_timeout is not None:
            if isinstance(round_timeout, str) or not round_timeout >= 0:
                raise ValueError(
                    f"round_timeout must be 'auto', None or >= 0, got {round_timeout!r}."
                )
        if min_uploads == "auto":
            min_uploads = auto_min_uploads(federation.n_clients)
        if isinstance(min_uploads, str) or isinstance(min_uploads, bool) or min_uploads < 1:
            raise ValueError(f"min_uploads must be 'auto' or at least 1, got {min_uploads!r}.")
        if not federation.is_operator:
            raise ValueError(
                f"The server of federation {federation.name!r} needs its private keys, which are "
                "not on this machine: run it where the federation was created, or copy the key "
                f"file servers/{federation.federation_id}.json of the operator's key directory "
                "there (mode 0600)."
            )
        if federation.privacy is not None:
            # Before anything is written (the epoch claim is a write): a ledger behind the
            # server's high-water mark, or a mark missing or corrupt, fails closed here.
            guard_server(federation)
        finished = finished_record(federation)
        if finished is not None:  # checked before the epoch claim: nothing is written
            raise FederationFinishedError(
                f"Nothing to serve: {finished_message(federation, finished)}."
            )
        self.federation = federation
        self._store = federation.store
        self._round_timeout = round_timeout
        self._min_uploads = int(min_uploads)
        self._discard = discard_uploads
        self._heartbeat_interval = heartbeat_interval
        self._lock = threading.RLock()
        self._pin = EpochPin.of(federation)
        self._epoch = claim_epoch(self._store, self._pin)
        self._last_heartbeat = float("-inf")
        self._leases = lease_book(federation)
        self._openings = RoundOpenings(federation.store)
        self._checked: dict[str, tuple[float, Any]] = {}
        self._finished: dict[str, Any] | None = None

    def _every(self, key: str, seconds: float, compute: Callable[[], Any]) -> Any:
        """``compute()``, re-evaluated at most every ``seconds`` (storage reads while polling)."""
        now = time.monotonic()
        cached = self._checked.get(key)
        if cached is None or now - cached[0] >= seconds:
            cached = (now, compute())
            self._checked[key] = cached
        return cached[1]

    def _keep_uploads_open(self, round_index: int) -> None:
        """Create the open round's uploads study again if someone deleted it (checked every
        second): the round goes on, and participants re-send the uploads it held."""
        self._every("uploads-study", 1.0, lambda: reopen_uploads(self._store, round_index))

    def _work_per_round(self) -> int:
        """Trials a participant runs per round (FTS: one; a Fed-PNE phase: its pulls)."""
        return 1

    def current_round_timeout(self) -> float | None:
        """Seconds after a round's first valid upload at which it closes without stragglers.

        With ``round_timeout="auto"``: ``max(AUTO_TIMEOUT_FLOOR, AUTO_TIMEOUT_FACTOR * T * w)``
        where ``T`` is the longest typical trial duration reported by the running participants
        (in their leases), capped at ``AUTO_TIMEOUT_STRAGGLER_CAP`` times their median, and
        ``w`` the trials a participant runs per round; ``None`` (wait) until some participant
        has reported one.
        """
        if self._round_timeout != "auto":
            return self._round_timeout  # type: ignore[return-value]

        def longest() -> float | None:
            times = [
                s.trial_seconds
                for s in self._leases.states().values()
                if s.status == "active" and s.trial_seconds is not None
            ]
            if not times:
                return None
            return min(max(times), AUTO_TIMEOUT_STRAGGLER_CAP * statistics.median(times))

        seconds = self._every("trial_seconds", 2.0, longest)
        if seconds is None:
            return None
        return max(AUTO_TIMEOUT_FLOOR, AUTO_TIMEOUT_FACTOR * seconds * self._work_per_round())

    def _watch(
        self, idle_timeout: float | None, log_interval: float, poll_interval: float
    ) -> ServeWatch:
        """What ``serve`` watches between rounds (see :mod:`._serve_watch`)."""
        return ServeWatch(
            self.federation,
            lambda: self.open_round,
            self._leases.departed,
            idle_timeout=idle_timeout,
            log_interval=log_interval,
            poll_interval=poll_interval,
        )

    def _serve_ended(self, end: ServeEnd) -> None:
        """``serve`` ended by itself: mark the federation finished if every participant did."""
        if not end.finished:
            _logger.warning(end.text)
            return
        self._finished = {"at": time.time(), "rounds": self.federation.open_round()}
        self._heartbeat(force=True, stopped="finished")

    # ------------------------------------------------------------------------ serving
    def serve(
        self,
        *,
        poll_interval: float = 1.0,
        max_rounds: int | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
        callback: Callable[[Any], None] | None = None,
        max_consecutive_errors: int = 10,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        log_interval: float = DEFAULT_LOG_INTERVAL,
    ) -> list[Any]:
        """Poll the storage and close rounds (Fed-PNE: phases) as they become ready.

        Returns when the protocol is done (FTS: the privacy budget is exhausted, nothing more
        can be published; Fed-PNE: the final phase), when every registered participant has
        finished its study or is lost (see
        :meth:`~optuna_fedbo.federation.Federation.lifecycle`), after publishing any round
        their last uploads completed, or after ``idle_timeout`` seconds in which no
        participant ran (see :mod:`optuna_fedbo.federation._serve_watch`).

        Args:
            poll_interval: Seconds between polls when nothing happened.
            max_rounds: Stop once this many rounds have been published in total.
            timeout: Stop after this many seconds.
            stop: Stop when this event is set.
            callback: Called with each :class:`RoundReport` (Fed-PNE: ``PhaseRoundReport``).
            max_consecutive_errors: Storage errors in a row tolerated (each logged, then the
                state is reloaded from storage) before the error is raised.
            idle_timeout: Seconds (default 300) with no participant running, once every one
                that joined has finished or is lost, after which serving ends (``None``:
                wait until stopped).
            log_interval: Seconds between the log lines saying whom the server waits for.

        Returns:
            The reports of the rounds published by this call (and of the round refused for
            the privacy budget, if that happened).
        """
        _logger.info(self._serving())

        def recover() -> None:
            with self._lock:
                self._recover()

        reports = poll_rounds(
            self.step,
            recover,
            done=lambda: (
                self._serve_done() or (max_rounds is not None and self.open_round >= max_rounds)
            ),
            poll_interval=poll_interval,
            timeout=timeout,
            stop=stop,
            callback=callback,
            max_consecutive_errors=max_consecutive_errors,
            watch=self._watch(idle_timeout, log_interval, poll_interval),
            on_end=self._serve_ended,
            intact=lambda: check_intact(self._store),
        )
        self._served()
        return reports

    def _serving(self) -> str:
        """The log line with which ``serve`` starts."""
        return f"Serving federation {self.federation.name!r} from round {self.open_round}."

    def _serve_done(self) -> bool:
        """Whether the protocol has nothing more to publish (``serve`` then returns)."""
        return False

    def _served(self) -> None:
        """Called when ``serve`` returns."""

    def summary(self) -> FederationSummary:
        """Rounds published, privacy spent and every participant's trials by kind."""
        return self.federation.summary()

    @property
    def open_round(self) -> int:
        """The round currently collecting uploads."""
        raise NotImplementedError

    @property
    def epoch(self) -> int:
        """This server's epoch: how many servers had started on the federation before it, + 1."""
        return self._epoch

    def _open_upload_bytes(self, client_id: str, text: str, round_index: int) -> tuple[int, bytes]:
        """:meth:`_open_upload_with_receipt` without the receipt (secure aggregation's
        messages)."""
        return self._open_upload_with_receipt(client_id, text, round_index)[:2]

    def _open_upload_with_receipt(
        self, client_id: str, text: str, round_index: int
    ) -> tuple[int, bytes, str]:
        """Check and open one stored upload: ``(counter, plaintext, receipt)`` (see ``Trust``;
        what :class:`~optuna_fedbo.federation._uploads.UploadCollector` opens with); one
        written before its round opened is refused (see ``_openings``)."""
        public_key = self.federation.public_key_of(client_id)
        if public_key is None:
            raise UploadRejected("unknown participant (not enrolled)")
        return self.federation.trust.open_upload_with_receipt(
            text,
            client_id=client_id,
            public_key=public_key,
            round_index=round_index,
            openings=self._openings(round_index),
        )

    def _ensure_current(self) -> None:
        """Raise :class:`ServerSupersededError` if a newer server has started."""
        newer = newer_epoch(self._store, self._pin, self._epoch, heartbeat=False) or self._every(
            "heartbeat-epoch", 1.0, lambda: newer_epoch(self._store, self._pin, self._epoch)
        )
        if newer is not None:
            raise ServerSupersededError(
                f"Another server (epoch {newer}) has started on federation "
                f"{self.federation.name!r}; this server (epoch {self._epoch}) stops publishing. "
                "Run one server per federation."
            )

    def announce(self, stopped: str | None = None) -> None:
        """Write the server's heartbeat now (participants then know a server runs), or, with
        ``stopped``, record that it stopped (participants then warn that nothing is
        published)."""
        if stopped is not None and newer_epoch(self._store, self._pin, self._epoch):
            return  # a newer server owns the heartbeat record
        self._heartbeat(force=True, stopped=stopped)

    def _heartbeat(self, force: bool = False, stopped: str | None = None) -> None:
        now = time.monotonic()
        if not force and now - self._last_heartbeat < self._heartbeat_interval:
            return
        self._last_heartbeat = now
        extra = {} if stopped is None else {"stopped": stopped}
        if self._finished is not None:  # kept by every later heartbeat of this server
            extra = {"stopped": "finished", "finished": self._finished}
        self._store.write_server_status(
            {
                **extra,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "epoch": self._epoch,
                "heartbeat": time.time(),
                "open_round": self.open_round,
                "heartbeat_interval": self._heartbeat_interval,
                "closing": {
                    "round_timeout": self._round_timeout,
                    "min_uploads": self._min_uploads,
                },
            }
        )


__all__ = ["FederationServer", "RoundReport"]
