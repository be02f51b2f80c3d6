"""A trial whose worker was killed before it could tag it does not stay running for ever
(issue 29): workers tag a trial first thing in ``before_trial``, and a running trial without a
tag that has run for ``ORPHAN_AGE`` seconds while a worker of the site is lost is failed. A
fresh untagged trial (a live worker's, milliseconds before its tag) and one while no worker is
lost are left running."""

from __future__ import annotations

import datetime
import itertools

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial
from optuna.trial import TrialState
import pytest

from optuna_fedbo import FedSampler
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.samplers import _site_state
from optuna_fedbo.samplers._site_state import WORKER_ATTR

optuna.logging.set_verbosity(optuna.logging.ERROR)
SPACE = {"x": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _site(monkeypatch) -> tuple[Federation, optuna.Study]:
    monkeypatch.setattr(_site_state, "CHECK_INTERVAL", 0.0)
    fed = Federation.create(
        f"orphans-{next(_names)}",
        search_space=SPACE,
        n_clients=2,
        protocol=FTSConfig(n_features=20, n_init=2, min_contributors=2),
        seed=5,
    )
    return fed, optuna.create_study(direction="maximize")


def _worker(fed: Federation, name: str, monkeypatch) -> FedSampler:
    monkeypatch.setattr("optuna_fedbo.federation.lease_record._SECRET", name.encode())
    return FedSampler(fed, client_id="site-0", seed=0, n_candidates=16)


def _untagged(study: optuna.Study, seconds_ago: float) -> int:
    """A running trial created ``seconds_ago`` by a worker that never tagged it."""
    started = datetime.datetime.now() - datetime.timedelta(seconds=seconds_ago)
    template = FrozenTrial(
        number=-1, state=TrialState.RUNNING, value=None, datetime_start=started,
        datetime_complete=None, params={}, distributions={}, user_attrs={}, system_attrs={},
        intermediate_values={}, trial_id=-1,
    )  # fmt: skip
    return study._storage.create_new_trial(study._study_id, template_trial=template)


def _trial(study: optuna.Study, sampler: FedSampler) -> None:
    study.sampler = sampler
    study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=1)


def _state(study: optuna.Study, trial_id: int) -> TrialState:
    return study._storage.get_trial(trial_id).state


def test_an_untagged_trial_of_a_killed_worker_is_failed_once_old(monkeypatch) -> None:
    fed, study = _site(monkeypatch)
    alive = _worker(fed, "alive", monkeypatch)
    orphan = _untagged(study, _site_state.ORPHAN_AGE + 5)
    fresh = _untagged(study, 1.0)
    _trial(study, alive)
    assert _state(study, orphan) == TrialState.RUNNING  # no worker of the site is lost yet
    _worker(fed, "killed", monkeypatch)._abandon()  # a worker dies (its lease lost)
    _trial(study, alive)
    assert _state(study, orphan) == TrialState.FAIL  # failed, not running for ever
    assert _state(study, fresh) == TrialState.RUNNING  # may be a live worker's, untagged yet
    assert all(WORKER_ATTR in t.system_attrs for t in study.trials if t.params)


def test_a_trial_is_tagged_with_its_worker_before_anything_else(monkeypatch) -> None:
    fed, study = _site(monkeypatch)
    worker = _worker(fed, "w", monkeypatch)

    def killed(self, study):  # noqa: ANN001, ANN202 - the process dies right after the tag
        raise SystemExit(9)

    monkeypatch.setattr(_site_state.SiteState, "_bind", killed)
    with pytest.raises(SystemExit):
        _trial(study, worker)
    (trial,) = study.trials
    assert trial.state == TrialState.RUNNING
    assert trial.system_attrs[WORKER_ATTR] == worker._lease.epoch  # known as this worker's
