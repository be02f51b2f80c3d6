"""The FTS family's default participant: a local GP with the broadcast as its prior mean.

With ``FTSConfig(transfer="prior")`` (the default) a participant does not run Thompson sampling:
each BO iteration maximizes the log expected improvement of its own exact GP, whose prior mean is
the newest broadcast function weighted by how well it predicts the participant's own values
(transfer learning from the federation, :mod:`optuna_fedbo.core.transfer`).
"""

from __future__ import annotations

from typing import Any
import warnings

import numpy as np
from optuna.study import Study
from optuna.trial import FrozenTrial

from optuna_fedbo.core.acquisition import ScaledFunction
from optuna_fedbo.core.believer import believe
from optuna_fedbo.core.gp_acquisition import LogExpectedImprovement
from optuna_fedbo.core.gp_acquisition import maximize_on_gp
from optuna_fedbo.core.gp_fit import GPFitState
from optuna_fedbo.core.gp_fit import REFIT_GROWTH
from optuna_fedbo.core.gp_fit import update_gp
from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.transfer import prior_weight
from optuna_fedbo.core.transfer import ranking_weight
from optuna_fedbo.core.warping import TailWarp
from optuna_fedbo.core.warping import WarpedFunction
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fts.messages import Broadcast
from optuna_fedbo.samplers._fts_participant import FTSParticipant
from optuna_fedbo.samplers._running_points import running_points
from optuna_fedbo.samplers._site_state import one_step_ranking
from optuna_fedbo.samplers._site_state import score_one_step

#: Random candidates of this participant's acquisition search by default (FTS participants score
#: 1024): with 64 more near the best trials and four L-BFGS-B starts, its LogEI maxima were as
#: high as with 1024 (4-D, 15 to 60 trials, 15 searches alone and 60 with a four-site broadcast
#: as prior mean, two seeds each: within 0.006 and 0.17 in log EI of a search with 8,192
#: candidates and 16 starts on average, against 0.045 and 0.19 with 1024), at 0.7 ms less per
#: search alone and 6 ms less with the broadcast, whose random features are evaluated at every
#: candidate. Paired by seed function (benchmarks/fts_value_paired.py), regret moved within a
#: reseed's spread.
SEARCH_CANDIDATES = 512
#: L-BFGS-B iterations of this participant's acquisition refinement (with the broadcast as prior
#: mean, or beyond :data:`ZOOM_MAX_COLUMNS` encoded columns; LocalGPSampler's are
#: :data:`~optuna_fedbo.core.gp_acquisition.ACQUISITION_MAX_ITERATIONS`, 20). Against a search of
#: 8,192 candidates, 16 starts and 100 iterations (4-D, 15 to 101 observations, two runs each:
#: 72 searches with a four-site broadcast as prior mean, 18 alone), 10 iterations lost 0.11 /
#: 0.20 in log EI on average with the broadcast (20: 0.11 / 0.18) and 0.04 / -0.18 alone (20:
#: 0.01 / -0.18), at 13 instead of 16 evaluations: a fifth of the search's time.
SEARCH_MAX_ITERATIONS = 10
#: Up to this many encoded columns the participant's own GP alone (no broadcast as prior mean)
#: is searched by zoom rounds around its best candidates, not L-BFGS-B (``local_search="zoom"`` of
#: :func:`~optuna_fedbo.core.gp_acquisition.maximize_on_gp`); with the broadcast from
#: :data:`ZOOM_WITH_BROADCAST_FROM` observations on. Against a search of 8,192
#: candidates, 16 starts and 100 iterations (a federation of four sites, 10 to 50
#: observations, 40 to 200 searches each), the zoom from the four best candidates lost 0.04 /
#: 0.11 / 0.04 in log EI on average at 10-20 / 21-40 / 41-70 observations in 4-D, where
#: L-BFGS-B (10 iterations) lost 0.04 / 0.12 / 0.07, and 0.03 / 0.04 against 0.03 / 0.06 in
#: 2-D, at about half of L-BFGS-B's time. Without gradients it falls behind with more
#: columns: 0.08 / 0.20 against 0.03 / 0.09 in 6-D, 0.07 / 0.59 against 0.01 / 0.20 in 8-D.
#: Paired regret at 10 / 20 / 30 trials (benchmarks/fts_value_tuning.py, 72 site-runs a family):
#: a one-site federation moved by -0.013 to +0.007, +0.001 on average over rotated, shifted and
#: independent 2-D GP draws.
ZOOM_MAX_COLUMNS = 4
#: From this many observations on, the zoom (:data:`ZOOM_MAX_COLUMNS`) also searches the GP
#: whose prior mean is the broadcast, stepping in the shorter of the GP's lengthscales and the
#: broadcast features' shortest one (the broadcast's wiggles); before, L-BFGS-B does. Such
#: searches of a four-site federation (15 to 80 observations, 101 in 4-D and 109 in 2-D) lost
#: 0.36 / -0.31 in log EI on average against a search of 8,192 candidates, 16 starts and 100
#: iterations, where L-BFGS-B lost 0.49 / -0.01 and the zoom in the GP's lengthscales 0.49 /
#: 0.82, at about two thirds of L-BFGS-B's time (a four-site participant's trial at 41-60
#: trials, 4-D, about a seventh cheaper). From the first transfer trial on, either zoom cost the
#: federation regret at 20 trials on ``rotated`` (paired, new minus L-BFGS-B: +0.018 +- 0.007
#: on 0.080 over 144 site-runs; in the GP's lengthscales +0.010 +- 0.007 over 72, and +0.001
#: to +0.006 on the other three). From 20 on, paired at 30 trials (72 site-runs a family):
#: +0.0029 +- 0.0022 on ``shifted`` (12 site-runs lower, 37 higher, on 0.0156), +0.0007 +-
#: 0.0029 on ``rotated``, -0.0002 +- 0.0003 on ``gp2d-independent``, +0.0017 +- 0.0013 on
#: ``gp2d-rough``; at 40 / 50 / 60 trials (36 site-runs) -0.0033 +- 0.0020 / -0.0000 / -0.0000
#: on ``shifted``, -0.0003 / -0.0001 / -0.0008 +- 0.0037 on ``rotated``.
ZOOM_WITH_BROADCAST_FROM = 20
#: From this many observations on, the participant's GP is refitted (and the broadcast weighed
#: again) only once the observations have grown by 10%
#: (:func:`~optuna_fedbo.core.gp_fit.update_gp`; LocalGPSampler's from 20 on,
#: :data:`~optuna_fedbo.core.gp_fit.REFIT_FROM`). Refitted at every trial up to 20
#: observations, the fits were about 40% of a participant's trial at 11-20 trials (4-D).
REFIT_FROM = 10


