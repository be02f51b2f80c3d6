"""What a participant checks about its site's study: the objective's direction and parameters.

* A federation created with ``direction=`` refuses a study with the other direction: its
  values would reach the others inverted. The error (a ``ValueError`` raised into
  ``study.optimize``, whose trial then fails) says how to fix it.
* A completed trial that did not suggest every parameter of the federation's search space is
  no observation of the federated model (nothing of it is shared): one warning per missing
  parameter names it, and the end-of-study warning gives that as the reason why no broadcast
  was used (rather than "it ended during its initial design").
* A parameter suggested with another distribution than the federation's is sampled
  independently: :func:`conflict_message` says so, and whether its trials still count.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import optuna
from optuna.distributions import BaseDistribution
from optuna.distributions import CategoricalDistribution
from optuna.study import Study
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from optuna_fedbo.samplers._common import check_single_objective
from optuna_fedbo.samplers._common import study_key

if TYPE_CHECKING:
    from optuna_fedbo.samplers._fed import FedSampler

_logger = optuna.logging.get_logger(__name__)


class SiteChecks:
    """The checks of one participant's studies (thread-safe).

    Args:
        sampler: The participant.
    """

    def __init__(self, sampler: FedSampler) -> None:
        self._sampler = sampler
        self._lock = threading.Lock()
        self._checked: set[tuple[int, int]] = set()
        self._missing: set[str] = set()

    def check_study(self, study: Study) -> None:
        """Raise ``ValueError`` for a multi-objective study or one of the other direction."""
        check_single_objective(study, self._sampler)
        key = study_key(study)
        with self._lock:
            if key in self._checked:
                return
        federation = self._sampler.federation
        expected = federation.config.direction
        if expected is not None:
            actual = "maximize" if study.direction == StudyDirection.MAXIMIZE else "minimize"
            if actual != expected:
                raise ValueError(
                    f"{self._sampler.client_id}: study {study.study_name!r} has direction "
                    f"{actual!r}, but federation {federation.name!r} is to {expected} its "
                    f"objective: create the study with direction={expected!r} (return the "
                    "negated value if your objective measures the opposite)."
                )
        with self._lock:
            self._checked.add(key)

    def note_params(self, trial: FrozenTrial, complete: bool) -> None:
        """Warn once per federation parameter that a completed trial did not suggest."""
        if not complete:
            return
        federation = self._sampler.federation
        missing = [name for name in federation.search_space if name not in trial.params]
        with self._lock:
            new = [name for name in missing if name not in self._missing]
            self._missing.update(new)
        if new:
            names = ", ".join(federation.search_space)
            _logger.warning(
                f"{self._sampler.client_id}: trial {trial.number} did not suggest "
                f"{', '.join(map(repr, new))} of federation {federation.name!r}'s search space, "
                "so it is no observation of the federated model and nothing of it is shared: "
                f"suggest every parameter of the federation ({names})."
            )

    def missing_text(self) -> str | None:
        """Why no trial was federated, if trials left federation parameters out."""
        with self._lock:
            missing = sorted(self._missing)
        if not missing:
            return None
        return (
            f"its objective did not suggest {', '.join(map(repr, missing))} of the federation's "
            "search space, so those trials were no observations of the federated model"
        )


def conflict_message(
    name: str,
    used: BaseDistribution,
    defined: BaseDistribution,
    sampler: FedSampler,
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


__all__ = ["SiteChecks", "conflict_message"]
