"""A federation is the identity a participant joined: swapped storages and copied configurations
(validly signed, by a server whose keys are on this machine) are refused, with one line naming
what happened and the fix, exit status 2 for the CLI, and nothing written to the storage
(real SQLite files; the restarted server is a real process)."""

from __future__ import annotations

import json
import os
from pathlib import Path
import re
import shutil
import stat
import subprocess
import sys

from _storage_snapshot import snapshot
from optuna.distributions import FloatDistribution
from optuna.storages import InMemoryStorage
import pytest

from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationNotFoundError
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.keys import _write_private
from optuna_fedbo.federation.keys import import_credential
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.pinning import pin_joined
from optuna_fedbo.federation.pinning import pin_path
from optuna_fedbo.federation.pinning import storage_location
from optuna_fedbo.federation.records import CONFIG_HASH_KEY
from optuna_fedbo.federation.records import CONFIG_KEY
from optuna_fedbo.federation.records import CONFIG_SIGNATURE_KEY
from optuna_fedbo.federation.storages import resolve_storage

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
PROTOCOL = FTSConfig(n_features=4, n_init=1, aggregation="weighted")
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}


def _create(name: str, url: str, key_dir: Path, *, dp: bool) -> Federation:
    return Federation.create(
        name,
        search_space=SPACE,
        n_clients=4,
        storage=url,
        protocol=PROTOCOL,
        privacy=DPConfig(1.0, 0.5, 3.0) if dp else None,
        key_dir=key_dir,
    )


def _snapshot(url: str) -> list:
    return snapshot(resolve_storage(url))


def _copy_config(url: str, source: str, target: str) -> None:
    """The attack: write ``source``'s signed configuration into ``target``'s main study."""
    storage = resolve_storage(url)
    attrs = storage.get_study_system_attrs(storage.get_study_id_from_name(source))
    target_id = storage.get_study_id_from_name(target)
    for key in (CONFIG_HASH_KEY, CONFIG_SIGNATURE_KEY, CONFIG_KEY):
        storage.set_study_system_attr(target_id, key, attrs[key])


def _cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    status = cli_main(list(argv))
    return status, capsys.readouterr().err.strip()


def test_a_swapped_storage_holding_a_federation_of_the_same_name_is_refused(
    tmp_path: Path, capsys
) -> None:
    # One machine, one key directory: DP federation "fed" in a.db (where site alice joined),
    # and another federation "fed", without DP, in b.db.
    keys = tmp_path / "keys"
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    a = _create("fed", a_url, keys, dp=True)
    Federation.load("fed", a_url, key_dir=keys).join("alice")
    b = _create("fed", b_url, keys, dp=False)
    assert a.privacy is not None and b.privacy is None
    # Site carol, on another machine, is enrolled in both and joined both.
    carol = tmp_path / "carol"
    for fed, url in ((a, a_url), (b, b_url)):
        path = tmp_path / f"{fed.federation_id}.cred"
        fed.enroll("carol").save(fed.name, path)
        import_credential(path, carol)
        Federation.load("fed", url, key_dir=carol).join("carol")
    # The attack: a.db replaced by a copy of b.db (both validly signed, both keys on this machine).
    shutil.copyfile(tmp_path / "b.db", tmp_path / "swap.db")
    os.replace(tmp_path / "swap.db", tmp_path / "a.db")
    before = _snapshot(a_url)
    with pytest.raises(ValueError, match="not the one this key directory joined") as error:
        Federation.load("fed", a_url, key_dir=keys)
    message = str(error.value)
    assert "\n" not in message and str(pin_path(a.store, keys)) in message
    assert a.config_hash[:12] in message and b.config_hash[:12] in message
    with pytest.raises(ValueError, match="not the one this key directory joined"):
        Federation.load("fed", a_url, key_dir=carol)
    with pytest.raises(ValueError, match="not the one this key directory joined"):
        Federation.create(
            "fed",
            search_space=SPACE,
            n_clients=4,
            storage=a_url,
            protocol=PROTOCOL,
            key_dir=keys,
            load_if_exists=True,
        )
    # The operator's restarted server (a real process) refuses too, with exit status 2.
    server = subprocess.run(
        [sys.executable, "-m", "optuna_fedbo.federation.cli", "serve", "--storage", a_url,
         "--name", "fed", "--key-dir", str(keys), "--max-rounds", "1", "--timeout", "30"],
        capture_output=True, text=True, env=ENV, timeout=120,
    )  # fmt: skip
    assert server.returncode == 2, server.stderr
    assert server.stderr.count("\n") == 1 and "not the one this key directory joined" in (
        server.stderr
    )
    status, err = _cli(
        capsys, "status", "--storage", a_url, "--name", "fed", "--key-dir", str(keys)
    )
    assert status == 2 and err.count("\n") == 0 and "not the one this key directory joined" in err
    assert _snapshot(a_url) == before  # nothing written
    # Each federation still loads from its own storage.
    assert Federation.load("fed", b_url, key_dir=keys).config_hash == b.config_hash
    assert Federation.load("fed", b_url, key_dir=keys).join("alice").index == 1
    assert Federation.load("fed", b_url, key_dir=carol).join("carol").index == 0


