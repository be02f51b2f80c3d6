"""Rollback-proof accounting: a storage rolled back (a restored file, a reset study, an old
pointer or heartbeat written back) never makes the server count from less, nor a participant
upload into the past; the operator's explicit restore carries every release forward."""

from __future__ import annotations

import logging
import os
from pathlib import Path
import shutil
import subprocess
import sys

from _trust_federation import DP
from _trust_federation import federation
from _trust_federation import M
from _trust_federation import publish
from _trust_federation import upload_all
from _upload_attacks import receipt
import numpy as np
import pytest

from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.ledger import LedgerIntegrityError
from optuna_fedbo.federation.records import CONFIG_HASH_KEY
from optuna_fedbo.federation.records import CONFIG_KEY
from optuna_fedbo.federation.records import CONFIG_SIGNATURE_KEY
from optuna_fedbo.federation.records import LATEST_KEY
from optuna_fedbo.federation.records import SERVER_KEY
from optuna_fedbo.federation.watermark import LedgerRollbackError
from optuna_fedbo.federation.watermark import ParticipantMark
from optuna_fedbo.federation.watermark import ServerMark

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}


def _epsilon(fed: Federation, releases: int) -> float:
    return fed.privacy_ledger().curve.epsilon(releases)


def _epochs(fed: Federation) -> int:
    return sum(1 for s in fed.storage.get_all_studies() if ":fedbo:server:" in s.study_name)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "optuna_fedbo.federation.cli", *args],
        capture_output=True, text=True, env=ENV, timeout=120,
    )  # fmt: skip


# ------------------------------------------------------------------ file-level rollback
def test_a_restored_backup_fails_closed_until_the_operator_carries_the_spend_forward(
    tmp_path, caplog
) -> None:
    db = tmp_path / "fed.db"
    url = f"sqlite:///{db}"
    fed = federation(url)
    publish(fed, 3)
    shutil.copy(db, tmp_path / "backup.db")
    publish(fed, 3)
    assert fed.privacy_spent()[0] == pytest.approx(_epsilon(fed, 6))
    os.replace(tmp_path / "backup.db", db)  # the restore (a new file: old connections see none)

    restored = Federation.load(fed.name, url)
    epochs = _epochs(restored)
    served = _cli("serve", "--storage", url, "--name", fed.name, "--timeout", "5")
    assert served.returncode == 2
    assert "behind the server's high-water mark" in served.stderr
    assert "6" in served.stderr and served.stderr.strip().count("\n") == 0
    assert _epochs(restored) == epochs  # nothing written: not even an epoch claim
    # A participant that saw 6 releases refuses to upload into the past, and says why.
    with caplog.at_level(logging.WARNING), pytest.raises(LedgerRollbackError, match="backwards"):
        restored.upload("c0", np.ones(M), n_observations=3, iteration=0)
    assert any("went backwards" in r.getMessage() for r in caplog.records)

    assert cli_main(["restore-ledger", "--storage", url, "--name", fed.name]) == 0
    after = Federation.load(fed.name, url)
    assert after.privacy_spent()[0] == pytest.approx(_epsilon(fed, 6))  # not 3
    assert after.status().privacy["ledger"] == "ok"
    publish(after, 1)  # the server goes on, from the restored round, counting from 6
    assert after.open_round() == 4
    assert after.privacy_spent()[0] == pytest.approx(_epsilon(fed, 7))
    assert after.ledger_entries()[-1].n_accounted == 7


def test_a_restored_backup_counts_against_the_budget(tmp_path) -> None:
    db = tmp_path / "fed.db"
    url = f"sqlite:///{db}"
    fed = federation(url, privacy=DPConfig(1.0, 1.0, 5.0, epsilon_budget=DP.epsilon(4, 3)))
    publish(fed, 2)
    shutil.copy(db, tmp_path / "backup.db")
    publish(fed, 2)
    os.replace(tmp_path / "backup.db", db)
    assert cli_main(["restore-ledger", "--storage", url, "--name", fed.name]) == 0
    restored = Federation.load(fed.name, url)
    server = FederationServer(restored)
    upload_all(restored)
    report = server.step()  # 4 releases spent the budget: the restored 2 do not refill it
    assert report.budget_exhausted and not report.published
    assert restored.open_round() == 2


