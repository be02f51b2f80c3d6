"""Direct tests of ``pinning``: the configuration a key directory created or joined, pinned
outside the storage, and the checks that refuse another one (journal-file storages, in-process).
Each was written to kill mutants of ``benchmarks/mutation_trust.py``."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from pathlib import Path
import stat

from optuna.distributions import FloatDistribution
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal import JournalStorage
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationNotFoundError
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import pinning
from optuna_fedbo.federation._damage import FederationDamagedError
from optuna_fedbo.federation.keys import KEY_FILE_VERSION
from optuna_fedbo.federation.keys import KeyFileError
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.location import storage_location
from optuna_fedbo.federation.store import CONFIG_HASH_KEY
from optuna_fedbo.federation.store import CONFIG_KEY
from optuna_fedbo.federation.store import CONFIG_SIGNATURE_KEY

SPACE = {"x": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _journal(path: Path) -> JournalStorage:
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def _create(storage, key_dir: Path, name: str | None = None, n_features: int = 4) -> Federation:
    return Federation.create(
        name or f"pin-{next(_names)}",
        search_space=SPACE,
        n_clients=2,
        storage=storage,
        protocol=FTSConfig(n_features=n_features, n_init=1, aggregation="weighted"),
        key_dir=key_dir,
    )


def _copy_config(storage, source: str, target: str) -> None:
    attrs = storage.get_study_system_attrs(storage.get_study_id_from_name(source))
    target_id = storage.get_study_id_from_name(target)
    for key in (CONFIG_HASH_KEY, CONFIG_SIGNATURE_KEY, CONFIG_KEY):
        storage.set_study_system_attr(target_id, key, attrs[key])


def test_the_pin_is_named_by_storage_and_name_and_holds_the_configuration(tmp_path) -> None:
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, tmp_path / "keys")
    location = storage_location(storage)
    digest = hashlib.sha256(f"{location}\n{fed.name}".encode()).hexdigest()[:32]
    path = tmp_path / "keys" / "joined" / f"{digest}.json"
    assert pinning.pin_file(location, fed.name, tmp_path / "keys") == path
    assert pinning.pin_path(fed.store, tmp_path / "keys") == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    record = json.loads(path.read_text())
    assert record == {
        "type": pinning.JOINED_TYPE,
        "version": KEY_FILE_VERSION,
        "federation": fed.name,
        "storage": location,
        "federation_id": fed.federation_id,
        "fingerprint": fed.fingerprint,
        "config": fed.config_hash,
    }
    assert pinning.pin_joined(fed.store, fed.trust, tmp_path / "keys") is None  # already there
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no draft left behind
    memory = _create(None, tmp_path / "keys")
    assert pinning.pin_path(memory.store, tmp_path / "keys") is None
    assert pinning.pin_joined(memory.store, memory.trust, tmp_path / "keys") is None
    pinning.check_joined(memory.store, "0" * 64, tmp_path / "keys")  # nothing pinned


def test_another_configuration_under_the_pinned_name_is_refused(tmp_path) -> None:
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, tmp_path / "keys")
    pinning.check_joined(fed.store, fed.config_hash, tmp_path / "keys")
    with pytest.raises(ValueError, match="is not the one this key directory joined") as error:
        pinning.check_joined(fed.store, "0" * 64, tmp_path / "keys")
    assert "\n" not in str(error.value)
    other = _create(_journal(tmp_path / "b.log"), tmp_path / "other", name=fed.name)
    with pytest.raises(ValueError, match="is not the one this key directory joined"):
        pinning.pin_joined(fed.store, other.trust, tmp_path / "keys")
    pinning.check_joined(other.store, other.config_hash, tmp_path / "keys")  # another storage


def test_a_pin_written_first_by_another_process_is_checked(tmp_path, monkeypatch) -> None:
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, tmp_path / "keys")
    other = _create(_journal(tmp_path / "b.log"), tmp_path / "other", name=fed.name)
    home = tmp_path / "site"
    path = pinning.pin_path(fed.store, home)
    real_link = os.link

    def racing_link(source, target):  # another process pins `other` just before this one
        monkeypatch.setattr(pinning.os, "link", real_link)
        pinning.pin_joined(fed.store, other.trust, home)
        return real_link(source, target)

    monkeypatch.setattr(pinning.os, "link", racing_link)
    with pytest.raises(ValueError, match="is not the one this key directory joined"):
        pinning.pin_joined(fed.store, fed.trust, home)
    assert json.loads(path.read_text())["config"] == other.config_hash
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # the draft was removed
    path.unlink()

    def same_link(source, target):  # ... or pins the same configuration
        monkeypatch.setattr(pinning.os, "link", real_link)
        pinning.pin_joined(fed.store, fed.trust, home)
        return real_link(source, target)

    monkeypatch.setattr(pinning.os, "link", same_link)
    assert pinning.pin_joined(fed.store, fed.trust, home) is None
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    path.unlink()
    assert pinning.pin_joined(fed.store, fed.trust, home) == path  # written now


def test_a_configuration_copied_from_another_federation_is_refused(tmp_path) -> None:
    storage = _journal(tmp_path / "a.log")
    keys = tmp_path / "keys"
    first, second = _create(storage, keys), _create(storage, keys)
    _copy_config(storage, first.name, second.name)
    with pytest.raises(ValueError, match="was made for federation|is that of federation"):
        Federation.load(second.name, storage, key_dir=keys)
    site = tmp_path / "site"  # a participant elsewhere (no server keys): the name is checked
    with pytest.raises(ValueError, match=f"is that of federation '{first.name}'"):
        Federation.load(second.name, storage, key_dir=site, server_fingerprint=first.fingerprint)


def test_the_server_refuses_a_configuration_its_key_file_was_not_made_for(tmp_path) -> None:
    storage = _journal(tmp_path / "a.log")
    keys = tmp_path / "keys"
    fed = _create(storage, keys)
    key_file = ServerKeys.path(fed.federation_id, keys)
    record = json.loads(key_file.read_text())
    for changes, expected in (
        ({"config": "0" * 64}, "was made for federation .* not for the configuration"),
        ({"federation": "another"}, "was made for federation 'another'"),
        ({"config": None}, "does not name the configuration it serves"),
    ):
        key_file.write_text(json.dumps({**record, **changes}))
        with pytest.raises(ValueError, match=expected) as error:
            Federation.load(fed.name, storage, key_dir=keys)
        assert f"The server key file {key_file} " in str(error.value)  # names the file
    key_file.write_text(json.dumps(record))
    assert Federation.load(fed.name, storage, key_dir=keys).config_hash == fed.config_hash


def test_the_configuration_must_be_signed_by_the_pinned_server(tmp_path) -> None:
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, tmp_path / "keys")
    site = tmp_path / "site"
    with pytest.raises(ValueError, match="No server fingerprint is pinned"):
        Federation.load(fed.name, storage, key_dir=site)
    wrong = ServerKeys.generate().identity.fingerprint
    with pytest.raises(ValueError, match="signed by server .*, not by the pinned"):
        Federation.load(fed.name, storage, key_dir=site, server_fingerprint=wrong)
    loaded = Federation.load(fed.name, storage, key_dir=site, server_fingerprint=fed.fingerprint)
    assert loaded.config_hash == fed.config_hash and not loaded.is_operator
    main = storage.get_study_id_from_name(fed.name)
    text = storage.get_study_system_attrs(main)[CONFIG_KEY]
    storage.set_study_system_attr(main, CONFIG_KEY, text + " ")  # one byte more
    with pytest.raises(ValueError, match="does not verify"):
        Federation.load(fed.name, storage, key_dir=tmp_path / "keys")
    storage.set_study_system_attr(main, CONFIG_KEY, json.dumps({"name": fed.name}))
    with pytest.raises(ValueError, match="has no valid server identity"):
        Federation.load(fed.name, storage, key_dir=tmp_path / "keys")


def test_a_pinned_federation_lost_from_its_storage_says_so(tmp_path) -> None:
    keys = tmp_path / "keys"
    fed = _create(_journal(tmp_path / "a.log"), keys)
    (tmp_path / "a.log").unlink()
    storage = _journal(tmp_path / "a.log")  # another file at the same path: the same location
    with pytest.raises(FederationNotFoundError, match="this key directory created or joined"):
        Federation.load(fed.name, storage, key_dir=keys)
    assert pinning.lost_message(fed.store, tmp_path / "nothing") is None
    with pytest.raises(FederationNotFoundError) as error:
        Federation.load(fed.name, storage, key_dir=tmp_path / "nothing")
    assert "created or joined" not in str(error.value)


def test_a_damaged_federation_this_key_directory_pinned_says_whose_pin(tmp_path) -> None:
    keys = tmp_path / "keys"
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, keys)
    storage.delete_study(storage.get_study_id_from_name(fed.name))  # its other studies remain
    with pytest.raises(FederationDamagedError, match="is damaged") as error:
        Federation.load(fed.name, storage, key_dir=keys)
    assert f"pinned in {pinning.pin_path(fed.store, keys)}" in str(error.value)
    with pytest.raises(FederationDamagedError) as error:
        Federation.load(fed.name, storage, key_dir=tmp_path / "elsewhere")
    assert "pinned in" not in str(error.value)  # no pin here: the storage's word only


def test_a_site_refuses_another_federation_of_the_name_it_joined_in_that_storage(
    tmp_path,
) -> None:
    site = tmp_path / "site"
    first = _create(_journal(tmp_path / "a.log"), tmp_path / "op1")
    joined = Federation.load(first.name, first.storage, key_dir=site,
                             server_fingerprint=first.fingerprint)  # fmt: skip
    assert joined.trust.config_hash == first.config_hash  # what uploads are bound to
    assert pinning.pin_joined(joined.store, joined.trust, site) is not None  # as join() pins
    (tmp_path / "a.log").unlink()  # the storage replaced: the same name, another federation
    storage = _journal(tmp_path / "a.log")
    second = _create(storage, tmp_path / "op2", name=first.name)
    with pytest.raises(ValueError, match="is not the one this key directory joined"):
        Federation.load(first.name, storage, key_dir=site, server_fingerprint=second.fingerprint)


def test_the_operator_loads_a_federation_able_to_sign(tmp_path) -> None:
    storage = _journal(tmp_path / "a.log")
    fed = _create(storage, tmp_path / "keys")
    loaded = Federation.load(fed.name, storage, key_dir=tmp_path / "keys")
    assert loaded.is_operator and loaded.trust.config_hash == fed.config_hash
    assert loaded.trust.verify("p", loaded.trust.sign("p", {"x": 1})) == {"x": 1}


def test_the_pin_folder_is_private_and_refused_when_others_can_write_it(tmp_path) -> None:
    fed = _create(_journal(tmp_path / "a.log"), tmp_path / "keys")
    site = tmp_path / "site" / "keys"
    old = os.umask(0o002)
    try:
        path = pinning.pin_joined(fed.store, fed.trust, site)
    finally:
        os.umask(old)
    for folder in (site.parent / "keys", path.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    os.chmod(path.parent, 0o770)
    with pytest.raises(KeyFileError, match=f"{path.parent} can be written by other users"):
        pinning.check_joined(fed.store, fed.config_hash, site)