def test_a_configuration_copied_between_two_federations_in_one_storage_is_refused(
    tmp_path: Path, capsys
) -> None:
    url = f"sqlite:///{tmp_path / 'fed.db'}"
    operator, site, other = tmp_path / "operator", tmp_path / "site", tmp_path / "other"
    a = _create("fed", url, operator, dp=True)
    b = _create("fed-b", url, operator, dp=False)
    # Site alice is enrolled in both (credentials from the operator); bob only in fed-b, so
    # that on bob's machine only the name bound in the configuration tells the copy.
    for fed, client, key_dir in ((a, "alice", site), (b, "alice", site), (b, "bob", other)):
        path = tmp_path / f"{fed.name}-{client}.cred"
        fed.enroll(client).save(fed.name, path)
        import_credential(path, key_dir)
        Federation.load(fed.name, url, key_dir=key_dir).join(client)
    _copy_config(url, "fed-b", "fed")  # B's non-DP protocol under A's name
    before = _snapshot(url)
    for key_dir in (site, other):
        with pytest.raises(ValueError, match="that of federation 'fed-b'.*copied") as error:
            Federation.load("fed", url, key_dir=key_dir)
        assert "\n" not in str(error.value)
    # The operator's restarted server: its key file of fed-b was not made for "fed".
    status, err = _cli(capsys, "serve", "--storage", url, "--name", "fed", "--key-dir",
                       str(operator), "--max-rounds", "1", "--timeout", "5")  # fmt: skip
    assert status == 2 and err.count("\n") == 0
    assert str(ServerKeys.path(b.federation_id, operator)) in err
    assert "was made for federation 'fed-b'" in err
    assert _snapshot(url) == before  # nothing written
    # fed-b itself is untouched and loads under its own name.
    assert Federation.load("fed-b", url, key_dir=other).join("bob").index == 1


def test_a_server_key_file_serves_only_the_configuration_it_was_made_for(
    tmp_path: Path, capsys
) -> None:
    url = f"sqlite:///{tmp_path / 'fed.db'}"
    keys = tmp_path / "keys"
    a = _create("fed", url, keys, dp=True)
    b = _create("fed-b", url, keys, dp=False)
    _copy_config(url, "fed-b", "fed")
    # Even without the key directory's pin (e.g. removed), the server refuses: the key file it
    # finds (fed-b's) names the configuration it serves, which is not the one stored as "fed".
    pin_path(a.store, keys).unlink()
    before = _snapshot(url)
    with pytest.raises(ValueError, match="key file .* was made for federation 'fed-b'"):
        Federation.load("fed", url, key_dir=keys)
    # A key file that does not name its configuration (an older version) is refused too.
    path = ServerKeys.path(b.federation_id, keys)
    record = json.loads(path.read_text())
    del record["config"]
    path.write_text(json.dumps(record))
    status, err = _cli(capsys, "serve", "--storage", url, "--name", "fed-b", "--key-dir",
                       str(keys), "--max-rounds", "1", "--timeout", "5")  # fmt: skip
    assert status == 2 and err.count("\n") == 0 and "does not name the configuration" in err
    assert _snapshot(url) == before


def test_a_federation_lost_from_its_storage_is_neither_loaded_nor_silently_recreated(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys"
    url = f"sqlite:///{tmp_path / 'fed.db'}"
    fed = _create("fed", url, keys, dp=True)
    pin = pin_path(fed.store, keys)
    fed.storage.delete_study(fed.storage.get_study_id_from_name("fed"))
    with pytest.raises(FederationNotFoundError, match="created or joined it there") as error:
        Federation.load("fed", url, key_dir=keys)
    assert str(pin) in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match=f"No federation 'fed'.*remove {re.escape(str(pin))}"):
        _create("fed", url, keys, dp=False)
    assert [s.study_name for s in fed.storage.get_all_studies()] == [
        "fed:fedbo:participants",
        "fed:fedbo:uploads:000000",
    ]
    pin.unlink()  # the operator's deliberate fix, as the message says
    again = _create("fed", url, keys, dp=False)
    assert Federation.load("fed", url, key_dir=keys).config_hash == again.config_hash


def test_a_storage_is_pinned_by_where_it_lives(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = resolve_storage("sqlite:///fed.db")
    absolute = resolve_storage(f"sqlite:///{tmp_path / 'fed.db'}")
    assert storage_location(relative) == storage_location(absolute)
    assert storage_location(absolute) == f"sqlite:{os.path.realpath(tmp_path / 'fed.db')}"
    assert storage_location(resolve_storage("sqlite:///other.db")) != storage_location(absolute)
    journal = resolve_storage(f"journal:{tmp_path / 'fed.log'}")
    assert storage_location(journal) == f"journal:{os.path.realpath(tmp_path / 'fed.log')}"
    assert storage_location(InMemoryStorage()) is None


@pytest.mark.parametrize("first", ["same configuration", "another configuration"])
def test_two_first_joins_at_once_agree_on_one_pin(tmp_path: Path, monkeypatch, first) -> None:
    keys = tmp_path / "keys"
    fed = _create("fed", f"sqlite:///{tmp_path / 'fed.db'}", keys, dp=False)
    pin = pin_path(fed.store, keys)
    record = json.loads(pin.read_text())
    pin.unlink()  # as on a site that has not joined yet
    link = os.link

    def another_process_pins_first(source: Path, target: Path) -> None:
        config = record["config"] if first == "same configuration" else "0" * 64
        other = {**record, "config": config}
        draft = Path(target).with_name("other.tmp")
        _write_private(draft, other, exclusive=True)
        link(draft, target)
        draft.unlink()
        link(source, target)  # FileExistsError, as for the process that comes second

    monkeypatch.setattr(os, "link", another_process_pins_first)
    if first == "same configuration":
        assert pin_joined(fed.store, fed.trust, keys) is None
    else:
        with pytest.raises(ValueError, match="not the one this key directory joined"):
            pin_joined(fed.store, fed.trust, keys)
    monkeypatch.undo()
    assert sorted(p.name for p in pin.parent.iterdir()) == [pin.name]  # no draft left behind
    assert stat.S_IMODE(pin.stat().st_mode) == 0o600
