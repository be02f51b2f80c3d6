"""Participants count their own releases under distributed DP, in their key folders.

A deviating server that unmasks an attempt's sum and then starts the round over (here: a new
``FederationServer`` each time, which never publishes what the last one could unmask) is not
stopped by its own ledger; the participants' own counts stop it. In-process: the tests poll the
participants and step the server in turn (no background thread).
"""

from __future__ import annotations

import logging
import os
import shutil

import pytest
from test_secagg_dp import _federation
from test_secagg_dp import _omegas
from test_secagg_dp import _run

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation.fts.secure import driver_of
from optuna_fedbo.federation.secagg.relay import parse_key
from optuna_fedbo.federation.secagg.relay import Relay
from optuna_fedbo.federation.secagg.spending import OwnLedger
from optuna_fedbo.federation.secagg.spending import OwnLedgerError

CLIENTS = [f"c{i}" for i in range(4)]
#: Epsilon of 2 releases is 7.09 and of 3 is 9.09 (z = 1, N = 4, t = 3): two sums at most.
BUDGET = 8.0
SPENT = "its own privacy budget is spent"


@pytest.fixture(autouse=True)
def _propagate_optuna_logs(propagate):
    """caplog sees optuna-fedbo's records at every level (the ``propagate`` fixture)."""
    yield


def _messages(fed: Federation, step: str) -> dict[int, set[str]]:
    """Who sent a ``step`` message, by attempt, in the open round."""
    found: dict[int, set[str]] = {}
    for key in Relay(fed.store).entries(fed.open_round(), inputs=True):
        parsed = parse_key(key)
        if parsed is not None and parsed[1] == f"msg:{step}":
            found.setdefault(parsed[0], set()).add(str(parsed[2]))
    return found


def _unmasked_then_failed(fed: Federation, seed: int, polls: int = 8) -> int:
    """One attempt of a deviating server: participants upload new inputs, the attempt runs to
    its unmask step, every participant answers (the server can now unmask the sum), and the
    server never publishes. Returns how many answered (``>= t``: the server has the sum)."""
    server = FederationServer(fed)  # a new server: the round starts over with a new attempt
    round_index = fed.open_round()
    for client, omega in _omegas(4, seed=seed).items():
        fed.upload(client, omega, n_observations=3, iteration=round_index)
    participants = driver_of(fed.channel)._participants.values()
    for _ in range(polls):
        server.step()
        attempt = server._secure.coordinator.attempt  # type: ignore[attr-defined]
        for participant in participants:
            participant.poll()
        if attempt is not None and attempt.server.step == "unmask":
            return len(_messages(fed, "unmask").get(attempt.attempt, ()))
    return 0


def test_a_server_that_unmasks_and_fails_attempts_gets_at_most_the_budgets_sums(caplog) -> None:
    fed = _federation(epsilon_budget=BUDGET)
    with caplog.at_level(logging.WARNING):
        answered = [_unmasked_then_failed(fed, seed) for seed in range(4)]
    assert answered == [4, 4, 0, 0]  # two sums, then nobody takes part any more
    driver = driver_of(fed.channel)
    for participant in driver._participants.values():
        own = participant.own_ledger
        assert own is not None and own.releases() == 2
        assert own.epsilon() == pytest.approx(fed.privacy_ledger().curve.epsilon(2))
        assert own.epsilon() <= BUDGET
        assert not participant.busy  # its background polling stops
    fed.upload("c0", _omegas(1, seed=9)["c0"], n_observations=3, iteration=fed.open_round())
    assert not driver._participants["c0"].busy  # and a new input does not start it again
    assert fed.privacy_ledger().entries() == []  # the server's ledger counted none of them
    assert caplog.text.count(SPENT) == 4  # once per participant
    # Spent, they advertise no keys: later attempts never even start their protocol.
    assert {a for a, senders in _messages(fed, "keys").items() if senders} == {0, 1}


