"""What every participant of an FTS-family federation does, whichever way it uses the broadcast.

Two classes take part in an FTS federation, one per value of ``FTSConfig.transfer``:
:class:`~optuna_fedbo.FedTransferSampler` (``"prior"``, the default: a local GP with the
broadcast as a weighted prior mean) and :class:`~optuna_fedbo.FedThompsonSampler`
(``"schedule"``: the papers' Thompson sampling, Algorithm 2 of DP-FTS-DE). Both subclass
:class:`FTSParticipant`, which holds what they share: joining and the lease (through
:class:`~optuna_fedbo.FedSampler`), the initial design, reading a broadcast as a function
``g(x)``, serving each trial's point in the federation's space, and the upload after every
finished trial (:mod:`._fts_upload`).
"""

from __future__ import annotations

from collections.abc import Sequence
import threading
from typing import Any
from typing import ClassVar
import warnings

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.core.acquisition import AcquisitionFunction
from optuna_fedbo.core.acquisition import LinearAcquisition
from optuna_fedbo.core.acquisition import maximize
from optuna_fedbo.core.acquisition import RegionwiseLinear
from optuna_fedbo.core.acquisition import search_budget
from optuna_fedbo.core.local_model import normalization
from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.threads import one_blas_thread
from optuna_fedbo.federation._codec import vector_digest
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fts.messages import Broadcast
from optuna_fedbo.samplers._fed import DEFAULT_LEASE_TTL
from optuna_fedbo.samplers._fed import FedSampler
from optuna_fedbo.samplers._fed import STALL_SECONDS
from optuna_fedbo.samplers._fts_upload import finished_value
from optuna_fedbo.samplers._fts_upload import UploadMemory
from optuna_fedbo.samplers._fts_upload import with_trial
from optuna_fedbo.samplers._observations import TrialObservations
from optuna_fedbo.samplers._rff_thompson import RFFThompsonSampler
from optuna_fedbo.samplers._running_points import claim_point
from optuna_fedbo.samplers._site_checks import conflict_message
from optuna_fedbo.samplers._waiting import sync_round
from optuna_fedbo.samplers._waiting import Waits

_logger = optuna.logging.get_logger(__name__)

#: Trial system attribute: how the trial's point was chosen ("init", "local", "federated" = the
#: broadcast function's maximizer, "transfer" = the local GP with the broadcast as prior mean,
#: "own" = the local GP alone because it predicted the latest trials better than the broadcast
#: did, "fallback" = local because no usable broadcast (none yet, only its own data, or the
#: federation's privacy budget is exhausted), "outside" = not the federation's space).
MODE_ATTR = "fedbo:mode"
#: Trial system attribute: the broadcast round a "federated" trial used.
BROADCAST_ROUND_ATTR = "fedbo:broadcast_round"

#: Choices of a trial's point at most (a point another worker's running trial claimed first is
#: chosen again, given that trial's point).
_CHOICES = 3

#: How each sampling mode counts in :attr:`FedSampler.counts`.
_KIND = {
    "init": "initial",
    "local": "local",
    "fallback": "local",
    "own": "local",
    "outside": "local",
    "federated": "federated",
    "transfer": "federated",
}

#: The participant class of each ``FTSConfig.transfer`` (filled in by the subclasses).
_BY_TRANSFER: dict[str, type[FTSParticipant]] = {}