# ------------------------------------------------------------------ study-level reset
def test_a_reset_federation_with_its_config_copied_back_fails_closed(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'reset.db'}"
    fed = federation(url)
    publish(fed, 3)
    storage = fed.storage
    main_id = storage.get_study_id_from_name(fed.name)
    config = {
        k: v
        for k, v in storage.get_study_system_attrs(main_id).items()
        if k in (CONFIG_KEY, CONFIG_HASH_KEY, CONFIG_SIGNATURE_KEY)
    }
    ledger_id = storage.get_study_id_from_name(fed.store.ledger_study_name)
    first = dict(sorted(storage.get_study_system_attrs(ledger_id).items())[:1])
    # Delete the main and ledger studies and recreate them: the signed configuration and the
    # oldest (validly signed) ledger entry copied back, no broadcast left to count from.
    storage.delete_study(main_id)
    storage.delete_study(ledger_id)
    new_main = storage.create_new_study([], fed.name)
    for key, value in config.items():
        storage.set_study_system_attr(new_main, key, value)
    new_ledger = storage.create_new_study([], fed.store.ledger_study_name)
    for key, value in first.items():
        storage.set_study_system_attr(new_ledger, key, value)

    reset = Federation.load(fed.name, url)
    assert reset.privacy_ledger().n_accounted() == 1  # what the storage alone says
    with pytest.raises(LedgerRollbackError, match="holds 1 release.*accounted 3"):
        FederationServer(reset)
    with pytest.raises(LedgerRollbackError, match="went backwards"):
        reset.upload("c1", np.ones(M), n_observations=3, iteration=0)


def test_a_deleted_ledger_shows_as_missing_never_as_epsilon_zero(tmp_path, caplog) -> None:
    url = f"sqlite:///{tmp_path / 'gone.db'}"
    fed = federation(url)
    publish(fed, 4)
    fed.storage.delete_study(fed.storage.get_study_id_from_name(fed.store.ledger_study_name))
    reader = Federation.load(fed.name, url)
    with caplog.at_level(logging.WARNING):
        epsilon, _ = reader.privacy_spent()
    assert epsilon == pytest.approx(_epsilon(fed, 4)) and epsilon > 0
    assert any("ledger" in r.getMessage() and "missing" in r.getMessage() for r in caplog.records)
    status = reader.status()
    assert status.privacy["ledger"] == "missing"
    assert "ledger         missing: 0 of 4 releases" in status.format()
    with pytest.raises(LedgerIntegrityError, match="entries were deleted"):
        FederationServer(reader)


# ------------------------------------------------------------------ the mark itself
def test_a_new_federation_starts_at_zero_and_the_mark_moves_before_each_release(
    tmp_path, monkeypatch
) -> None:
    fed = federation(f"sqlite:///{tmp_path / 'new.db'}")
    mark = ServerMark(fed)
    assert mark.read() is None
    server = FederationServer(fed)
    assert mark.read().releases == 0
    assert mark.path.stat().st_mode & 0o777 == 0o600
    seen = []
    stage = fed.store.stage_broadcast

    def staged(round_index: int, signed: str) -> int:
        seen.append(ServerMark(fed).read().releases)  # what the mark held before the release
        return stage(round_index, signed)

    monkeypatch.setattr(fed.store, "stage_broadcast", staged)
    for _ in range(2):
        upload_all(fed)
        server.step()
    assert seen == [1, 2]
    assert mark.read().digest == fed.privacy_ledger().chain().head.digest


