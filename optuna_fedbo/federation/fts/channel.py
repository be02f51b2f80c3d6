"""A participant's access to an FTS-family federation: shared features, sub-regions, broadcasts,
uploads.

Everything here reads what every participant may read (the configuration, the broadcasts) and
writes only the participant's own upload key of the open round. ``Federation.features()``,
``latest_broadcast()``, ``upload()`` ... delegate here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import threading
import time

import numpy as np
import optuna

from optuna_fedbo.core.pooling import pooling_feature_maps
from optuna_fedbo.core.rff import multiscale_range
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.federation._damage import ErasureCheck
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fts.config import FTSConfig
from optuna_fedbo.federation.fts.messages import Broadcast
from optuna_fedbo.federation.fts.messages import encode_upload
from optuna_fedbo.federation.fts.messages import parse_broadcast
from optuna_fedbo.federation.fts.secure import secure_poll
from optuna_fedbo.federation.fts.secure import secure_upload
from optuna_fedbo.federation.fts.subregions import SubregionPartition
from optuna_fedbo.federation.lease_book import lease_book
from optuna_fedbo.federation.trust import UntrustedRecordError

_logger = optuna.logging.get_logger(__name__)

#: Tries of an upload whose round closes while it is written.
_UPLOAD_ATTEMPTS = 3


@dataclass(frozen=True)
class _SentVector:
    """A vector a participant sent in full: a read-only copy, the receipt of the upload that
    carried it (its name in a later upload's ``same_as``), round and the server epoch then."""

    vector: np.ndarray
    receipt: str
    round: int
    epoch: int


class FTSChannel:
    """The participant side of an FTS-family federation (thread-safe, cached per federation).

    Args:
        federation: A federation whose protocol is an :class:`FTSConfig`.

    Raises:
        ValueError: If the protocol is not FTS.
    """

    def __init__(self, federation: Federation) -> None:
        self.federation = federation
        self.config: FTSConfig = federation.fts
        self._lock = threading.Lock()
        self._features: RandomFourierFeatures | None = None
        self._pooling_features: list[RandomFourierFeatures] | None = None
        self._partition: SubregionPartition | None = None
        self._broadcast: Broadcast | None = None
        self._broadcast_trial: int | None = None
        # Pooled statistics: each participant's last vector sent in full, and (round, server
        # epoch, re-send in full) of its last upload by reference when that came later.
        self._sent_vectors: dict[str, _SentVector] = {}
        self._references: dict[str, tuple[int, int, Callable[[], None]]] = {}
        # Each participant's last upload: (round, re-send it), re-sent if it vanishes from its
        # still open round (its uploads study deleted by someone with the URL).
        self._last_sent: dict[str, tuple[int, Callable[[], None]]] = {}
        self._erasures = ErasureCheck()
        self._epoch = 0

    def features(self) -> RandomFourierFeatures:
        """The shared random features ``phi`` (identical for everyone: public seed)."""
        with self._lock:
            if self._features is None:
                fts = self.config
                encoder = self.federation.encoder
                categorical = encoder.encoding.categorical_columns
                # A stored configuration without the field predates it: one-hot columns as is.
                scale = 1.0 if fts.categorical_scale is None else fts.categorical_scale
                self._features = RandomFourierFeatures(
                    encoder.n_columns,
                    fts.n_features,
                    multiscale_range(max(encoder.n_varying, 1))
                    if fts.lengthscale is None
                    else fts.lengthscale,
                    seed=self.federation.seed,
                    column_scales=np.where(categorical, scale, 1.0)
                    if scale != 1.0 and categorical.any()
                    else None,
                )
            return self._features

    def pooling_features(self) -> list[RandomFourierFeatures]:
        """The feature blocks of ``aggregation="pooled"``: the shared features first, then the
        single-scale blocks (:func:`optuna_fedbo.core.pooling.pooling_feature_maps`)."""
        features = self.features()
        with self._lock:
            if self._pooling_features is None:
                self._pooling_features = pooling_feature_maps(features)
            return self._pooling_features

    def partition(self) -> SubregionPartition:
        """The ``P`` equal-volume sub-regions of the encoded search space."""
        with self._lock:
            if self._partition is None:
                self._partition = SubregionPartition(
                    self.federation.encoder.encoding, self.config.n_subregions
                )
            return self._partition

    def subregion_of(self, index: int) -> int:
        """The sub-region assigned to participant ``index`` (round robin, as the authors do)."""
        if not 0 <= index < self.federation.n_clients:
            raise ValueError(
                f"Participant index {index} is outside [0, {self.federation.n_clients})."
            )
        return index % self.config.n_subregions

    def assignment(self) -> np.ndarray:
        """The sub-region of every participant index, shape ``(N,)``."""
        return np.arange(self.federation.n_clients) % self.config.n_subregions

    def latest_broadcast(self) -> Broadcast | None:
        """The newest published broadcast, or ``None`` before the first one."""
        latest = self.federation.store.latest()
        if latest is None:
            return None
        trial_id = int(latest["trial_id"])
        with self._lock:
            if self._broadcast_trial == trial_id:
                return self._broadcast
        try:
            round_index, payload = self.federation.read_broadcast(trial_id)
        except UntrustedRecordError as error:
            self.federation.store.warn_once(
                f"broadcast-read:{trial_id}",
                f"Ignoring broadcast trial {trial_id} of {self.federation.name!r}: {error}.",
            )
            with self._lock:
                return self._broadcast
        broadcast = parse_broadcast(payload)
        if broadcast.round != round_index or broadcast.config_hash != self.federation.config_hash:
            raise ValueError(f"Broadcast trial {trial_id} does not belong to this federation.")
        with self._lock:
            self._broadcast, self._broadcast_trial = broadcast, trial_id
        return broadcast

    def wait_for_round(
        self,
        round_index: int,
        timeout: float | None,
        poll_interval: float = 0.05,
        stop: Callable[[], bool] | None = None,
    ) -> Broadcast | None:
        """Block until round ``round_index`` (or a later one) is published, at most
        ``timeout`` seconds (``None``: until ``stop()``; one of them is required).

        Statistics this process sent to that round by reference are re-sent in full as soon as a
        new server has started (it does not hold them), and when the wait ends empty.

        Returns:
            The newest broadcast, or ``None`` if the timeout expired (or ``stop()`` became
            true) first or the privacy budget ran out before that round (see
            :meth:`budget_exhausted`).
        """
        if timeout is None and stop is None:
            raise ValueError("wait_for_round needs a timeout or a stop condition.")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._published(round_index):
                return self.latest_broadcast()
            if self.federation.budget_exhausted() is not None:
                return None
            if (deadline is not None and time.monotonic() >= deadline) or (stop and stop()):
                # What ended the wait (a server's last heartbeat, "serve ended") can come just
                # after the round it publishes last: look once more before giving up.
                if self._published(round_index):
                    return self.latest_broadcast()
                self._resend_references(round_index, stalled=True)
                return None
            self._resend_references(round_index, stalled=False)
            self._resend_erased(round_index)
            secure_poll(self)
            time.sleep(poll_interval)

    def _published(self, round_index: int) -> bool:
        """Whether round ``round_index`` (or a later one) is published."""
        latest = self.federation.store.latest()
        return latest is not None and int(latest["round"]) >= round_index

    def upload(
        self,
        client_id: str,
        omega: np.ndarray,
        *,
        n_observations: int,
        iteration: int,
    ) -> int:
        """Send a participant's vector to the open round.

        A second upload by the same participant in the same round replaces the first. With
        ``aggregation="pooled"``, a vector identical to the participant's last one, which went
        to an earlier round, is sent by reference only (the receipt of the upload that carried
        it: the server holds it); if the server does not use it (it restarted meanwhile), the
        vector itself is re-sent when this process reads that round's broadcast.

        Args:
            client_id: The participant (must have joined).
            omega: The vector, shape ``(M,)``, finite; with ``aggregation="pooled"``, the
                participant's packed statistics (:func:`optuna_fedbo.core.pooling.pack_blocks`).
            n_observations: Number of observations behind it.
            iteration: The participant's BO iteration (``<= 0`` during the initial design).

        Returns:
            The round the vector was sent to.

        Raises:
            ValueError: For a vector of the wrong shape or with NaN/inf, an unknown client, or
                a federation whose privacy budget is exhausted (nothing will be published).
        """
        if self.federation.budget_exhausted() is not None:
            raise ValueError(
                f"The privacy budget of federation {self.federation.name!r} is exhausted: no "
                "round will be published any more, so nothing is uploaded."
            )
        omega = np.asarray(omega, dtype=float)
        length = self.config.upload_length
        if omega.shape != (length,):
            raise ValueError(f"omega must have shape ({length},), got {omega.shape}.")
        if not np.all(np.isfinite(omega)):
            raise ValueError("omega contains NaN or infinity; it is not uploaded.")
        if self.federation.index_of(client_id) is None:
            raise ValueError(f"{client_id!r} has not joined federation {self.federation.name!r}.")
        if self.federation.secure_aggregation is not None:
            return secure_upload(self, client_id, omega, n_observations)
        return self._send(client_id, omega, n_observations, iteration, by_reference=True)

    def _send(
        self,
        client_id: str,
        omega: np.ndarray,
        n_observations: int,
        iteration: int,
        *,
        by_reference: bool,
    ) -> int:
        """Seal and write a checked upload; ``by_reference``: by reference where the server holds
        it (the same vector went to an earlier round, and no server has started since): named
        by the receipt of the upload that carried it."""
        pooled = self.config.aggregation == "pooled"

        def resend() -> None:
            self._send(client_id, omega, n_observations, iteration, by_reference=False)

        for attempt in range(_UPLOAD_ATTEMPTS):
            round_index = self.federation.open_round()
            epoch = self._server_epoch() if pooled else 0
            with self._lock:
                sent = self._sent_vectors.get(client_id)
            same_as = None
            if (
                by_reference
                and sent is not None
                # The server holds the site's last vector, which another worker process of the
                # site may have sent: only a site of one worker names its own by reference.
                and lease_book(self.federation).live_workers(client_id) <= 1
                and (sent.round < round_index and sent.epoch == epoch)
                and np.array_equal(sent.vector, omega)
            ):
                same_as = sent.receipt
            payload = encode_upload(
                config_hash=self.federation.config_hash,
                round_index=round_index,
                client_id=client_id,
                omega=omega,
                n_observations=n_observations,
                iteration=iteration,
                same_as=same_as,
            )
            try:
                receipt = self.federation.send_upload(
                    client_id, round_index, payload, resend=resend
                )
            except Exception:
                # The round closed between reading the pointer and writing (its uploads study
                # is gone: KeyError, or on SQLite a StaleDataError while the server deletes
                # it): retry into the round that is open now.
                if attempt == _UPLOAD_ATTEMPTS - 1 or not self._closed_since(round_index):
                    raise
                _logger.debug(f"Round {round_index} closed during an upload; retrying.")
                continue
            with self._lock:
                self._last_sent[client_id] = (round_index, resend)
            if pooled:
                with self._lock:
                    if same_as is not None:
                        self._references[client_id] = (round_index, epoch, resend)
                    else:
                        vector = omega.copy()
                        vector.flags.writeable = False
                        self._sent_vectors[client_id] = _SentVector(
                            vector, receipt, round_index, epoch
                        )
                        self._references.pop(client_id, None)
            return round_index
        raise AssertionError("unreachable")

    def _server_epoch(self) -> int:
        """The newest server epoch started on the federation (0 before the first server)."""
        store = self.federation.store
        with self._lock:
            epoch = self._epoch
        while store.has_server_epoch(epoch + 1):
            epoch += 1
        with self._lock:
            self._epoch = max(self._epoch, epoch)
            return self._epoch

    def _resend_references(self, round_index: int, *, stalled: bool) -> None:
        """Re-send in full the uploads to ``round_index`` that named statistics by reference, if a
        server has started since (it does not hold them) or the round has ``stalled``."""
        with self._lock:
            pending = {c: r for c, r in self._references.items() if r[0] == round_index}
        if not pending:
            return
        epoch = self._server_epoch()
        for client_id, (_, sent_epoch, resend) in pending.items():
            if stalled or sent_epoch != epoch:
                _logger.info(f"{client_id}: re-sending its statistics in full.")
                resend()

    def _resend_erased(self, round_index: int) -> None:
        """Re-send this process's uploads to the open ``round_index`` that are no longer in it
        (:class:`~optuna_fedbo.federation._damage.ErasureCheck`): deleted from the storage,
        they would never count."""
        with self._lock:
            pending = {c: r for c, (n, r) in self._last_sent.items() if n == round_index}
        for client_id in self._erasures.erased(self.federation, round_index, pending):
            resend = pending[client_id]
            if self.federation.open_round() != round_index:
                return  # the round closed meanwhile (and its uploads were discarded)
            _logger.info(f"{client_id}: its upload left round {round_index}; re-sending it.")
            resend()

    def _closed_since(self, round_index: int) -> bool:
        """Whether ``round_index`` is no longer the open round (waits briefly for the server to
        move the pointer when it is deleting the round's uploads right now)."""
        for _ in range(20):
            if self.federation.open_round() > round_index:
                return True
            time.sleep(0.05)
        return False


__all__ = ["FTSChannel"]