def test_a_restarted_participant_keeps_its_count_when_the_storage_is_rolled_back(
    tmp_path, caplog
) -> None:
    db = tmp_path / "f.db"
    url = f"sqlite:///{db}"
    fed = _federation(storage=url, epsilon_budget=BUDGET, name="own-rollback")
    shutil.copy(db, tmp_path / "backup.db")  # before any attempt
    assert [_unmasked_then_failed(fed, seed) for seed in range(2)] == [4, 4]
    path = OwnLedger(fed, "c0").path
    assert path is not None and path.stat().st_mode & 0o777 == 0o600
    os.replace(tmp_path / "backup.db", db)  # rolled back: nothing of those attempts is left
    restarted = Federation.load(fed.name, url)  # every participant's process restarts
    driver_of(restarted.channel).background = False
    assert {c: OwnLedger(restarted, c).releases() for c in CLIENTS} == dict.fromkeys(CLIENTS, 2)
    with caplog.at_level(logging.WARNING):
        assert _unmasked_then_failed(restarted, seed=5) == 0
    assert _messages(restarted, "keys") == {}  # none of them took part
    assert SPENT in caplog.text


def test_an_honest_run_spends_on_each_participant_what_the_server_accounts() -> None:
    fed = _federation()
    server = FederationServer(fed)
    for seed in range(3):
        report = _run(fed, server, _omegas(4, seed=seed))
        assert report is not None and report.published and report.n_contributors == 4
    spent = fed.privacy_spent()[0]
    assert len(fed.privacy_ledger().entries()) == 3
    for participant in driver_of(fed.channel)._participants.values():
        own = participant.own_ledger
        assert own is not None and own.releases() == 3
        assert own.epsilon() == pytest.approx(spent, rel=1e-12)


def test_a_participant_whose_budget_is_spent_before_it_masks_does_not_mask(caplog) -> None:
    """The count is checked at the masking itself: spent since the participant joined the
    attempt (by another worker of the site on this host), it sends no masked input. (The same
    refusal of a count kept in a file: ``test_mutation_kills_secagg_spending.py``.)"""
    fed = _federation(epsilon_budget=5.0)  # one release: 4.75
    server = FederationServer(fed)
    round_index = fed.open_round()
    for client, omega in _omegas(4).items():
        fed.upload(client, omega, n_observations=3, iteration=round_index)
    participants = driver_of(fed.channel)._participants
    for _ in range(4):
        server.step()
        attempt = server._secure.coordinator.attempt  # type: ignore[attr-defined]
        if attempt is not None and attempt.server.step == "masked":
            break
        for participant in participants.values():
            participant.poll()
    assert participants["c0"]._client is not None  # it joined (keys and shares sent)
    assert OwnLedger(fed, "c0").record(7, 0)  # another worker of c0 spends its budget
    with caplog.at_level(logging.WARNING):
        report = _run(fed, server, {})
    assert SPENT in caplog.text
    assert participants["c0"].masked_rounds == []
    assert report is not None and report.published
    assert report.contributors == ("c1", "c2", "c3") and report.n_recovered == 1


def test_a_damaged_count_makes_the_participant_take_no_part(monkeypatch, caplog) -> None:
    """A count that cannot be trusted (which files are refused:
    ``test_mutation_kills_secagg_spending.py``) keeps the participant out of the attempt."""
    fed = _federation(name="own-damaged")
    participant = driver_of(fed.channel).participant(fed, "c0")
    own = participant.own_ledger
    assert own is not None

    def damaged(*args):
        raise OwnLedgerError("/keys/releases.json is corrupt: restore it")

    monkeypatch.setattr(own, "record", damaged)
    server = FederationServer(fed)
    with caplog.at_level(logging.WARNING):
        report = _run(fed, server, _omegas(4))
    assert "c0: secure aggregation round 0 attempt 0: /keys/releases.json is corrupt" in (
        caplog.text
    )
    assert driver_of(fed.channel)._participants["c0"].masked_rounds == []
    assert report is not None and report.published and "c0" not in report.contributors
