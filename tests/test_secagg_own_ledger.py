"""Participants count their own releases under distributed DP, in their key folders.

A deviating server that unmasks an attempt's sum and then starts the round over (here: a new
``FederationServer`` each time, which never publishes what the last one could unmask) is not
stopped by its own ledger; the participants' own counts stop it. In-process: the tests poll the
participants and step the server in turn (no background thread).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading

import numpy as np
import pytest
from test_secagg_dp import _federation
from test_secagg_dp import _omegas
from test_secagg_dp import _run

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation.fts.secure import driver_of
from optuna_fedbo.federation.secagg import spending
from optuna_fedbo.federation.secagg.relay import parse_key
from optuna_fedbo.federation.secagg.relay import Relay
from optuna_fedbo.federation.secagg.spending import OwnLedger
from optuna_fedbo.federation.secagg.spending import OwnLedgerError
from optuna_fedbo.federation.secagg.spending import ReplayedAttemptError
from optuna_fedbo.federation.watermark import restore_ledger
from optuna_fedbo.federation.watermark import ServerMark

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


def _budget_of(releases: int) -> float:
    """A budget that allows ``releases`` releases and not one more."""
    curve = _federation(name="probe").privacy_ledger().curve
    return (curve.epsilon(releases) + curve.epsilon(releases + 1)) / 2


def test_a_restarted_participant_whose_budget_is_spent_stays_out_of_a_rolled_back_storage(
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


def _rounds_then_rolled_back(tmp_path, name: str) -> tuple[Federation, str]:
    """Rounds 0 to 3 published (each participant counted 4 of the 5 releases its budget
    allows; the claims of round 0 are gone), then the storage rolled back to before round 0."""
    db = tmp_path / "f.db"
    url = f"sqlite:///{db}"
    fed = _federation(storage=url, epsilon_budget=_budget_of(5), name=name)
    shutil.copy(db, tmp_path / "backup.db")  # before any attempt
    server = FederationServer(fed)
    for seed in range(4):
        report = _run(fed, server, _omegas(4, seed=seed))
        assert report is not None and report.published
    assert {c: OwnLedger(fed, c).newest() for c in CLIENTS} == dict.fromkeys(CLIENTS, (0, 3, 0))
    os.replace(tmp_path / "backup.db", db)  # rolled back past every claim still kept
    return fed, url


def _restarted(fed: Federation, url: str) -> Federation:
    restarted = Federation.load(fed.name, url)  # every participant's process restarts
    driver_of(restarted.channel).background = False
    assert restarted.open_round() == 0
    return restarted


def test_a_restarted_participant_keeps_its_count_when_the_storage_is_rolled_back(
    tmp_path, caplog
) -> None:
    """The review's attack, below the budget: after the rollback, a server that dropped its own
    high-water mark runs round 0 attempt 0 again. Every participant refuses it before it
    advertises keys: no input is masked into an attempt it already counted, and its count is
    unchanged."""
    fed, url = _rounds_then_rolled_back(tmp_path, "own-replay")
    ServerMark(fed).path.unlink()  # a deviating server: it drops its own high-water mark
    restarted = _restarted(fed, url)
    with caplog.at_level(logging.WARNING):
        report = _run(restarted, FederationServer(restarted), _omegas(4, seed=9))
    assert report is None or not report.published
    assert _messages(restarted, "keys") == {} and _messages(restarted, "masked") == {}
    for client in CLIENTS:
        own = OwnLedger(restarted, client)
        assert own.releases() == 4 and not own.would_exceed()  # refused, not spent
    assert SPENT not in caplog.text
    assert caplog.text.count("is not after round 3 attempt 0") == 4  # once per participant


def test_after_the_operator_restores_the_ledger_participants_take_part_again_and_count_it(
    tmp_path,
) -> None:
    fed, url = _rounds_then_rolled_back(tmp_path, "own-restored")
    restore_ledger(_restarted(fed, url))  # the operator: a signed restore entry, 4 carried
    restarted = _restarted(fed, url)
    report = _run(restarted, FederationServer(restarted), _omegas(4, seed=9))
    assert report is not None and report.published and report.n_contributors == 4
    for client in CLIENTS:
        own = OwnLedger(restarted, client)
        assert own.releases() == 5 and own.newest() == (1, 0, 0) and own.would_exceed()
    assert restarted.privacy_ledger().n_accounted() == 5


@pytest.mark.parametrize("sqlite", [False, True], ids=["in-memory", "sqlite"])
def test_every_masking_is_a_new_entry_and_only_after_the_newest(tmp_path, sqlite) -> None:
    storage = f"sqlite:///{tmp_path / 'f.db'}" if sqlite else None
    own = OwnLedger(_federation(storage=storage, epsilon_budget=_budget_of(3)), "c0")
    assert own.record(0, 0) and own.record(0, 2) and own.record(1, 0)
    for repeat in [(1, 0), (0, 2), (0, 3), (0, 0)]:
        with pytest.raises(ReplayedAttemptError, match="not after round 1 attempt 0, the"):
            own.record(*repeat)
        with pytest.raises(ReplayedAttemptError):
            own.check_newer(*repeat)
    own.check_newer(1, 1)  # after the newest: allowed
    assert own.releases() == 3 and own.newest() == (0, 1, 0)
    assert not own.record(2, 0)  # a fourth would exceed the budget: nothing written
    assert own.releases() == 3 and own.newest() == (0, 1, 0)


def test_a_count_whose_entries_go_backwards_is_refused_as_corrupt(tmp_path) -> None:
    own = OwnLedger(_federation(storage=f"sqlite:///{tmp_path / 'f.db'}"), "c0")
    assert own.record(0, 0) and own.record(1, 0) and own.path is not None
    record = json.loads(own.path.read_text())
    own.path.write_text(json.dumps({**record, "releases": [[0, 1, 0], [0, 0, 0]]}))
    with pytest.raises(OwnLedgerError, match="corrupt"):
        own.releases()


def test_the_count_is_on_disk_before_record_returns(tmp_path, monkeypatch) -> None:
    """The file (all of it) and the directory holding its rename are synced before the masked
    input may be sent (a machine that crashes after sending must not come back with the old
    count)."""
    own = OwnLedger(_federation(storage=f"sqlite:///{tmp_path / 'f.db'}"), "c0")
    assert own.record(0, 0) and own.path is not None
    events: list[tuple[str, str, int]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor: int) -> None:
        where = os.readlink(f"/proc/self/fd/{descriptor}")
        events.append(("fsync", where, os.fstat(descriptor).st_size))
        real_fsync(descriptor)

    def replace(source, target) -> None:
        events.append(("replace", str(target), 0))
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    assert own.record(0, 1)
    where = own.path.resolve()
    assert [e[:2] for e in events[-2:]] == [
        ("replace", str(own.path)),
        ("fsync", str(where.parent)),
    ]
    kind, temporary, size = events[0]
    assert kind == "fsync" and temporary.startswith(f"{where}.")  # the temporary file ...
    assert size == own.path.stat().st_size  # ... with all of the new count in it
    assert OwnLedger(own._federation, "c0").releases() == 2


def test_two_handles_in_one_process_count_in_turn(monkeypatch) -> None:
    """In-memory counts are checked and extended under a lock: a second handle's record made
    while the first one is between its check and its write waits for it (deterministic: the
    first lets the second run until it blocks on the lock, or ends)."""
    fed = _federation()
    first, second = OwnLedger(fed, "c0"), OwnLedger(fed, "c0")
    reached = threading.Event()
    outcome: list[object] = []

    class Watched:
        def __init__(self, lock) -> None:
            self._lock = lock

        def __enter__(self):
            if threading.current_thread() is other:
                reached.set()  # the second handle is at the lock
            return self._lock.__enter__()

        def __exit__(self, *exc):
            return self._lock.__exit__(*exc)

    def second_records() -> None:
        try:
            outcome.append(second.record(0, 1))
        except OwnLedgerError as error:
            outcome.append(error)
        finally:
            reached.set()

    other = threading.Thread(target=second_records)
    real_exceeds = first._exceeds

    def between_check_and_write(releases: int) -> bool:
        other.start()
        reached.wait()
        return real_exceeds(releases)

    monkeypatch.setattr(spending, "_memory_lock", Watched(spending._memory_lock))
    monkeypatch.setattr(first, "_exceeds", between_check_and_write)
    assert first.record(0, 0)
    other.join()
    assert outcome == [True]
    assert first.releases() == 2 and first.newest() == (0, 0, 1)


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
    fed = _federation(epsilon_budget=_budget_of(2))
    server = FederationServer(fed)
    report = _run(fed, server, _omegas(4))  # round 0: one release each
    assert report is not None and report.published
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
    # Another worker of c0, still in an attempt of round 0, spends its budget.
    assert OwnLedger(fed, "c0").record(0, 5)
    with caplog.at_level(logging.WARNING):
        report = _run(fed, server, {})
    assert SPENT in caplog.text
    assert participants["c0"].masked_rounds == [(0, 0)]
    assert OwnLedger(fed, "c0").releases() == 2
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


@pytest.mark.parametrize("at", ["join", "mask"])
def test_a_spent_participant_says_what_it_counted_and_takes_no_further_part(caplog, at) -> None:
    """Refused at either check (advertising keys, masking the input): nothing is counted, it
    is idle, and the warning names the count, where it is kept, its epsilon and the budget."""
    fed = _federation(epsilon_budget=_budget_of(2), name=f"own-spent-{at}")
    participant = driver_of(fed.channel).participant(fed, "c0")
    own = participant.own_ledger
    assert own is not None and own.record(0, 0) and own.record(0, 1)
    participant.offer(np.zeros(3, dtype=np.uint64), encoded=True)
    with caplog.at_level(logging.WARNING):
        if at == "join":
            assert participant._join(0, 2, {}) is False  # refused before reading the setup
        else:
            participant._attempt = (0, 2)
            assert participant._count() is False
    assert participant._client is None and not participant.busy
    assert own.releases() == 2 and own.newest() == (0, 0, 1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        f"c0: its own privacy budget is spent (2 masked input(s) counted in memory, epsilon "
        f"{own.epsilon(2):.4g}; one more would take it above {own.budget:g} at delta "
        f"{own.delta:g}): it masks no further input and takes no further part in secure "
        "aggregation."
    ]
