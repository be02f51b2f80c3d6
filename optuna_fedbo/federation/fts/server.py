"""The FTS family's server round: closes rounds, aggregates the uploads, publishes broadcasts.

One round (DP-FTS-DE, Algorithm 1) is ``collect -> aggregate -> publish``:

1. *collect*: read the open round's sealed uploads, check each one's signature and binding and
   open it (only the server can), parse and check it (forged, copied, replayed, oversized,
   wrong configuration, unknown participant, wrong length, NaN/inf or absurd values,
   malformed: rejected and logged, never aggregated); with ``aggregation="pooled"``, an upload
   may name by reference the statistics its participant sent before, which the server keeps (in
   memory: after a restart such an upload is refused, and the participant re-sends them);
2. *aggregate*: for ``aggregation="weighted"``, one vector per sub-region,
   ``omega^(i) = sum_n phi_n^(i) omega_n`` with DP-FTS-DE's softmax weights
   (:func:`optuna_fedbo.core.weights.subregion_weights`, renormalized over the participants
   that uploaded); for ``aggregation="sample"`` (original FTS), the uploaded vectors themselves in
   an order secret to the server; for ``aggregation="pooled"`` (the default without DP), the
   posterior mean given all participants' summed statistics (:mod:`optuna_fedbo.core.pooling`);
   each participant's weight bounded, and nothing published of fewer than ``min_contributors``
   (:mod:`optuna_fedbo.federation.fts.influence`);
3. *publish*: sign the broadcast (with receipts of the uploads received in time) and stage it
   as a ``RUNNING`` trial, open the next round's uploads, then complete the trial and move the
   signed ``latest`` pointer, and finally discard the uploads.

Every step is idempotent from stored state, so a server restarted at any point resumes the open
round with the uploads already written and never publishes a round twice.

One server at a time (the epoch of :mod:`optuna_fedbo.federation.server`): a superseded server
stops before it stages anything, so two servers never keep aggregating (with differential
privacy: releasing differently noised vectors of one accounted round) side by side.

With differential privacy (``Federation.create(..., privacy=DPConfig(...))``) the round is
``collect -> privatize -> account -> publish``: the aggregation is Algorithm 1 of DP-FTS-DE
(Poisson subsampling with probability ``q`` over the ``N`` registered agents, clipping to
``S / sqrt(P)``, weighted sums divided by ``q``, Gaussian noise ``z phi_max S / q``; randomness
from the OS, never a seed), and the round is composed into the persistent privacy ledger before
its broadcast is staged, so no broadcast ever exists unaccounted. A round that would take epsilon
above the budget is not published: the server records that the budget is exhausted, logs it,
reports it, discards the round's uploads and stops. Which agents were selected, how many
vectors were clipped and how many contributed are reported to the server operator only (the
broadcast carries ``n_contributors = -1``: the count would reveal participation).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

from optuna_fedbo.core.gp_fit import REFIT_GROWTH
from optuna_fedbo.core.pooling import block_sizes
from optuna_fedbo.core.pooling import KeptChoice
from optuna_fedbo.core.pooling import unpack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.weights import subregion_weights
from optuna_fedbo.core.weights import WeightSchedule
from optuna_fedbo.federation._uploads import UploadCollector
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fts.influence import bounded
from optuna_fedbo.federation.fts.influence import secret_order
from optuna_fedbo.federation.fts.influence import withheld_message
from optuna_fedbo.federation.fts.messages import encode_broadcast
from optuna_fedbo.federation.fts.messages import parse_broadcast
from optuna_fedbo.federation.fts.messages import parse_upload
from optuna_fedbo.federation.fts.messages import Upload
from optuna_fedbo.federation.fts.secure import SecureRounds
from optuna_fedbo.federation.fts.staged import Staged
from optuna_fedbo.federation.ledger import PrivacyLedger
from optuna_fedbo.federation.server import FederationServer
from optuna_fedbo.federation.server import RoundReport
from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.privacy._gaussian import aggregate
from optuna_fedbo.privacy._gaussian import AggregationResult
from optuna_fedbo.privacy._rng import research_rng

_logger = optuna.logging.get_logger(__name__)


class FTSServer(FederationServer):
    """The trusted aggregator of an FTS federation.

    Takes the arguments of :class:`~optuna_fedbo.federation.server.FederationServer`; the
    federation's protocol must be an :class:`~optuna_fedbo.FTSConfig`.

    With differential privacy, a server with an epsilon budget precomputes epsilon for the
    rounds the budget allows when it starts (at most about 2 s; accounting those rounds is then
    a table lookup).

    ``FederationServer(federation)`` builds this class for an FTS-family federation.
    """

    #: The budget-exhausted record once the server has stopped for the privacy budget.
    _exhausted: dict[str, Any] | None = None
    #: Noise source of a research simulation (``None``: OS entropy, the only choice otherwise).
    _noise_rng: np.random.Generator | None = None

    def __init__(
        self,
        federation: Federation,
        *,
        round_timeout: float | str | None = "auto",
        min_uploads: int | str = "auto",
        discard_uploads: bool = True,
        heartbeat_interval: float = 5.0,
    ) -> None:
        fts = federation.fts
        self._start(
            federation,
            round_timeout=round_timeout,
            min_uploads=min_uploads,
            discard_uploads=discard_uploads,
            heartbeat_interval=heartbeat_interval,
        )
        self._fts = fts
        self._weights = WeightSchedule(
            a=fts.weight_a,
            hold_rounds=fts.weight_hold_rounds,
            decay_rounds=fts.weight_decay_rounds,
        )
        self._uploads: UploadCollector[Upload] = UploadCollector(self._open_upload_with_receipt)
        # The newest statistics received from each participant (aggregation="pooled"), which
        # a later upload may name instead of repeating them (in memory only: after a restart
        # such an upload is refused, and its participant re-sends the statistics): the receipt
        # of the upload that carried them (their name), the packed vector and the checked
        # statistics of each block.
        self._held: dict[str, tuple[str, np.ndarray, list[SufficientStatistics]]] = {}
        # (participants and the receipts naming their statistics, vectors, feature block) of
        # the last pooled aggregation.
        self._last_pooled: tuple[tuple[tuple[str, str], ...], np.ndarray, int] | None = None
        # The pooling last chosen, kept while the same contributors' observations grow < 10%;
        # with one participant, kept for good (_pool).
        self._pooling = KeptChoice(math.inf if federation.n_clients == 1 else REFIT_GROWTH)
        self._last_published = -1
        self._withheld = -1  # the last round reported as withheld for want of contributors
        self._staged: Staged | None = None
        self._ledger: PrivacyLedger | None = None
        if federation.privacy is not None:
            self._ledger = federation.privacy_ledger()
            self._mechanism = federation.privacy.mechanism()
            self._ledger.prepare()
        self._recover()
        self._secure = None if federation.secure_aggregation is None else SecureRounds(self)

    def _use_insecure_noise_seed(self, insecure_noise_seed: int) -> None:
        """Draw subsampling and noise (or the relay order of ``"sample"``) from a seeded
        generator: for ``simulate()`` only.

        The privacy guarantee is void against whoever knows the seed; the public constructor
        refuses it, and only :func:`optuna_fedbo.simulation.simulate` calls this.
        """
        self._noise_rng = research_rng(insecure_noise_seed)

    # ------------------------------------------------------------------------ recovery
    def _recover(self) -> None:
        """Rebuild the server's state from storage (after a restart or an error).

        Only broadcasts signed by the server count; with differential privacy the ledger must
        verify (else :class:`~optuna_fedbo.federation.ledger.LedgerIntegrityError`: fail
        closed). A staged broadcast of the open round is published as it is; a payload
        accounted but never staged (a crash in between) is staged from the ledger; any other
        staged payload is purged.
        """
        broadcasts = self._store.broadcasts()
        published = [b for b in broadcasts if b.state == TrialState.COMPLETE]
        self._last_published = max((b.round for b in published), default=-1)
        pointer = self._store.latest()
        stale = pointer is None or "scanned" in pointer or pointer["round"] < self._last_published
        if published and stale:  # a crash before the pointer moved, or an older pointer
            newest = max(published, key=lambda b: b.round)
            self._store.commit_broadcast(
                newest.trial_id, self._last_published, int(newest.value or 0)
            )
        if self._ledger is not None:
            self._ledger.reload()
            self._exhausted = self._ledger.exhausted()
        self._staged = None
        open_round = self._last_published + 1
        for broadcast in broadcasts:
            if broadcast.state != TrialState.RUNNING:
                continue
            if broadcast.round == open_round and self._staged is None:
                self._staged = self._resumed(broadcast.trial_id, broadcast.payload)
            else:
                _logger.warning(
                    f"Purging a stale staged broadcast of round {broadcast.round} (accounted)."
                )
                self._store.purge_broadcast(broadcast.trial_id)
        if self._staged is None and self._ledger is not None and self._exhausted is None:
            accounted = self._ledger.unreleased(open_round, {b.digest for b in broadcasts})
            if accounted is not None:
                payload, receipts = accounted
                _logger.warning(
                    f"Round {open_round} was accounted but not staged (a crash): publishing the "
                    "accounted payload."
                )
                self._ensure_current()
                self._uploads.receipts = {r: r for r in receipts}  # kept with it in the ledger
                trial_id = self._store.stage_broadcast(open_round, self._sign(open_round, payload))
                self._staged = self._resumed(trial_id, payload)
        if self._last_published >= 0 and self._discard:
            self._store.discard_uploads(self._last_published)
        if self._exhausted is None:
            self._store.open_uploads(open_round)
        self._reset_round()

    def _resumed(self, trial_id: int, payload: str) -> Staged:
        round_index = parse_broadcast(payload).round
        count = parse_broadcast(payload).n_contributors
        return Staged(trial_id, round_index, count, (), (), "resumed", payload)

    def _sign(self, round_index: int, payload: str, ledger_count: int | None = None) -> str:
        """The signed broadcast record (with the receipts of the round's valid uploads)."""
        if ledger_count is None:
            ledger_count = 0 if self._ledger is None else self._ledger.n_released()
        return self._store.sign_broadcast(
            round_index,
            payload,
            epoch=self._epoch,
            receipts=tuple(self._uploads.receipts.values()),
            ledger_count=ledger_count,
        )

    def _reset_round(self) -> None:
        self._uploads.reset()

    # ----------------------------------------------------------------------- the round
    @property
    def open_round(self) -> int:
        """The round currently collecting uploads."""
        return self._last_published + 1

    @property
    def budget_exhausted(self) -> dict[str, Any] | None:
        """The record of the round refused for the privacy budget, or ``None``."""
        return self._exhausted

    def step(self, force: bool = False) -> RoundReport | None:
        """Close the open round if it is ready, aggregate it and publish the broadcast.

        A round is ready when all ``N`` participants have a valid upload in it (in round 0,
        each with its ``n_init`` initial observations), or when ``round_timeout`` has passed
        since its first valid upload, or when ``force`` is true. A round without any valid
        upload is never closed. With differential privacy, a ready round that would exceed the
        epsilon budget is not published: the report says so (``budget_exhausted``), once;
        afterwards ``step`` does nothing.

        Args:
            force: Close the round with whatever valid uploads arrived.

        Returns:
            The :class:`RoundReport` of the published round, or ``None`` if none was published.
        """
        with self._lock:
            self._ensure_current()
            self._heartbeat()
            if self._staged is not None:
                return self._publish()
            if self._exhausted is not None:
                return None
            round_index = self.open_round
            self._keep_uploads_open(round_index)
            if self._secure is not None:  # the server learns only a sum (.secure)
                return self._secure.step(force)
            uploads, rejected = self._collect(round_index)
            reason = self._closing_reason(round_index, uploads, force)
            if reason is None:
                return None
            if self._ledger is None and len(uploads) < self._fts.min_contributors:
                return self._withhold(round_index, uploads, rejected)
            private = entry = None
            phi_max = 0.0
            feature_block = 0
            if self._ledger is None:
                vectors, feature_block = self._aggregate(round_index, uploads)
                contributors = tuple(u.client_id for u in uploads)
            else:
                if self._ledger.would_exceed():
                    return self._stop_for_budget(round_index, uploads, rejected)
                private, phi_max = self._privatize(round_index, uploads)
                vectors = np.asarray(private.vectors)
                roster = self.federation.participants()
                contributors = tuple(roster[int(i)] for i in private.contributors)
            payload = encode_broadcast(
                round_index=round_index,
                aggregation=self._fts.aggregation,
                vectors=vectors,
                n_contributors=len(uploads) if private is None else -1,
                config_hash=self.federation.config_hash,
                feature_block=feature_block,
            )
            if self._ledger is not None and private is not None:
                # Accounted (persistently, bound to the payload) before it exists anywhere; by
                # a current server only (a superseded one would pay for a payload never shown).
                self._ensure_current()
                entry = self._ledger.account(
                    round_index,
                    payload,
                    epoch=self._epoch,
                    noise_std=private.noise_std,
                    phi_max=phi_max,
                    receipts=tuple(self._uploads.receipts.values()),
                )
            signed = self._sign(round_index, payload, None if entry is None else entry.n_accounted)
            self._ensure_current()  # again: aggregation took time, and staging is a release
            trial_id = self._store.stage_broadcast(round_index, signed)
            self._staged = Staged(
                trial_id,
                round_index,
                len(contributors),
                contributors,
                rejected,
                reason,
                payload,
                private,
                entry,
                ()
                if self._fts.aggregation == "pooled"
                else tuple(float(np.linalg.norm(u.omega)) for u in uploads),
            )
            return self._publish()

    def _collect(self, round_index: int) -> tuple[list[Upload], tuple[tuple[str, str], ...]]:
        config_hash = self.federation.config_hash
        length = self._fts.upload_length

        def parse(client_id: str, plaintext: bytes, receipt: str) -> Upload:
            held = self._held.get(client_id)
            upload = parse_upload(
                plaintext,
                client_id=client_id,
                round_index=round_index,
                config_hash=config_hash,
                length=length,
                held=None if held is None else held[:2],
            )
            if self._fts.aggregation == "pooled" and (held is None or upload.omega is not held[1]):
                # New statistics (not the ones held, named by their upload's receipt): check
                # them, keep them under this upload's receipt (no pass over the vector).
                try:
                    blocks = unpack_blocks(upload.omega, self._fts.n_features)
                except ValueError as error:
                    raise UploadRejected(f"inconsistent statistics ({error})") from None
                self._held[client_id] = (receipt, upload.omega, blocks)
            return upload

        valid, rejected = self._uploads.collect(
            self._store.read_uploads(round_index), round_index, parse
        )
        return list(valid.values()), rejected

    def _closing_reason(self, round_index: int, uploads: list[Upload], force: bool) -> str | None:
        if not uploads:
            return None
        complete = len(uploads) >= self.federation.n_clients
        if complete and round_index == 0:
            complete = all(u.n_observations >= self._fts.n_init for u in uploads)
        if complete:
            return "complete"
        if force:
            return "forced"
        if round_index == 0:
            # Round 0 holds the initial designs: only finished ones count towards a timeout.
            uploads = [u for u in uploads if u.n_observations >= self._fts.n_init]
        if len(uploads) >= self._min_uploads and self._uploads.waited(
            self.current_round_timeout()
        ):
            return "timeout"
        return None

    def _aggregate(self, round_index: int, uploads: list[Upload]) -> tuple[np.ndarray, int]:
        """The non-private aggregation, each participant's weight bounded; and its feature block.

        ``"pooled"``: the posterior mean given the participants' statistics together (none
        weighing more than the heaviest other one), on the feature block and with the noise
        variance and offsets of largest evidence
        (:func:`~optuna_fedbo.core.pooling.select_posterior`). Every vector, and the pooled
        mean, is clipped to the norm the model allows (:func:`.influence.bounded`).
        """
        if self._fts.aggregation == "pooled":
            # The same statistics as the last round's (participants between refreshes): the
            # same posterior. (A valid upload is its participant's newest parsed one, whose
            # statistics _held keeps.)
            held = [self._held[u.client_id] for u in uploads]
            key = tuple((u.client_id, digest) for u, (digest, _, _) in zip(uploads, held))
            if self._last_pooled is None or self._last_pooled[0] != key:
                block, mean = self._pool([blocks for _, _, blocks in held], key)
                size = block_sizes(self._fts.n_features)[block]
                self._last_pooled = (key, bounded(mean[None, :], size, round_index), block)
            return self._last_pooled[1], self._last_pooled[2]
        omegas = bounded(np.stack([u.omega for u in uploads]), self._fts.n_features, round_index)
        if self._fts.aggregation == "sample":
            # Secret to the server (OS entropy; a research simulation's seed, if it gave one).
            return omegas[secret_order(len(omegas), self._noise_rng)], 0
        indices = np.array([self.federation.index_of(u.client_id) for u in uploads])
        weights = self._subregion_weights(round_index)
        return np.array(aggregate(omegas, indices, weights, mechanism=None).vectors), 0

    def _pool(
        self, statistics: list[list[SufficientStatistics]], key: tuple[tuple[str, str], ...]
    ) -> tuple[int, np.ndarray]:
        """The pooled posterior; block, noise and offsets chosen again only once the same
        contributors' observations have grown by 10% since the last choice
        (:class:`~optuna_fedbo.core.pooling.KeptChoice`).

        In a federation of one participant the first choice is kept: its broadcasts hold that
        participant's statistics alone, which serve nobody (a participant leaves out a round
        whose only contributor it was), and a new choice's evidences took about 5 ms of each
        round that brought fresh statistics."""
        count = sum(blocks[0].count for blocks in statistics)
        choice, mean = self._pooling.choose(statistics, (client for client, _ in key), count)
        return choice.block, mean

    def _subregion_weights(self, round_index: int) -> np.ndarray:
        """DP-FTS-DE's softmax weights of round ``round_index`` over the ``N`` agents."""
        return subregion_weights(
            self.federation.assignment(),
            self._fts.n_subregions,
            round_index=round_index,
            schedule=self._weights,
        )

    def _withhold(
        self, round_index: int, uploads: list[Upload], rejected: tuple[tuple[str, str], ...]
    ) -> RoundReport | None:
        """Publish nothing of a round with too few contributors; report it once."""
        if self._withheld == round_index:
            return None
        self._withheld = round_index
        count, minimum = len(uploads), self._fts.min_contributors
        _logger.warning(withheld_message(self.federation.name, round_index, count, minimum))
        contributors = tuple(u.client_id for u in uploads)
        return RoundReport(
            round_index, count, contributors, rejected, "withheld", time.time(), published=False
        )

    def _privatize(
        self, round_index: int, uploads: list[Upload]
    ) -> tuple[AggregationResult, float]:
        """Algorithm 1, lines 5-11, with weights over all ``N`` registered agents."""
        omegas = np.stack([u.omega for u in uploads])
        indices = np.array([self.federation.index_of(u.client_id) for u in uploads])
        weights = self._subregion_weights(round_index)
        # _noise_rng is None (subsampling and noise from the OS entropy source, secure_rng)
        # except in a research simulation given an insecure_noise_seed.
        result = aggregate(
            omegas, indices, weights, mechanism=self._mechanism, rng=self._noise_rng
        )
        return result, float(weights.max())

    def _stop_for_budget(
        self,
        round_index: int,
        uploads: list[Upload],
        rejected: tuple[tuple[str, str], ...],
    ) -> RoundReport:
        assert self._ledger is not None
        record = self._ledger.mark_exhausted(round_index)
        self._exhausted = record
        if self._discard:
            self._store.discard_uploads(round_index)
        self._reset_round()
        self._heartbeat(force=True)
        _logger.warning(
            f"Privacy budget of {self.federation.name!r} exhausted: round {round_index} is not "
            f"published (epsilon would reach {record['epsilon_next']:.4g} > budget "
            f"{record['epsilon_budget']:g}; spent {record['epsilon']:.4g} at delta "
            f"{record['delta']:.3g} over {record['rounds_accounted']} round(s)). The server "
            "stops publishing; participants continue with their local models."
        )
        return RoundReport(
            round=round_index,
            n_contributors=0,
            contributors=(),
            rejected=rejected,
            reason="budget",
            published_at=time.time(),
            published=False,
            epsilon=float(record["epsilon"]),
            delta=float(record["delta"]),
            budget_exhausted=True,
        )

    def _publish(self) -> RoundReport:
        staged = self._staged
        assert staged is not None
        entry = staged.entry
        if self._ledger is not None and entry is None:  # a staged broadcast found at restart
            if not self._ledger.is_accounted(text_digest(staged.payload)):
                # Cannot happen through step(), which accounts before staging: a broadcast found
                # staged without its ledger entry is accounted before it is published.
                _logger.warning(f"Round {staged.round} was staged unaccounted; accounting it now.")
            phi_max = float(self._subregion_weights(staged.round).max())
            entry = self._ledger.account(
                staged.round,
                staged.payload,
                epoch=self._epoch,
                noise_std=self._mechanism.noise_multiplier
                * phi_max
                * self._mechanism.clip_norm
                / self._mechanism.sample_rate,
                phi_max=phi_max,
            )
        self._ensure_current()  # again before the release is committed
        self._store.open_uploads(staged.round + 1)
        # Under differential privacy the number of contributors is withheld (-1).
        published_count = staged.n_contributors if entry is None else -1
        self._store.commit_broadcast(staged.trial_id, staged.round, published_count)
        self._last_published = staged.round
        self._staged = None
        if self._discard:
            self._store.discard_uploads(staged.round)
        self._reset_round()
        self._heartbeat(force=True)
        private = staged.private
        report = RoundReport(
            round=staged.round,
            n_contributors=staged.n_contributors,
            contributors=staged.contributors,
            rejected=staged.rejected,
            reason=staged.reason,
            published_at=time.time(),
            epsilon=None if entry is None else entry.epsilon,
            delta=None if entry is None else entry.delta,
            n_selected=None if private is None else int(private.selected.size),
            n_clipped=None if private is None else private.n_clipped,
            noise_std=None if entry is None else entry.noise_std,
            upload_norms=staged.upload_norms,
        )
        details = ""
        if entry is not None:
            details = f", epsilon {entry.epsilon:.4g} at delta {entry.delta:.3g}"
            if private is not None:
                details += (
                    f", {private.selected.size} selected, {private.n_clipped} of "
                    f"{private.contributors.size} clipped"
                )
        _logger.info(
            f"Published round {staged.round} of {self.federation.name!r} "
            f"({staged.n_contributors} contributors, {staged.reason}{details})."
        )
        return report

    # ------------------------------------------------------------------------ serving
    def _serving(self) -> str:
        return f"Serving federation {self.federation.name!r} from round {self.open_round}."

    def _serve_done(self) -> bool:
        return self._exhausted is not None  # nothing more can be published
