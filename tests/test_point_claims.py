"""Claimed points (samplers/_running_points.py): two workers never keep one point at once.

Two processes of a site may choose at the same moment, each before it could read the other's
point: the interleavings are injected deterministically (a fake ticket counter, a patched sleep,
a choice forced onto the other worker's point), never left to timing.
"""

from __future__ import annotations

import itertools

import numpy as np
import optuna
import pytest
from test_believer import _site_with_data
from test_believer import SPACE
from test_believer import TIE

from optuna_fedbo import FedSampler
import optuna_fedbo.samplers._bakery as bakery
from optuna_fedbo.samplers._running_points import claim_point
from optuna_fedbo.samplers._running_points import POINT_ATTR
from optuna_fedbo.samplers._running_points import POINT_TICKET_ATTR
from optuna_fedbo.samplers._running_points import UNCONTESTED

POINT = np.array([0.0, 1.0])


def _running_pair() -> tuple[optuna.Study, optuna.trial.FrozenTrial, optuna.trial.FrozenTrial]:
    study = optuna.create_study()
    rival, mine = study.ask(), study.ask()
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == [rival.number, mine.number]
    return study, trials[0], trials[1]


def _tickets(*tickets: int):
    drawn = iter(tickets)
    return lambda: next(drawn)


def _ticket_of(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> int | None:
    return study._storage.get_trial(trial._trial_id).system_attrs[POINT_TICKET_ATTR]["ticket"]


def test_an_uncontested_claim_keeps_its_point_without_drawing_a_ticket() -> None:
    study, rival, mine = _running_pair()
    assert claim_point(study, rival, np.array([0.5, 0.5]), _tickets()) is True  # nothing drawn
    assert claim_point(study, mine, POINT, _tickets()) is True  # another point: no rival
    assert _ticket_of(study, mine) == UNCONTESTED
    assert study._storage.get_trial(mine._trial_id).system_attrs[POINT_ATTR] == [0.0, 1.0]


def test_a_point_claimed_first_by_another_running_trial_is_lost() -> None:
    study, rival, mine = _running_pair()
    assert claim_point(study, rival, POINT, _tickets()) is True
    assert claim_point(study, mine, POINT, _tickets(100)) is False
    assert _ticket_of(study, mine) == 100
    # A finished rival holds nothing: the point is free again.
    study.tell(rival.number, 0.0)
    assert claim_point(study, mine, POINT, _tickets()) is True


def test_two_claims_that_saw_each_others_intent_keep_one_point(monkeypatch) -> None:
    study, rival, mine = _running_pair()
    # The rival wrote its intent and read this trial's not yet; its ticket comes later.
    study._storage.set_trial_system_attr(rival._trial_id, POINT_ATTR, [0.0, 1.0])
    drawn = {"rival": False}

    def rival_draws(seconds: float) -> None:  # while this trial waits for the rival's ticket
        if not drawn["rival"]:
            drawn["rival"] = True
            study._storage.set_trial_system_attr(
                rival._trial_id, POINT_TICKET_ATTR, {"point": [0.0, 1.0], "ticket": 150}
            )

    monkeypatch.setattr(bakery.time, "sleep", rival_draws)
    assert claim_point(study, mine, POINT, _tickets(100)) is True
    assert drawn["rival"]  # it waited for the rival's ticket before keeping the point
    assert claim_point(study, rival, POINT, _tickets(150)) is False  # never both


def test_a_ticket_of_an_earlier_point_does_not_count(monkeypatch) -> None:
    study, rival, mine = _running_pair()
    # The rival claimed another point, lost it, and has written its new point (the same as
    # this trial's) but not its new ticket: its old ticket is no ticket for this point.
    study._storage.set_trial_system_attr(
        rival._trial_id, POINT_TICKET_ATTR, {"point": [0.5, 0.5], "ticket": 7}
    )
    study._storage.set_trial_system_attr(rival._trial_id, POINT_ATTR, [0.0, 1.0])
    clock = itertools.count(0.0, 4.0)
    monkeypatch.setattr(bakery.time, "monotonic", lambda: next(clock))
    slept = []
    monkeypatch.setattr(bakery.time, "sleep", slept.append)
    # It waits for the rival's ticket (not losing to ticket 7), until CHOOSING_WAIT has passed.
    assert claim_point(study, mine, POINT, _tickets(100)) is True
    assert len(slept) >= 2


def test_a_point_another_process_chose_at_the_same_moment_is_chosen_again(monkeypatch) -> None:
    fed, study = _site_with_data(0)
    monkeypatch.setattr("optuna_fedbo.federation.lease_record._SECRET", b"worker-a")
    study.sampler = FedSampler(fed, client_id="site-0", seed=0)
    other = study.ask(SPACE)  # another worker's running trial, at a point it claimed
    monkeypatch.setattr("optuna_fedbo.federation.lease_record._SECRET", b"worker-b")
    sampler = FedSampler(fed, client_id="site-0", seed=0)
    real_choose, choices = sampler._choose, []

    def raced(study_, trial):  # the first choice read the running trials before `other`'s point
        choices.append(real_choose(study_, trial))
        return dict(other.params) if len(choices) == 1 else choices[-1]

    monkeypatch.setattr(sampler, "_choose", raced)
    study.sampler = sampler
    mine = study.ask(SPACE)
    assert len(choices) == 2  # chosen again, now given the other trial's point
    chosen = np.array([mine.params["x"], mine.params["y"]])
    assert np.linalg.norm(chosen - [other.params["x"], other.params["y"]]) > TIE
    counts = sampler.counts.to_dict()
    assert counts["initial"] + counts["local"] + counts["federated"] == 1  # counted once
    stored = study._storage.get_trial(mine._trial_id).system_attrs
    assert stored[POINT_ATTR] == pytest.approx(list(chosen))
    assert stored[POINT_TICKET_ATTR]["ticket"] == UNCONTESTED  # the new point: no rival
