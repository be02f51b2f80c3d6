"""Direct tests of ``epoch_pin``: server epochs pinned outside the storage, one process winning
each number, and a newer server found from the pin, the signed claims or the heartbeat. Each was
written to kill mutants of ``benchmarks/mutation_trust.py``."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace
import uuid

from optuna.storages import InMemoryStorage
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal import JournalStorage
import pytest

from optuna_fedbo.federation.epoch_pin import claim_epoch
from optuna_fedbo.federation.epoch_pin import EpochPin
from optuna_fedbo.federation.epoch_pin import newer_epoch
from optuna_fedbo.federation.epoch_pin import signed_epoch_floor
from optuna_fedbo.federation.keys import ServerKeys


class _Store:
    """What the epoch functions read of a store: the signed heartbeat, broadcasts, claims."""

    def __init__(self, heartbeat=None, broadcasts=(), superseded=None) -> None:
        self.heartbeat = heartbeat
        self._broadcasts = [SimpleNamespace(epoch=e) for e in broadcasts]
        self._superseded = superseded
        self.claims: list[int] = []

    def server_status(self):
        return self.heartbeat

    def broadcasts(self):
        return self._broadcasts

    def superseded(self, epoch: int):
        return self._superseded if self._superseded and self._superseded > epoch else None

    def claim_server_epoch(self, start: int, reserve) -> int:
        epoch = start
        while not reserve(epoch):
            epoch += 1
        self.claims.append(epoch)
        return epoch


def test_the_pin_sits_beside_the_server_key_file_or_in_memory(tmp_path) -> None:
    fid = uuid.uuid4().hex
    journal = JournalStorage(JournalFileBackend(str(tmp_path / "e.log")))  # outlives the process
    pin = EpochPin.of(SimpleNamespace(federation_id=fid, storage=journal, _key_dir=tmp_path))
    assert pin.folder == ServerKeys.path(fid, tmp_path).with_name(f"{fid}.epochs")
    assert pin.federation_id == fid
    memory = EpochPin.of(
        SimpleNamespace(federation_id=fid, storage=InMemoryStorage(), _key_dir=tmp_path)
    )
    assert memory.folder is None and memory.federation_id == fid


def test_each_epoch_is_pinned_once_and_only_the_newest_kept(tmp_path) -> None:
    pin = EpochPin("f" * 32, tmp_path / "servers" / "f.epochs")
    assert pin.epochs() == [] and pin.newer_than(0) is None  # no folder yet
    assert pin.reserve(3) is True
    assert stat.S_IMODE(pin.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((pin.folder / "000003").stat().st_mode) == 0o600
    assert pin.reserve(3) is False  # another server holds it
    other = EpochPin("f" * 32, pin.folder)  # another process of the same key directory
    assert other.reserve(3) is False and other.reserve(5) is True
    assert pin.epochs() == [5]  # older pins dropped: only newer ones matter
    assert pin.reserve(4) is True and pin.epochs() == [4, 5]  # newer ones are kept
    (pin.folder / "notes.txt").write_text("x")
    assert pin.epochs() == [4, 5]
    assert pin.newer_than(4) == 5 and pin.newer_than(5) is None and pin.newer_than(6) is None


def test_a_pin_folder_that_cannot_be_written_is_one_line_naming_it(tmp_path) -> None:
    blocker = tmp_path / "servers"
    blocker.write_text("a file where the folder should be")
    pin = EpochPin("f" * 32, blocker / "f.epochs")
    with pytest.raises(ValueError, match=f"Cannot pin the server epoch in {pin.folder}") as error:
        pin.reserve(1)
    assert "\n" not in str(error.value)


def test_in_memory_pins_are_per_federation() -> None:
    one, two = EpochPin(uuid.uuid4().hex, None), EpochPin(uuid.uuid4().hex, None)
    assert one.epochs() == [] and one.reserve(2) and not one.reserve(2)
    assert one.reserve(1) and one.epochs() == [1, 2]
    assert two.epochs() == [] and two.reserve(2)
    assert EpochPin(one.federation_id, None).newer_than(1) == 2


def test_the_signed_floor_is_the_newest_epoch_the_heartbeat_or_a_broadcast_names() -> None:
    assert signed_epoch_floor(_Store()) == 0
    assert signed_epoch_floor(_Store(heartbeat={"epoch": 4}, broadcasts=(2, 7, 3))) == 7
    assert signed_epoch_floor(_Store(heartbeat={"epoch": 9}, broadcasts=(2,))) == 9
    assert signed_epoch_floor(_Store(heartbeat={}, broadcasts=())) == 0


def test_a_claim_is_above_every_pinned_and_signed_epoch(tmp_path) -> None:
    pin = EpochPin("f" * 32, tmp_path / "f.epochs")
    store = _Store(heartbeat={"epoch": 2}, broadcasts=(3,))
    assert claim_epoch(store, pin) == 4 and pin.epochs() == [4]
    assert claim_epoch(store, pin) == 5  # the pin is above the signed records now
    assert claim_epoch(_Store(), EpochPin("e" * 32, tmp_path / "e.epochs")) == 1


def test_a_newer_server_is_found_from_the_pin_the_claims_or_the_heartbeat(tmp_path) -> None:
    pin = EpochPin("f" * 32, tmp_path / "f.epochs")
    pin.reserve(3)
    assert newer_epoch(_Store(), pin, 3) is None
    assert newer_epoch(_Store(), pin, 2) == 3  # pinned
    assert newer_epoch(_Store(superseded=5), pin, 3) == 5  # a signed claim
    beat = _Store(heartbeat={"epoch": 6})
    assert newer_epoch(beat, pin, 3) == 6  # the signed heartbeat
    assert newer_epoch(beat, pin, 3, heartbeat=False) is None
    assert newer_epoch(beat, pin, 6) is None
    assert newer_epoch(_Store(heartbeat={}), pin, 3) is None
    assert newer_epoch(_Store(heartbeat={"epoch": 6}), pin, 2) == 3  # the pin first


def test_an_older_pin_removed_meanwhile_by_another_server_is_no_error(
    tmp_path, monkeypatch
) -> None:
    pin = EpochPin("f" * 32, tmp_path / "f.epochs")
    assert pin.reserve(3)
    real = os.listdir

    def listing(folder):  # another server unlinks 000003 right after this one listed it
        names = real(folder)
        (pin.folder / "000003").unlink(missing_ok=True)
        return names

    monkeypatch.setattr(os, "listdir", listing)
    assert pin.reserve(5) is True
    monkeypatch.setattr(os, "listdir", real)
    assert pin.epochs() == [5]