class FTSParticipant(FedSampler):
    """What every participant of an FTS-family federation does (see the module docstring).

    ``FTSParticipant(federation, ...)`` (and ``FedSampler(federation, ...)``) builds the class of
    the federation's ``FTSConfig.transfer``. Subclasses set :attr:`transfer` and implement
    :meth:`_bo_step` (a trial after the initial design) and :meth:`_vector` (the vector a
    non-pooled upload sends).

    Each trial is one BO iteration; the first ``n_init`` trials follow the participant's own
    space-filling design (a Latin hypercube over the whole space, or over its sub-region with
    distributed exploration). After every finished trial the participant uploads to the open
    round: by default (``aggregation="pooled"``) the sufficient statistics of its values,
    oriented for maximization, on the shared random features and the single-scale feature
    blocks (:mod:`optuna_fedbo.core.pooling`), refreshed once its observations have grown by
    :data:`~optuna_fedbo.samplers._fts_upload.STATISTICS_REFRESH` (10%; so after every trial up
    to 11 observations) and otherwise named by digest (:meth:`_statistics_serve_nobody`);
    otherwise ``omega_{n,t}`` from its posterior over the shared features, fitted to its values
    normalized as ``FTSConfig.normalization`` says (:meth:`_vector`). Errors there are logged,
    never raised into ``study.optimize``.

    The participant's trials stay in its own study; only the upload leaves it. Asynchronous by
    default (each trial uses the newest broadcast it can read); ``synchronous=True`` waits, before
    each BO iteration, for the broadcast of the open round when it holds the site's upload
    (any worker's, a restarted one's too: :func:`~optuna_fedbo.samplers._waiting.sync_round`).

    Under differential privacy with an epsilon budget, once the server has stopped for the
    budget (:attr:`budget_exhausted`) the participant neither waits nor uploads any more, and
    every BO iteration is local (the DP-FTS-DE paper's footnote 13): no further privacy is
    spent. A warning is logged once.

    Args:
        federation: The federation to take part in (FTS protocol).
        client_id: This participant's id; it joins the federation on construction.
        synchronous: Wait for the current round's broadcast before each BO iteration.
        sync_timeout: Longest wait in synchronous mode (seconds; ``None``: no limit). A wait
            also ends at the timeout of ``study.optimize``, at once when the federation has
            finished or its server stopped, and after ``patience`` seconds of no server, a
            server down or too few participants (see :mod:`optuna_fedbo.samplers._waiting`);
            the trial then uses the newest broadcast or the local model (one warning).
        patience: Seconds a wait goes on while such a problem lasts.
        poll_interval: Seconds between storage reads while waiting.
        n_candidates: Random candidates scored per acquisition maximization.
        n_refinements: Best candidates refined with L-BFGS-B.
        independent_sampler: Sampler for parameters outside the federation's search space.
        warn_independent_sampling: Warn when such a parameter is sampled independently.
        seed: Seed of this participant's own randomness (initial points, coin flips, draws).
        lease_ttl: Seconds after its last heartbeat at which this participant's lease on
            ``client_id`` expires if its process dies (see :class:`~optuna_fedbo.FedSampler`).
    """

    protocol_kind = "fts"
    #: The ``FTSConfig.transfer`` this class implements.
    transfer: ClassVar[str]
    #: What its trials use without a broadcast (for messages).
    _local_model: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _BY_TRANSFER.setdefault(cls.transfer, cls)

    @classmethod
    def _sampler_for(cls, federation: Federation) -> type[FedSampler]:
        transfer = federation.fts.transfer
        chosen = _BY_TRANSFER[transfer]
        if cls is FTSParticipant or issubclass(chosen, cls):
            return chosen
        if cls.transfer == "schedule":
            # FedThompsonSampler built the participant of either transfer until 0.1.
            warnings.warn(
                f"FedThompsonSampler is the papers' participant (FTSConfig(transfer='schedule')); "
                f"federation {federation.name!r} uses transfer={transfer!r}, whose participant "
                f"is {chosen.__name__}: this builds one, but use FedSampler(...) or "
                f"{chosen.__name__}(...) instead.",
                FutureWarning,
                stacklevel=3,  # the caller of FedThompsonSampler(...)
            )
            return chosen
        raise ValueError(
            f"{cls.__name__} is the participant of FTSConfig(transfer={cls.transfer!r}), but "
            f"federation {federation.name!r} uses transfer={transfer!r}: use FedSampler(...) "
            f"or {chosen.__name__}(...)."
        )

    def __init__(
        self,
        federation: Federation,
        client_id: str,
        *,
        synchronous: bool = False,
        sync_timeout: float | None = 600.0,
        patience: float = STALL_SECONDS,
        poll_interval: float = 0.05,
        n_candidates: int = 1024,
        n_refinements: int = 4,
        independent_sampler: BaseSampler | None = None,
        warn_independent_sampling: bool = True,
        seed: int | None = None,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        worker: str | None = None,
    ) -> None:
        fts = federation.fts
        if n_candidates < 1 or n_refinements < 0:
            raise ValueError("n_candidates must be >= 1 and n_refinements >= 0.")
        self._waits = Waits(
            self,
            limit=("sync_timeout", sync_timeout),
            patience=patience,
            fallback="its local model",
        )
        super().__init__(
            independent_sampler=independent_sampler,
            warn_independent_sampling=warn_independent_sampling,
            seed=seed,
        )
        self._participate(federation, client_id, lease_ttl, worker)
        self._choosing = threading.Lock()
        epoch = self._lease.epoch  # each worker its own stream: not one point twice
        if seed is not None and epoch > 1:
            self._rng = np.random.default_rng([seed, epoch])
        self._fts = fts
        self._synchronous = synchronous
        self._poll_interval = poll_interval
        self._n_candidates = n_candidates
        self._n_refinements = n_refinements
        self._encoder = federation.encoder
        self._features = federation.features()
        self._partition = federation.partition()
        self._space = {n: d for n, d in federation.search_space.items() if not d.single()}
        # With aggregation="pooled" the statistics are also kept (and uploaded) on the
        # single-scale feature blocks.
        self._feature_maps = (
            federation.pooling_features() if fts.aggregation == "pooled" else [self._features]
        )
        self._observations = TrialObservations(self._encoder, self._feature_maps)
        # The participant's own space-filling initial design (from its own seed).
        self._design_rng = np.random.default_rng(None if seed is None else [seed, 1])
        self._design: np.ndarray | None = None
        self._uploads = UploadMemory()
        self._outside = RFFThompsonSampler(
            n_features=fts.n_features,
            lengthscale="auto" if fts.lengthscale is None else fts.lengthscale,
            noise_variance="auto" if fts.lengthscale is None else fts.noise_variance,
            n_startup_trials=0,
            independent_sampler=self._independent_sampler,
            warn_independent_sampling=False,
            feature_seed=federation.seed,
            seed=seed,
        )
        self._lock = threading.RLock()
        self._modes: dict[int, str] = {}
        self._points: dict[int, dict[str, Any]] = {}
        self._warned_conflicts: set[str] = set()
        self._warned_exhausted = False

    @property
    def budget_exhausted(self) -> bool:
        """Whether the federation's privacy budget is exhausted (no more broadcasts)."""
        try:
            record = self.federation.budget_exhausted()
        except Exception:
            _logger.debug("Could not read the federation's budget state.", exc_info=True)
            return False
        if record is not None and not self._warned_exhausted:
            self._warned_exhausted = True
            _logger.warning(
                f"{self.client_id}: the privacy budget of federation {self.federation.name!r} "
                f"is exhausted (round {record.get('round')} was not published); continuing "
                f"with {self._local_model}."
            )
        return record is not None

    @property
    def last_upload_round(self) -> int | None:
        """The round this participant's newest upload went to (``None`` before the first)."""
        return self._uploads.last_round

    def reseed_rng(self) -> None:
        super().reseed_rng()
        self._outside.reseed_rng()

    # --------------------------------------------------------------------- sampling
    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        # Before the first completed trial nothing tells which distributions the objective uses;
        # the federation's parameters then go through sample_independent, which serves them
        # from the same per-trial point when their distribution matches the federation's.
        trials = study._get_trials(deepcopy=False, use_cache=True)
        last = next((t for t in reversed(trials) if t.state == TrialState.COMPLETE), None)
        if last is None:
            return {}
        used = last.distributions
        space = {}
        for name, distribution in self._space.items():
            if name in used and used[name] != distribution:
                if name not in self._warned_conflicts:
                    self._warned_conflicts.add(name)
                    _logger.warning(conflict_message(name, used[name], distribution, self))
                continue
            space[name] = distribution
        return space

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._check_study(study)
        if search_space == {}:
            return {}
        if any(self._space.get(name) != d for name, d in search_space.items()):
            # Not (part of) the federation's space: plain local TS on the given space.
            self._record(study, trial, "outside")
            return self._outside.sample_relative(study, trial, search_space)
        point = self._point(study, trial)
        return {name: point[name] for name in search_space if name in point}

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        self._check_study(study)
        if self._space.get(param_name) == param_distribution:
            point = self._point(study, trial)
            if param_name in point:
                return point[param_name]
        return self._sample_elsewhere(study, trial, param_name, param_distribution)

    def _sample_elsewhere(
        self, study: Study, trial: FrozenTrial, name: str, distribution: BaseDistribution
    ) -> Any:
        """A parameter the trial's point does not hold: the independent sampler's."""
        warn = name not in self._space  # a conflicting distribution is warned about apart
        return self._sample_outside(study, trial, name, distribution, warn=warn)

    def _point(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """This trial's point in the federation's space (chosen once, then cached)."""
        with self._lock:
            cached = self._points.get(trial._trial_id)
        if cached is not None:
            return cached
        # One BLAS limit for the whole step (its updates, posteriors and GPs would each set
        # and restore it). One choice at a time in a process: each thread's choice sees the
        # points of the others' running trials; a point another process's running trial
        # claimed first is chosen again, given that trial's point (at most _CHOICES times).
        with self._choosing, one_blas_thread():
            poll = min(self._poll_interval, 0.05)
            for _ in range(_CHOICES):
                params = self._choose(study, trial)
                point = self._encoder.encode([params])[0]
                if claim_point(study, trial, point, self._draw_ticket, poll):
                    break
                self._uncount(trial._trial_id)
                _logger.debug(f"Trial {trial.number}: its point was taken; choosing again.")
        with self._lock:
            self._points[trial._trial_id] = params
        return params

    def _choose(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """The initial design (:meth:`_initial`), then a BO iteration (:meth:`_bo_step`)."""
        with self._lock:
            self._observations.update(study)
            n_observed = self._observations.count
        params = self._initial(study, trial, n_observed)
        if params is not None:
            return params
        self._check_progress()
        return self._bo_step(study, trial, n_observed)

    def _initial(self, study: Study, trial: FrozenTrial, n_observed: int) -> dict[str, Any] | None:
        """A point of the initial design while it lasts, else ``None``."""
        if n_observed >= self._fts.n_init:
            return None
        self._record(study, trial, "init")
        return self._encoder.decode(self._initial_point(trial.number))

    def _bo_step(self, study: Study, trial: FrozenTrial, n_observed: int) -> dict[str, Any]:
        """A trial after the initial design (``n_observed`` observations)."""
        raise NotImplementedError

    def _initial_point(self, index: int) -> np.ndarray:
        """Point ``index`` of the initial design (uniform beyond its end)."""
        box = (
            self._partition.box(self.participant.subregion)
            if self._fts.init_in_subregion
            else None
        )
        encoding = self._encoder.encoding
        if self._fts.initial_design == "uniform":
            return encoding.sample(1, self._rng, box)[0]
        with self._lock:
            if self._design is None:
                self._design = encoding.space_filling(self._fts.n_init, self._design_rng, box)
            design = self._design
        if index < len(design):
            return design[index]
        return encoding.sample(1, self._rng, box)[0]

    def _usable_broadcast(self) -> Broadcast | None:
        """The newest broadcast, or ``None`` (none yet, unreadable, budget exhausted, or the
        federation finished before this participant started)."""
        if self.federation_finished or self.budget_exhausted:
            return None
        try:
            return self.federation.latest_broadcast()
        except Exception:
            _logger.warning(
                "Could not read the newest broadcast; using the local model.", exc_info=True
            )
            return None

    def _normalization(self, extra: float | None = None) -> tuple[float, float]:
        targets = self._observations.targets
        if extra is not None:
            targets = np.append(targets, extra)
        return normalization(targets, self._fts.normalization, self._fts.n_init)

    def _posterior(self, study: Study) -> LinearPosterior:
        """The posterior given the observations (lock held); the one a vector upload computed
        after a trial is reused when the observations are exactly those."""
        location = self._normalization()
        kept = self._uploads.posterior(study, self._observations, location)
        if kept is not None:
            return kept
        statistics = self._observations.statistics[0]
        return statistics.posterior(self._fts.noise_variance, standardize=location)

    def _maximize(
        self, function: AcquisitionFunction, extra: np.ndarray | None = None
    ) -> np.ndarray:
        budget = search_budget(
            len(self._observations.targets), self._n_candidates, self._n_refinements
        )
        point, _ = maximize(
            function,
            self._encoder.encoding,
            self._rng,
            n_candidates=budget.n_candidates,
            n_refinements=budget.n_refinements,
            n_zoom=budget.n_zoom,
            extra_candidates=extra,
        )
        return point

    def _broadcast_function(
        self, broadcast: Broadcast
    ) -> LinearAcquisition | RegionwiseLinear | None:
        """``g(x)`` of a broadcast (``None`` if it offers nothing usable, as pooled zeros do)."""
        vectors = broadcast.vectors
        if broadcast.aggregation == "pooled":
            if not vectors.any():
                return None
            maps, block = self._feature_maps, broadcast.feature_block
            features = maps[block] if 0 <= block < len(maps) else None
            if features is None or vectors.shape != (1, features.n_features):
                _logger.warning(f"Ignoring broadcast {broadcast.round}: no such block or vector.")
                return None
            return LinearAcquisition(features, vectors[0])
        if vectors.shape[1] != self._fts.n_features:
            _logger.warning(f"Ignoring broadcast {broadcast.round}: vectors of the wrong length.")
            return None
        if broadcast.aggregation == "sample":
            own = self._uploads.own_digest(broadcast.round)
            others = [k for k in range(len(vectors)) if vector_digest(vectors[k]) != own]
            if not others:
                return None
            return LinearAcquisition(
                self._features, vectors[others[int(self._rng.integers(len(others)))]]
            )
        if len(vectors) != self._partition.n_subregions:
            _logger.warning(f"Ignoring broadcast {broadcast.round}: wrong number of sub-regions.")
            return None
        if len(vectors) == 1:
            return LinearAcquisition(self._features, vectors[0])
        return RegionwiseLinear(self._features, vectors, self._partition.index_of)

    def _record(
        self, study: Study, trial: FrozenTrial, mode: str, broadcast_round: int | None = None
    ) -> None:
        with self._lock:
            self._modes[trial._trial_id] = mode
        self._count(trial._trial_id, _KIND[mode])
        try:
            storage = study._storage
            storage.set_trial_system_attr(trial._trial_id, MODE_ATTR, mode)
            if broadcast_round is not None:
                storage.set_trial_system_attr(
                    trial._trial_id, BROADCAST_ROUND_ATTR, broadcast_round
                )
        except Exception:
            # The trial may be a detached one (conformance tests); the record is informative.
            _logger.debug("Could not record the sampling mode on the trial.", exc_info=True)

    # ------------------------------------------------------------------ trial hooks
    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._start_trial(study, trial)
        super().before_trial(study, trial)
        if not self._synchronous:
            return
        try:
            with self._lock:
                self._observations.update(study)
                initializing = self._observations.count < self._fts.n_init
            if initializing or self.federation_finished or self.budget_exhausted:
                return
            target = sync_round(self.federation, self.client_id, self._uploads.last_round)
            if target is not None:
                self._wait_for_round(target)
        except Exception:
            _logger.warning(f"{self.client_id}: waiting for the broadcast failed.", exc_info=True)

    def _wait_for_round(self, target: int) -> None:
        """Synchronous mode: wait for round ``target``, a bounded wait (:mod:`._waiting`)."""
        self._check_progress()
        wait = self._waits.begin(f"the broadcast of round {target}")
        channel = self.federation.channel
        broadcast = channel.wait_for_round(target, wait.left(), self._poll_interval, wait.over)
        wait.end(broadcast is not None or self.budget_exhausted)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        super().after_trial(study, trial, state, values)
        with self._lock:
            self._modes.pop(trial._trial_id, None)
            self._points.pop(trial._trial_id, None)
        value = finished_value(study, state, values)
        self._observed(study, trial, value)
        self._note_params(trial, state == TrialState.COMPLETE)
        if self.federation_finished or self.budget_exhausted:
            return  # nothing will be published any more: nothing leaves the participant
        try:
            with one_blas_thread():
                self._upload(study, trial, value)
        except Exception:
            if self.budget_exhausted:  # exhausted while uploading
                return
            _logger.warning(
                f"{self.client_id}: the upload after trial {trial.number} failed; the study "
                "continues without it.",
                exc_info=True,
            )

    def _observed(self, study: Study, trial: FrozenTrial, value: float | None) -> None:
        """A trial finished with ``value`` (oriented for maximization; ``None``: no value)."""

    def _vector(self, posterior: LinearPosterior) -> np.ndarray:
        """The vector ``omega`` a non-pooled upload sends from the participant's posterior."""
        raise NotImplementedError

    def _statistics_serve_nobody(self) -> bool:
        """Whether fresh statistics serve nobody (a subclass's rule; ``False`` here): the
        uploads after the initial design then name the design's statistics for good."""
        return False

    def _upload(self, study: Study, trial: FrozenTrial, value: float | None) -> None:
        """Upload after a finished trial: the statistics of the stored trials and the finished
        one's ``value`` (pooled), or the vector of the posterior given them."""
        with self._lock:
            self._observations.update(study)
            version = self._observations.version
            blocks = self._observations.statistics
            extra = None
            if value is not None and self._encoder.contains(trial.params):
                extra = value
            n_observations = self._observations.count + (extra is not None)
            if n_observations == 0:
                _logger.debug(f"{self.client_id}: no observation yet, nothing to upload.")
                return
            maps, encoder = self._feature_maps, self._encoder
            if self._fts.aggregation == "pooled":
                # The statistics of the values themselves: the server pools them and
                # standardizes everyone's values together (one scale; each participant's own
                # normalization, from a few initial values, would differ between participants).
                for_good = self._fts.n_init if self._statistics_serve_nobody() else None
                omega = self._uploads.statistics_held(
                    study, n_observations, for_good_from=for_good
                )
                if omega is None:
                    added = with_trial(blocks, maps, encoder, trial, extra)
                    if extra is not None:  # the next update adds this trial: to these
                        self._observations.expect(version, trial, extra, added)
                    omega = pack_blocks(added)
                    self._uploads.sent_statistics(study, n_observations, omega)
            else:
                (block,) = with_trial(blocks[:1], maps, encoder, trial, extra)
                location = self._normalization(extra)
                posterior = block.posterior(self._fts.noise_variance, standardize=location)
                if extra is not None:
                    number = trial.number
                    self._uploads.keep_posterior(
                        study, n_observations, number, location, posterior
                    )
                omega = self._vector(posterior)
        round_index = self.federation.upload(
            self.client_id,
            omega,
            n_observations=n_observations,
            iteration=n_observations - self._fts.n_init,
        )
        with self._lock:
            # Its own vector's digest, to leave it out of a draw (aggregation="sample").
            keep_digest = self._fts.aggregation == "sample"
            self._uploads.uploaded(round_index, omega, keep_digest=keep_digest)
        if n_observations > self._fts.n_init:  # round 0 stays open during initial designs
            self._uploaded_to(round_index)
            if self._stalled(round_index):
                self._check_progress(stalled=True)


__all__ = ["BROADCAST_ROUND_ATTR", "FTSParticipant", "MODE_ATTR"]
