"""Keys and identity: server keys, pinned fingerprints, signed configuration, enrollment, and the
one-line errors (nothing written to the storage) for bad keys."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
import stat

from _storage_snapshot import snapshot
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from optuna.distributions import FloatDistribution
from optuna.storages import InMemoryStorage
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.keys import check_fingerprint
from optuna_fedbo.federation.keys import find_server_keys
from optuna_fedbo.federation.keys import KeyFileError
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.keys import ServerIdentity
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.records import CONFIG_KEY
from optuna_fedbo.federation.records import ENROLLMENT_KEY
from optuna_fedbo.federation.storages import resolve_storage
from optuna_fedbo.federation.trust import Trust

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _create(storage: object, key_dir: Path, n_clients: int = 3) -> Federation:
    return Federation.create(
        f"keys-{next(_names)}",
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=FTSConfig(n_features=4, n_init=1),
        key_dir=key_dir,
    )


@pytest.fixture
def sqlite(tmp_path: Path) -> object:
    return resolve_storage(f"sqlite:///{tmp_path / 'fed.db'}")


def test_create_writes_a_private_key_file_and_signs_the_configuration(tmp_path, sqlite) -> None:
    fed = _create(sqlite, tmp_path / "operator")
    path = ServerKeys.path(fed.federation_id, tmp_path / "operator")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    keys = ServerKeys.load(path)
    assert keys.identity.fingerprint == fed.fingerprint
    stored = json.loads(fed.store.main_attrs()[CONFIG_KEY])
    # The public keys are in the hashed configuration; no private key is in the storage.
    assert stored["server"] == keys.identity.to_dict()
    record = json.loads(path.read_text())
    text = json.dumps(snapshot(sqlite), default=str)
    assert record["signing_key"] not in text and record["sealing_key"] not in text
    loaded = Federation.load(fed.name, sqlite, key_dir=tmp_path / "operator")
    assert loaded.is_operator and loaded.config_hash == fed.config_hash


def test_in_memory_keys_never_touch_the_disk(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OPTUNA_FEDBO_HOME", str(tmp_path / "home"))
    fed = Federation.create(
        "mem", search_space=SPACE, n_clients=2, storage=InMemoryStorage(), protocol=FTSConfig()
    )
    fed.join("a")
    assert Federation.load("mem", fed.storage).is_operator
    assert not (tmp_path / "home").exists()


def test_a_participant_elsewhere_needs_the_pinned_fingerprint(tmp_path, sqlite) -> None:
    fed = _create(sqlite, tmp_path / "operator")
    elsewhere = tmp_path / "site"
    with pytest.raises(ValueError, match="No server fingerprint is pinned.*import-credential"):
        Federation.load(fed.name, sqlite, key_dir=elsewhere)
    with pytest.raises(ValueError, match="not by the pinned"):
        Federation.load(fed.name, sqlite, key_dir=elsewhere, server_fingerprint="ab" * 32)
    with pytest.raises(ValueError, match="is not a server fingerprint"):
        Federation.load(fed.name, sqlite, key_dir=elsewhere, server_fingerprint="abc")
    site = Federation.load(fed.name, sqlite, key_dir=elsewhere, server_fingerprint=fed.fingerprint)
    assert not site.is_operator


def test_a_rewritten_configuration_is_refused(tmp_path, sqlite) -> None:
    fed = _create(sqlite, tmp_path / "operator")
    main_id = sqlite.get_study_id_from_name(fed.name)
    record = json.loads(fed.store.main_attrs()[CONFIG_KEY])
    record["protocol"]["n_features"] = 99  # e.g. z 1 -> 0.1 under DP: any change
    sqlite.set_study_system_attr(main_id, CONFIG_KEY, json.dumps(record))
    with pytest.raises(ValueError, match="does not verify"):
        Federation.load(fed.name, sqlite, key_dir=tmp_path / "operator")
    # A configuration re-signed by an attacker's own server key fails the pin instead.
    attacker = ServerKeys.generate()
    record["server"] = {**attacker.identity.to_dict(), "id": fed.federation_id}
    sqlite.set_study_system_attr(main_id, CONFIG_KEY, json.dumps(record))
    with pytest.raises(ValueError, match="not by the pinned"):
        Federation.load(fed.name, sqlite, key_dir=tmp_path / "operator")


def test_enrollment_is_operator_driven_and_ids_cannot_be_squatted(tmp_path, sqlite) -> None:
    fed = _create(sqlite, tmp_path / "operator")
    site = Federation.load(
        fed.name, sqlite, key_dir=tmp_path / "site", server_fingerprint=fed.fingerprint
    )
    before = snapshot(sqlite)
    with pytest.raises(ValueError, match="not enrolled.*optuna-fedbo enroll"):
        site.join("site-1")
    with pytest.raises(ValueError, match="Only the operator"):
        site.enroll("site-1")
    assert snapshot(sqlite) == before  # nothing written
    # A squatter writing its own (unsigned) enrollment record gets nothing.
    site.store.register("site-1", json.dumps({"body": {"client": "site-1"}, "sig": "AA=="}))
    assert site.participants() == []
    credential = fed.enroll("site-1")
    assert site.participants() == ["site-1"]
    with pytest.raises(ValueError, match="private key is not on this machine"):
        site.join("site-1")
    path = tmp_path / "site-1.cred"
    credential.save(fed.name, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    from optuna_fedbo.federation.keys import import_credential

    import_credential(path, tmp_path / "site")
    assert site.join("site-1").index == 0
    # The credential pins the server: a fresh load on the site needs no fingerprint.
    again = Federation.load(fed.name, sqlite, key_dir=tmp_path / "site")
    assert again.join("site-1").index == 0


def test_corrupt_and_world_readable_key_files_give_one_line_errors(tmp_path, sqlite) -> None:
    fed = _create(sqlite, tmp_path / "operator")
    path = ServerKeys.path(fed.federation_id, tmp_path / "operator")
    before = snapshot(sqlite)
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match=r"chmod 600") as error:
        Federation.load(fed.name, sqlite, key_dir=tmp_path / "operator")
    assert "\n" not in str(error.value)
    os.chmod(path, 0o600)
    path.write_text("{garbage")
    with pytest.raises(KeyFileError, match="corrupt.*backup") as error:
        Federation.load(fed.name, sqlite, key_dir=tmp_path / "operator")
    assert "\n" not in str(error.value)
    assert snapshot(sqlite) == before


def test_a_participant_key_that_is_not_the_enrolled_one_is_refused(tmp_path, sqlite) -> None:
    fed = _create(sqlite, tmp_path / "operator")
    fed.enroll("site-1")
    site_dir = tmp_path / "site"
    site = Federation.load(fed.name, sqlite, key_dir=site_dir, server_fingerprint=fed.fingerprint)
    ParticipantKey.generate(fed.federation_id, "site-1", fed.fingerprint).save(
        fed.name, key_dir=site_dir
    )
    before = snapshot(sqlite)
    with pytest.raises(ValueError, match="not the one enrolled"):
        site.join("site-1")
    assert snapshot(sqlite) == before


def test_on_one_machine_join_enrolls_with_a_key_in_the_key_directory(tmp_path, sqlite) -> None:
    fed = _create(sqlite, tmp_path / "operator")
    participant = Federation.load(fed.name, sqlite, key_dir=tmp_path / "operator")
    assert participant.join("a").index == 0 and participant.join("b").index == 1
    key_path = ParticipantKey.path(fed.federation_id, "a", tmp_path / "operator")
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert find_server_keys(fed.federation_id, tmp_path / "operator") is not None
    assert fed.participants() == ["a", "b"]


def test_the_cli_hands_out_fingerprint_and_credentials(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'fed.db'}"
    operator, site = str(tmp_path / "operator"), str(tmp_path / "site")
    space = json.dumps({"x": {"name": "FloatDistribution", "attributes": {"low": 0, "high": 1}}})
    common = ["--storage", url, "--name", "cli"]
    assert cli_main(["create", *common, "--search-space", space, "--n-clients", "2",
                     "--key-dir", operator]) == 0  # fmt: skip
    assert cli_main(["fingerprint", *common, "--key-dir", operator]) == 0
    fingerprint = capsys.readouterr().out.strip().splitlines()[-1]
    cred = str(tmp_path / "s1.cred")
    assert cli_main(["enroll", *common, "--key-dir", operator, "--client-id", "s1",
                     "--out", cred]) == 0  # fmt: skip
    assert cli_main(["import-credential", cred, "--key-dir", site]) == 0
    # keygen: a site that keeps its private key to itself.
    assert cli_main(["keygen", *common, "--key-dir", site, "--client-id", "s2",
                     "--server-fingerprint", fingerprint]) == 0  # fmt: skip
    public_key = capsys.readouterr().out.strip().splitlines()[-1]
    s2 = str(tmp_path / "s2.cred")
    assert cli_main(["enroll", *common, "--key-dir", operator, "--client-id", "s2",
                     "--public-key", public_key, "--out", s2]) == 0  # fmt: skip
    fed = Federation.load("cli", url, key_dir=site)
    assert fed.fingerprint == fingerprint
    assert [fed.join(c).index for c in ("s1", "s2")] == [0, 1]
    capsys.readouterr()
    assert cli_main(["status", *common, "--key-dir", str(tmp_path / "nobody")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "server_fingerprint" in err


def _server_forger(federation_id: str) -> Trust:
    """A signer with the federation's id but its own random key (anyone can make one)."""
    keys = ServerKeys(federation_id, Ed25519PrivateKey.generate(), X25519PrivateKey.generate())
    return Trust(keys.identity, "0" * 64, keys)


