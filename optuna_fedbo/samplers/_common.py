"""What every optuna-fedbo sampler does the same way: single-objective checks, fallbacks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.samplers import RandomSampler
from optuna.samplers._base import _INDEPENDENT_SAMPLING_WARNING_TEMPLATE
from optuna.search_space import IntersectionSearchSpace
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

_logger = optuna.logging.get_logger(__name__)


def study_key(study: Study) -> tuple[int, int]:
    """What identifies a study while the process runs: its storage object and study id."""
    return id(study._storage), study._study_id


def check_single_objective(study: Study, sampler: BaseSampler) -> None:
    """Raise the ``ValueError`` Optuna's conformance tests expect for a multi-objective study."""
    if study._is_multi_objective():
        raise ValueError(f"{type(sampler).__name__} supports single-objective studies only.")


def outside_relative_space_reason(study: Study, min_completed: int) -> str | None:
    """Why a parameter is sampled independently, once the model is in use; else ``None``.

    Before ``min_completed`` trials have completed every parameter is sampled independently
    by design, which deserves no warning.
    """
    completed = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True)
    if len(completed) < min_completed:
        return None
    return (
        "the parameter is not in the relative search space (a dynamic search space, "
        "or the first trial)"
    )


class FallbackSampler(BaseSampler):
    """The independent-sampler fallback every optuna-fedbo sampler shares.

    What the sampler does not choose itself goes to ``independent_sampler`` (a
    :class:`~optuna.samplers.RandomSampler` by default) with Optuna's usual warning; the
    independent sampler (and any other sampler :meth:`_companions` names) sees every trial's
    ``before_trial`` and ``after_trial``, and :meth:`reseed_rng` reseeds them with the sampler's
    own randomness (``self._rng``). Subclasses call ``super().__init__`` and extend the hooks
    with ``super()``.

    Args:
        independent_sampler: Defaults to :class:`~optuna.samplers.RandomSampler`.
        warn_independent_sampling: Whether the sampler warns when it falls back (subclasses
            decide when; see :meth:`_sample_independently`).
        seed: Seed of the sampler's own randomness and of the default independent sampler.
    """

    def __init__(
        self,
        *,
        independent_sampler: BaseSampler | None,
        warn_independent_sampling: bool,
        seed: int | None,
    ) -> None:
        self._rng = np.random.default_rng(seed)
        self._independent_sampler = independent_sampler or RandomSampler(seed=seed)
        self._warn_independent_sampling = warn_independent_sampling

    def _companions(self) -> list[BaseSampler]:
        """The samplers that see this one's trial hooks and reseeding."""
        return [self._independent_sampler]

    def reseed_rng(self) -> None:
        self._rng = np.random.default_rng()
        for sampler in self._companions():
            sampler.reseed_rng()

    def _sample_independently(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
        *,
        warning_reason: str | None,
    ) -> Any:
        """Sample one parameter with the independent sampler, with Optuna's usual warning.

        Args:
            study: The study.
            trial: The trial.
            param_name: The parameter's name.
            param_distribution: The parameter's distribution.
            warning_reason: Why the fallback happened, for the warning; ``None`` for no warning.
        """
        if warning_reason is not None:
            _logger.warning(
                _INDEPENDENT_SAMPLING_WARNING_TEMPLATE.format(
                    param_name=param_name,
                    trial_number=trial.number,
                    independent_sampler_name=type(self._independent_sampler).__name__,
                    sampler_name=type(self).__name__,
                    fallback_reason=warning_reason,
                )
            )
        return self._independent_sampler.sample_independent(
            study, trial, param_name, param_distribution
        )

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        for sampler in self._companions():
            sampler.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        for sampler in self._companions():
            sampler.after_trial(study, trial, state, values)


class LocalModelSampler(FallbackSampler):
    """What a sampler with a model of the study's own trials shares with every other one.

    The model covers the intersection search space (minus single-valued parameters) once
    ``n_startup_trials`` trials have completed; everything else goes to ``independent_sampler``
    with Optuna's usual warning. Subclasses implement ``sample_relative``.

    Args:
        n_startup_trials: Number of trials sampled by ``independent_sampler`` first.
        independent_sampler: Defaults to :class:`~optuna.samplers.RandomSampler`.
        warn_independent_sampling: Warn when a parameter is sampled independently after the
            startup trials.
        seed: Seed of the sampler's own randomness (``self._rng``).
    """

    def __init__(
        self,
        *,
        n_startup_trials: int,
        independent_sampler: BaseSampler | None,
        warn_independent_sampling: bool,
        seed: int | None,
    ) -> None:
        if n_startup_trials < 0:
            raise ValueError(f"n_startup_trials must be non-negative, got {n_startup_trials}.")
        super().__init__(
            independent_sampler=independent_sampler,
            warn_independent_sampling=warn_independent_sampling,
            seed=seed,
        )
        self._n_startup_trials = n_startup_trials
        self._intersection_search_space = IntersectionSearchSpace()

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {
            name: distribution
            for name, distribution in self._intersection_search_space.calculate(study).items()
            if not distribution.single()
        }

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        check_single_objective(study, self)
        reason = (
            outside_relative_space_reason(study, self._n_startup_trials)
            if self._warn_independent_sampling
            else None
        )
        return self._sample_independently(
            study, trial, param_name, param_distribution, warning_reason=reason
        )
