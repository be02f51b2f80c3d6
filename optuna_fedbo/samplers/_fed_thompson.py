"""Federated Thompson sampling: the participant of FTS / FTS-DE (DP-FTS-DE, Algorithm 2)."""

from __future__ import annotations

from collections.abc import Sequence
import copy
import math
import threading
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.distributions import CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.samplers import RandomSampler
from optuna.study import Study
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.core.acquisition import AcquisitionFunction
from optuna_fedbo.core.acquisition import LinearAcquisition
from optuna_fedbo.core.acquisition import maximize
from optuna_fedbo.core.acquisition import RegionwiseLinear
from optuna_fedbo.core.acquisition import ScaledFunction
from optuna_fedbo.core.acquisition import search_budget
from optuna_fedbo.core.believer import believe
from optuna_fedbo.core.gp import GPFitState
from optuna_fedbo.core.gp import REFIT_FROM
from optuna_fedbo.core.gp import REFIT_GROWTH
from optuna_fedbo.core.gp import update_gp
from optuna_fedbo.core.local_model import normalization
from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.threads import one_blas_thread
from optuna_fedbo.core.transfer import prior_weight
from optuna_fedbo.core.transfer import ranking_weight
from optuna_fedbo.federation._codec import vector_digest
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fts.messages import Broadcast
from optuna_fedbo.federation.fts.schedules import local_probability
from optuna_fedbo.federation.fts.schedules import resolve_schedule
from optuna_fedbo.federation.fts.schedules import Schedule
from optuna_fedbo.samplers._common import sample_independently
from optuna_fedbo.samplers._common import study_key
from optuna_fedbo.samplers._fed import DEFAULT_LEASE_TTL
from optuna_fedbo.samplers._fed import FedSampler
from optuna_fedbo.samplers._fed import STALL_SECONDS
from optuna_fedbo.samplers._observations import TrialObservations
from optuna_fedbo.samplers._rff_thompson import RFFThompsonSampler
from optuna_fedbo.samplers._site_state import one_step_ranking
from optuna_fedbo.samplers._site_state import running_points
from optuna_fedbo.samplers._site_state import score_one_step
from optuna_fedbo.samplers._site_state import set_point
from optuna_fedbo.samplers._waiting import Waits

_logger = optuna.logging.get_logger(__name__)

#: Trial system attribute: how the trial's point was chosen ("init", "local", "federated" = the
#: broadcast function's maximizer, "transfer" = the local GP with the broadcast as prior mean,
#: "own" = the local GP alone because it predicted the latest trials better than the broadcast
#: did, "fallback" = local because no usable broadcast (none yet, or the federation's privacy
#: budget is exhausted), "outside" = not the federation's space).
MODE_ATTR = "fedbo:mode"
#: Trial system attribute: the broadcast round a "federated" trial used.
BROADCAST_ROUND_ATTR = "fedbo:broadcast_round"

_OWN_DIGESTS_KEPT = 4

#: A pooled participant sends fresh statistics once its observations have grown by this
#: fraction since the last ones it sent (so after every trial up to 21 observations, after every
#: 50th at 1,000); in between it names the last ones again by digest, instead of packing,
#: sealing and signing 26,000-41,500 numbers. The broadcast then pools at least 95% of each
#: participant's observations.
STATISTICS_REFRESH = 0.05

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


