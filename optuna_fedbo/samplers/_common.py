"""What every optuna-fedbo sampler does the same way: single-objective checks, fallbacks."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.samplers._base import _INDEPENDENT_SAMPLING_WARNING_TEMPLATE
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

_logger = optuna.logging.get_logger(__name__)


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


def sample_independently(
    sampler: BaseSampler,
    independent_sampler: BaseSampler,
    study: Study,
    trial: FrozenTrial,
    param_name: str,
    param_distribution: BaseDistribution,
    *,
    warning_reason: str | None,
) -> Any:
    """Sample one parameter with ``independent_sampler``, with Optuna's usual warning.

    Args:
        sampler: The sampler falling back (named in the warning).
        independent_sampler: The sampler that draws the value.
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
                independent_sampler_name=type(independent_sampler).__name__,
                sampler_name=type(sampler).__name__,
                fallback_reason=warning_reason,
            )
        )
    return independent_sampler.sample_independent(study, trial, param_name, param_distribution)
