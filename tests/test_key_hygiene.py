"""Key and storage hygiene: in-memory federations never write the key folder; ``list`` and
``delete`` (API and CLI); the main job and the test session leave nothing behind; ``status``
after a clean finish says it finished."""

from __future__ import annotations

import builtins
import importlib.util
import io
import itertools
import json
import os
from pathlib import Path
import shutil
import subprocess
import sys

import optuna
from optuna.distributions import FloatDistribution
from optuna.storages import InMemoryStorage
import pytest

import optuna_fedbo as fb
from optuna_fedbo.federation import cli_keys
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.fts.presets import PRESETS
from optuna_fedbo.federation.fts.presets import PRIVACY_PRESETS
from optuna_fedbo.federation.key_folder import federation_files
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.location import persists_keys
from optuna_fedbo.federation.storages import resolve_storage

ROOT = Path(__file__).parents[1]
SPACE = {"x": FloatDistribution(0.0, 1.0)}
PROTOCOL = fb.FTSConfig(n_features=4, n_init=1)
_names = itertools.count()


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def _objective(trial: optuna.Trial) -> float:
    return -((trial.suggest_float("x", 0.0, 1.0) - 0.3) ** 2)


def _federation(url: str, key_dir: Path, sites: tuple[str, ...] = ("a",)) -> fb.Federation:
    fed = fb.Federation.create(
        f"hyg-{next(_names)}", search_space=SPACE, n_clients=2, storage=url, protocol=PROTOCOL,
        key_dir=key_dir,
    )  # fmt: skip
    for site in sites:
        fed.join(site)
    return fed


@pytest.mark.parametrize("storage", [None, "memory-object", "sqlite:///:memory:"])
def test_in_memory_federations_never_touch_the_key_folder(tmp_path, monkeypatch, storage) -> None:
    monkeypatch.setenv("OPTUNA_FEDBO_HOME", str(tmp_path / "home"))
    storage = InMemoryStorage() if storage == "memory-object" else storage
    result = fb.simulate(
        [_objective] * 2, search_space=SPACE, n_rounds=2, protocol=PROTOCOL, seed=0,
        storage=storage, privacy=fb.DPConfig(1.0, 1.0, 5.0), progress=False,
    )  # fmt: skip
    assert result.federation.open_round() == 2  # it ran: keys made, rounds signed and accounted
    assert result.federation.is_operator
    assert not persists_keys(result.federation.storage)
    assert not (tmp_path / "home").exists()


def test_list_names_each_federation_its_keys_and_whether_its_storage_has_it(
    tmp_path, capsys
) -> None:
    keys = tmp_path / "keys"
    kept = _federation(f"sqlite:///{tmp_path / 'kept.db'}", keys, ("a", "b"))
    gone = _federation(f"sqlite:///{tmp_path / 'gone.db'}", keys)
    emptied = _federation(f"sqlite:///{tmp_path / 'emptied.db'}", keys)
    (tmp_path / "gone.db").unlink()
    optuna.delete_study(study_name=emptied.name, storage=f"sqlite:///{tmp_path / 'emptied.db'}")
    beside = ServerKeys.path(kept.federation_id, keys).with_suffix(".releases.json")
    beside.write_text("{}")  # a file another writer keeps beside the server's keys
    entries = {e.name: e for e in fb.list_federations(keys)}
    assert len(entries) == 3 and set(entries) == {kept.name, gone.name, emptied.name}
    first = entries[kept.name]
    assert (first.federation_id, first.fingerprint) == (kept.federation_id, kept.fingerprint)
    assert first.server and first.participants == ["a", "b"] and not first.orphaned
    assert first.storages == {f"sqlite:{os.path.realpath(tmp_path / 'kept.db')}": "present"}
    assert first.files == federation_files(kept.federation_id, keys) and len(first.files) == 4
    assert beside in first.files
    assert list(entries[gone.name].storages.values()) == ["missing"]
    assert list(entries[emptied.name].storages.values()) == ["no federation"]
    assert entries[gone.name].orphaned and entries[emptied.name].orphaned

    assert cli_main(["list", "--key-dir", str(keys)]) == 0
    out = capsys.readouterr().out
    assert f"{kept.name}  id {kept.federation_id}  fingerprint {kept.fingerprint[:16]}" in out
    assert "keys: server, site a, site b  (4 files)" in out
    hint = f"optuna-fedbo delete {gone.name} --storage sqlite:///{tmp_path / 'gone.db'}"
    assert out.count("ORPHANED") == 2 and hint in out
    assert cli_main(["list", "--key-dir", str(tmp_path / "none")]) == 0
    assert "no federations in" in capsys.readouterr().out