class FedTransferSampler(FTSParticipant):
    """The default participant of an FTS federation: transfer from the broadcast to a local GP.

    The participant of a federation with ``FTSConfig(transfer="prior")`` (the default):

    * the first ``n_init`` trials follow the participant's own space-filling design (a Latin
      hypercube over the whole space, or over its sub-region with distributed exploration);
      a participant that joins a federation which already has a broadcast spends its first
      trial on the broadcast function's maximizer;
    * afterwards every trial maximizes the expected improvement of the participant's own exact
      GP (:func:`~optuna_fedbo.core.gp_fit.fit_gp`) whose prior mean is the newest broadcast
      function ``g(x) = phi(x)^T omega`` weighted by ``c``, the posterior mean of its weight
      given the participant's own values (:func:`~optuna_fedbo.core.transfer.prior_weight`): a
      broadcast that predicts them guides the search, one that does not is weighted to about
      zero. That GP has the hyperparameters fitted to the participant's values without the
      broadcast, fitted at every trial up to 10 observations and from then on once they have
      grown by 10% (:func:`~optuna_fedbo.core.gp_fit.update_gp`; in between conditioned on the
      new data). The weight is computed again as often, or when a broadcast comes on another
      feature block; in between each new broadcast enters with the last weight. Without a
      broadcast the GP has no prior mean. The GP's constant mean is the worst value seen (of
      the values less the prior mean): far from the trials it expects the worst, not an
      average value (:data:`~optuna_fedbo.core.gp.CONSTANT_MEANS`), so that expected
      improvement refines the region of the best trials instead of the box's corners.
      When, over the latest ten trials, the participant's GP alone ordered each new value
      against the earlier ones better than the GP with the broadcast did (both predicting it
      before it was observed: :class:`~optuna_fedbo.core.transfer.OneStepRanking`), the trial
      uses the GP alone (mode ``"own"``).

    Its non-pooled upload is its posterior mean over the shared features (the participant's
    best estimate: the average of samples is noisier at equal privacy). Uploads, synchronous
    mode and the privacy budget are those of every FTS participant
    (:class:`~optuna_fedbo.samplers._fts_participant.FTSParticipant`), whose arguments it takes.

    Args:
        federation: The federation to take part in (FTS protocol, ``transfer="prior"``).
        client_id: This participant's id; it joins the federation on construction.
        schedule: Deprecated, without effect (it applies to ``transfer="schedule"``, the
            papers' :class:`~optuna_fedbo.FedThompsonSampler`); a ``FutureWarning`` if given.
        local_sampler: Deprecated, without effect, as ``schedule``.
        **kwargs: The arguments of every FTS participant (``synchronous``, ``sync_timeout``,
            ``patience``, ``poll_interval``, ``n_candidates``, ``n_refinements``,
            ``independent_sampler``, ``warn_independent_sampling``, ``seed``, ``lease_ttl``:
            see :class:`~optuna_fedbo.samplers._fts_participant.FTSParticipant`);
            ``n_candidates`` is :data:`SEARCH_CANDIDATES` (512) unless given.
    """

    transfer = "prior"
    _local_model = "its local GP"

    def __init__(
        self,
        federation: Federation,
        client_id: str,
        *,
        schedule: object = None,
        local_sampler: object = None,
        **kwargs: Any,
    ) -> None:
        ignored = [n for n, v in (("schedule", schedule), ("local_sampler", local_sampler)) if v]
        if ignored:
            warnings.warn(
                f"{', '.join(ignored)} has no effect on FedTransferSampler (it applies to "
                "FTSConfig(transfer='schedule'), the papers' FedThompsonSampler): drop it.",
                FutureWarning,
                stacklevel=2,
            )
        kwargs.setdefault("n_candidates", SEARCH_CANDIDATES)
        super().__init__(federation, client_id, **kwargs)
        # Public reference points to standardize broadcast functions on (same for everyone).
        self._reference = self._encoder.encoding.sample(
            256, np.random.default_rng([federation.seed, 2])
        )
        # Their features under each feature map the observations are kept on, once needed.
        self._reference_features: dict[int, np.ndarray] = {}
        # The last fit (warm start) of the participant's own GP, whose hyperparameters the GP
        # with the broadcast as prior mean shares.
        self._own_gp_fit: GPFitState | None = None
        # (observation count, feature block, weight) of the broadcast's last weighing.
        self._transfer_weight: tuple[int, int, float] | None = None
        # Whether a broadcast was left out for holding only the participant's own data.
        self._left_out_own = False
        # One-step-ahead scores of the own GP against the GP with the broadcast, and the two
        # predictions of each running transfer trial (own, transfer, normalization, values).
        self._predictions: dict[int, tuple[float, float, tuple[float, float], np.ndarray]] = {}

    def _initial(self, study: Study, trial: FrozenTrial, n_observed: int) -> dict[str, Any] | None:
        if n_observed == 0:
            # A participant joining a federation that already has broadcasts uses them at once
            # (also with ``n_init = 0``: the local GP needs at least one observation).
            broadcast = self._usable_broadcast()
            function = None if broadcast is None else self._broadcast_function(broadcast)
            if function is not None and broadcast is not None:
                self._record(study, trial, "federated", broadcast.round)
                return self._encoder.decode(self._maximize(function))
            self._record(study, trial, "init")
            return self._encoder.decode(self._initial_point(trial.number))
        return super()._initial(study, trial, n_observed)

    def _vector(self, posterior: LinearPosterior) -> np.ndarray:
        return posterior.mean

    def _only_own(self, broadcast: Broadcast) -> bool:
        """Whether a broadcast holds nothing but this participant's own data (a round whose one
        contributor is this participant). As a prior mean it would count the own trials twice:
        fitted to them, it ranks them well and keeps its weight. In a one-site federation
        (``benchmarks/fts_value_tuning.py``, independent 2-D GP draws, 36 site-runs) regret at
        20 / 30 trials was 2.3x / 5.8x GPSampler's with it, 0.67x / 0.18x without.

        In a one-site federation every broadcast is the site's own, also for a worker of the
        site that did not upload to that round itself."""
        if self._statistics_serve_nobody():
            return True
        with self._lock:
            return self._uploads.only_own(broadcast.round, broadcast.n_contributors)

    def _only_own_broadcasts(self) -> bool:
        return self._left_out_own

    def _statistics_serve_nobody(self) -> bool:
        """In a one-site federation (``n_clients`` is fixed at creation and enrollment stops
        there: no site can join later) every broadcast is left out (:meth:`_only_own`), so
        fresh statistics would serve nobody: after its initial design the participant names
        the design's statistics again for good, and the server, holding them, opens a short
        upload that names them (signature, receipt and round checked as ever) and publishes its
        last pooled vector again. Before, every second or third round at 11-30 trials brought
        fresh statistics: most of a 4-D server's 5-6 ms round (decoding, hashing, opening and
        checking 41,500 numbers, then a posterior), and their packing and sealing in the
        participant's trial. A later study of the site that
        starts on the broadcast (:meth:`_initial`, no observation yet) starts on the design's
        statistics of the study that sent them."""
        return self.federation.n_clients == 1

    def _bo_step(self, study: Study, trial: FrozenTrial, n_observed: int) -> dict[str, Any]:
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
        broadcast = self._usable_broadcast()
        if broadcast is not None and self._only_own(broadcast):
            broadcast, self._left_out_own = None, True
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
            own_fit = self._own_gp_fit
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
        own_is_better = one_step_ranking(study).own_is_better()  # any worker's trials
        n = len(values)
        # The GPs model the values with their lower tail compressed (core/warping.py).
        warp = TailWarp(values)
        warped = warp(values)
        own, own_fit = update_gp(
            points, warped, own_fit, self._rng, constant_mean="worst", refit_from=REFIT_FROM
        )
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
            transfer_prior = WarpedFunction(
                ScaledFunction(function, weight / spread, -weight * shift / spread), warp
            )
            # The own GP's hyperparameters, conditioned on the same points with the broadcast
            # as prior mean: one fit per trial instead of two, and one kernel matrix.
            transfer_gp = own.with_prior_mean(transfer_prior.values(own.X))
            transfer = (transfer_gp, transfer_prior)
            if own_is_better:
                self._record(study, trial, "own", broadcast.round)
            else:
                gp, prior_function = transfer
                self._record(study, trial, "transfer", broadcast.round)
        with self._lock:
            self._own_gp_fit = own_fit
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
        gp = believe(gp, running, at_running)  # the incumbent counts their believed values
        zoom_scales = None
        if prior_function is not None:
            # The broadcast varies on its features' lengthscales: the zoom steps in the
            # shorter of those and the GP's (:data:`ZOOM_WITH_BROADCAST_FROM`).
            assert function is not None
            zoom_scales = np.minimum(
                gp.params.lengthscales, function.feature_map.lengthscales.min()
            )
        point = maximize_on_gp(
            LogExpectedImprovement(gp, float(max(warped.max(), gp.y.max())), prior_function),
            gp,
            self._encoder.encoding,
            self._rng,
            points[np.argsort(-values, kind="stable")[:5]],
            n_observations=n,
            n_candidates=self._n_candidates,
            n_refinements=self._n_refinements,
            max_iterations=SEARCH_MAX_ITERATIONS,
            local_search=(
                "zoom"
                if points.shape[1] <= ZOOM_MAX_COLUMNS
                and (prior_function is None or n >= ZOOM_WITH_BROADCAST_FROM)
                else "lbfgsb"
            ),
            zoom_scales=zoom_scales,
        )
        if transfer is not None:
            # Both models' predictions of the chosen point, scored once it is observed.
            x = point[None, :]
            # In the values' units (the one-step scores compare them with the values).
            own_prediction = float(warp.inverse(own.predict(x, return_std=False)[0])[0])
            transfer_gp, transfer_prior = transfer
            transfer_prediction = float(
                warp.inverse(
                    transfer_gp.predict(x, transfer_prior.values(x), return_std=False)[0]
                )[0]
            )
            with self._lock:
                self._predictions[trial._trial_id] = (
                    own_prediction,
                    transfer_prediction,
                    location,
                    values,
                )
        return self._encoder.decode(point)

    def _observed(self, study: Study, trial: FrozenTrial, value: float | None) -> None:
        """Score both models' predictions of a transfer trial into it once it is observed
        (every worker of the site reads the ranking from the study)."""
        with self._lock:
            prediction = self._predictions.pop(trial._trial_id, None)
        if prediction is not None and value is not None:
            score_one_step(study, trial, prediction, value)


__all__ = ["FedTransferSampler"]