@pytest.mark.parametrize("damage", ["missing", "corrupt", "other federation"])
def test_a_bad_mark_file_fails_closed_with_one_line(tmp_path, capsys, damage) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    fed = federation(url)
    publish(fed, 1)
    path = ServerMark(fed).path
    if damage == "missing":
        path.unlink()
    elif damage == "corrupt":
        path.write_text("{not json")
    else:
        other = federation(f"sqlite:///{tmp_path / 'other.db'}")
        publish(other, 1)
        shutil.copy(ServerMark(other).path, path)
    if path.exists():
        path.chmod(0o600)
    epochs, entries = _epochs(fed), len(fed.ledger_entries())
    assert cli_main(["serve", "--storage", url, "--name", fed.name, "--timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0
    assert {"missing": "is missing", "corrupt": "is corrupt", "other federation": "another"}[
        damage
    ] in err
    assert "restore-ledger" in err and "--trust-storage" in err  # the fix
    assert _epochs(fed) == epochs and len(fed.ledger_entries()) == entries  # nothing written
    if damage == "missing":  # the named fix works (the storage was not rolled back)
        assert cli_main(["restore-ledger", "--storage", url, "--name", fed.name,
                         "--trust-storage"]) == 0  # fmt: skip
        assert ServerMark(fed).read().releases == 1


# ------------------------------------------------------------------ stale records
def test_an_old_pointer_is_refused_by_a_fresh_process_with_a_warning(caplog) -> None:
    fed = federation(None, privacy=None)
    publish(fed, 1)
    main_id = fed.storage.get_study_id_from_name(fed.name)
    old = fed.storage.get_study_system_attrs(main_id)[LATEST_KEY]  # round 0, signed
    publish(fed, 2)
    assert fed.open_round() == 3
    fed.storage.set_study_system_attr(main_id, LATEST_KEY, old)  # replayed
    fresh = Federation.load(fed.name, fed.storage)
    with caplog.at_level(logging.WARNING):
        assert fresh.open_round() == 3  # not 1: the newest published broadcast wins
        assert fresh.latest_broadcast().round == 2
        assert fed.open_round() == 3  # the process that saw round 2 refuses it too
    warned = [r.getMessage() for r in caplog.records if "older 'latest' pointer" in r.getMessage()]
    assert warned and "round 0; round 2 is published" in warned[0]
    # A restarted server puts the newest pointer back.
    FederationServer(Federation.load(fed.name, fed.storage))
    assert fed.storage.get_study_system_attrs(main_id)[LATEST_KEY] != old


def test_an_old_stopped_heartbeat_is_refused_with_a_warning(caplog) -> None:
    fed = federation(None, privacy=None)
    first = FederationServer(fed)
    first.announce(stopped="serve ended")
    main_id = fed.storage.get_study_id_from_name(fed.name)
    stopped = fed.storage.get_study_system_attrs(main_id)[SERVER_KEY]
    publish(fed, 1)  # a new server (epoch 2) runs and publishes
    fed.storage.set_study_system_attr(main_id, SERVER_KEY, stopped)  # replayed
    fresh = Federation.load(fed.name, fed.storage)
    with caplog.at_level(logging.WARNING):
        assert fresh.store.server_status() is None
        kinds = [p.kind for p in fresh.lifecycle().problems]
    assert "server-down" not in kinds
    assert any("older server heartbeat" in r.getMessage() for r in caplog.records)


def test_an_old_heartbeat_of_an_earlier_round_is_refused() -> None:
    fed = federation(None, privacy=None)
    server = FederationServer(fed)
    server.announce()
    main_id = fed.storage.get_study_id_from_name(fed.name)
    old = fed.storage.get_study_system_attrs(main_id)[SERVER_KEY]  # open round 0
    server.announce()
    newer = fed.store.server_status()["heartbeat"]
    fed.storage.set_study_system_attr(main_id, SERVER_KEY, old)  # the same round, but older
    assert fed.store.server_status()["heartbeat"] == newer
    for _ in range(2):
        upload_all(fed)
        server.step()
    assert fed.store.server_status()["open_round"] == 2
    fed.storage.set_study_system_attr(main_id, SERVER_KEY, old)
    assert fed.store.server_status()["open_round"] == 2  # the newest seen, not the replay
    assert Federation.load(fed.name, fed.storage).store.server_status() is None


def test_a_round_recovered_from_the_ledger_carries_its_receipts(tmp_path, monkeypatch) -> None:
    fed = federation(f"sqlite:///{tmp_path / 'crash.db'}")
    server = FederationServer(fed)
    upload_all(fed)

    def crash(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("killed between accounting and staging")

    monkeypatch.setattr(fed.store, "stage_broadcast", crash)
    with pytest.raises(RuntimeError):
        server.step()
    monkeypatch.undo()
    sent = fed.store.read_uploads(0).values()
    restarted = FederationServer(Federation.load(fed.name, fed.storage))
    assert restarted.step().reason == "resumed"
    (broadcast,) = [b for b in fed.store.broadcasts() if b.round == 0]
    assert set(broadcast.receipts) == {receipt(fed.trust, text) for text in sent}
    assert len(broadcast.receipts) == 3  # so no participant re-sends its vector to round 1
    assert len(fed.ledger_entries()) == 1  # one release, no new noise


def test_a_ledger_that_diverges_from_the_mark_fails_closed(tmp_path) -> None:
    db = tmp_path / "fork.db"
    url = f"sqlite:///{db}"
    fed = federation(url)
    publish(fed, 2)
    shutil.copy(db, tmp_path / "backup.db")
    publish(fed, 2)
    mark = ServerMark(fed).path.read_bytes()  # 4 releases
    os.replace(tmp_path / "backup.db", db)
    assert cli_main(["restore-ledger", "--storage", url, "--name", fed.name,
                     "--trust-storage"]) == 0  # fmt: skip  # misused: the storage went back
    ParticipantMark(fed).path.unlink()  # (participants would refuse: theirs are not tested)
    publish(Federation.load(fed.name, url), 2)  # another 2 releases on the restored branch
    ServerMark(fed).path.write_bytes(mark)  # as many releases, but not the ones it counted
    with pytest.raises(LedgerRollbackError, match="diverges"):
        FederationServer(Federation.load(fed.name, url))
    assert cli_main(["restore-ledger", "--storage", url, "--name", fed.name]) == 0
    # 6 releases were made (2 shared, 2 + 2 on each branch): never fewer are counted.
    assert Federation.load(fed.name, url).privacy_spent()[0] >= _epsilon(fed, 6)
