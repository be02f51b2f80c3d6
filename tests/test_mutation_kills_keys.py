"""Direct, in-process tests of keys.py's checks: the signed bytes, the fingerprint, base64 and
key-file refusals. Each was written to kill mutants of ``benchmarks/mutation_trust.py`` that the
federation tests let survive (a check weakened with every test green)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
import stat

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
import pytest

from optuna_fedbo.federation import keys
from optuna_fedbo.federation.keys import KeyFileError
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.keys import ServerIdentity
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.keys import unb64
from optuna_fedbo.federation.keys import verify_signature


def _bound() -> ServerKeys:
    server = ServerKeys.generate()
    server.bind("fed", "c" * 64)
    return server


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _rewrite(path: Path, **changes: object) -> None:
    record = json.loads(path.read_text())
    record.update(changes)
    path.write_text(json.dumps(record))


def test_the_signed_bytes_are_the_documented_domain_separated_message() -> None:
    # The wire format other versions verify: "optuna-fedbo/1\n<federation id>\n<purpose>\n".
    server = ServerKeys.generate()
    fid = server.identity.federation_id
    signature = server.sign("latest", b"payload")
    public = Ed25519PublicKey.from_public_bytes(server.identity.signing_key)
    public.verify(signature, f"optuna-fedbo/1\n{fid}\nlatest\n".encode() + b"payload")
    participant = ParticipantKey.generate(fid, "alice", server.identity.fingerprint)
    signature = participant.sign("upload", b"m")
    public = Ed25519PublicKey.from_public_bytes(participant.public_key)
    public.verify(signature, f"optuna-fedbo/1\n{fid}\nupload\n".encode() + b"m")
    # Bound to federation and purpose: the same bytes under another one do not verify.
    assert server.identity.verify("latest", b"payload", server.sign("latest", b"payload"))
    assert not server.identity.verify("config", b"payload", server.sign("latest", b"payload"))
    other = ServerIdentity("0" * 32, server.identity.signing_key, server.identity.sealing_key)
    assert not other.verify("latest", b"payload", server.sign("latest", b"payload"))


def test_a_signature_check_on_a_malformed_key_or_signature_is_false_not_an_error() -> None:
    server = ServerKeys.generate()
    fid = server.identity.federation_id
    good = server.sign("p", b"m")
    key = server.identity.signing_key
    assert verify_signature(key, fid, "p", b"m", good) is True
    assert verify_signature(key[:31], fid, "p", b"m", good) is False  # not a public key
    assert verify_signature(key, fid, "p", b"m", good[:63]) is False
    assert verify_signature(key, fid, "p", b"n", good) is False


def test_the_fingerprint_is_the_documented_digest_of_the_identity() -> None:
    identity = ServerIdentity("f" * 32, bytes(range(32)), bytes(range(32, 64)))
    record = f"{'f' * 32}\n{base64.b64encode(bytes(range(32))).decode()}\n"
    record += base64.b64encode(bytes(range(32, 64))).decode()
    expected = hashlib.sha256(b"optuna-fedbo-server/1\n" + record.encode()).hexdigest()
    assert identity.fingerprint == expected


def test_unb64_refuses_what_is_not_strict_base64_of_the_length() -> None:
    assert unb64("AAEC", "x") == b"\x00\x01\x02"
    assert unb64("AAEC", "x", 3) == b"\x00\x01\x02"
    for bad in ("AA!C", "AAE", "AA!EC", "AA\nEC", "AAEC\n", None, 12):  # one text per bytes
        with pytest.raises(ValueError, match="the thing is not valid base64"):
            unb64(bad, "the thing")
    with pytest.raises(ValueError, match="the thing has 3 bytes, expected 4"):
        unb64("AAEC", "the thing", 4)


def test_the_sealing_key_is_the_identitys(tmp_path) -> None:
    server = ServerKeys.generate()
    from cryptography.hazmat.primitives import serialization

    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    assert server.identity.sealing_public_key().public_bytes(*raw) == server.identity.sealing_key
    assert server.sealing_private_key.public_key().public_bytes(*raw) == (
        server.identity.sealing_key
    )


def test_the_key_directory_is_the_argument_then_the_environment_then_the_xdg_default(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(keys.HOME_ENV, raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert keys.key_home() == tmp_path / "home" / ".config" / "optuna-fedbo"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert keys.key_home() == tmp_path / "xdg" / "optuna-fedbo"
    monkeypatch.setenv(keys.HOME_ENV, "~/fedbo-keys")
    assert keys.key_home() == tmp_path / "home" / "fedbo-keys"
    assert keys.key_home("~/given") == tmp_path / "home" / "given"
    monkeypatch.setenv(keys.HOME_ENV, "")  # empty: as if unset
    assert keys.key_home() == tmp_path / "xdg" / "optuna-fedbo"


def test_a_new_federation_id_is_128_random_bits() -> None:
    ids = {ServerKeys.generate().identity.federation_id for _ in range(3)}
    assert len(ids) == 3
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_a_server_key_file_is_private_exclusive_and_read_back_bound(tmp_path) -> None:
    with pytest.raises(ValueError, match="only once bound"):
        ServerKeys.generate().save(tmp_path)
    assert not (tmp_path / "servers").exists()
    server = _bound()
    path = server.save(tmp_path)
    assert path == tmp_path / "servers" / f"{server.identity.federation_id}.json"
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700 and _mode(tmp_path) == 0o700
    record = json.loads(path.read_text())
    assert record["type"] == keys.SERVER_KEY_TYPE and record["version"] == keys.KEY_FILE_VERSION
    assert (record["federation"], record["config"]) == ("fed", "c" * 64)
    loaded = ServerKeys.load(path)
    assert loaded.identity == server.identity and loaded.made_for == ("fed", "c" * 64)
    assert loaded.identity.verify("p", b"m", loaded.sign("p", b"m"))
    before = path.read_text()
    with pytest.raises(FileExistsError):
        server.save(tmp_path)  # never overwritten
    assert path.read_text() == before
    _rewrite(path, config=None)  # an older file: loaded, but bound to nothing
    assert ServerKeys.load(path).made_for is None


def test_a_server_key_file_whose_keys_do_not_match_is_refused(tmp_path) -> None:
    path = _bound().save(tmp_path)
    other = _bound().save(tmp_path / "other")
    good = json.loads(path.read_text())
    for field in ("signing_key", "sealing_key", "federation_id"):
        _rewrite(path, **{field: json.loads(other.read_text())[field]})
        with pytest.raises(KeyFileError, match="do not match its fingerprint"):
            ServerKeys.load(path)
        path.write_text(json.dumps(good))
    _rewrite(path, signing_key="AAAA")
    with pytest.raises(KeyFileError, match=r"corrupt \(signing key has 3 bytes"):
        ServerKeys.load(path)
    path.write_text(json.dumps({k: v for k, v in good.items() if k != "sealing_key"}))
    with pytest.raises(KeyFileError, match="corrupt"):
        ServerKeys.load(path)


@pytest.mark.parametrize("mode", [0o640, 0o620, 0o610, 0o604, 0o602, 0o601, 0o700, 0o400])
def test_a_key_file_any_other_user_can_touch_is_refused(tmp_path, mode) -> None:
    path = _bound().save(tmp_path)
    os.chmod(path, mode)
    if mode & 0o077:
        with pytest.raises(KeyFileError, match=f"mode {mode:04o}"):
            ServerKeys.load(path)
    else:  # the owner's own bits are the owner's business
        assert ServerKeys.load(path).made_for == ("fed", "c" * 64)


def test_a_key_file_that_is_missing_corrupt_or_of_another_kind_is_refused(tmp_path) -> None:
    path = _bound().save(tmp_path)
    good = path.read_text()
    with pytest.raises(KeyFileError, match="does not exist"):
        ServerKeys.load(tmp_path / "nothing.json")
    for text, error in (
        ("{not json", "corrupt"),
        ("[1]", "not a optuna-fedbo-server-key file"),
        (good.replace(keys.SERVER_KEY_TYPE, keys.PARTICIPANT_KEY_TYPE), "not a optuna-fedbo-s"),
        (good.replace('"version": 1', '"version": 2'), "unsupported version 2"),
    ):
        path.write_text(text)
        with pytest.raises(KeyFileError, match=error):
            ServerKeys.load(path)
    path.unlink()
    path.mkdir(mode=0o700)  # cannot be read as a file
    with pytest.raises(KeyFileError, match=r"corrupt \(IsADirectoryError\)"):
        ServerKeys.load(path)


def test_a_credential_is_private_and_its_two_keys_must_agree(tmp_path) -> None:
    fp = ServerKeys.generate().identity.fingerprint
    alice = ParticipantKey.generate("f" * 32, "alice", fp.upper())
    assert alice.server_fingerprint == fp and alice.has_private_key
    target = tmp_path / "out" / "alice.json"
    assert alice.save("fed", target) == target
    assert _mode(target) == 0o600 and _mode(target.parent) == 0o700
    record = json.loads(target.read_text())
    assert record["type"] == keys.PARTICIPANT_KEY_TYPE and record["federation"] == "fed"
    loaded = ParticipantKey.load(target)
    assert (loaded.federation_id, loaded.client_id, loaded.public_key) == (
        "f" * 32,
        "alice",
        alice.public_key,
    )
    assert verify_signature(alice.public_key, "f" * 32, "p", b"m", loaded.sign("p", b"m"))
    assert alice.save("fed", target) == target  # an explicit path may be overwritten
    other = Ed25519PrivateKey.generate().public_key()
    from cryptography.hazmat.primitives import serialization

    raw = other.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    _rewrite(target, public_key=base64.b64encode(raw).decode())
    with pytest.raises(KeyFileError, match="private and public key differ"):
        ParticipantKey.load(target)
    _rewrite(target, public_key="AAAA")
    with pytest.raises(KeyFileError, match="corrupt"):
        ParticipantKey.load(target)
    public_only = ParticipantKey("f" * 32, "bob", None, fp, public_key=raw)
    assert not public_only.has_private_key and "signing_key" not in public_only.to_record("f")
    with pytest.raises(ValueError, match="holds no private key"):
        public_only.sign("p", b"m")
    with pytest.raises(ValueError, match="holds no private key"):
        public_only.derive_secret("p")
    with pytest.raises(ValueError, match="needs a private or a public key"):
        ParticipantKey("f" * 32, "bob", None, fp)


def test_a_participants_derived_secret_is_bound_to_federation_participant_and_purpose() -> None:
    fp = ServerKeys.generate().identity.fingerprint
    signing = Ed25519PrivateKey.generate()
    alice = ParticipantKey("f" * 32, "alice", signing, fp)
    secret = alice.derive_secret("seal")
    assert len(secret) == 32 and secret == alice.derive_secret("seal")
    assert secret != alice.derive_secret("other")
    assert secret != ParticipantKey("e" * 32, "alice", signing, fp).derive_secret("seal")
    assert secret != ParticipantKey("f" * 32, "bob", signing, fp).derive_secret("seal")
    assert secret != ParticipantKey(
        "f" * 32, "alice", Ed25519PrivateKey.generate(), fp
    ).derive_secret("seal")


def test_a_key_file_copied_under_another_federation_or_participant_is_refused(tmp_path) -> None:
    server = _bound()
    path = server.save(tmp_path)
    fid = server.identity.federation_id
    assert keys.find_server_keys(fid, tmp_path).identity == server.identity
    assert keys.find_server_keys("0" * 32, tmp_path) is None
    copy = ServerKeys.path("0" * 32, tmp_path)
    copy.write_bytes(path.read_bytes())
    os.chmod(copy, 0o600)
    with pytest.raises(KeyFileError, match="belongs to another federation"):
        keys.find_server_keys("0" * 32, tmp_path)
    alice = ParticipantKey.generate(fid, "alice", server.identity.fingerprint)
    source = alice.save("fed", key_dir=tmp_path)
    assert source == ParticipantKey.path(fid, "alice", tmp_path)
    assert keys.find_participant_key(fid, "alice", tmp_path).public_key == alice.public_key
    assert keys.find_participant_key(fid, "bob", tmp_path) is None
    for other_fid, other_id in ((fid, "bob"), ("0" * 32, "alice")):
        copy = ParticipantKey.path(other_fid, other_id, tmp_path)
        copy.parent.mkdir(mode=0o700, exist_ok=True)
        copy.write_bytes(source.read_bytes())
        os.chmod(copy, 0o600)
        with pytest.raises(KeyFileError, match="another federation or participant"):
            keys.find_participant_key(other_fid, other_id, tmp_path)


def test_the_pinned_fingerprint_comes_from_the_server_key_or_a_credential(tmp_path) -> None:
    server = _bound()
    fid, fp = server.identity.federation_id, server.identity.fingerprint
    assert keys.pinned_fingerprint(fid, tmp_path) is None
    ParticipantKey.generate(fid, "alice", fp).save("fed", key_dir=tmp_path)
    assert keys.pinned_fingerprint(fid, tmp_path) == fp
    assert keys.pinned_fingerprint("0" * 32, tmp_path) is None
    os.chmod(tmp_path / "participants" / fid, 0o770)
    with pytest.raises(KeyFileError, match="can be written by other users"):
        keys.pinned_fingerprint(fid, tmp_path)
    os.chmod(tmp_path / "participants" / fid, 0o700)
    other = ServerKeys.generate().identity.fingerprint
    keys.remember(fid, "bob", ParticipantKey.generate(fid, "bob", other))
    try:
        assert keys.pinned_fingerprint(fid, tmp_path) == other  # this process's first
    finally:
        keys.forget(fid)
    assert keys.pinned_fingerprint(fid, tmp_path) == fp
    server.save(tmp_path)
    assert keys.pinned_fingerprint(fid, tmp_path) == fp


def test_a_key_folder_others_can_write_is_refused_down_to_the_file(tmp_path) -> None:
    home = tmp_path / "home"
    folder = home / "participants" / ("f" * 32)
    folder.mkdir(parents=True, mode=0o700)
    os.chmod(home, 0o700)
    os.chmod(home / "participants", 0o700)
    keys.check_key_folders(folder, home)  # all private
    keys.check_key_folders(home / "nothing" / "here", home)  # not made yet: nothing to check
    for each in (home, home / "participants", folder):
        for mode in (0o720, 0o702):
            os.chmod(each, mode)
            with pytest.raises(KeyFileError, match=f"{each} can be written.*{mode:04o}"):
                keys.check_key_folders(folder, home)
        os.chmod(each, 0o755)  # readable and searchable by others is fine
        keys.check_key_folders(folder, home)
    outside = tmp_path / "elsewhere"
    outside.mkdir(mode=0o777)
    os.chmod(outside, 0o777)
    keys.check_key_folders(outside, home)  # only the key directory and what is inside it


def test_key_folders_are_made_private_whatever_the_umask(tmp_path) -> None:
    old = os.umask(0o002)
    try:
        server = _bound()
        server.save(tmp_path / "home")
        fp = server.identity.fingerprint
        alice = ParticipantKey.generate(server.identity.federation_id, "alice", fp)
        path = alice.save("fed", key_dir=tmp_path / "home")
    finally:
        os.umask(old)
    for folder in (tmp_path / "home", tmp_path / "home" / "servers", path.parent.parent):
        assert _mode(folder) == 0o700, folder
    assert _mode(path.parent) == 0o700 and _mode(path) == 0o600
    with pytest.raises(FileExistsError):  # a credential in the key directory: never replaced
        alice.save("fed", key_dir=tmp_path / "home")


def test_importing_a_credential_installs_it_once_and_never_replaces_another(tmp_path) -> None:
    fp = ServerKeys.generate().identity.fingerprint
    alice = ParticipantKey.generate("f" * 32, "alice", fp)
    source = alice.save("fed", tmp_path / "alice.json")
    home = tmp_path / "home"
    target = keys.import_credential(source, home)
    assert target == ParticipantKey.path("f" * 32, "alice", home) and _mode(target) == 0o600
    assert json.loads(target.read_text()) == json.loads(source.read_text())
    assert keys.import_credential(source, home) == target  # the same again: a no-op
    public = ParticipantKey("f" * 32, "alice", None, fp, public_key=alice.public_key)
    public_file = public.save("fed", tmp_path / "public.json")
    assert keys.import_credential(public_file, home) == target
    assert ParticipantKey.load(target).has_private_key  # the private key was not dropped
    target.unlink()
    keys.import_credential(public_file, home)
    assert not ParticipantKey.load(target).has_private_key
    keys.import_credential(source, home)  # the private key of the same public key: completes it
    assert ParticipantKey.load(target).has_private_key
    other = ParticipantKey.generate("f" * 32, "alice", fp).save("fed", tmp_path / "other.json")
    before = target.read_text()
    with pytest.raises(KeyFileError, match="Another key of 'alice' is installed"):
        keys.import_credential(other, home)
    assert target.read_text() == before
    os.chmod(target.parent, 0o770)
    with pytest.raises(KeyFileError, match="can be written by other users"):
        keys.import_credential(source, home)


def test_keys_are_found_in_this_process_first_and_in_private_folders_only(tmp_path) -> None:
    server = _bound()
    fid = server.identity.federation_id
    alice = ParticipantKey.generate(fid, "alice", server.identity.fingerprint)
    keys.remember(fid, None, server)
    keys.remember(fid, "alice", alice)
    try:
        assert keys.find_server_keys(fid, tmp_path) is server
        assert keys.find_participant_key(fid, "alice", tmp_path) is alice
        assert not (tmp_path / "servers").exists()  # never written
    finally:
        keys.forget(fid)
    assert keys.find_server_keys(fid, tmp_path) is None
    assert keys.find_participant_key(fid, "alice", tmp_path) is None
    server.save(tmp_path)
    alice.save("fed", key_dir=tmp_path)
    for folder in (tmp_path / "servers", tmp_path / "participants" / fid):
        os.chmod(folder, 0o722)
        with pytest.raises(KeyFileError, match=f"{folder} can be written"):
            keys.find_server_keys(fid, tmp_path)
            keys.find_participant_key(fid, "alice", tmp_path)
        os.chmod(folder, 0o700)
    assert keys.find_server_keys(fid, tmp_path).identity == server.identity
    assert keys.find_participant_key(fid, "alice", tmp_path).public_key == alice.public_key


def test_a_server_identity_with_a_short_key_is_refused() -> None:
    good = ServerKeys.generate().identity.to_dict()
    short = base64.b64encode(bytes(31)).decode()
    for field in ("sign", "seal"):
        with pytest.raises(ValueError, match="has 31 bytes, expected 32"):
            ServerIdentity.from_dict({**good, field: short})


def test_a_credential_lives_at_its_documented_path(tmp_path) -> None:
    name = hashlib.sha256(b"alice").hexdigest()[:24]
    expected = tmp_path / "participants" / ("f" * 32) / f"{name}.json"
    assert ParticipantKey.path("f" * 32, "alice", tmp_path) == expected


def test_a_public_only_credential_with_a_short_public_key_is_refused(tmp_path) -> None:
    fp = ServerKeys.generate().identity.fingerprint
    alice = ParticipantKey.generate("f" * 32, "alice", fp)
    public = ParticipantKey("f" * 32, "alice", None, fp, public_key=alice.public_key)
    path = public.save("fed", tmp_path / "public.json")
    assert ParticipantKey.load(path).public_key == alice.public_key
    _rewrite(path, public_key=base64.b64encode(alice.public_key[:31]).decode())
    with pytest.raises(KeyFileError, match="corrupt .*public key has 31 bytes"):
        ParticipantKey.load(path)


def test_the_server_key_file_pins_the_fingerprint_before_any_credential(tmp_path) -> None:
    server = _bound()
    fid, fp = server.identity.federation_id, server.identity.fingerprint
    server.save(tmp_path)
    assert keys.pinned_fingerprint(fid, tmp_path) == fp  # the server key file alone
    other = ServerKeys.generate().identity.fingerprint
    ParticipantKey.generate(fid, "alice", other).save("fed", key_dir=tmp_path)
    assert keys.pinned_fingerprint(fid, tmp_path) == fp  # the server's, not a credential's


def test_a_credential_of_another_federation_held_in_memory_pins_nothing(tmp_path) -> None:
    fp = ServerKeys.generate().identity.fingerprint
    keys.remember("e" * 32, "bob", ParticipantKey.generate("e" * 32, "bob", fp))
    try:
        assert keys.pinned_fingerprint("f" * 32, tmp_path) is None
    finally:
        keys.forget("e" * 32)


def test_importing_an_installed_credential_again_leaves_the_file_untouched(tmp_path) -> None:
    fp = ServerKeys.generate().identity.fingerprint
    home = tmp_path / "home"
    for private in (True, False):
        alice = ParticipantKey.generate(f"{int(private)}" * 32, "alice", fp)
        if not private:
            alice = ParticipantKey(alice.federation_id, "alice", None, fp, alice.public_key)
        source = alice.save("fed", tmp_path / f"alice-{private}.json")
        target = keys.import_credential(source, home)
        target.write_text(json.dumps(json.loads(target.read_text())))  # as another version wrote
        installed = target.read_text()
        _rewrite(source, federation="renamed")
        assert keys.import_credential(source, home) == target
        assert target.read_text() == installed


def test_an_imported_credential_makes_its_folders_private_whatever_the_umask(tmp_path) -> None:
    fp = ServerKeys.generate().identity.fingerprint
    source = ParticipantKey.generate("f" * 32, "alice", fp).save("fed", tmp_path / "a.json")
    old = os.umask(0o002)
    try:
        target = keys.import_credential(source, tmp_path / "home")
    finally:
        os.umask(old)
    for folder in (tmp_path / "home", tmp_path / "home" / "participants", target.parent):
        assert _mode(folder) == 0o700, folder


def test_every_folder_between_the_key_directory_and_a_deep_folder_is_checked(tmp_path) -> None:
    home = tmp_path / "home"
    deep = home / "a" / "b" / "c"
    deep.mkdir(parents=True)
    for folder in (home, home / "a", home / "a" / "b", deep):
        os.chmod(folder, 0o700)
    keys.check_key_folders(deep, home)
    for folder in (home / "a", home / "a" / "b"):
        os.chmod(folder, 0o770)
        with pytest.raises(KeyFileError, match=f"{folder} can be written"):
            keys.check_key_folders(deep, home)
        os.chmod(folder, 0o700)


def test_key_files_are_written_where_no_folder_exists_yet(tmp_path) -> None:
    server = _bound()
    path = server.save(tmp_path / "a" / "b" / "home")  # the key directory's parents too
    assert ServerKeys.load(path).identity == server.identity
    fp = server.identity.fingerprint
    alice = ParticipantKey.generate("f" * 32, "alice", fp)
    target = alice.save("fed", tmp_path / "x" / "y" / "alice.json")  # an explicit path
    assert ParticipantKey.load(target).public_key == alice.public_key


def test_a_key_file_is_private_from_the_moment_it_is_created(tmp_path, monkeypatch) -> None:
    # The final chmod is not what protects it: a reader between the create and the chmod (or a
    # crash in between) finds a file only its owner can open.
    monkeypatch.setattr(os, "chmod", lambda *args, **kwargs: None)
    old = os.umask(0o000)
    try:
        path = _bound().save(tmp_path)
    finally:
        os.umask(old)
    assert _mode(path) == 0o600