def test_delete_removes_the_federation_and_its_keys_and_nothing_else(tmp_path) -> None:
    keys, url = tmp_path / "keys", f"sqlite:///{tmp_path / 'fed.db'}"
    doomed = _federation(url, keys, ("a", "b"))
    other = _federation(url, keys, ("a",))
    optuna.create_study(study_name="site-a", storage=url).optimize(_objective, n_trials=1)
    # What other writers keep beside the keys (marks, epoch pins) follows the layout's rule.
    server_file = ServerKeys.path(doomed.federation_id, keys)
    server_file.with_suffix(".mark").write_text("{}")
    (server_file.parent / f"{doomed.federation_id}.epochs").mkdir()
    (server_file.parent / f"{doomed.federation_id}.epochs" / "3").write_text("")
    (keys / "participants" / doomed.federation_id / "ledger.mark").write_text("{}")
    before, studies = _files(keys), set(optuna.get_all_study_names(url))
    deletion = fb.delete_federation(doomed.name, url, key_dir=keys)

    names = set(optuna.get_all_study_names(url))
    assert studies - names == set(deletion.studies)
    assert {doomed.name, f"{doomed.name}:fedbo:participants"} <= set(deletion.studies)
    assert "site-a" in names and other.name in names  # the site's and another federation's
    removed = before - _files(keys)
    assert all(doomed.federation_id in p or p.startswith("joined") for p in removed)
    assert f"servers/{doomed.federation_id}.epochs/3" in removed
    assert f"participants/{doomed.federation_id}/ledger.mark" in removed
    assert not [p for p in _files(keys) if doomed.federation_id in p]
    assert len([p for p in removed if p.startswith("joined/")]) == 1
    assert not federation_files(doomed.federation_id, keys)
    assert [e.federation_id for e in fb.list_federations(keys)] == [other.federation_id]
    assert fb.Federation.load(other.name, url, key_dir=keys).is_operator  # untouched
    # A federation of that name can be made there anew (no pin refuses it).
    assert fb.Federation.create(doomed.name, search_space=SPACE, n_clients=2, storage=url,
                                protocol=PROTOCOL, key_dir=keys).is_operator  # fmt: skip
    with pytest.raises(KeyError, match="nothing to delete"):
        fb.delete_federation("never-made", url, key_dir=keys)


def test_delete_finds_the_keys_of_a_federation_whose_storage_is_gone(tmp_path) -> None:
    keys = tmp_path / "keys"
    fed = _federation(f"sqlite:///{tmp_path / 'gone.db'}", keys)
    (tmp_path / "gone.db").unlink()
    deletion = fb.delete_federation(fed.name, f"sqlite:///{tmp_path / 'gone.db'}", key_dir=keys)
    assert deletion.storage is None and deletion.studies == []
    assert _files(keys) == set() and not (tmp_path / "gone.db").exists()  # nothing re-created


def test_delete_takes_key_files_from_the_pin_never_from_the_storage(tmp_path) -> None:
    """A storage anyone can write holds a copy of another federation (same name, same signed
    configuration): deleting it there deletes its studies, never the other one's keys."""
    keys = tmp_path / "keys"
    fed = _federation(f"sqlite:///{tmp_path / 'real.db'}", keys)
    shutil.copy(tmp_path / "real.db", tmp_path / "copy.db")
    before = _files(keys)
    deletion = fb.delete_federation(fed.name, f"sqlite:///{tmp_path / 'copy.db'}", key_dir=keys)
    assert deletion.federation_id is None and deletion.files == [] and deletion.studies
    assert _files(keys) == before and ServerKeys.path(fed.federation_id, keys).exists()
    assert fb.Federation.load(fed.name, f"sqlite:///{tmp_path / 'real.db'}", key_dir=keys)


