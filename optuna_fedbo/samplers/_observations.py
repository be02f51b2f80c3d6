"""A participant's own completed trials, turned into RFF sufficient statistics incrementally."""

from __future__ import annotations

from collections.abc import Sequence
import math
import threading

import numpy as np
import optuna
from optuna.study import Study
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.samplers._common import study_key
from optuna_fedbo.search_space import SearchSpaceEncoder

_logger = optuna.logging.get_logger(__name__)


class TrialObservations:
    """Sufficient statistics of a study's completed trials over one or more feature maps.

    Values are oriented for maximization (negated for a minimized study). Trials that failed,
    were pruned, have a non-finite value, or have parameters outside the search space are left
    out. Each trial is added once, so the cost of keeping up with a study is ``O(M^2)`` per new
    trial whatever its length. The object is thread-safe.

    Args:
        encoder: The encoding of the search space the statistics are over.
        feature_maps: Feature maps over the encoded space, one set of statistics each.
    """

    def __init__(
        self,
        encoder: SearchSpaceEncoder,
        feature_maps: Sequence[RandomFourierFeatures],
    ) -> None:
        self.encoder = encoder
        self.feature_maps = tuple(feature_maps)
        self.statistics = [SufficientStatistics(f.n_features) for f in self.feature_maps]
        self.best_point: np.ndarray | None = None
        self.best_value = -math.inf
        #: Encoded points and oriented values of the modelled trials, in the order added, and
        #: the points' features under the first feature map (computed once per trial). Each
        #: update replaces these arrays and never writes into them, so a reference taken under
        #: the lock stays a consistent snapshot.
        self.points = np.zeros((0, encoder.n_columns))
        self.features = np.zeros((0, self.feature_maps[0].n_features))
        self.targets = np.zeros(0)
        self._seen: set[int] = set()
        self._study_key: tuple[int, int] | None = None
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        """Number of trials in the statistics."""
        return self.statistics[0].count

    def includes(self, number: int) -> bool:
        """Whether trial ``number`` has been considered (modelled or left out)."""
        return number in self._seen

    def update(self, study: Study) -> None:
        """Add the study's newly completed trials (resetting if the study changed)."""
        trials = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True)
        with self._lock:
            key = study_key(study)
            if key != self._study_key:
                self._reset(key)
            # Completion is final, so the trials not seen yet are the surplus over those seen;
            # they usually finished last, so look from the end and stop once all are found.
            n_new = len(trials) - len(self._seen)
            new: list[FrozenTrial] = []
            for trial in reversed(trials):
                if len(new) == n_new:
                    break
                if trial.number not in self._seen:
                    new.append(trial)
            new.reverse()
            self._seen.update(t.number for t in new)
            self._add(new, study.direction)

    def _reset(self, key: tuple[int, int]) -> None:
        self.statistics = [SufficientStatistics(f.n_features) for f in self.feature_maps]
        self.best_point, self.best_value = None, -math.inf
        self.points = np.zeros((0, self.encoder.n_columns))
        self.features = np.zeros((0, self.feature_maps[0].n_features))
        self.targets = np.zeros(0)
        self._seen = set()
        self._study_key = key

    def _add(self, trials: list[FrozenTrial], direction: StudyDirection) -> None:
        usable = [t for t in trials if self._usable(t)]
        if not usable:
            return
        sign = 1.0 if direction == StudyDirection.MAXIMIZE else -1.0
        targets = sign * np.array([t.value for t in usable], dtype=float)
        points = self.encoder.encode([t.params for t in usable])
        phis = [features(points) for features in self.feature_maps]
        for phi, statistics in zip(phis, self.statistics):
            statistics.add(phi, targets)
        self.points = np.vstack([self.points, points])
        self.features = np.vstack([self.features, phis[0]])
        self.targets = np.concatenate([self.targets, targets])
        best = int(np.argmax(targets))
        if targets[best] > self.best_value:
            self.best_value, self.best_point = float(targets[best]), points[best]

    def _usable(self, trial: FrozenTrial) -> bool:
        if trial.values is None or len(trial.values) != 1 or not math.isfinite(trial.values[0]):
            _logger.debug(f"Trial {trial.number} has no finite value; it is not modelled.")
            return False
        if not self.encoder.contains(trial.params):
            _logger.debug(f"Trial {trial.number} lies outside the search space; not modelled.")
            return False
        return True
