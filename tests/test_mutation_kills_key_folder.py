"""Direct tests of deleting a federation with its key files (``key_folder``): what is deleted is
read from this key folder's pin, never from the storage, and nothing of another federation or
of the participants' own studies goes (journal-file storages, in-process). Each was written to
kill mutants of ``benchmarks/mutation_trust.py``."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from optuna.distributions import FloatDistribution
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal import JournalStorage
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationNotFoundError
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import key_folder
from optuna_fedbo.federation.keys import find_server_keys
from optuna_fedbo.federation.keys import KeyFileError
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.pinning import pin_path
from optuna_fedbo.federation.store import CONFIG_KEY

SPACE = {"x": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _journal(path: Path) -> JournalStorage:
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def _create(storage, key_dir: Path, name: str | None = None) -> Federation:
    fed = Federation.create(
        name or f"del-{next(_names)}",
        search_space=SPACE,
        n_clients=2,
        storage=storage,
        protocol=FTSConfig(n_features=4, n_init=1, aggregation="weighted"),
        key_dir=key_dir,
    )
    fed.join("alice")
    return fed


def _studies(storage) -> set[str]:
    return {s.study_name for s in storage.get_all_studies()}


def test_a_federations_files_are_its_own_and_nothing_else(tmp_path) -> None:
    keys = tmp_path / "keys"
    storage = _journal(tmp_path / "a.log")
    fed, other = _create(storage, keys), _create(storage, keys)
    fid = fed.federation_id
    (keys / "servers" / f"{fid}.mark").write_text("x")
    (keys / "joined" / "junk.json").write_text("not json")
    (keys / "joined" / "list.json").write_text("[1]")
    (keys / "joined" / "other.json").write_text(json.dumps({"type": "x", "federation_id": fid}))
    files = key_folder.federation_files(fid, keys)
    assert sorted(files) == sorted(
        [
            keys / "servers" / f"{fid}.json",
            keys / "servers" / f"{fid}.mark",
            keys / "participants" / fid,
            pin_path(fed.store, keys),
        ]
    )
    assert not set(files) & set(key_folder.federation_files(other.federation_id, keys))
    assert key_folder.federation_files(fid, tmp_path / "empty") == []


def test_delete_removes_the_federation_and_its_keys_and_nothing_else(tmp_path) -> None:
    keys = tmp_path / "keys"
    storage = _journal(tmp_path / "a.log")
    fed, other = _create(storage, keys), _create(storage, keys)
    storage.create_new_study([], f"{fed.name}-site-study")  # a participant's own study
    kept_files = set(key_folder.federation_files(other.federation_id, keys))
    deletion = key_folder.delete_federation(fed.name, storage, key_dir=keys)
    assert deletion.federation_id == fed.federation_id and len(deletion.files) == 3
    assert not any(s == fed.name or s.startswith(f"{fed.name}:fedbo:") for s in _studies(storage))
    assert f"{fed.name}-site-study" in _studies(storage) and other.name in _studies(storage)
    assert all(not p.exists() for p in deletion.files)
    assert all(p.exists() for p in kept_files)
    assert (keys / "servers").is_dir() and (keys / "joined").is_dir()  # still holding others
    key_folder.delete_federation(other.name, storage, key_dir=keys)
    assert not (keys / "servers").exists() and not (keys / "joined").exists()  # left empty
    assert not (keys / "participants").exists() or not any((keys / "participants").iterdir())
    with pytest.raises(FederationNotFoundError, match="nothing to delete"):
        key_folder.plan_deletion(fed.name, storage, keys)


def test_which_keys_go_is_read_from_the_pin_never_from_the_storage(tmp_path) -> None:
    keys = tmp_path / "keys"
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, keys)
    victim = _create(_journal(tmp_path / "b.log"), keys)  # another federation, same key folder
    main = storage.get_study_id_from_name(fed.name)
    victim_config = victim.storage.get_study_system_attrs(
        victim.storage.get_study_id_from_name(victim.name)
    )[CONFIG_KEY]
    storage.set_study_system_attr(main, CONFIG_KEY, victim_config)  # the storage lies
    plan = key_folder.plan_deletion(fed.name, storage, keys)
    assert plan.federation_id == fed.federation_id
    plan.run()
    assert find_server_keys(victim.federation_id, keys) is not None
    assert ServerKeys.path(victim.federation_id, keys).exists()


def test_a_pin_that_cannot_be_read_stops_the_deletion(tmp_path) -> None:
    keys = tmp_path / "keys"
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, keys)
    pin = pin_path(fed.store, keys)
    for text in ("not json", json.dumps({"type": "x"}), "[1]"):
        pin.write_text(text)
        with pytest.raises(KeyFileError, match="cannot be read.*remove it by hand"):
            key_folder.plan_deletion(fed.name, storage, keys)
    assert fed.name in _studies(storage)  # nothing deleted


def test_an_ordinary_study_is_never_deleted_as_a_federation(tmp_path) -> None:
    storage = _journal(tmp_path / "a.log")
    storage.create_new_study([], "plain")
    with pytest.raises(ValueError, match="is not a federation: nothing deleted"):
        key_folder.delete_federation("plain", storage, key_dir=tmp_path / "keys")
    assert "plain" in _studies(storage)
    for bad in ("", 5, None):
        with pytest.raises(ValueError, match="storage must be a URL or a BaseStorage"):
            key_folder.plan_deletion("plain", bad, tmp_path / "keys")


def test_the_keys_of_a_federation_whose_storage_file_is_gone_are_deleted(tmp_path) -> None:
    keys = tmp_path / "keys"
    fed = _create(_journal(tmp_path / "a.log"), keys)
    files = key_folder.federation_files(fed.federation_id, keys)
    (tmp_path / "a.log").unlink()
    plan = key_folder.plan_deletion(fed.name, f"journal:{tmp_path / 'a.log'}", keys)
    assert plan.storage is None and plan.studies == [] and sorted(plan.files) == sorted(files)
    plan.run()
    assert not any(p.exists() for p in files)


def test_an_in_memory_federation_is_deleted_with_its_keys_in_memory(tmp_path) -> None:
    fed = _create(None, tmp_path / "keys")
    plan = key_folder.plan_deletion(fed.name, fed.storage, tmp_path / "keys")
    assert plan.federation_id == fed.federation_id and plan.files == []
    assert find_server_keys(fed.federation_id, tmp_path / "keys") is not None
    plan.run()
    assert find_server_keys(fed.federation_id, tmp_path / "keys") is None  # forgotten
    assert fed.name not in _studies(fed.storage)
    assert key_folder._stored_id("not json") is None
    assert key_folder._stored_id(json.dumps({"server": {"id": 1}})) is None


def test_a_study_deleted_meanwhile_does_not_stop_the_deletion(tmp_path) -> None:
    keys = tmp_path / "keys"
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, keys)
    plan = key_folder.plan_deletion(fed.name, storage, keys)
    gone = next(s for s in plan.studies if s != fed.name)
    storage.delete_study(storage.get_study_id_from_name(gone))
    plan.run()
    assert not any(s == fed.name or s.startswith(f"{fed.name}:") for s in _studies(storage))
    assert all(not p.exists() for p in plan.files)


def test_the_main_study_goes_last(tmp_path, monkeypatch) -> None:
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, tmp_path / "keys")
    plan = key_folder.plan_deletion(fed.name, storage, tmp_path / "keys")
    deleted: list[str] = []
    real = storage.delete_study
    names = {storage.get_study_id_from_name(s): s for s in plan.studies}

    def delete_study(study_id):
        deleted.append(names[study_id])
        real(study_id)

    monkeypatch.setattr(storage, "delete_study", delete_study)
    plan.run()
    assert deleted[-1] == fed.name and sorted(deleted) == sorted(plan.studies)


def test_a_deletion_interrupted_midway_is_finished_by_deleting_again(
    tmp_path, monkeypatch
) -> None:
    keys = tmp_path / "keys"
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, keys)
    files = key_folder.federation_files(fed.federation_id, keys)
    key_file = ServerKeys.path(fed.federation_id, keys)
    real = Path.unlink

    def crash_at_the_key_file(self, missing_ok=False):
        if self == key_file:
            raise OSError("interrupted")
        return real(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", crash_at_the_key_file)
    with pytest.raises(OSError, match="interrupted"):
        key_folder.delete_federation(fed.name, storage, key_dir=keys)
    monkeypatch.undo()
    again = key_folder.delete_federation(fed.name, storage, key_dir=keys)  # the pin is still there
    assert again.federation_id == fed.federation_id
    assert not any(p.exists() for p in files)


def test_a_key_file_removed_meanwhile_does_not_stop_the_deletion(tmp_path) -> None:
    keys = tmp_path / "keys"
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, keys)
    plan = key_folder.plan_deletion(fed.name, storage, keys)
    ServerKeys.path(fed.federation_id, keys).unlink()  # by hand, after the plan
    plan.run()
    assert not any(p.exists() for p in plan.files)


def test_an_unreadable_pin_sorting_first_hides_no_other_pin(tmp_path) -> None:
    keys = tmp_path / "keys"
    fed = _create(_journal(tmp_path / "a.log"), keys)
    (keys / "joined" / "0000.json").write_text("not json")  # sorts before every digest
    assert pin_path(fed.store, keys) in key_folder.federation_files(fed.federation_id, keys)


def test_a_federation_this_key_folder_never_pinned_loses_its_studies_only(tmp_path) -> None:
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, tmp_path / "operator")
    plan = key_folder.plan_deletion(fed.name, storage, tmp_path / "elsewhere")
    assert plan.federation_id is None and plan.files == [] and fed.name in plan.studies
    assert plan.describe() == (
        f"federation {fed.name!r}: {len(plan.studies)} studies in {plan.location}, no key files"
    )
    assert plan.location.startswith("journal:")
    plan.run()
    assert fed.name not in _studies(storage)
    assert ServerKeys.path(fed.federation_id, tmp_path / "operator").exists()
