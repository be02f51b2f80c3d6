"""Federated Thompson sampling: the papers' participant (FTS, FTS-DE; DP-FTS-DE Algorithm 2)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from optuna_fedbo.core.acquisition import LinearAcquisition
from optuna_fedbo.core.acquisition import maximize
from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fts.messages import Broadcast
from optuna_fedbo.federation.fts.schedules import local_probability
from optuna_fedbo.federation.fts.schedules import resolve_schedule
from optuna_fedbo.federation.fts.schedules import Schedule
from optuna_fedbo.samplers._fts_participant import FTSParticipant


class FedThompsonSampler(FTSParticipant):
    """The papers' participant of federated Thompson sampling (FTS, FTS-DE, DP-FTS-DE).

    The participant of a federation with ``FTSConfig(transfer="schedule")`` (the papers'
    settings: :data:`~optuna_fedbo.federation.fts.presets.PAPER_ALGORITHM`). It follows
    Algorithm 2 of DP-FTS-DE:

    * the first ``n_init`` trials are drawn from the participant's assigned sub-region
      (distributed exploration; the whole domain when ``P = 1``);
    * afterwards, at BO iteration ``t`` (``t = 1`` right after the initial design), with
      probability ``p_t`` the participant runs local Thompson sampling on its own posterior
      (or asks ``local_sampler``); otherwise it maximizes ``phi(x)^T omega^(i[x])`` over the
      sub-regions with the vectors of the newest broadcast (``aggregation="weighted"``), or
      ``phi(x)^T omega_n`` for the vector of one other agent drawn uniformly
      (``aggregation="sample"``, the original FTS). Without a broadcast it runs local TS.

    Its non-pooled upload is a posterior draw ``omega_{n,t}`` (the papers' Thompson sample).
    Uploads, synchronous mode and the privacy budget are those of every FTS participant
    (:class:`~optuna_fedbo.samplers._fts_participant.FTSParticipant`).

    ``FedThompsonSampler(federation, ...)`` on a federation with ``transfer="prior"`` (the
    default) builds that federation's participant, a :class:`~optuna_fedbo.FedTransferSampler`,
    with a ``FutureWarning`` (it built either until optuna-fedbo 0.1); use
    :class:`~optuna_fedbo.FedSampler`, which picks the participant from the federation.

    Args:
        federation: The federation to take part in (FTS protocol, ``transfer="schedule"``).
        client_id: This participant's id; it joins the federation on construction.
        schedule: ``p_t`` schedule: a name of
            :data:`~optuna_fedbo.federation.fts.schedules.SCHEDULES` or a callable ``t -> p_t``;
            ``None`` uses the federation's default.
        local_sampler: Optional Optuna sampler for the local steps (instead of local TS on the
            shared features). The uploads come from the RFF posterior in both cases.
        **kwargs: The arguments of every FTS participant (``synchronous``, ``sync_timeout``,
            ``patience``, ``poll_interval``, ``n_candidates``, ``n_refinements``,
            ``independent_sampler``, ``warn_independent_sampling``, ``seed``, ``lease_ttl``:
            see :class:`~optuna_fedbo.samplers._fts_participant.FTSParticipant`).
    """

    transfer = "schedule"
    _local_model = "local Thompson sampling"

    def __init__(
        self,
        federation: Federation,
        client_id: str,
        *,
        schedule: str | Schedule | None = None,
        local_sampler: BaseSampler | None = None,
        **kwargs: Any,
    ) -> None:
        self._schedule = resolve_schedule(
            federation.fts.schedule if schedule is None else schedule
        )
        self._local_sampler = local_sampler
        super().__init__(federation, client_id, **kwargs)

    def _companions(self) -> list[BaseSampler]:
        local = [] if self._local_sampler is None else [self._local_sampler]
        return super()._companions() + local

    def _bo_step(self, study: Study, trial: FrozenTrial, n_observed: int) -> dict[str, Any]:
        """Algorithm 2's coin: local TS with probability ``p_t``, else the broadcast."""
        with self._lock:
            posterior = self._posterior(study)
        iteration = n_observed - self._fts.n_init + 1
        if self._rng.uniform() <= local_probability(self._schedule, iteration):
            return self._local_step(study, trial, posterior, "local")
        broadcast = self._usable_broadcast()
        point = None if broadcast is None else self._federated_point(broadcast)
        if point is None:
            return self._local_step(study, trial, posterior, "fallback")
        assert broadcast is not None
        self._record(study, trial, "federated", broadcast.round)
        return self._encoder.decode(point)

    def _vector(self, posterior: LinearPosterior) -> np.ndarray:
        return posterior.sample(self._rng)  # the papers: a Thompson sample

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

    def _sample_elsewhere(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        with self._lock:
            mode = self._modes.get(trial._trial_id)
        if self._local_sampler is not None and mode in ("local", "fallback"):
            return self._local_sampler.sample_independent(
                study, trial, param_name, param_distribution
            )
        return super()._sample_elsewhere(study, trial, param_name, param_distribution)


__all__ = ["FedThompsonSampler"]
