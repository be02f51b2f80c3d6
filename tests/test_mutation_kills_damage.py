"""Deleted records (``federation/_damage.py``), in process: a deleted main study or configuration
is a damaged federation (not a missing one) exactly while the federation's other studies remain;
a deleted uploads study of the open round is created again, with one warning per round; and the
participant's erasure check reads the storage only at its intervals (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from _trust_federation import small_store
from optuna.study import StudyDirection
import pytest

from optuna_fedbo.federation import _damage
from optuna_fedbo.federation._damage import check_intact
from optuna_fedbo.federation._damage import ErasureCheck
from optuna_fedbo.federation._damage import FederationDamagedError
from optuna_fedbo.federation._damage import FederationNotFoundError
from optuna_fedbo.federation._damage import missing_config
from optuna_fedbo.federation._damage import missing_main_study
from optuna_fedbo.federation._damage import reopen_uploads
from optuna_fedbo.federation.records import CONFIG_KEY
from optuna_fedbo.federation.store import FederationStore


def _store() -> FederationStore:
    return small_store("damage-kills")


def _delete(store: FederationStore, study_name: str) -> None:
    store.storage.delete_study(store.storage.get_study_id_from_name(study_name))


def _drop_config(store: FederationStore) -> None:
    """The main study again without its configuration (Optuna cannot delete an attribute)."""
    attrs = store.storage.get_study_system_attrs(store.storage.get_study_id_from_name(store.name))
    _delete(store, store.name)
    study_id = store.storage.create_new_study([StudyDirection.MINIMIZE], store.name)
    for key, value in attrs.items():
        if key != CONFIG_KEY:
            store.storage.set_study_system_attr(study_id, key, value)


def test_the_error_is_its_message_not_a_quoted_key() -> None:
    assert str(FederationNotFoundError("No federation named 'x'.")) == "No federation named 'x'."
    assert str(FederationDamagedError("gone")) == "gone"
    assert str(FederationNotFoundError()) == ""


def test_an_intact_federation_passes_the_check() -> None:
    assert check_intact(_store()) is None


def test_a_deleted_main_study_is_damage_while_the_other_studies_remain() -> None:
    store = _store()
    _delete(store, store.name)
    with pytest.raises(FederationDamagedError, match="its main study .* was deleted"):
        check_intact(store)
    error = missing_main_study(store)
    assert type(error) is FederationDamagedError and store.name in str(error)
    assert "restores the storage from a backup" in str(error)
    assert str(error).endswith(f"is published or uploaded in {store.name!r} until then.")
    _delete(store, store.participants_study_name)  # nothing of it left: not found, not damaged
    error = missing_main_study(store)
    assert type(error) is FederationNotFoundError
    assert str(error) == f"No federation named {store.name!r} in this storage."


def test_a_deleted_configuration_is_damage_while_the_other_studies_remain() -> None:
    store = _store()
    _drop_config(store)
    with pytest.raises(FederationDamagedError, match=r"its configuration \(system attribute"):
        check_intact(store)
    error = missing_config(store)
    assert type(error) is FederationDamagedError and "restores the storage" in str(error)
    assert str(error).endswith(f"is published or uploaded in {store.name!r} until then.")
    _delete(store, store.participants_study_name)  # a study of that name, not a federation
    error = missing_config(store)
    assert type(error) is FederationNotFoundError
    assert str(error).startswith(f"The study {store.name!r} exists but is not an optuna-fedbo")
    with pytest.raises(FederationNotFoundError) as raised:
        check_intact(store)
    assert type(raised.value) is FederationNotFoundError


def test_a_deleted_uploads_study_is_created_again_with_one_warning_per_round(
    propagate, caplog
) -> None:
    store = _store()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=_damage.__name__):
        assert reopen_uploads(store, 0) is False  # still there: nothing to do, nothing said
    assert [r for r in caplog.records if r.name == _damage.__name__] == []
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            _delete(store, store.uploads_study_name(0))
            assert reopen_uploads(store, 0) is True
            store.storage.get_study_id_from_name(store.uploads_study_name(0))  # created again
        assert reopen_uploads(store, 1) is True  # never created: the open round's study
    said = [r for r in caplog.records if "uploads study of the open" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING] * 2  # once per round (warn_once)
    warnings = [r.getMessage() for r in said]
    assert "open round 0 of federation" in warnings[0] and store.name in warnings[0]
    assert "open round 1 of" in warnings[1]


def test_a_participant_that_recreates_the_uploads_study_logs_info_not_a_warning(
    propagate, caplog
) -> None:
    store = _store()
    _delete(store, store.uploads_study_name(0))
    # (at the package logger: an in-process CLI run earlier in this worker leaves it at WARNING)
    with caplog.at_level(logging.INFO, logger="optuna_fedbo"):
        assert reopen_uploads(store, 0, warn=False) is True
    levels = [r.levelno for r in caplog.records if r.name == _damage.__name__]
    assert levels == [logging.INFO]
    store.storage.get_study_id_from_name(store.uploads_study_name(0))


def test_the_erasure_check_reads_the_study_every_second_and_the_uploads_every_ten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(_damage, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    store = _store()
    sent = {"c0": True, "c1": False}
    reads = []

    def has_sent(client: str, round_index: int) -> bool:
        reads.append((client, round_index))
        return sent[client]

    federation = SimpleNamespace(store=store, has_sent=has_sent)
    check = ErasureCheck()
    clients = ["c0", "c1"]
    assert check.erased(federation, 0, clients) == []  # the study is there; uploads not read
    assert reads == []
    _delete(store, store.uploads_study_name(0))
    clock[0] = 100.5
    assert check.erased(federation, 0, clients) == []  # between checks: no read at all
    clock[0] = 101.0
    assert check.erased(federation, 0, iter(clients)) == clients  # the study is gone: everyone
    store.open_uploads(0)
    clock[0] = 110.0  # ten seconds since the check began: the uploads themselves are read
    assert check.erased(federation, 0, clients) == ["c1"]
    assert reads == [("c0", 0), ("c1", 0)]
    clock[0] = 111.0
    assert check.erased(federation, 0, clients) == []  # the study only, until 120
    clock[0] = 119.0
    assert check.erased(federation, 0, clients) == []
    clock[0] = 120.0
    assert check.erased(federation, 0, clients) == ["c1"]
    assert len(reads) == 4


def test_the_first_erasure_check_reads_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_damage, "time", SimpleNamespace(monotonic=lambda: 50.0))
    store = _store()
    _delete(store, store.uploads_study_name(0))
    federation = SimpleNamespace(store=store, has_sent=lambda client, round_index: True)
    assert ErasureCheck().erased(federation, 0, ["c0"]) == ["c0"]
