"""The FTS family's pooled statistics under secure aggregation: the server learns only their sum.

Without secure aggregation the server pools each participant's statistics itself: it
standardizes everyone's values together, may give each participant an offset of its own, and
bounds each one's weight (:func:`optuna_fedbo.core.pooling.robust_weights`). On a masked sum it
can do none of that, so what can be done moves to the participant (:func:`secure_input`):

* **centring and scaling**: each participant standardizes its values by the mean and spread of
  its first statistics offered (in round 0, those of its initial design), then frozen, as
  ``FTSConfig(normalization="shared")`` does for its own model: with whole-space initial
  designs every site measures against a comparable reference, so the levels it finds later are
  kept, while sites whose values differ in scale or offset are brought to one scale (the server
  can no longer choose, by the evidence, between offsets per site and none);
* **weight**: a participant with more than ``SecureAggregation.max_observations`` observations
  scales its statistics down to that many (the server's cap of one participant's weight becomes
  a fixed cap), which also bounds every coordinate: by Cauchy-Schwarz on unit-norm features
  (``|Gram| <= n``, ``|sum phi y| <= sqrt(n sum y^2)``), with values up to
  :data:`~optuna_fedbo.federation.secagg.config.VALUE_SPREADS` spreads from the reference;
* **clipping**: every coordinate is clipped to that bound (a no-op for honest statistics within
  it), and the ring is sized so that the sum of ``N`` clipped inputs never wraps.

A malicious participant can still send any in-range statistics: their consistency cannot be
checked on masked data (that needs zero-knowledge proofs, out of scope); out-of-range values wrap
the ring, and a sum that is then not statistics of any observations is not published. The server
decodes the sum (:func:`pooled_from_sum`) and publishes the posterior given it, on the feature
block and noise variance of largest evidence, without offsets (there is one summed
"participant").
"""

from __future__ import annotations

from dataclasses import replace
import math
import time
from typing import Any

import numpy as np
import optuna

from optuna_fedbo.core.pooling import block_sizes
from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.pooling import select_posterior
from optuna_fedbo.core.pooling import unpack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.federation.fts.influence import bounded
from optuna_fedbo.federation.fts.messages import encode_broadcast
from optuna_fedbo.federation.fts.secure_dp import private_input
from optuna_fedbo.federation.fts.secure_dp import publish_private
from optuna_fedbo.federation.fts.staged import Staged
from optuna_fedbo.federation.ledger import LedgerEntry
from optuna_fedbo.federation.secagg import claims
from optuna_fedbo.federation.secagg.config import VALUE_SPREADS
from optuna_fedbo.federation.secagg.participant import Driver
from optuna_fedbo.federation.secagg.server import SecAggCoordinator
from optuna_fedbo.federation.server import RoundReport

_logger = optuna.logging.get_logger(__name__)


def reference_of(omega: np.ndarray, n_features: int) -> tuple[float, float]:
    """The mean and spread of the values behind packed statistics (spread 1 if they are equal).

    Raises:
        ValueError: If ``omega`` is not consistent statistics (:func:`unpack_blocks`).
    """
    statistics = unpack_blocks(omega, n_features)[0]
    n = statistics.count
    mean = statistics.target_sum / n
    variance = max(statistics.target_square_sum / n - mean * mean, 0.0)
    spread = math.sqrt(variance) if variance > 1e-24 * max(1.0, mean * mean) else 1.0
    return mean, spread


def _standardized(
    statistics: SufficientStatistics, cap: int, reference: tuple[float, float]
) -> SufficientStatistics:
    """``statistics`` of the values ``(y - mean) / spread`` of ``reference``, weighed down to
    ``cap`` observations."""
    n, (mean, spread) = statistics.count, reference
    weight = min(1.0, cap / n)
    out = SufficientStatistics(statistics.n_features)
    out.count = weight * n  # type: ignore[assignment]
    out.target_sum = weight * (statistics.target_sum - n * mean) / spread
    out.target_square_sum = (
        weight
        * (statistics.target_square_sum - 2 * mean * statistics.target_sum + n * mean * mean)
        / spread**2
    )
    out.feature_sum = weight * statistics.feature_sum
    out.feature_target = weight * (statistics.feature_target - mean * statistics.feature_sum)
    out.feature_target /= spread
    out.gram = weight * statistics.gram
    return out


def secure_input(
    omega: np.ndarray, n_features: int, cap: int, reference: tuple[float, float] | None = None
) -> np.ndarray:
    """A participant's input to secure aggregation from its packed statistics ``omega``: its
    values standardized by ``reference`` (default: their own mean and spread), its weight
    capped at ``cap`` observations, every coordinate clipped to
    :attr:`~optuna_fedbo.SecureAggregation.bound`.

    Raises:
        ValueError: If ``omega`` is not consistent statistics (:func:`unpack_blocks`).
    """
    blocks = unpack_blocks(omega, n_features)
    reference = reference_of(omega, n_features) if reference is None else reference
    packed = pack_blocks([_standardized(block, cap, reference) for block in blocks])
    bound = cap * VALUE_SPREADS**2
    return np.clip(packed, -bound, bound)


def pooled_from_sum(
    values: np.ndarray, n_features: int, round_index: int, slack: float = 1e-3
) -> tuple[np.ndarray, int]:
    """The broadcast vectors (one row) and feature block of the posterior given the summed
    statistics, its norm bounded as every pooled broadcast's is.

    Args:
        slack: Absolute tolerance of the checks (the fixed-point rounding of the sum).

    Raises:
        ValueError: If the sum is not statistics of observations on unit-norm features (a
            participant sent values outside what its own statistics can be): every block's
            count must be the same and positive, and its Gram matrix's trace that count.
    """
    blocks = unpack_blocks(np.asarray(values, dtype=float), n_features, strict=False)
    counts = np.array([float(np.asarray(b.count)) for b in blocks])
    traces = np.array([float(np.trace(b.gram)) for b in blocks])
    tolerance = slack + 1e-9 * float(np.max(np.abs(counts)))
    if (
        not np.all(np.isfinite(values))
        or counts.min() < 1.0 - tolerance
        or np.ptp(counts) > tolerance
        or np.max(np.abs(traces - counts)) > tolerance
    ):
        raise ValueError("the sum is not statistics that observations on these features give")
    try:
        block, mean = select_posterior([blocks], offset_scales=(0.0,))
    except np.linalg.LinAlgError:
        raise ValueError("the sum's feature Gram matrix is not positive semi-definite") from None
    if not np.all(np.isfinite(mean)):
        raise ValueError("the posterior given the sum is not finite")
    size = block_sizes(n_features)[block]
    return bounded(mean[None, :], size, round_index), block


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
            participant.poll()
            driver.kick()
            return round_index
        n_features = channel.config.n_features
        # The first statistics offered (in round 0: the initial design's) fix the reference,
        # as FTSConfig(normalization="shared") does for the participant's own model; it is
        # kept in the key folder, so a restarted participant keeps its scale.
        reference = claims.reference(
            federation, client_id, lambda: reference_of(omega, n_features)
        )
        participant.offer(secure_input(omega, n_features, config.max_observations, reference))
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
            open_upload=server._open_upload,
            min_uploads=server._min_uploads,
            round_timeout=server.current_round_timeout,
        )

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
        dimension = fts.upload_length
        slack = len(survivors) * dimension * self.coordinator.config.step
        try:
            vectors, block = pooled_from_sum(
                outcome.result.values, fts.n_features, round_index, slack
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