def test_an_enrollment_signed_by_another_key_is_refused_for_its_signature(
    tmp_path, sqlite, caplog, propagate
) -> None:
    fed = _create(sqlite, tmp_path / "operator")
    fed.join("alice")
    mallory = ParticipantKey.generate(fed.federation_id, "mallory", fed.fingerprint)
    # Well-formed in every respect (the server's record format, mallory's own id and key, the
    # federation's id), so that only the signature can tell it from a real enrollment.
    forged = _server_forger(fed.federation_id).enrollment("mallory", mallory.public_key)
    assert set(json.loads(forged)) == {"body", "sig"}
    fed.store.register("mallory", forged)
    site = Federation.load(fed.name, sqlite, key_dir=tmp_path / "operator")
    assert site.participants() == ["alice"]
    assert site.public_key_of("mallory") is None
    assert "not signed by the server" in caplog.text
    mallory.save(fed.name, key_dir=tmp_path / "mallory")
    with pytest.raises(ValueError, match="not enrolled"):
        Federation.load(fed.name, sqlite, key_dir=tmp_path / "mallory").join("mallory")


def test_a_genuine_enrollment_copied_under_another_id_is_refused_for_its_id(
    tmp_path, sqlite, caplog, propagate
) -> None:
    fed = _create(sqlite, tmp_path / "operator")
    fed.join("alice")
    roster_id = sqlite.get_study_id_from_name(fed.store.participants_study_name)
    trials = sqlite.get_all_trials(roster_id)
    genuine = trials[0].system_attrs[ENROLLMENT_KEY]
    fed.store.register("mallory", genuine)  # alice's signed record, filed under "mallory"
    site = Federation.load(fed.name, sqlite, key_dir=tmp_path / "operator")
    assert site.participants() == ["alice"]
    assert site.public_key_of("mallory") is None
    assert "names another participant" in caplog.text


