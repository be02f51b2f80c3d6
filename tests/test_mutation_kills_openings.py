"""The openings of a round (``_openings.RoundOpenings``), in process: the signed ``latest`` pointer
names the one broadcast that opens the next round; without a pointer to the round before, only the
verified, completed broadcasts of that very round open it (not a staged one, a forged one, or a
genuine record of another round filed under it); and the openings are read once per round
(written to kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import logging

from _trust_federation import small_store
from optuna.trial import TrialState
import pytest

from optuna_fedbo.federation._openings import FIRST_OPENING
from optuna_fedbo.federation._openings import RoundOpenings
from optuna_fedbo.federation._openings import write_to_open_round
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import text_digest


def _store() -> FederationStore:
    return small_store("openings")


def _stage(store: FederationStore, round_index: int, payload: str, epoch: int = 1) -> str:
    """Stage a genuine server-signed broadcast; returns its record."""
    signed = store.sign_broadcast(round_index, payload, epoch=epoch)
    store.stage_broadcast(round_index, signed)
    return signed


def _complete(store: FederationStore, round_index: int, record: str) -> None:
    """A completed broadcast trial holding ``record``, filed under ``round_index``, with no
    pointer moved (a racing server, or someone with the URL)."""
    trial_id = store.stage_broadcast(round_index, record)
    store.storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [1.0])


def _publish(store: FederationStore, round_index: int, payload: str) -> str:
    signed = store.sign_broadcast(round_index, payload, epoch=1)
    trial_id = store.stage_broadcast(round_index, signed)
    store.commit_broadcast(trial_id, round_index, 2)
    return signed


def test_the_pointer_names_the_broadcast_that_opens_the_next_round() -> None:
    store = _store()
    assert RoundOpenings(store)(0) == {FIRST_OPENING}
    published = _publish(store, 0, "A")
    _complete(store, 0, store.sign_broadcast(0, "B", epoch=2))  # a racing server's, no pointer
    assert store.latest()["round"] == 0
    assert RoundOpenings(store)(1) == {text_digest(published)}


def test_without_a_pointer_to_the_round_before_only_its_verified_completed_broadcasts_open_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _store()
    first = _publish(store, 0, "A")
    _stage(store, 0, "C")  # staged, never published: opens nothing
    _complete(store, 0, '{"forged": true}')  # not signed by the server
    second = store.sign_broadcast(0, "B", epoch=2)
    _complete(store, 0, second)  # a racing server's, completed: it opens round 1 too
    later = _publish(store, 1, "D")  # the pointer moves on to round 1 ...
    _complete(store, 0, later)  # ... and round 1's genuine record, filed under round 0
    assert store.latest()["round"] == 1
    expected = {text_digest(first), text_digest(second)}
    assert RoundOpenings(store)(1) == expected
    assert RoundOpenings(store)(2) == {text_digest(later)}
    # No pointer at all (deleted, or one that does not verify): the same scan.
    monkeypatch.setattr(store, "latest", lambda: None)
    assert RoundOpenings(store)(1) == expected


def test_openings_are_read_once_per_round_and_only_once_the_round_is_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _store()
    openings = RoundOpenings(store)
    first = _publish(store, 0, "A")
    assert openings(2) == frozenset()  # round 2 is not open: nothing opens it (yet)
    assert openings(1) == {text_digest(first)}
    later = _publish(store, 1, "B")
    assert openings(2) == {text_digest(later)}  # not the empty answer of before

    def unread(*args: object) -> None:
        raise AssertionError("the openings of an open round are read once")

    monkeypatch.setattr(store, "latest", unread)
    monkeypatch.setattr(store, "broadcast_trials", unread)
    assert openings(2) == {text_digest(later)}
    assert openings(0) == {FIRST_OPENING}


# ------------------------------------------------------- a participant writing to the open round
def _delete_uploads(store: FederationStore, round_index: int) -> None:
    name = store.uploads_study_name(round_index)
    store.storage.delete_study(store.storage.get_study_id_from_name(name))


def test_an_upload_to_the_open_round_whose_study_was_deleted_recreates_it(
    caplog, propagate
) -> None:
    store = _store()
    store.open_uploads(0)
    store.write_upload(0, "c1", "EARLIER")  # the study id is cached by this process
    _delete_uploads(store, 0)  # someone with the URL deleted the open round's uploads
    with caplog.at_level(logging.INFO, logger="optuna_fedbo"):
        write_to_open_round(store, 0, "c0", "SEALED")
    assert store.read_uploads(0) == {"c0": "SEALED"}  # created again, and this upload in it
    reopened = [r for r in caplog.records if "was deleted from the storage" in r.getMessage()]
    assert [r.levelno for r in reopened] == [logging.INFO]  # a participant: no warning


def test_an_upload_to_a_round_closed_meanwhile_is_refused_and_nothing_is_written() -> None:
    store = _store()
    store.open_uploads(0)
    _publish(store, 0, "A")  # round 1 is open now
    _delete_uploads(store, 0)  # the server discarded round 0's uploads
    with pytest.raises(KeyError, match="Round 0 of .* is closed"):
        write_to_open_round(store, 0, "c0", "SEALED")
    names = [s.study_name for s in store.storage.get_all_studies()]
    assert store.uploads_study_name(0) not in names and store.read_uploads(0) == {}
