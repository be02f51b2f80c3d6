"""Direct tests of the high-water marks (``watermark``): the server's signed mark beside its key
file and a participant's mark in its key folder, read, refused, moved and compared in-process
(a journal-file storage, the ledger written directly). Each was written to kill mutants of
``benchmarks/mutation_trust.py``."""

from __future__ import annotations

import itertools
import json
import logging
import os
from pathlib import Path
import stat

from optuna.distributions import FloatDistribution
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal import JournalStorage
import pytest

from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation._chain import LedgerHead
from optuna_fedbo.federation._chain import LedgerIntegrityError
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.store import LATEST_KEY
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.federation.watermark import check_participant
from optuna_fedbo.federation.watermark import guard_server
from optuna_fedbo.federation.watermark import LedgerRollbackError
from optuna_fedbo.federation.watermark import ParticipantMark
from optuna_fedbo.federation.watermark import restore_ledger
from optuna_fedbo.federation.watermark import ServerMark

SPACE = {"x": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _fed(tmp_path: Path, storage: object = "journal") -> Federation:
    if storage == "journal":
        tmp_path.mkdir(parents=True, exist_ok=True)
        storage = JournalStorage(JournalFileBackend(str(tmp_path / "fed.log")))
    return Federation.create(
        f"mark-{next(_names)}",
        search_space=SPACE,
        n_clients=2,
        storage=storage,
        protocol=FTSConfig(n_features=4, n_init=1, aggregation="weighted"),
        privacy=DPConfig(1.0, 1.0, 5.0, accountant="rdp"),
        key_dir=tmp_path / "keys",
    )


def _account(fed: Federation, *rounds: int) -> None:
    for r in rounds:
        fed.privacy_ledger().account(r, f"payload {r}", epoch=1, noise_std=1.0, phi_max=1.0)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_server_mark_is_signed_private_and_read_back_furthest_first(tmp_path) -> None:
    fed = _fed(tmp_path)
    mark = ServerMark(fed)
    assert mark.path == ServerKeys.path(fed.federation_id, tmp_path / "keys").with_suffix(".mark")
    assert mark.read() is None
    mark.write(LedgerHead(2, "d" * 64, 1, 0))
    assert _mode(mark.path) == 0o600 and mark.read() == LedgerHead(2, "d" * 64, 1, 0)
    record = json.loads(mark.path.read_text())
    assert record["federation_id"] == fed.federation_id and record["federation"] == fed.name
    assert record["version"] == 1
    body = fed.trust.verify("ledger-mark", record["mark"])
    assert body["federation_id"] == fed.federation_id and isinstance(body["at"], float)
    assert (body["releases"], body["digest"], body["round"], body["restores"]) == (
        2,
        "d" * 64,
        1,
        0,
    )
    mark.advance(LedgerHead(1, "e" * 64, 5, 0))  # fewer releases: not moved
    assert len(mark.path.read_text().splitlines()) == 1
    mark.advance(LedgerHead(3, "f" * 64, 2, 0))
    mark.advance(LedgerHead(3, "a" * 64, 9, 1))  # a restore since
    assert len(mark.path.read_text().splitlines()) == 3
    assert _mode(mark.path) == 0o600
    other = ServerMark(fed)  # another process: the furthest line (restores, releases, round)
    assert other.read() == LedgerHead(3, "a" * 64, 9, 1)
    assert other.open() == LedgerHead(3, "a" * 64, 9, 1)
    assert len(mark.path.read_text().splitlines()) == 1  # kept small at the start
    assert ServerMark(fed).read() == LedgerHead(3, "a" * 64, 9, 1)


def test_the_server_mark_is_on_disk_before_it_returns(tmp_path, monkeypatch) -> None:
    """Written (the temporary file, then the directory holding its rename) or appended to,
    the mark is synced before the release it accounts can become readable."""
    fed = _fed(tmp_path)
    mark = ServerMark(fed)
    synced: list[str] = []
    real = os.fsync

    def fsync(descriptor: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    mark.write(LedgerHead(2, "d" * 64, 1, 0))
    where = mark.path.resolve()
    assert len(synced) == 2 and synced[0].startswith(f"{where}.")  # the temporary file
    assert synced[1] == str(where.parent)
    mark.advance(LedgerHead(3, "f" * 64, 2, 0))
    assert synced[2:] == [str(where)]


def test_a_torn_last_line_is_skipped_but_nothing_else(tmp_path) -> None:
    fed = _fed(tmp_path)
    mark = ServerMark(fed)
    mark.write(LedgerHead(2, "d" * 64, 1, 0))
    good = mark.path.read_text()
    mark.path.write_text(good + '{"type": "optuna-fe')  # a crash while appending
    assert ServerMark(fed).read() == LedgerHead(2, "d" * 64, 1, 0)
    mark.path.write_text('{"type": "optuna-fe\n' + good)  # torn, but not the last line
    with pytest.raises(LedgerRollbackError, match="is corrupt \\(not a ledger mark\\)"):
        ServerMark(fed).read()
    mark.path.write_text('{"type": "optuna-fe')  # torn and alone
    with pytest.raises(LedgerRollbackError, match="is corrupt \\(not a ledger mark\\)"):
        ServerMark(fed).read()


@pytest.mark.parametrize("damage", ["open", "foreign", "forged", "empty", "type", "dir", "body"])
def test_a_bad_server_mark_fails_closed(tmp_path, damage) -> None:
    fed = _fed(tmp_path)
    mark = ServerMark(fed)
    mark.write(LedgerHead(2, "d" * 64, 1, 0))
    record = json.loads(mark.path.read_text())
    expected = "corrupt"
    if damage == "open":
        os.chmod(mark.path, 0o640)
        expected = "accessible by other users \\(mode 0640\\)"
    elif damage == "foreign":
        record["federation_id"] = "0" * 32
        expected = "belongs to another federation"
    elif damage == "forged":
        keys = ServerKeys.generate()
        forger = Trust(keys.identity, fed.config_hash, keys)
        record["mark"] = forger.sign("ledger-mark", {"releases": 9, "digest": "", "round": 0})
    elif damage == "empty":
        record = None
        expected = "corrupt \\(empty\\)"
    elif damage == "type":
        record["type"] = "optuna-fedbo-server-key"
        expected = "corrupt \\(not a ledger mark\\)"
    elif damage == "dir":
        mark.path.unlink()
        mark.path.mkdir()
        expected = "cannot be read"
    elif damage == "body":
        record["mark"] = fed.trust.sign("ledger-mark", {"releases": -1, "digest": "", "round": 0,
                                                        "restores": 0})  # fmt: skip
    if damage not in ("open", "dir"):
        mark.path.write_text("" if record is None else json.dumps(record) + "\n")
    with pytest.raises(LedgerRollbackError, match=expected):
        ServerMark(fed).read()
    with pytest.raises(LedgerRollbackError, match=expected):
        guard_server(fed)


def test_a_missing_mark_starts_at_zero_only_for_a_ledger_without_releases(tmp_path) -> None:
    fed = _fed(tmp_path)
    assert ServerMark(fed).open() == LedgerHead()
    assert ServerMark(fed).read() == LedgerHead()  # written
    _account(fed, 0)
    ServerMark(fed).path.unlink()
    with pytest.raises(LedgerRollbackError, match="is missing, but its storage holds releases"):
        ServerMark(fed).open()
    fed = _fed(tmp_path / "b")
    fed.store.stage_broadcast(0, fed.store.sign_broadcast(0, "{}", epoch=1, ledger_count=1))
    with pytest.raises(LedgerRollbackError, match="is missing, but its storage holds releases"):
        ServerMark(fed).open()  # no entry, but a signed record counted one


def test_the_server_mark_refuses_a_ledger_behind_or_beside_it_and_follows_one_ahead(
    tmp_path,
) -> None:
    fed = _fed(tmp_path)
    _account(fed, 0, 1)
    ledger = fed.privacy_ledger()
    mark = ServerMark(fed)
    head = ledger.chain().head
    mark.write(LedgerHead(head.releases + 1, "d" * 64, 2, 0))
    with pytest.raises(LedgerRollbackError, match="is behind the server's high-water mark"):
        mark.check(ledger.chain())
    mark.write(LedgerHead(head.releases, "d" * 64, 1, 0))  # as many, but not its head
    with pytest.raises(LedgerRollbackError, match="diverges from the server's high-water mark"):
        mark.check(ledger.chain())
    mark.write(LedgerHead(1, "", 0, 0))  # no digest: only the count is compared
    mark.check(ledger.chain())
    assert ServerMark(fed).read() == head  # moved to the ledger, which was ahead
    mark.check(ledger.chain())
    assert len(mark.path.read_text().splitlines()) == 2  # not moved again
    unopened = ServerMark(fed)  # checked before it was opened: opens first
    mark.write(LedgerHead(head.releases + 5, "", 2, 0))
    with pytest.raises(LedgerRollbackError, match="behind"):
        unopened.check(ledger.chain())


def test_a_guarded_ledger_moves_the_mark_before_each_release(tmp_path) -> None:
    fed = _fed(tmp_path)
    guard_server(fed)
    _account(fed, 0)
    mark = ServerMark(fed).read()
    assert mark == fed.privacy_ledger().chain().head and mark.releases == 1
    _account(fed, 1)
    assert ServerMark(fed).read().releases == 2


def test_in_memory_marks_live_in_the_process_and_only_move_forward(tmp_path) -> None:
    fed = _fed(tmp_path, storage=None)
    mark = ServerMark(fed)
    assert mark.read() is None and mark.open() == LedgerHead()
    mark.advance(LedgerHead(2, "d" * 64, 1, 0))
    assert ServerMark(fed).read() == LedgerHead(2, "d" * 64, 1, 0)
    stale = ServerMark(fed)  # another object that saw less
    stale._head = None
    stale.advance(LedgerHead(1, "e" * 64, 0, 0))
    assert ServerMark(fed).read() == LedgerHead(2, "d" * 64, 1, 0)
    assert not (tmp_path / "keys").exists()
    participant = ParticipantMark(fed)
    assert participant.read() is None
    participant.update(LedgerHead(1, "", 0, 0), None)
    assert ParticipantMark(fed).read() == LedgerHead(1, "", 0, 0)
    assert ServerMark(fed).read() == LedgerHead(2, "d" * 64, 1, 0)  # kept apart


def test_restoring_the_ledger_carries_the_mark_forward(tmp_path) -> None:
    fed = _fed(tmp_path)
    guard_server(fed)
    _account(fed, 0, 1, 2)
    with pytest.raises(LedgerIntegrityError, match="is not behind"):
        restore_ledger(fed)
    mark = ServerMark(fed)
    full = mark.read()
    mark.write(LedgerHead(full.releases + 4, full.digest, 5, 0))  # the storage lost 4
    entry = restore_ledger(fed)
    assert entry.carried == 4 and entry.kind == "restore" and entry.round == fed.open_round()
    assert fed.privacy_ledger().n_accounted() == full.releases + 4
    assert ServerMark(fed).read().restores == 1
    fed2 = _fed(tmp_path / "b")
    guard_server(fed2)
    _account(fed2, 0)
    mark = ServerMark(fed2)
    mark.write(LedgerHead(1, "d" * 64, 0, 0))  # as many, but another head: diverged
    assert restore_ledger(fed2).carried == 1  # all of the mark's releases (never under)
    mark.path.unlink()
    with pytest.raises(LedgerRollbackError, match="is missing: there is nothing to carry"):
        restore_ledger(fed2)
    assert restore_ledger(fed2, trust_storage=True) is None
    assert ServerMark(fed2).read() == fed2.privacy_ledger().chain().head
    participant = Federation.load(fed2.name, fed2.storage, key_dir=tmp_path / "elsewhere",
                                  server_fingerprint=fed2.fingerprint)  # fmt: skip
    with pytest.raises(ValueError, match="Only the operator"):
        restore_ledger(participant)


def test_a_participant_mark_is_private_and_refused_when_foreign_or_corrupt(tmp_path) -> None:
    fed = _fed(tmp_path)
    mark = ParticipantMark(fed)
    assert mark.path == tmp_path / "keys" / "participants" / fed.federation_id / "ledger.mark"
    assert mark.read() is None
    mark.update(LedgerHead(3, "d" * 64, 2, 1), None)
    assert _mode(mark.path) == 0o600 and ParticipantMark(fed).read() == LedgerHead(
        3, "d" * 64, 2, 1
    )
    record = json.loads(mark.path.read_text())
    for changes, expected in (
        ({"federation_id": "0" * 32}, "belongs to another federation"),
        ({"releases": -1}, "is corrupt"),
        ({"restores": -1}, "is corrupt"),
        ({"round": "x"}, "is corrupt"),
        ({"type": "other"}, "is corrupt \\(not a ledger mark\\)"),
        ({"version": 2}, "is corrupt \\(not a ledger mark\\)"),
    ):
        mark.path.write_text(json.dumps({**record, **changes}))
        with pytest.raises(LedgerRollbackError, match=expected):
            ParticipantMark(fed).read()
    mark.path.write_text("not json")
    with pytest.raises(LedgerRollbackError, match="is corrupt"):
        mark.read()
    mark.path.write_text(json.dumps(record))
    os.chmod(mark.path, 0o604)
    with pytest.raises(LedgerRollbackError, match="accessible by other users \\(mode 0604\\)"):
        mark.read()
    os.chmod(mark.path, 0o600)
    assert mark.read() == LedgerHead(3, "d" * 64, 2, 1)


def test_a_participant_mark_never_moves_back_behind_another_process(tmp_path) -> None:
    fed = _fed(tmp_path)
    mark = ParticipantMark(fed)
    seen = LedgerHead(3, "d" * 64, 2, 0)
    mark.update(seen, None)
    ParticipantMark(fed).update(LedgerHead(5, "e" * 64, 4, 0), seen)  # another process moved it
    mark.update(LedgerHead(4, "f" * 64, 3, 0), seen)  # this one read `seen` before: kept
    assert mark.read() == LedgerHead(5, "e" * 64, 4, 0)
    mark.update(LedgerHead(6, "f" * 64, 5, 0), seen)  # further: written
    assert mark.read() == LedgerHead(6, "f" * 64, 5, 0)
    mark.update(LedgerHead(1, "", 0, 1), LedgerHead(6, "f" * 64, 5, 0))  # a restore since
    assert mark.read() == LedgerHead(1, "", 0, 1)
    mark.update(LedgerHead(0, "", 0, 0), LedgerHead(1, "", 0, 1))  # what it read: replaced
    assert mark.read() == LedgerHead(0, "", 0, 0)


def _participant_view(fed: Federation, releases: int, round_: int, restores: int = 0):
    mark = ParticipantMark(fed)
    mark.update(LedgerHead(releases, "", round_, restores), mark.read())  # what it saw
    return mark


def test_a_participant_refuses_a_federation_that_went_backwards(tmp_path, caplog) -> None:
    fed = _fed(tmp_path)
    _account(fed, 0)
    check_participant(fed)  # no mark: the ledger is taken and the mark written
    assert ParticipantMark(fed).read() == LedgerHead(1, fed.privacy_ledger().chain().head.digest,
                                                     -1, 0)  # fmt: skip
    _participant_view(fed, 2, -1)  # this participant saw 2 releases
    with (
        caplog.at_level(logging.WARNING),
        pytest.raises(
            LedgerRollbackError, match="holds 1 release\\(s\\) but this participant saw 2"
        ),
    ):
        check_participant(fed)
    assert any("went backwards" in r.getMessage() for r in caplog.records)
    _participant_view(fed, 1, 3)  # ... and round 3
    with pytest.raises(LedgerRollbackError, match="newest round is -1 but this participant saw"):
        check_participant(fed)
    _participant_view(fed, 1, -1)
    check_participant(fed)
    _account(fed, 4)  # the ledger accounted round 4, but nothing newer than -1 was published
    with pytest.raises(LedgerRollbackError, match="ledger accounted round 4"):
        check_participant(fed)


def test_a_participant_refuses_a_ledger_below_what_a_signed_broadcast_counted(tmp_path) -> None:
    fed = _fed(tmp_path)
    _account(fed, 0)
    fed.store.stage_broadcast(0, fed.store.sign_broadcast(0, "{}", epoch=1, ledger_count=2))
    check_participant(fed)  # a staged broadcast is not the newest published one
    main = fed.storage.get_study_id_from_name(fed.name)
    trial = fed.store.broadcast_trials()[-1]._trial_id
    pointer = {"round": 0, "trial_id": trial, "digest": "0" * 64}
    fed.storage.set_study_system_attr(main, "fedbo:latest", fed.trust.sign("latest", pointer))
    with pytest.raises(LedgerRollbackError, match="holds 1 release\\(s\\) but its signed records"):
        check_participant(fed)


def test_after_the_operator_restored_uploads_go_on_with_a_warning(tmp_path, caplog) -> None:
    fed = _fed(tmp_path)
    _account(fed, 0)
    _participant_view(fed, 1, 3)  # saw round 3, the storage is back at round -1
    fed.privacy_ledger().carry_forward(ServerMark(fed), LedgerHead(1, "", 0, 0), 0, 1)
    with caplog.at_level(logging.WARNING):
        check_participant(fed)
    assert any("was restored from a backup" in r.getMessage() for r in caplog.records)
    after = ParticipantMark(fed).read()
    assert (after.releases, after.round, after.restores) == (2, -1, 1)  # back to the restored


def _point(fed: Federation, round_index: int, trial_id: int) -> None:
    """A server-signed 'latest' pointer (what a server writes when it publishes)."""
    main = fed.storage.get_study_id_from_name(fed.name)
    pointer = {"round": round_index, "trial_id": trial_id, "digest": "0" * 64}
    fed.storage.set_study_system_attr(main, LATEST_KEY, fed.trust.sign("latest", pointer))


def test_a_participant_marks_the_newest_published_round(tmp_path) -> None:
    fed = _fed(tmp_path)
    _account(fed, 0)
    trial_id = fed.store.stage_broadcast(0, fed.store.sign_broadcast(0, "{}", epoch=1))
    _point(fed, 0, trial_id)
    check_participant(fed)
    assert ParticipantMark(fed).read().round == 0


def test_a_pointer_to_a_broadcast_that_cannot_be_read_leaves_the_ledger_count(tmp_path) -> None:
    fed = _fed(tmp_path)
    _account(fed, 0)
    forged = fed.store.stage_broadcast(0, "not a signed record")
    for trial_id in (forged, 10**6):  # does not verify; does not exist
        _point(fed, 0, trial_id)
        check_participant(fed)  # the ledger's own count stands: uploads go on
        assert ParticipantMark(fed).read().releases == 1


def test_a_participant_refuses_a_ledger_ahead_of_the_newest_round_by_two(tmp_path) -> None:
    fed = _fed(tmp_path)
    _account(fed, 0)
    check_participant(fed)  # round 0 accounted, nothing published: being published
    _account(fed, 1)  # round 1 accounted too, but round 0 was never published
    with pytest.raises(LedgerRollbackError, match="newest round is -1 .* accounted round 1"):
        check_participant(fed)


def test_a_restore_without_a_round_going_back_is_not_announced(tmp_path, caplog) -> None:
    fed = _fed(tmp_path)
    _account(fed, 0)
    _participant_view(fed, 1, -1)
    fed.privacy_ledger().carry_forward(ServerMark(fed), LedgerHead(1, "", 0, 0), 0, 1)
    with caplog.at_level(logging.WARNING):
        check_participant(fed)
    assert not any("was restored from a backup" in r.getMessage() for r in caplog.records)
    assert ParticipantMark(fed).read().restores == 1


def test_restoring_one_missing_release_carries_exactly_one(tmp_path) -> None:
    fed = _fed(tmp_path)
    guard_server(fed)
    _account(fed, 0, 1)
    mark = ServerMark(fed)
    full = mark.read()
    mark.write(LedgerHead(full.releases + 1, full.digest, 2, 0))
    assert restore_ledger(fed).carried == 1


def test_rebuilding_the_mark_from_the_storage_needs_a_ledger_that_verifies(tmp_path) -> None:
    fed = _fed(tmp_path)
    guard_server(fed)
    _account(fed, 0, 1)
    mark = ServerMark(fed)
    before = mark.read()
    study_id = fed.storage.get_study_id_from_name(fed.store.ledger_study_name)
    key = sorted(fed.storage.get_study_system_attrs(study_id))[-1]
    fed.storage.set_study_system_attr(study_id, key, "forged")
    with pytest.raises(LedgerIntegrityError, match="does not verify"):
        restore_ledger(fed, trust_storage=True)
    assert ServerMark(fed).read() == before


def test_an_in_memory_mark_is_opened_where_it_stood_and_never_written_to_disk(tmp_path) -> None:
    fed = _fed(tmp_path, storage=None)
    ServerMark(fed).advance(LedgerHead(2, "d" * 64, 1, 0))
    assert ServerMark(fed).open() == LedgerHead(2, "d" * 64, 1, 0)
    ParticipantMark(fed).update(LedgerHead(1, "", 0, 0), None)
    assert not (tmp_path / "keys").exists()


def test_a_mark_of_two_lines_is_kept_to_its_furthest_at_the_start(tmp_path) -> None:
    fed = _fed(tmp_path)
    mark = ServerMark(fed)
    mark.write(LedgerHead(1, "d" * 64, 0, 0))
    mark.advance(LedgerHead(2, "e" * 64, 1, 0))
    assert len(mark.path.read_text().splitlines()) == 2
    assert ServerMark(fed).open() == LedgerHead(2, "e" * 64, 1, 0)
    assert len(mark.path.read_text().splitlines()) == 1


def test_a_mark_file_appended_to_is_private_from_its_creation(tmp_path, monkeypatch) -> None:
    fed = _fed(tmp_path)
    mark = ServerMark(fed)
    mark.path.parent.mkdir(parents=True, exist_ok=True)
    old = os.umask(0o000)
    try:
        mark.advance(LedgerHead(1, "d" * 64, 0, 0))  # no file yet: created by the append
    finally:
        os.umask(old)
    assert _mode(mark.path) == 0o600 and ServerMark(fed).read() == LedgerHead(1, "d" * 64, 0, 0)


def test_a_participant_mark_moved_as_far_by_another_process_is_kept(tmp_path) -> None:
    fed = _fed(tmp_path)
    mark = ParticipantMark(fed)
    seen = LedgerHead(3, "d" * 64, 2, 0)
    mark.update(seen, None)
    ParticipantMark(fed).update(LedgerHead(5, "e" * 64, 4, 0), seen)  # another process
    mark.update(LedgerHead(5, "f" * 64, 4, 0), seen)  # as far, not further: kept
    assert mark.read() == LedgerHead(5, "e" * 64, 4, 0)
    assert json.loads(mark.path.read_text())["federation"] == fed.name


def test_an_in_memory_mark_written_at_the_start_reads_back(tmp_path) -> None:
    fed = _fed(tmp_path, storage=None)
    ServerMark(fed).open()  # just created: starts at zero, written
    assert ServerMark(fed).read() == LedgerHead()


def test_an_opened_mark_appends_nothing_for_a_head_not_further(tmp_path) -> None:
    fed = _fed(tmp_path)
    ServerMark(fed).write(LedgerHead(3, "d" * 64, 2, 0))
    mark = ServerMark(fed)
    assert mark.open() == LedgerHead(3, "d" * 64, 2, 0)
    mark.advance(LedgerHead(2, "e" * 64, 1, 0))
    assert len(mark.path.read_text().splitlines()) == 1


def test_the_participant_mark_takes_the_head_it_checked(tmp_path) -> None:
    fed = _fed(tmp_path)
    _account(fed, 0)
    _participant_view(fed, 1, -1)  # as far, but without the head's digest
    check_participant(fed)
    head = fed.privacy_ledger().chain().head
    assert ParticipantMark(fed).read() == LedgerHead(1, head.digest, -1, 0)
