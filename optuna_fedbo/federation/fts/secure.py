"""The FTS family's pooled statistics under secure aggregation: the server learns only their sum.

Without secure aggregation the server pools each participant's statistics itself: it
standardizes everyone's values together, may give each participant an offset of its own, and
bounds each one's weight (:func:`optuna_fedbo.core.pooling.robust_weights`). On a masked sum it
can still standardize everyone's values together, since the sum carries the raw sums of the
values, exactly (:mod:`optuna_fedbo.core.secure_statistics`); what it can no longer do is look
at one participant's statistics, so:

* **weight**: a participant with more than ``SecureAggregation.max_observations`` observations
  scales its statistics down to that many (the server's cap of one participant's weight becomes
  a fixed cap), which also bounds its count and Gram entries (features have unit norm);
* **no offsets per site**: the server pools the one summed "participant", so it cannot give a
  site an offset of its own, nor check one site's statistics.

A malicious participant can still send any in-range statistics: their consistency cannot be
checked on masked data (that needs zero-knowledge proofs, out of scope); a sum that is then not
statistics of any observations is not published. The server decodes the sum
(:func:`pooled_from_sum`) and publishes the posterior given it, standardized by the pooled
mean and spread of everyone's values, on the feature block and noise variance of largest
evidence, as the plain server does without offsets (and, as it does, kept until the same
contributors' observations have grown by 10%: :class:`~optuna_fedbo.core.pooling.KeptChoice`).
"""

from __future__ import annotations

from dataclasses import replace
import time
from typing import Any

import numpy as np
import optuna

from optuna_fedbo.core.pooling import block_sizes
from optuna_fedbo.core.pooling import KeptChoice
from optuna_fedbo.core.pooling import unpack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.secagg.ring import RingSpec
from optuna_fedbo.core.secure_statistics import decode_statistics
from optuna_fedbo.core.secure_statistics import encode_statistics
from optuna_fedbo.core.secure_statistics import input_length
from optuna_fedbo.federation.fts.influence import bounded
from optuna_fedbo.federation.fts.messages import encode_broadcast
from optuna_fedbo.federation.fts.secure_dp import private_input
from optuna_fedbo.federation.fts.secure_dp import publish_private
from optuna_fedbo.federation.fts.staged import Staged
from optuna_fedbo.federation.ledger import LedgerEntry
from optuna_fedbo.federation.secagg.participant import Driver
from optuna_fedbo.federation.secagg.server import SecAggCoordinator
from optuna_fedbo.federation.server import RoundReport

_logger = optuna.logging.get_logger(__name__)


def _weighed(statistics: SufficientStatistics, cap: int) -> SufficientStatistics:
    """``statistics`` weighed down to ``cap`` observations (unchanged with at most ``cap``)."""
    weight = min(1.0, cap / statistics.count)
    out = SufficientStatistics(statistics.n_features)
    out.count = weight * statistics.count  # type: ignore[assignment]
    out.target_sum = weight * statistics.target_sum
    out.target_square_sum = weight * statistics.target_square_sum
    out.feature_sum = weight * statistics.feature_sum
    out.feature_target = weight * statistics.feature_target
    out.gram = weight * statistics.gram
    return out


def secure_input(omega: np.ndarray, n_features: int, cap: int, ring: RingSpec) -> np.ndarray:
    """A participant's input to secure aggregation from its packed statistics ``omega``, as
    ring elements: its weight capped at ``cap`` observations, the count and Gram entries clipped
    to the ring's bound, the sums with values exact
    (:func:`~optuna_fedbo.core.secure_statistics.encode_statistics`).

    Raises:
        ValueError: If ``omega`` is not consistent statistics (:func:`unpack_blocks`).
    """
    blocks = unpack_blocks(omega, n_features)
    return encode_statistics([_weighed(block, cap) for block in blocks], ring)


def pooled_from_sum(
    values: np.ndarray,
    n_features: int,
    round_index: int,
    step: float,
    slack: float = 1e-3,
    *,
    kept: KeptChoice | None = None,
    contributors: tuple[str, ...] = (),
) -> tuple[np.ndarray, int]:
    """The broadcast vectors (one row) and feature block of the posterior given the summed
    statistics (standardized by everyone's pooled mean and spread), its norm bounded as every
    pooled broadcast's is.

    Args:
        values: The decoded sum (centred ring integers times ``step``).
        step: The ring's fixed-point step.
        slack: Absolute tolerance of the checks (the fixed-point rounding of the sum).
        kept: The server's pooling choice, kept as the plain server keeps its own (the same
            ``contributors``, the sum's count grown by less than 10%); ``None``: choose anew.
        contributors: Who contributed to the sum.

    Raises:
        ValueError: If the sum is not statistics of observations on unit-norm features (a
            participant sent values outside what its own statistics can be): the count must be
            positive and every block's Gram matrix's trace that count.
    """
    if not np.all(np.isfinite(values)):
        raise ValueError("the sum is not finite")
    blocks = decode_statistics(values, step, n_features)
    count = float(blocks[0].count)
    traces = np.array([float(np.trace(b.gram)) for b in blocks])
    tolerance = slack + 1e-9 * abs(count)
    if count < 1.0 - tolerance or np.max(np.abs(traces - count)) > tolerance:
        raise ValueError("the sum is not statistics that observations on these features give")
    try:
        choice, mean = (kept or KeptChoice()).choose(
            [blocks], contributors, count, offset_scales=(0.0,)
        )
    except np.linalg.LinAlgError:
        raise ValueError("the sum's feature Gram matrix is not positive semi-definite") from None
    if not np.all(np.isfinite(mean)):
        raise ValueError("the posterior given the sum is not finite")
    size = block_sizes(n_features)[choice.block]
    return bounded(mean[None, :], size, round_index), choice.block