class FedThompsonSampler(FedSampler):
    """A participant of federated Thompson sampling (FTS, FTS-DE) over a :class:`Federation`.

    Each trial is one BO iteration. With the federation's default :class:`FTSConfig`:

    * the first ``n_init`` trials follow the participant's own space-filling design (a Latin
      hypercube over the whole space, or over its sub-region with distributed exploration);
      a participant that joins a federation which already has a broadcast spends its first
      trial on the broadcast function's maximizer;
    * afterwards every trial maximizes the expected improvement of the participant's own exact
      GP (:func:`~optuna_fedbo.core.gp.fit_gp`) whose prior mean is the newest broadcast function
      ``g(x) = phi(x)^T omega`` weighted by ``c``, the posterior mean of its weight given the
      participant's own values (:func:`~optuna_fedbo.core.transfer.prior_weight`): a broadcast
      that predicts them guides the search, one that does not is weighted to about zero
      (``FTSConfig.transfer="prior"``). From 100 observations on, the weight is computed
      again only as often as the GP's hyperparameters are refitted (once the observations have
      grown by 10%) or when a broadcast comes on another feature block; in between each new
      broadcast enters with the last weight. Without a broadcast the GP has no prior mean. When,
      over the latest ten trials, the participant's GP alone ordered each new value against
      the earlier ones better than the GP with the broadcast did (both predicting it before it
      was observed: :class:`~optuna_fedbo.core.transfer.OneStepRanking`), the trial uses the
      GP alone (mode ``"own"``).

    With ``FTSConfig.transfer="schedule"`` it follows Algorithm 2 of DP-FTS-DE instead:

    * the first ``n_init`` trials are drawn from the participant's assigned sub-region
      (distributed exploration; the whole domain when ``P = 1``);
    * afterwards, at BO iteration ``t`` (``t = 1`` right after the initial design), with
      probability ``p_t`` the participant runs local Thompson sampling on its own posterior
      (or asks ``local_sampler``); otherwise it maximizes ``phi(x)^T omega^(i[x])`` over the
      sub-regions with the vectors of the newest broadcast (``aggregation="weighted"``), or
      ``phi(x)^T omega_n`` for the vector of one other agent drawn uniformly
      (``aggregation="sample"``, the original FTS). Without a broadcast it runs local TS.

    In both cases, after every finished trial it uploads to the open round: by default
    (``aggregation="pooled"``) the sufficient statistics of its values, oriented for
    maximization, on the shared random features and the single-scale feature blocks
    (:mod:`optuna_fedbo.core.pooling`), refreshed once its observations have grown by
    :data:`STATISTICS_REFRESH` (5%; so after every trial up to 21 observations) and otherwise
    named by digest; otherwise ``omega_{n,t}`` from its posterior over the shared features,
    fitted to its values normalized as ``FTSConfig.normalization`` says: the posterior mean
    with ``transfer="prior"``, a posterior draw (the papers' Thompson sample) with
    ``transfer="schedule"``. Errors there are logged, never raised into ``study.optimize``.

    The participant's trials stay in its own study; only the upload leaves it. Asynchronous by
    default (each trial uses the newest broadcast it can read); ``synchronous=True`` waits, before
    each BO iteration, for the broadcast of the round its last upload went to.

    Under differential privacy with an epsilon budget, once the server has stopped for the
    budget (:attr:`budget_exhausted`) the participant neither waits nor uploads any more, and
    every BO iteration is local Thompson sampling (the DP-FTS-DE paper's footnote 13): no
    further privacy is spent. A warning is logged once.

    Args:
        federation: The federation to take part in (FTS protocol).
        client_id: This participant's id; it joins the federation on construction.
        schedule: ``p_t`` schedule: a name of
            :data:`~optuna_fedbo.federation.fts.schedules.SCHEDULES` or a callable ``t -> p_t``;
            ``None`` uses the federation's default.
        local_sampler: Optional Optuna sampler for the local steps of
            ``transfer="schedule"`` (instead of local TS on the shared features). The uploads
            come from the RFF posterior in both cases.
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
        worker: This worker's name, to refuse a second process under it while it runs (see
            :class:`~optuna_fedbo.FedSampler`); ``None``: an anonymous worker.
    """

    def __init__(
        self,
        federation: Federation,
        client_id: str,
        *,
        schedule: str | Schedule | None = None,
        local_sampler: BaseSampler | None = None,
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
        if not isinstance(federation, Federation):
            raise ValueError(f"federation must be a Federation, got {federation!r}.")
        fts = federation.fts
        if n_candidates < 1 or n_refinements < 0:
            raise ValueError("n_candidates must be >= 1 and n_refinements >= 0.")
        self._schedule = resolve_schedule(fts.schedule if schedule is None else schedule)
        limit = ("sync_timeout", sync_timeout)
        self._waits = Waits(self, limit=limit, patience=patience, fallback="its local model")
        self._participate(federation, client_id, lease_ttl, worker)
        self._fts = fts
        self._local_sampler = local_sampler
        self._synchronous = synchronous
        self._poll_interval = poll_interval
        self._n_candidates = n_candidates
        self._n_refinements = n_refinements
        epoch = self._lease.epoch  # each worker its own stream: not one point twice
        self._rng = np.random.default_rng(seed if seed is None or epoch == 1 else [seed, epoch])
        self._independent_sampler = independent_sampler or RandomSampler(seed=seed)
        self._warn_independent_sampling = warn_independent_sampling
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
        # Public reference points to standardize broadcast functions on (same for everyone).
        self._reference = self._encoder.encoding.sample(
            256, np.random.default_rng([federation.seed, 2])
        )
        # Their features under each feature map the observations are kept on, once needed.
        self._reference_features: dict[int, np.ndarray] = {}
        # The last fits (warm starts) of the GP with the broadcast as prior mean and of the
        # participant's own GP.
        self._gp_fit: GPFitState | None = None
        self._own_gp_fit: GPFitState | None = None
        # (observation count, feature block, weight) of the broadcast's last weighing.
        self._transfer_weight: tuple[int, int, float] | None = None
        # ((study, observation count, trial number, normalization), posterior) of the last
        # vector upload that added a finished trial by hand.
        self._uploaded_posterior: tuple[tuple[Any, ...], LinearPosterior] | None = None
        # (study, observation count, packed statistics) last sent in full (pooled).
        self._sent_statistics: tuple[tuple[int, int], int, np.ndarray] | None = None
        # The two predictions of each running transfer trial (own, transfer, normalization,
        # values), scored into the trial when it finishes (the ranking is read from the study).
        self._predictions: dict[int, tuple[float, float, tuple[float, float], np.ndarray]] = {}
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
        self._last_upload_round: int | None = None
        self._own_digests: dict[int, str] = {}
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
                "with local Thompson sampling."
            )
        return record is not None

    @property
    def last_upload_round(self) -> int | None:
        """The round this participant's newest upload went to (``None`` before the first)."""
        return self._last_upload_round

    def reseed_rng(self) -> None:
        self._rng = np.random.default_rng()
        self._independent_sampler.reseed_rng()
        self._outside.reseed_rng()
        if self._local_sampler is not None:
            self._local_sampler.reseed_rng()

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
                    _logger.warning(_conflict_message(name, used[name], distribution, self))
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

    def _point(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """This trial's point in the federation's space (chosen once, then cached)."""
        with self._lock:
            cached = self._points.get(trial._trial_id)
        if cached is not None:
            return cached
        # One BLAS limit for the whole step (its updates, posteriors and GPs would each set
        # and restore it).
        with one_blas_thread():
            params = self._choose(study, trial)
        set_point(study, trial, self._encoder.encode([params])[0])
        with self._lock:
            self._points[trial._trial_id] = params
        return params

    def _choose(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """Initial design, then the broadcast as a prior (default) or Algorithm 2's coin."""
        fts = self._fts
        with self._lock:
            self._observations.update(study)
            n_observed = self._observations.count
        transfer = fts.transfer == "prior"
        if n_observed < fts.n_init or (transfer and n_observed == 0):
            # A participant joining a federation that already has broadcasts uses them at once
            # (also with ``n_init = 0``: the local GP needs at least one observation).
            broadcast = self._usable_broadcast() if transfer and n_observed == 0 else None
            function = None if broadcast is None else self._broadcast_function(broadcast)
            if function is not None and broadcast is not None:
                self._record(study, trial, "federated", broadcast.round)
                return self._encoder.decode(self._maximize(function))
            self._record(study, trial, "init")
            return self._encoder.decode(self._initial_point(trial.number))
        self._check_progress()
        if transfer:
            return self._transfer_step(study, trial)
        with self._lock:
            posterior = self._posterior(study)
        iteration = n_observed - fts.n_init + 1
        if self._rng.uniform() <= local_probability(self._schedule, iteration):
            return self._local_step(study, trial, posterior, "local")
        broadcast = self._usable_broadcast()
        point = None if broadcast is None else self._federated_point(broadcast)
        if point is None:
            return self._local_step(study, trial, posterior, "fallback")
        assert broadcast is not None
        self._record(study, trial, "federated", broadcast.round)
        return self._encoder.decode(point)

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
        """The posterior given the observations (lock held).

        A vector upload after a trial already computed it with that trial added by hand; it is
        reused when the observations are exactly those (the same study and count, that trial
        among them, the same normalization).
        """
        location = self._normalization()
        cached = self._uploaded_posterior
        if cached is not None:
            (key, count, number, cached_location), posterior = cached
            if (
                (key, count, cached_location)
                == (study_key(study), self._observations.count, location)
            ) and self._observations.includes(number):
                return posterior
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
        """``g(x)``, the function a broadcast describes (``None`` if it offers nothing usable)."""
        vectors = broadcast.vectors
        if broadcast.aggregation == "pooled":
            block = broadcast.feature_block
            if not 0 <= block < len(self._feature_maps) or len(vectors) != 1:
                _logger.warning(f"Ignoring broadcast {broadcast.round}: no such feature block.")
                return None
            features = self._feature_maps[block]
            if vectors.shape[1] != features.n_features:
                _logger.warning(
                    f"Ignoring broadcast {broadcast.round}: vectors of the wrong length."
                )
                return None
            return LinearAcquisition(features, vectors[0])
        if vectors.shape[1] != self._fts.n_features:
            _logger.warning(f"Ignoring broadcast {broadcast.round}: vectors of the wrong length.")
            return None
        if broadcast.aggregation == "sample":
            own = self._own_digests.get(broadcast.round)
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

    def _transfer_step(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """Expected improvement on the local GP whose prior mean is the weighted broadcast.

        The broadcast function ``g`` enters with weight ``w c``. ``c`` is its posterior mean
        under the local model on the shared features (prior ``c ~ N(1, 1)``): near one where
        ``g`` predicts the participant's own values, near zero where it does not. ``w`` is the
        probability that ``c g`` ranks the participant's observations at least as well as the
        participant's own GP does by leave-one-out prediction
        (:func:`~optuna_fedbo.core.transfer.ranking_weight`): once the own data know better,
        the broadcast fades out. A useless or misleading broadcast leaves the plain local GP,
        and so does a broadcast that ordered the latest new trials worse than the own GP did
        (:class:`~optuna_fedbo.core.transfer.OneStepRanking`).
        """
        from optuna_fedbo.core.gp_acquisition import LogExpectedImprovement
        from optuna_fedbo.core.gp_acquisition import maximize_on_gp

        broadcast = self._usable_broadcast()
        function = None if broadcast is None else self._broadcast_function(broadcast)
        # The feature map the broadcast function is on: one of those kept for the observations.
        block = 0 if function is None else self._feature_maps.index(function.feature_map)
        with self._lock:
            # Replaced, never changed in place, as observations come in: no copies needed.
            points = self._observations.points
            features = self._observations.features
            block_features = self._observations.features_under(block)
            reference_features = self._reference_features.get(block)
            location = self._normalization()
            values = (self._observations.targets - location[0]) / location[1]
            transfer_fit, own_fit = self._gp_fit, self._own_gp_fit
            # The broadcast is weighed again as often as hyperparameters are refitted, and
            # whenever it comes on another feature block.
            weighed = self._transfer_weight
            if weighed is not None:
                count, weighed_block, _ = weighed
                if weighed_block != block or not REFIT_FROM <= len(values) < REFIT_GROWTH * count:
                    weighed = None
            posterior = (
                self._posterior(study) if function is not None and weighed is None else None
            )
        own_is_better = one_step_ranking(study).own_is_better()
        n = len(values)
        own, own_fit = update_gp(points, values, own_fit, self._rng)
        gp, prior_function, transfer = own, None, None
        if function is None:
            self._record(study, trial, "fallback")
        else:
            assert broadcast is not None
            # g standardized over the search space (a fixed reference sample), so that its
            # weight is about one where it has the shape of the participant's normalized
            # values, however many participants it averages (which shrinks it) and however
            # noisy.
            if reference_features is None:
                reference_features = function.feature_map(self._reference)
                with self._lock:
                    self._reference_features[block] = reference_features
            reference = function.values(self._reference, features=reference_features)
            shift, spread = float(reference.mean()), max(float(reference.std()), 1e-12)
            at_points = (function.values(points, features=block_features) - shift) / spread
            if weighed is None:
                assert posterior is not None
                weight, _, _ = prior_weight(
                    posterior,
                    features.T @ at_points,
                    float(at_points @ at_points),
                    float(at_points @ values),
                )
                at_own = weight * (function.values(own.X) - shift) / spread
                weight *= ranking_weight(at_own, *own.leave_one_out(), own.y, self._rng)
                weighed = (n, block, weight)
            weight = weighed[2]
            transfer_prior = ScaledFunction(function, weight / spread, -weight * shift / spread)
            transfer_gp, transfer_fit = update_gp(
                points, values, transfer_fit, self._rng, prior_mean=weight * at_points
            )
            transfer = (transfer_gp, transfer_prior)
            if own_is_better:
                self._record(study, trial, "own", broadcast.round)
            else:
                gp, prior_function = transfer
                self._record(study, trial, "transfer", broadcast.round)
        with self._lock:
            self._gp_fit, self._own_gp_fit = transfer_fit, own_fit
            if weighed is not None:
                self._transfer_weight = weighed
        # LocalGPSampler's search (candidates near the best trials, lengthscale-scaled
        # refinement). Against the broadcast's own search (random candidates and the five
        # best trials, unscaled refinement) on benchmarks/fts_value.py, 10 seed functions
        # each, regret at 20 trials: lower on 7 of 15 problems, higher on 4 (SVC tuning:
        # 1.60x against 1.20x the best stock sampler's), equal on 4.
        # The other workers' running trials, as GPSampler takes them (the Kriging believer).
        running = running_points(study, trial, points.shape[1])
        at_running = None if prior_function is None else prior_function.values(running)
        gp = believe(gp, running, at_running)
        point = maximize_on_gp(
            LogExpectedImprovement(gp, float(values.max()), prior_function),
            gp,
            self._encoder.encoding,
            self._rng,
            points[np.argsort(-values, kind="stable")[:5]],
            n_observations=n,
            n_candidates=self._n_candidates,
            n_refinements=self._n_refinements,
        )
        if transfer is not None:
            # Both models' predictions of the chosen point, scored once it is observed.
            x = point[None, :]
            own_prediction = float(own.predict(x, return_std=False)[0][0])
            transfer_gp, transfer_prior = transfer
            transfer_prediction = float(
                transfer_gp.predict(x, transfer_prior.values(x), return_std=False)[0][0]
            )
            with self._lock:
                self._predictions[trial._trial_id] = (
                    own_prediction,
                    transfer_prediction,
                    location,
                    values,
                )
        return self._encoder.decode(point)

    def _local_step(
        self,
        study: Study,
        trial: FrozenTrial,
        posterior: LinearPosterior,
        mode: str,
    ) -> dict[str, Any]:
        self._record(study, trial, mode)
        if self._local_sampler is not None:
            local_space = self._local_sampler.infer_relative_search_space(study, trial)
            params = self._local_sampler.sample_relative(study, trial, local_space)
            return {k: v for k, v in params.items() if self._space.get(k) == local_space[k]}
        omega = posterior.sample(self._rng)
        best = self._observations.best_point
        point = self._maximize(
            LinearAcquisition(self._features, omega), None if best is None else best[None, :]
        )
        return self._encoder.decode(point)

    def _federated_point(self, broadcast: Broadcast) -> np.ndarray | None:
        """The maximizer of the broadcast's function, or ``None`` if it offers nothing usable."""
        function = self._broadcast_function(broadcast)
        if function is None:
            return None
        vectors = broadcast.vectors
        if broadcast.aggregation == "sample" or len(vectors) == 1:
            return self._maximize(function)
        encoding = self._encoder.encoding
        best_point, best_value = None, -math.inf
        n_regions = len(vectors)
        incumbent = self._observations.best_point
        incumbent_region = (
            None if incumbent is None else int(self._partition.index_of(incumbent[None, :])[0])
        )
        for region in range(n_regions):
            point, value = maximize(
                LinearAcquisition(self._features, vectors[region]),
                encoding,
                self._rng,
                box=self._partition.box(region),
                n_candidates=max(self._n_candidates // n_regions, 16),
                n_refinements=max(self._n_refinements // n_regions, 1)
                if self._n_refinements
                else 0,
                extra_candidates=incumbent[None, :] if incumbent_region == region else None,
            )
            if value > best_value:
                best_point, best_value = point, value
        return best_point

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
        with self._lock:
            mode = self._modes.get(trial._trial_id)
        if self._local_sampler is not None and mode in ("local", "fallback"):
            return self._local_sampler.sample_independent(
                study, trial, param_name, param_distribution
            )
        warn = self._warn_independent_sampling and param_name not in self._space
        warn = warn and self._first(f"outside:{param_name}")  # once per parameter
        reason = f"the parameter is not in the search space of federation {self.federation.name!r}"
        return sample_independently(
            self,
            self._independent_sampler,
            study,
            trial,
            param_name,
            param_distribution,
            warning_reason=reason if warn else None,
        )

    # ------------------------------------------------------------------ trial hooks
    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._start_trial(study, trial)
        self._independent_sampler.before_trial(study, trial)
        if self._local_sampler is not None:
            self._local_sampler.before_trial(study, trial)
        if not self._synchronous or self._last_upload_round is None:
            return
        try:
            with self._lock:
                self._observations.update(study)
                initializing = self._observations.count < self._fts.n_init
            if initializing or self.federation_finished or self.budget_exhausted:
                return
            self._wait_for_round(self._last_upload_round)
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
        self._trial_done(trial._trial_id)
        self._independent_sampler.after_trial(study, trial, state, values)
        if self._local_sampler is not None:
            self._local_sampler.after_trial(study, trial, state, values)
        with self._lock:
            self._modes.pop(trial._trial_id, None)
            self._points.pop(trial._trial_id, None)
            prediction = self._predictions.pop(trial._trial_id, None)
        value = _finished_value(study, state, values)
        if prediction is not None and value is not None:
            score_one_step(study, trial, prediction, value)  # read back by every worker
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

    def _upload(self, study: Study, trial: FrozenTrial, value: float | None) -> None:
        """Upload after a finished trial: the statistics of the stored trials and the finished
        one's ``value`` (pooled), or the vector of the posterior given them."""
        with self._lock:
            self._observations.update(study)
            blocks = self._observations.statistics
            extra = None
            if value is not None and self._encoder.contains(trial.params):
                extra = value
            n_observations = self._observations.count + (extra is not None)
            if n_observations == 0:
                _logger.debug(f"{self.client_id}: no observation yet, nothing to upload.")
                return
            if self._fts.aggregation == "pooled":
                # The statistics of the values themselves: the server pools them and
                # standardizes everyone's values together (one scale; each participant's own
                # normalization, from a few initial values, would differ between participants).
                omega = self._statistics_held(study, n_observations)
                if omega is None:
                    omega = pack_blocks(self._with_trial(blocks, trial, extra))
                    self._sent_statistics = (study_key(study), n_observations, omega)
            else:
                (block,) = self._with_trial(blocks[:1], trial, extra)
                location = self._normalization(extra)
                posterior = block.posterior(self._fts.noise_variance, standardize=location)
                if extra is not None:
                    key = (study_key(study), n_observations, trial.number, location)
                    self._uploaded_posterior = (key, posterior)
                if self._fts.transfer == "prior":
                    # The default without pooling shares the posterior mean, the participant's
                    # best estimate (the average of samples is noisier at equal privacy).
                    omega = posterior.mean
                else:
                    omega = posterior.sample(self._rng)  # the papers: a Thompson sample
        round_index = self.federation.upload(
            self.client_id,
            omega,
            n_observations=n_observations,
            iteration=n_observations - self._fts.n_init,
        )
        with self._lock:
            if self._fts.aggregation == "sample":  # to leave its own vector out of a draw
                self._own_digests[round_index] = vector_digest(omega)
                for old in sorted(self._own_digests)[:-_OWN_DIGESTS_KEPT]:
                    del self._own_digests[old]
            if self._last_upload_round is None or round_index > self._last_upload_round:
                self._last_upload_round = round_index
        if n_observations > self._fts.n_init:  # round 0 stays open during initial designs
            self._uploaded_to(round_index)
            if self._stalled(round_index):
                self._check_progress(stalled=True)

    def _with_trial(
        self, blocks: list[SufficientStatistics], trial: FrozenTrial, value: float | None
    ) -> list[SufficientStatistics]:
        """The statistics with the finishing trial's ``value`` added (lock held): after_trial
        runs before the trial is stored as complete, so it is added by hand, to copies."""
        if value is None:
            return blocks
        point = self._encoder.encode([trial.params])
        blocks = [_copy_statistics(block) for block in blocks]
        for block, features in zip(blocks, self._feature_maps):
            block.add(features(point), np.array([value]))
        return blocks

    def _statistics_held(self, study: Study, n_observations: int) -> np.ndarray | None:
        """The packed statistics last sent, if they are to be sent again (lock held): until the
        observations have grown by ``STATISTICS_REFRESH``; ``None``: send fresh ones."""
        if self._sent_statistics is None:
            return None
        key, count, packed = self._sent_statistics
        if key == study_key(study) and count <= n_observations < count * (1 + STATISTICS_REFRESH):
            return packed
        return None


def _conflict_message(
    name: str,
    used: BaseDistribution,
    defined: BaseDistribution,
    sampler: FedThompsonSampler,
) -> str:
    """Why a parameter suggested with another distribution than the federation's is sampled
    independently, and (accurately) whether its trials still count."""
    inner = type(used) is type(defined) and _within(used, defined)
    text = (
        f"Parameter {name!r} is suggested with {used}, but federation "
        f"{sampler.federation.name!r} defines it as {defined}, so the federated model does not "
        f"choose it: it is sampled by {type(sampler._independent_sampler).__name__}. "
    )
    if inner:
        return text + (
            "Its values lie inside the federation's range, so these trials are still modelled "
            "and shared. Suggest the federation's distribution to let the model choose it."
        )
    return text + (
        "Trials whose values fall outside the federation's range are not modelled nor shared; "
        "suggest the federation's distribution."
    )


def _within(used: BaseDistribution, defined: BaseDistribution) -> bool:
    """Whether every value of ``used`` is a value of ``defined``."""
    if isinstance(used, CategoricalDistribution):
        return set(used.choices) <= set(defined.choices)  # type: ignore[attr-defined]
    low, high = getattr(used, "low", None), getattr(used, "high", None)
    if low is None or high is None:
        return False
    return defined._contains(defined.to_internal_repr(low)) and defined._contains(
        defined.to_internal_repr(high)
    )


def _copy_statistics(statistics: SufficientStatistics) -> SufficientStatistics:
    """An independent copy of running sums (cheaper than ``copy.deepcopy``)."""
    duplicate = copy.copy(statistics)
    duplicate.gram = statistics.gram.copy()
    duplicate.feature_sum = statistics.feature_sum.copy()
    duplicate.feature_target = statistics.feature_target.copy()
    return duplicate


def _finished_value(
    study: Study, state: TrialState, values: Sequence[float] | None
) -> float | None:
    """A finished trial's value oriented for maximization (``None`` unless complete and finite)."""
    if state != TrialState.COMPLETE or values is None or len(values) != 1:
        return None
    if not math.isfinite(values[0]):
        return None
    return (1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0) * float(values[0])
