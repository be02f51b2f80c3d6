"""What an FTS participant uploads after a finished trial, and what it remembers of it.

By default (``aggregation="pooled"``) a participant uploads the sufficient statistics of its
values on the shared feature blocks, and sends fresh ones only once its observations have grown
by :data:`STATISTICS_REFRESH` (alone in a one-site federation, where they serve nobody, none
after its initial design); otherwise it uploads one vector ``omega`` of its posterior. Both
are computed with the finishing trial added by hand (``after_trial`` runs before the trial is
stored as complete), on copies of the running statistics.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
import copy
import math
from typing import Any

import numpy as np
from optuna.study import Study
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.federation._codec import vector_digest
from optuna_fedbo.samplers._common import study_key
from optuna_fedbo.samplers._observations import TrialObservations
from optuna_fedbo.search_space import SearchSpaceEncoder

#: A pooled participant sends fresh statistics once its observations have grown by this
#: fraction since the last ones it sent (so after every trial up to 11 observations, after every
#: 100th at 1,000), as often as it refits its GP and the server chooses its pooling again; in
#: between it names the last ones again by digest, instead of packing, sealing and signing
#: 26,000-41,500 numbers that the server must decode and verify. The broadcast then pools at
#: least 91% of each participant's observations. At 5% (every second to third trial at 20-60
#: trials) fresh statistics were most of the server's round and a seventh of a participant's
#: trial (4-D); paired by seed function on the rotated and shifted Styblinski-Tang families
#: (``benchmarks/fts_value_tuning.py``), regret moved within noise (see the README).
STATISTICS_REFRESH = 0.1

#: Own vector digests kept (``aggregation="sample"``) to leave its own vector out of a draw.
_OWN_DIGESTS_KEPT = 4


class UploadMemory:
    """What a participant remembers of its uploads (callers hold the participant's lock)."""

    def __init__(self) -> None:
        #: The round the newest upload went to (``None`` before the first).
        self.last_round: int | None = None
        # (study, observation count, packed statistics) last sent in full (pooled).
        self._sent_statistics: tuple[tuple[int, int], int, np.ndarray] | None = None
        # ((study, observation count, trial number, normalization), posterior) of the last
        # vector upload that added a finished trial by hand.
        self._posterior: tuple[tuple[Any, ...], LinearPosterior] | None = None
        self._own_digests: dict[int, str] = {}
        # The latest rounds uploaded to.
        self._rounds: deque[int] = deque(maxlen=_OWN_DIGESTS_KEPT)

    def statistics_held(
        self, study: Study, n_observations: int, *, for_good_from: int | None = None
    ) -> np.ndarray | None:
        """The packed statistics last sent, if they are to be sent again: until the
        observations have grown by ``STATISTICS_REFRESH``; ``None``: send fresh ones.

        Args:
            for_good_from: Given (a participant whose statistics serve nobody but the server),
                statistics of at least this many observations are sent again for good.
        """
        if self._sent_statistics is None:
            return None
        key, count, packed = self._sent_statistics
        if key != study_key(study) or n_observations < count:
            return None
        if for_good_from is not None and count >= for_good_from:
            return packed
        if n_observations < count * (1 + STATISTICS_REFRESH):
            return packed
        return None

    def sent_statistics(self, study: Study, n_observations: int, packed: np.ndarray) -> None:
        """Remember the statistics just sent in full."""
        self._sent_statistics = (study_key(study), n_observations, packed)

    def keep_posterior(
        self,
        study: Study,
        n_observations: int,
        number: int,
        location: tuple[float, float],
        posterior: LinearPosterior,
    ) -> None:
        """Remember the posterior a vector upload computed with trial ``number`` added."""
        self._posterior = ((study_key(study), n_observations, number, location), posterior)

    def posterior(
        self, study: Study, observations: TrialObservations, location: tuple[float, float]
    ) -> LinearPosterior | None:
        """The posterior kept by :meth:`keep_posterior`, if the observations are exactly those
        it was computed from (the same study and count, that trial among them, the same
        normalization)."""
        if self._posterior is None:
            return None
        (key, count, number, kept_location), posterior = self._posterior
        if (key, count, kept_location) == (
            study_key(study),
            observations.count,
            location,
        ) and observations.includes(number):
            return posterior
        return None

    def uploaded(self, round_index: int, omega: np.ndarray, *, keep_digest: bool) -> None:
        """Note an upload to ``round_index`` (its vector's digest too, with ``keep_digest``)."""
        if keep_digest:
            self._own_digests[round_index] = vector_digest(omega)
            for old in sorted(self._own_digests)[:-_OWN_DIGESTS_KEPT]:
                del self._own_digests[old]
        self._rounds.append(round_index)
        if self.last_round is None or round_index > self.last_round:
            self.last_round = round_index

    def only_own(self, round_index: int, n_contributors: int) -> bool:
        """Whether round ``round_index``, of ``n_contributors``, holds nothing but this
        participant's upload (one contributor, in a round it uploaded to)."""
        return n_contributors == 1 and round_index in self._rounds

    def own_digest(self, round_index: int) -> str | None:
        """The digest of this participant's vector in round ``round_index``, if kept."""
        return self._own_digests.get(round_index)


def with_trial(
    blocks: list[SufficientStatistics],
    feature_maps: Sequence[RandomFourierFeatures],
    encoder: SearchSpaceEncoder,
    trial: FrozenTrial,
    value: float | None,
) -> list[SufficientStatistics]:
    """The statistics with the finishing trial's ``value`` added, to copies (``None``: as
    they are)."""
    if value is None:
        return blocks
    point = encoder.encode([trial.params])
    blocks = [_copy_statistics(block) for block in blocks]
    for block, features in zip(blocks, feature_maps):
        block.add(features(point), np.array([value]))
    return blocks


def _copy_statistics(statistics: SufficientStatistics) -> SufficientStatistics:
    """An independent copy of running sums (cheaper than ``copy.deepcopy``)."""
    duplicate = copy.copy(statistics)
    duplicate.gram = statistics.gram.copy()
    duplicate.feature_sum = statistics.feature_sum.copy()
    duplicate.feature_target = statistics.feature_target.copy()
    return duplicate


def finished_value(
    study: Study, state: TrialState, values: Sequence[float] | None
) -> float | None:
    """A finished trial's value oriented for maximization (``None`` unless complete and finite)."""
    if state != TrialState.COMPLETE or values is None or len(values) != 1:
        return None
    if not math.isfinite(values[0]):
        return None
    return (1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0) * float(values[0])


__all__ = ["STATISTICS_REFRESH", "UploadMemory", "finished_value", "with_trial"]