# ------------------------------------------------------------------------- participant side
def driver_of(channel: Any) -> Driver:
    """The channel's participant driver (one per process and federation)."""
    driver = getattr(channel, "_secagg_driver", None)
    if driver is None:
        driver = channel._secagg_driver = Driver()
    return driver


def secure_upload(channel: Any, client_id: str, omega: np.ndarray, n_observations: int) -> int:
    """``FTSChannel.upload`` under secure aggregation: offer the participant's input to the open
    round's protocol (in round 0 once its initial design is complete) and take it as far as the
    server allows; the rest happens while it waits or in the background (:class:`Driver`).

    Returns:
        The open round.
    """
    federation = channel.federation
    round_index = federation.open_round()
    config = federation.secure_aggregation
    if round_index > 0 or n_observations >= channel.config.n_init:
        driver = driver_of(channel)
        participant = driver.participant(federation, client_id)
        if federation.privacy is not None:  # DP-FTS(-DE): clipped, weighed and noised here

            def draw() -> np.ndarray:
                return private_input(federation, client_id, omega, round_index)

            participant.offer(draw(), encoded=True, redraw=draw)
        else:
            n_features = channel.config.n_features
            ring = config.ring(federation.n_clients, input_length(n_features))
            cap = config.max_observations
            participant.offer(secure_input(omega, n_features, cap, ring), encoded=True)
        participant.poll()
        driver.kick()
    return round_index


def secure_poll(channel: Any) -> None:
    """Advance this process's participants (called while waiting for a broadcast)."""
    driver = getattr(channel, "_secagg_driver", None)
    if driver is not None:
        driver.poll()


def close_in_turn(federation: Any, server: Any, max_steps: int = 12) -> RoundReport | None:
    """Close the open round in one process (``simulate``): the participants of this process
    answer each step in turn, the server closes it at once (``force``).

    Returns:
        The round's report, or ``None`` if no step could close.
    """
    driver = driver_of(federation.channel)
    driver.background = False
    for _ in range(max_steps):
        driver.poll()
        report = server.step(force=True)
        if report is not None:
            return report
    return None


# ------------------------------------------------------------------------------ server side
class SecureRounds:
    """The FTS server's rounds under secure aggregation (``FTSServer.step`` delegates here).

    Args:
        server: The ``FTSServer``.
    """

    def __init__(self, server: Any) -> None:
        self.server = server
        self.coordinator = SecAggCoordinator(
            server.federation,
            open_upload=server._open_upload_bytes,
            min_uploads=server._min_uploads,
            round_timeout=server.current_round_timeout,
        )
        # The pooling chosen for the last sum, kept as the plain server keeps its own.
        self.pooling = KeptChoice()

    def step(self, force: bool) -> RoundReport | None:
        """Advance the open round's protocol; publish the posterior given the sum once it is
        unmasked (a report with ``published=False`` when an attempt fails)."""
        server = self.server
        round_index = server.open_round
        attempt = self.coordinator.attempt
        starting = attempt is None or attempt.round != round_index
        if starting and server._ledger is not None and server._ledger.would_exceed():
            # Before an attempt starts: the server must not unmask a sum it could not account.
            return server._stop_for_budget(round_index, [], ())
        outcome = self.coordinator.step(round_index, force=force)
        if outcome is None:
            return None
        if outcome.result is None:
            return RoundReport(
                round_index,
                0,
                (),
                outcome.rejected,
                "secagg-failed",
                time.time(),
                published=False,
            )
        if server._ledger is not None:
            return publish_private(self, outcome)
        fts = server._fts
        survivors = outcome.result.survivors
        step = self.coordinator.config.step
        slack = len(survivors) * input_length(fts.n_features) * step
        try:
            vectors, block = pooled_from_sum(
                outcome.result.values,
                fts.n_features,
                round_index,
                step,
                slack,
                kept=self.pooling,
                contributors=tuple(survivors),
            )
        except ValueError as error:
            _logger.warning(
                f"Round {round_index} of {server.federation.name!r} is not published: {error} "
                "(some participant sent values outside the bound of its own statistics); the "
                "round starts over."
            )
            return RoundReport(
                round_index,
                0,
                (),
                outcome.rejected,
                "secagg-invalid",
                time.time(),
                published=False,
            )
        payload = encode_broadcast(
            round_index=round_index,
            aggregation="pooled",
            vectors=vectors,
            n_contributors=len(survivors),
            config_hash=server.federation.config_hash,
            feature_block=block,
        )
        return self.stage_and_publish(outcome, payload)

    def stage_and_publish(
        self, outcome: Any, payload: str, entry: LedgerEntry | None = None
    ) -> RoundReport:
        """Sign, stage and publish a round's payload (accounted in ``entry``, under DP)."""
        server = self.server
        round_index = outcome.round
        survivors = outcome.result.survivors
        signed = server._sign(round_index, payload, None if entry is None else entry.n_accounted)
        server._ensure_current()
        trial_id = server._store.stage_broadcast(round_index, signed)
        server._staged = Staged(
            trial_id,
            round_index,
            len(survivors),
            survivors,
            outcome.rejected,
            outcome.reason,
            payload,
            entry=entry,
        )
        report = server._publish()
        if server._discard:
            self.coordinator.discard(round_index)
        recovered = outcome.result.recovered
        if recovered:
            _logger.info(
                f"Round {round_index}: {len(recovered)} dropout(s) recovered (the masks of "
                f"{', '.join(recovered)}, who dropped out after sharing keys, were removed with "
                "the survivors' shares)."
            )
        return replace(report, n_recovered=len(recovered))


__all__ = [
    "SecureRounds",
    "close_in_turn",
    "pooled_from_sum",
    "secure_input",
    "secure_poll",
    "secure_upload",
]