#: Every mode with a group or other bit set on a key file (read, write or execute).
_OPEN_MODES = (0o640, 0o604, 0o660, 0o620, 0o602, 0o610, 0o601, 0o644)


def test_a_key_file_others_can_read_write_or_run_is_refused(tmp_path, sqlite) -> None:
    operator = tmp_path / "operator"
    fed = _create(sqlite, operator)
    fed.join("alice")
    before = snapshot(sqlite)
    for path in (
        ServerKeys.path(fed.federation_id, operator),
        ParticipantKey.path(fed.federation_id, "alice", operator),
    ):
        for mode in _OPEN_MODES:
            os.chmod(path, mode)
            with pytest.raises(KeyFileError, match=rf"mode {mode:04o}.*chmod 600") as error:
                Federation.load(fed.name, sqlite, key_dir=operator).join("alice")
            assert str(path) in str(error.value) and "\n" not in str(error.value)
        os.chmod(path, 0o600)
        assert Federation.load(fed.name, sqlite, key_dir=operator).join("alice").index == 0
    assert snapshot(sqlite) == before


@pytest.mark.parametrize("folder", ["", "servers", "participants", "joined"])
def test_a_key_directory_others_can_write_is_refused_with_the_fix(
    tmp_path, sqlite, folder
) -> None:
    operator = tmp_path / "operator"
    fed = _create(sqlite, operator)
    fed.join("alice")
    open_folder = operator / folder
    before = snapshot(sqlite)
    for mode in (0o777, 0o770, 0o720, 0o702, 0o1777):
        os.chmod(open_folder, mode)
        with pytest.raises(KeyFileError, match=rf"{open_folder}.*mode {mode:04o}") as error:
            Federation.load(fed.name, sqlite, key_dir=operator).join("alice")
        assert f"chmod go-w {open_folder}" in str(error.value) and "\n" not in str(error.value)
    assert snapshot(sqlite) == before
    os.chmod(open_folder, 0o755)  # readable by others is fine: the key files are 0600
    assert Federation.load(fed.name, sqlite, key_dir=operator).join("alice").index == 0