def test_delete_refuses_an_ordinary_study(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    optuna.create_study(study_name="plain", storage=url)
    with pytest.raises(ValueError, match="'plain' in this storage is not a federation"):
        fb.delete_federation("plain", url, key_dir=tmp_path / "keys")
    assert optuna.get_all_study_names(url) == ["plain"]


def test_delete_forgets_an_in_memory_federations_keys() -> None:
    storage = InMemoryStorage()
    fed = fb.Federation.create(
        "mem-del", search_space=SPACE, n_clients=2, storage=storage, protocol=PROTOCOL
    )
    fed.join("a")
    deletion = fb.delete_federation("mem-del", storage)
    assert deletion.federation_id == fed.federation_id and storage.get_all_studies() == []
    # The server keys are gone from the process: the name can be created anew, as a new id.
    again = fb.Federation.create(
        "mem-del", search_space=SPACE, n_clients=2, storage=storage, protocol=PROTOCOL
    )
    assert again.federation_id != fed.federation_id


def test_cli_delete_asks_and_refuses_without_a_terminal(tmp_path, capsys, monkeypatch) -> None:
    keys, url = tmp_path / "keys", f"sqlite:///{tmp_path / 'fed.db'}"
    fed = _federation(url, keys)
    command = ["delete", fed.name, "--storage", url, "--key-dir", str(keys)]
    before = (_files(keys), optuna.get_all_study_names(url))

    monkeypatch.setattr(cli_keys.sys, "stdin", io.StringIO(""))  # not a terminal
    assert cli_main(command) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "without confirmation" in err and "--yes" in err

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(cli_keys.sys, "stdin", Terminal())
    monkeypatch.setattr(builtins, "input", lambda prompt: "n")
    assert cli_main(command) == 1
    assert "nothing deleted" in capsys.readouterr().out
    assert (_files(keys), optuna.get_all_study_names(url)) == before

    asked = []
    monkeypatch.setattr(builtins, "input", lambda prompt: asked.append(prompt) or "y")
    assert cli_main(command) == 0
    assert f"federation {fed.name!r}: 3 studies" in asked[0] and "no undo" in asked[0]
    assert optuna.get_all_study_names(url) == [] and not federation_files(fed.federation_id, keys)
    assert cli_main(command) == 2  # gone: one line, exit 2
    assert "nothing to delete" in capsys.readouterr().err


def test_cli_delete_with_yes_needs_no_terminal(tmp_path, capsys, monkeypatch) -> None:
    keys, url = tmp_path / "keys", f"sqlite:///{tmp_path / 'fed.db'}"
    fed = _federation(url, keys)
    monkeypatch.setattr(cli_keys.sys, "stdin", io.StringIO(""))  # not a terminal
    assert cli_main(["delete", fed.name, "--storage", url, "--key-dir", str(keys), "--yes"]) == 0
    assert "deleted federation" in capsys.readouterr().out and _files(keys) == set()


def test_status_after_a_clean_finish_says_it_finished(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'done.db'}"
    fed = fb.Federation.create(
        "done", search_space=SPACE, n_clients=2, storage=url, protocol=PROTOCOL
    )
    server = fb.FederationServer(fed)
    server.announce()
    samplers = [fb.FedSampler(fed, client_id=c, seed=0, lease_ttl=30.0) for c in "ab"]
    samplers[0].finish()
    server.announce(stopped="serve ended")
    assert [p.kind for p in fed.lifecycle().problems] == ["server-stopped"]  # b still runs
    samplers[1].finish()
    lifecycle = fed.lifecycle()
    assert lifecycle.ended and lifecycle.problems == ()
    assert cli_main(["status", "--storage", url, "--name", "done"]) == 0
    text = capsys.readouterr().out
    assert "finished: every participant finished; the server stopped (serve ended)" in text
    assert "problem" not in text
    assert cli_main(["status", "--storage", url, "--name", "done", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)["lifecycle"]
    assert record["problems"] == [] and record["server_stopped"] == "serve ended"


def test_a_federation_that_ended_without_ever_a_server_still_says_so(tmp_path) -> None:
    fed = fb.Federation.create(
        "serverless", search_space=SPACE, n_clients=1, storage=f"sqlite:///{tmp_path / 'n.db'}",
        protocol=fb.FTSConfig(n_features=4, n_init=1, min_contributors=1),
    )  # fmt: skip
    fb.FedSampler(fed, client_id="a", seed=0, lease_ttl=30.0).finish()
    lifecycle = fed.lifecycle()
    assert lifecycle.ended and [p.kind for p in lifecycle.problems] == ["no-server"]


def test_the_main_jobs_federations_leave_the_key_folder_unchanged(tmp_path, monkeypatch) -> None:
    home = tmp_path / "home"
    (home / "servers").mkdir(parents=True)
    (home / "servers" / "someone-elses.json").write_text("{}")  # the user's own keys stay
    before = _files(home)
    monkeypatch.setenv("OPTUNA_FEDBO_HOME", str(home))
    spec = importlib.util.spec_from_file_location("svc", ROOT / "examples" / "federated_svc.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    url = f"sqlite:///{tmp_path / 'federation.db'}"
    studies = job.run_federated([_objective] * 2, n_trials=6, seed=0, storage=url)
    assert [len(s.trials) for s in studies] == [6, 6]  # it ran: keys were made and used
    assert _files(home) == before
    assert optuna.get_all_study_names(url) == []  # and its studies are gone


def test_a_test_session_leaves_no_key_folder_in_the_temp_dir(tmp_path) -> None:
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "test_one.py").write_text(
        "import os\n\n\ndef test_keys():\n"
        "    assert os.path.isdir(os.environ['OPTUNA_FEDBO_HOME'])\n"
    )
    temp = tmp_path / "temp"
    temp.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_one.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout and list(temp.iterdir()) == []


def test_the_readme_lists_every_preset_and_the_key_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("`create --preset` takes") :]
    section = section[: section.index("\n\n")]
    assert all(f"`{name}`" in section for name in [*PRESETS, *PRIVACY_PRESETS])
    assert all(hasattr(fb.presets, name.replace("-", "_")) for name in PRESETS)
    assert "optuna-fedbo list" in text and "optuna-fedbo delete svm-tuning --storage" in text


def test_only_storages_that_outlive_the_process_persist_keys(tmp_path) -> None:
    assert not persists_keys(resolve_storage("sqlite:///:memory:"))
    assert not persists_keys(InMemoryStorage())
    assert persists_keys(resolve_storage(f"sqlite:///{tmp_path / 'fed.db'}"))
    assert persists_keys(resolve_storage(f"journal:{tmp_path / 'fed.log'}"))
