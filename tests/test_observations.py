from __future__ import annotations

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.samplers._fts_upload import with_trial
from optuna_fedbo.samplers._observations import TrialObservations
from optuna_fedbo.search_space import SearchSpaceEncoder

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(-1.0, 1.0)}


def _observations() -> TrialObservations:
    encoder = SearchSpaceEncoder(SPACE)
    return TrialObservations(
        encoder,
        [RandomFourierFeatures(2, 16, 0.3, seed=0), RandomFourierFeatures(2, 8, 0.1, seed=1)],
    )


def _ask(study: optuna.Study, x: float) -> optuna.Trial:
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    trial.suggest_float("y", -1.0, 1.0)
    study._storage.set_trial_param(trial._trial_id, "x", x, SPACE["x"])
    return trial


def test_trials_that_finish_out_of_order_are_added_once_each() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")
    observations = _observations()
    first, second, third = (_ask(study, x) for x in (0.1, 0.2, 0.3))
    study.tell(second, 2.0)
    observations.update(study)
    assert observations.count == 1 and observations.includes(1)
    assert not observations.includes(0)
    snapshot = observations.targets
    study.tell(third, state=optuna.trial.TrialState.FAIL)
    study.tell(first, 1.0)  # finishes after a later trial
    fourth = _ask(study, 0.4)  # still running
    observations.update(study)
    observations.update(study)  # nothing new: nothing added twice
    assert observations.count == 2
    assert observations.includes(0)
    assert not observations.includes(2) and not observations.includes(3)  # failed, running
    np.testing.assert_array_equal(observations.targets, [-2.0, -1.0])  # minimized: negated
    np.testing.assert_array_equal(observations.points[:, 0], [0.2, 0.1])
    np.testing.assert_array_equal(snapshot, [-2.0])  # an earlier snapshot does not change
    study.tell(fourth, 5.0)
    for k in range(100):  # beyond the first buffer
        study.tell(_ask(study, 0.5), float(k))
    observations.update(study)
    assert observations.count == 103 and observations.includes(3)
    assert observations.points.shape == (103, 2) and observations.features.shape == (103, 16)
    with pytest.raises(ValueError, match="read-only"):
        observations.targets[0] = 0.0
    # The statistics and features, under each feature map, are exactly the modelled trials'.
    for k, features in enumerate(observations.feature_maps):
        expected = SufficientStatistics(features.n_features)
        expected.add(features(observations.points), observations.targets)
        np.testing.assert_allclose(observations.statistics[k].gram, expected.gram)
        np.testing.assert_allclose(observations.features_under(k), features(observations.points))
    np.testing.assert_array_equal(observations.features, observations.features_under(0))


def test_another_study_starts_from_scratch() -> None:
    observations = _observations()
    study = optuna.create_study()
    study.tell(_ask(study, 0.7), 3.0)
    observations.update(study)
    other = optuna.create_study()
    observations.update(other)
    assert observations.count == 0 and observations.points.shape == (0, 2)
    other.tell(_ask(other, 0.2), 1.0)
    observations.update(other)
    assert observations.count == 1 and observations.best_value == -1.0


class _ListedStudy:
    """A study whose trial list the test controls (as a relational storage may show it)."""

    def __init__(self, trials: list[optuna.trial.FrozenTrial]) -> None:
        self.trials = trials
        self._storage = object()
        self._study_id = 0
        self.direction = optuna.study.StudyDirection.MAXIMIZE

    def _get_trials(self, deepcopy: bool, use_cache: bool) -> list[optuna.trial.FrozenTrial]:
        return list(self.trials)


def test_a_trial_that_shows_up_late_before_finished_ones_is_still_added() -> None:
    def completed(number: int) -> optuna.trial.FrozenTrial:
        trial = optuna.trial.create_trial(
            params={"x": 0.1 * number, "y": 0.0}, distributions=SPACE, value=float(number)
        )
        trial.number = number
        return trial

    observations = _observations()
    study = _ListedStudy([completed(0), completed(1), completed(3)])
    observations.update(study)  # type: ignore[arg-type]
    assert observations.count == 3
    # Trial 2's insert committed after trial 3's: it appears between finished trials.
    study.trials = [completed(0), completed(1), completed(2), completed(3), completed(4)]
    observations.update(study)  # type: ignore[arg-type]
    assert observations.count == 5 and all(observations.includes(k) for k in range(5))
    np.testing.assert_array_equal(observations.targets, [0.0, 1.0, 3.0, 2.0, 4.0])


def _same_statistics(a: SufficientStatistics, b: SufficientStatistics) -> bool:
    return (
        np.array_equal(a.gram, b.gram)
        and np.array_equal(a.feature_sum, b.feature_sum)
        and np.array_equal(a.feature_target, b.feature_target)
        and (a.target_sum, a.target_square_sum, a.count)
        == (b.target_sum, b.target_square_sum, b.count)
    )


def test_statistics_an_upload_computed_with_the_finishing_trial_are_kept(monkeypatch) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")
    observations, reference = _observations(), _observations()  # the latter adds every trial
    for x in (0.1, 0.5, 0.8):
        study.tell(_ask(study, x), x * x)
    observations.update(study)
    reference.update(study)
    maps, encoder = observations.feature_maps, observations.encoder
    adds = []
    original_add = SufficientStatistics.add

    def counted(self: SufficientStatistics, *args: object) -> None:
        adds.append(1)
        original_add(self, *args)

    monkeypatch.setattr(SufficientStatistics, "add", counted)
    for kept_target, other_trial_first in ((-2.5, False), (-9.0, False), (-2.5, True)):
        trial = _ask(study, 0.37)
        frozen = study._storage.get_trial(trial._trial_id)
        added = with_trial(observations.statistics, maps, encoder, frozen, -2.5)
        observations.expect(observations.version, frozen, kept_target, added)
        if other_trial_first:  # the statistics change before the trial is added
            study.tell(_ask(study, 0.9), 0.3)
            observations.update(study)
            reference.update(study)
        adds.clear()
        study.tell(trial, 2.5)  # minimized: the target is -2.5
        observations.update(study)
        reused = kept_target == -2.5 and not other_trial_first
        assert (len(adds) == 0) == reused  # the kept statistics, not added again
        assert all((a is b) == reused for a, b in zip(observations.statistics, added))
        reference.update(study)
        assert all(map(_same_statistics, observations.statistics, reference.statistics))
