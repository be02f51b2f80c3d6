"""The store's verification paths (``federation/store.py``), in process: a broadcast counts only
if the server signed it for the round it is filed under; staging, publishing and purging move a
broadcast trial exactly as documented (a published one is never purged or re-valued); ledger
entries verify, and a cached one replaced by a forgery is verified again; the budget and heartbeat
records count only when signed (written to kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from datetime import datetime
import logging
import time

from _trust_federation import small_store
from optuna.trial import TrialState
import pytest

from optuna_fedbo.federation.records import BROADCAST_KEY
from optuna_fedbo.federation.records import BUDGET_EXHAUSTED_KEY
from optuna_fedbo.federation.records import ledger_key
from optuna_fedbo.federation.records import PURGED
from optuna_fedbo.federation.records import ROUND_KEY
from optuna_fedbo.federation.records import SERVER_KEY
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.federation.trust import UntrustedRecordError


def _store() -> FederationStore:
    return small_store("store-kills")


def _main_id(store: FederationStore) -> int:
    return store.storage.get_study_id_from_name(store.name)


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


# ------------------------------------------------------------------------ broadcasts
def test_a_staged_broadcast_reads_back_verified_with_every_field() -> None:
    store = _store()
    signed = store.sign_broadcast(3, "P", epoch=2, receipts=("b", "a"), ledger_count=4)
    trial_id = store.stage_broadcast(3, signed)
    trial = store.storage.get_trial(trial_id)
    assert trial.state == TrialState.RUNNING and trial.value is None
    assert trial.system_attrs == {ROUND_KEY: 3, BROADCAST_KEY: signed}
    # A well-formed Optuna trial (SQLite and PostgreSQL refuse anything else), stamped now.
    assert trial.params == trial.distributions == trial.user_attrs == {}
    assert trial.intermediate_values == {}
    assert abs((datetime.now() - trial.datetime_start).total_seconds()) < 60
    broadcast = store.read_verified_broadcast(trial_id)
    assert (broadcast.trial_id, broadcast.round) == (trial_id, 3)
    assert broadcast.state == TrialState.RUNNING
    assert (broadcast.payload, broadcast.digest) == ("P", text_digest("P"))
    assert (broadcast.epoch, broadcast.receipts, broadcast.ledger_count) == (2, ("a", "b"), 4)
    assert broadcast.value is None
    assert store.read_broadcast(trial_id) == (3, "P")
    assert [b.trial_id for b in store.broadcasts()] == [trial_id]


def test_publishing_completes_the_trial_and_moves_the_signed_pointer() -> None:
    store = _store()
    signed = store.sign_broadcast(0, "A", epoch=1)
    trial_id = store.stage_broadcast(0, signed)
    before = time.time()
    store.commit_broadcast(trial_id, 0, 2)
    trial = store.storage.get_trial(trial_id)
    assert trial.state == TrialState.COMPLETE and trial.value == 2.0
    pointer = store.latest()
    assert (pointer["round"], pointer["trial_id"]) == (0, trial_id)
    assert pointer["digest"] == text_digest(signed)
    assert before <= pointer["published_at"] <= time.time()
    assert store.read_verified_broadcast(trial_id).value == 2.0
    # Pointing at it again (a recovery) keeps its value; purging a published one does nothing.
    store.commit_broadcast(trial_id, 0, 5)
    store.purge_broadcast(trial_id)
    trial = store.storage.get_trial(trial_id)
    assert trial.state == TrialState.COMPLETE and trial.value == 2.0
    assert trial.system_attrs[BROADCAST_KEY] == signed


def test_purging_erases_the_payload_and_fails_the_staged_trial(propagate, caplog) -> None:
    store = _store()
    trial_id = store.stage_broadcast(0, store.sign_broadcast(0, "secret", epoch=1))
    store.purge_broadcast(trial_id)
    trial = store.storage.get_trial(trial_id)
    assert trial.state == TrialState.FAIL and trial.system_attrs[BROADCAST_KEY] == PURGED
    with caplog.at_level(logging.WARNING):
        assert store.broadcasts() == []
        with pytest.raises(UntrustedRecordError, match=f"broadcast trial {trial_id} does not"):
            store.read_verified_broadcast(trial_id)
    assert _warnings(caplog, "Ignoring broadcast") == []  # purged: not a forgery


@pytest.mark.parametrize(
    "record",
    [
        "forged",  # not signed by the server
        "other round",  # a genuine record of round 1 filed under round 0
        "not text",  # signed, but its payload is not text
        "no epoch",  # signed, but a field is missing
        "bad receipts",  # signed, but its receipts are not a list
    ],
)
def test_a_broadcast_that_does_not_verify_is_ignored_with_one_warning(
    record: str, propagate, caplog
) -> None:
    store = _store()
    trust = store._trust()
    body = {"round": 0, "payload": "A", "epoch": 1, "receipts": [], "ledger_count": 0}
    signed = {
        "forged": '{"body": {"round": 0, "payload": "A"}, "sig": "AAAA"}',
        "other round": store.sign_broadcast(1, "A", epoch=1),
        "not text": trust.sign("broadcast", {**body, "payload": 5}),
        "no epoch": trust.sign("broadcast", {k: v for k, v in body.items() if k != "epoch"}),
        "bad receipts": trust.sign("broadcast", {**body, "receipts": 7}),
    }[record]
    trial_id = store.stage_broadcast(0, signed)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            assert store.broadcasts() == []
        with pytest.raises(UntrustedRecordError):
            store.read_broadcast(trial_id)
    (said,) = _warnings(caplog, "Ignoring broadcast trial")
    assert said.startswith(f"Ignoring broadcast trial #0 of federation {store.name!r}: ")
    store.stage_broadcast(0, store.sign_broadcast(0, "B", epoch=1))  # another trial: warned too
    with caplog.at_level(logging.WARNING):
        assert [b.payload for b in store.broadcasts()] == ["B"]
    assert len(_warnings(caplog, "Ignoring broadcast trial")) == 1


def test_the_same_forgery_in_two_trials_is_warned_about_for_each() -> None:
    store = _store()
    warned = []
    store.warn_once = lambda key, message: warned.append(key)  # type: ignore[method-assign]
    for _ in range(2):
        store.stage_broadcast(0, "forged")
    store.stage_broadcast(0, store.sign_broadcast(1, "A", epoch=1))
    store.broadcasts()
    assert len(set(warned)) == 3


# ---------------------------------------------------------------------------- ledger
def test_ledger_entries_verify_under_their_own_key_and_a_replaced_one_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _store()
    assert store.read_ledger() == ({}, [])
    digest = text_digest("P")
    key = ledger_key(0, digest)
    body = {"round": 0, "payload": digest, "epsilon": 0.5}
    store.write_ledger_entry(key, body)
    study_id = store.storage.get_study_id_from_name(store.ledger_study_name)
    store.storage.set_study_system_attr(study_id, "note", "not an entry")
    copied = ledger_key(1, digest)  # a genuine entry copied under round 1's key
    store.storage.set_study_system_attr(
        study_id, copied, store.storage.get_study_system_attrs(study_id)[key]
    )
    entries, problems = store.read_ledger()
    assert entries == {key: body}
    assert problems == [f"entry {copied!r}: it is stored under another key (a copy)"]
    verified = []
    trust = store._trust()
    real = trust.verify
    monkeypatch.setattr(trust, "verify", lambda *args: verified.append(1) or real(*args))
    assert store.read_ledger()[0] == {key: body} and len(verified) == 1  # cached: the copy only
    store.storage.set_study_system_attr(study_id, key, '{"body": {}, "sig": "AAAA"}')
    entries, problems = store.read_ledger()  # replaced by a forgery: verified again, refused
    assert entries == {} and len(problems) == 2 and problems[0].startswith(f"entry {key!r}: ")
    store.storage.set_study_system_attr(study_id, key, trust.sign("ledger", {"round": "0"}))
    assert store.read_ledger()[0] == {}  # a malformed body (TypeError in ledger_key)


def test_a_deleted_ledger_study_reads_empty_and_is_written_again() -> None:
    store = _store()
    digest = text_digest("P")
    body = {"round": 0, "payload": digest}
    store.write_ledger_entry(ledger_key(0, digest), body)
    store.storage.delete_study(store.storage.get_study_id_from_name(store.ledger_study_name))
    assert store.read_ledger() == ({}, [])  # (the ledger fails closed on its own count)
    store.write_ledger_entry(ledger_key(0, digest), body)  # a new study, not the deleted one
    assert store.read_ledger() == ({ledger_key(0, digest): body}, [])


# ------------------------------------------------------------------ budget and heartbeat
def test_the_budget_record_counts_only_when_signed(propagate, caplog) -> None:
    store = _store()
    assert store.budget_exhausted() is None
    store.storage.set_study_system_attr(_main_id(store), BUDGET_EXHAUSTED_KEY, "forged")
    with caplog.at_level(logging.WARNING):
        assert store.budget_exhausted() is None
        assert store.budget_exhausted() is None
    (said,) = _warnings(caplog, "budget-exhausted record")
    assert said.startswith(f"Ignoring the budget-exhausted record of federation {store.name!r}")
    store.mark_budget_exhausted({"round": 3})
    assert store.budget_exhausted() == {"round": 3}


def test_the_server_heartbeat_counts_only_when_signed(propagate, caplog) -> None:
    store = _store()
    assert store.server_status() is None
    store.storage.set_study_system_attr(_main_id(store), SERVER_KEY, "forged")
    with caplog.at_level(logging.WARNING):
        assert store.server_status() is None
        assert store.server_status() is None
    (said,) = _warnings(caplog, "server heartbeat")
    assert said.startswith(f"Ignoring the server heartbeat of federation {store.name!r}")
    status = {"epoch": 1, "heartbeat": 10.0, "open_round": 0}
    store.write_server_status(status)
    assert store.server_status() == status
    store.write_server_status({**status, "heartbeat": 5.0})  # older: the newest seen stays
    assert store.server_status() == status
