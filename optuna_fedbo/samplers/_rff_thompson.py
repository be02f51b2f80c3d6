"""Local Thompson sampling on random Fourier features: the baseline of every federation."""

from __future__ import annotations

import threading
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from optuna_fedbo.core.acquisition import LinearAcquisition
from optuna_fedbo.core.acquisition import maximize
from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.threads import one_blas_thread
from optuna_fedbo.samplers._common import check_single_objective
from optuna_fedbo.samplers._common import LocalModelSampler
from optuna_fedbo.samplers._observations import TrialObservations
from optuna_fedbo.search_space import SearchSpaceEncoder

_logger = optuna.logging.get_logger(__name__)

#: Fixed SE lengthscale (unit-cube coordinates) where features must be shared and cannot be
#: selected per participant, as in a federation. The papers' 0.01 leaves a shared sample almost
#: no signal; ``benchmarks/rff_thompson.py`` compares 0.01 to 0.5.
DEFAULT_LENGTHSCALE = 0.2
#: Fixed noise variance of standardized values, beside :data:`DEFAULT_LENGTHSCALE`.
DEFAULT_NOISE_VARIANCE = 1e-2
#: Candidate lengthscales of ``lengthscale="auto"`` (marginal-likelihood selection, the
#: sampler's default: it ranks best among fixed and selected lengthscales in the benchmark).
AUTO_LENGTHSCALES = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
#: Candidate noise variances of ``noise_variance="auto"``.
AUTO_NOISE_VARIANCES = (1e-4, 1e-3, 1e-2, 1e-1)


class RFFThompsonSampler(LocalModelSampler):
    """Thompson sampling with a Bayesian linear model on random Fourier features.

    Each trial draws ``omega`` from the posterior ``N(nu_t, lambda Sigma_t^{-1})`` of a Bayesian
    linear regression on ``M`` random Fourier features of an SE kernel (the RFF-GP of the FTS
    paper, Section 2) fitted to the study's completed trials, and suggests the maximizer of the
    sampled function ``phi(x)^T omega`` over the search space, encoded into the unit cube.
    Values are oriented for maximization and standardized, so the study's direction and scale
    do not matter. Failed, pruned and non-finite trials are ignored. The cost per trial is
    ``O(M^2)`` per new observation plus ``O(M^3)`` for one Cholesky factorization: it does not
    grow with the number of trials.

    Args:
        n_features: Number of random features ``M``.
        lengthscale: SE lengthscale in unit-cube coordinates, or ``"auto"`` to choose it from
            :data:`AUTO_LENGTHSCALES` by marginal likelihood on the study's own trials.
        noise_variance: Noise variance ``lambda`` of the standardized values, or ``"auto"`` to
            choose it from :data:`AUTO_NOISE_VARIANCES` by marginal likelihood.
        n_startup_trials: Number of trials sampled by ``independent_sampler`` first.
        n_candidates: Random candidates scored per suggestion before L-BFGS-B refinement.
        n_refinements: Number of best candidates refined with L-BFGS-B.
        independent_sampler: Sampler for the startup trials and for parameters outside the
            relative search space. Defaults to :class:`~optuna.samplers.RandomSampler`.
        warn_independent_sampling: Warn when a parameter is sampled independently after the
            startup trials.
        feature_seed: Seed of the random features; defaults to ``seed``.
        seed: Seed of the sampler's own randomness.
    """

    def __init__(
        self,
        *,
        n_features: int = 100,
        lengthscale: float | str = "auto",
        noise_variance: float | str = "auto",
        n_startup_trials: int = 10,
        n_candidates: int = 1024,
        n_refinements: int = 4,
        independent_sampler: BaseSampler | None = None,
        warn_independent_sampling: bool = True,
        feature_seed: int | None = None,
        seed: int | None = None,
    ) -> None:
        if n_features < 1:
            raise ValueError(f"n_features must be positive, got {n_features}.")
        if lengthscale != "auto" and not (
            isinstance(lengthscale, (int, float)) and lengthscale > 0
        ):
            raise ValueError(
                f"lengthscale must be a positive number or 'auto', got {lengthscale!r}."
            )
        if noise_variance != "auto" and not (
            isinstance(noise_variance, (int, float)) and noise_variance > 0
        ):
            raise ValueError(
                f"noise_variance must be a positive number or 'auto', got {noise_variance!r}."
            )
        super().__init__(
            n_startup_trials=n_startup_trials,
            independent_sampler=independent_sampler,
            warn_independent_sampling=warn_independent_sampling,
            seed=seed,
        )
        self._n_features = n_features
        self._lengthscales = AUTO_LENGTHSCALES if lengthscale == "auto" else (float(lengthscale),)
        self._noise_variances = (
            AUTO_NOISE_VARIANCES if noise_variance == "auto" else (float(noise_variance),)
        )
        self._n_candidates = n_candidates
        self._n_refinements = n_refinements
        self._feature_seed = (
            feature_seed
            if feature_seed is not None
            else (seed if seed is not None else int(self._rng.integers(2**31)))
        )
        self._observations: TrialObservations | None = None
        # (observation count, feature-map index, noise variance) of the last model selection.
        self._selection: tuple[int, int, float] | None = None
        # Guards the model (observations, selection) when trials run in threads (n_jobs > 1): a
        # posterior must never be built from statistics that another thread is updating.
        self._model_lock = threading.Lock()

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        check_single_objective(study, self)
        if search_space == {}:
            return {}
        with one_blas_thread(), self._model_lock:
            observations = self._observations_for(search_space)
            observations.update(study)
            if observations.count < self._n_startup_trials:
                return {}
            features, posterior = self._select_model(observations)
            omega = posterior.sample(self._rng)
            best = observations.best_point
        extra = None if best is None else best[None, :]
        point, _ = maximize(
            LinearAcquisition(features, omega),
            observations.encoder.encoding,
            self._rng,
            n_candidates=self._n_candidates,
            n_refinements=self._n_refinements,
            extra_candidates=extra,
        )
        return observations.encoder.decode(point)

    def _observations_for(self, search_space: dict[str, BaseDistribution]) -> TrialObservations:
        if self._observations is None or self._observations.encoder.search_space != search_space:
            encoder = SearchSpaceEncoder(search_space)
            base = RandomFourierFeatures(
                encoder.n_columns, self._n_features, self._lengthscales[0], seed=self._feature_seed
            )
            self._selection = None
            self._observations = TrialObservations(
                encoder, [base.with_lengthscale(ls) for ls in self._lengthscales]
            )
        return self._observations

    def _select_model(
        self, observations: TrialObservations
    ) -> tuple[RandomFourierFeatures, LinearPosterior]:
        """The (features, posterior) pair of highest marginal likelihood among the candidates.

        The choice is made anew whenever the number of observations has grown by 10% since the
        last choice (at every trial early on), so that its cost fades from long studies.
        """
        count = observations.count
        selection = self._selection
        if selection is None or not selection[0] <= count < max(
            selection[0] + 1, 1.1 * selection[0]
        ):
            candidates = [
                (index, noise_variance)
                for index in range(len(observations.feature_maps))
                for noise_variance in self._noise_variances
            ]
            if len(candidates) > 1:
                best = max(
                    candidates,
                    key=lambda c: (
                        observations.statistics[c[0]].posterior(c[1]).log_marginal_likelihood()
                    ),
                )
            else:
                best = candidates[0]
            selection = self._selection = (count, *best)
        _, index, noise_variance = selection
        return observations.feature_maps[index], observations.statistics[index].posterior(
            noise_variance
        )