def test_key_folders_are_made_for_their_owner_only(tmp_path, sqlite) -> None:
    old = os.umask(0o002)  # a umask that leaves folders group-writable
    try:
        fed = _create(sqlite, tmp_path / "a" / "operator")
        fed.join("alice")
    finally:
        os.umask(old)
    home = tmp_path / "a" / "operator"
    for folder in (home, home / "servers", home / "participants", home / "joined"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert Federation.load(fed.name, sqlite, key_dir=home).join("alice").index == 0


def test_a_fingerprint_is_read_in_any_printed_form_and_nothing_else() -> None:
    fp = ServerKeys.generate().identity.fingerprint
    pairs = ":".join(fp[i : i + 2] for i in range(0, 64, 2))
    for written in (
        fp,
        fp.upper(),
        f"sha256:{fp}",
        f"  SHA256:{pairs.upper()} ",
        fp[:32] + " " + fp[32:],
    ):
        assert check_fingerprint(written) == fp
    for bad in (fp[:-1], fp + "0", f"{fp}sha256:", "g" * 64, f"md5:{fp}", 64):
        with pytest.raises(ValueError):
            check_fingerprint(bad)


def test_a_malformed_server_identity_is_refused() -> None:
    good = ServerKeys.generate().identity.to_dict()
    assert ServerIdentity.from_dict(good).to_dict() == good
    for length in (8, 64):  # the bounds of a federation id, both inclusive
        assert ServerIdentity.from_dict({**good, "id": "f" * length}).federation_id == "f" * length
    for bad in (
        {**good, "extra": "x"},
        {k: v for k, v in good.items() if k != "seal"},
        {**good, "id": "f" * 7},
        {**good, "id": "x" * 65},
        {**good, "id": 12345678},
        {**good, "sign": good["seal"][:-4]},
        [good],
    ):
        with pytest.raises(ValueError, match="malformed|bytes|base64"):
            ServerIdentity.from_dict(bad)
