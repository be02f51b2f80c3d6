"""What a secure-aggregation participant keeps outside the storage
(``federation/secagg/claims.py``), in process: an attempt is claimed once (so a restarted
participant never answers twice), old claims are cleared without touching newer ones, and the
standardization reference is kept once and never replaced by another worker's (written to kill
mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
import stat
from types import SimpleNamespace

import optuna
import pytest

from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.secagg import claims


def _on_disk(tmp_path: Path, monkeypatch, federation_id: str = "fid-1") -> SimpleNamespace:
    """A federation whose storage keeps its keys in the key folder ``tmp_path / 'keys'``."""
    monkeypatch.setattr(claims, "persists_keys", lambda storage: True)
    return SimpleNamespace(
        storage=object(), federation_id=federation_id, _key_dir=tmp_path / "keys"
    )


def _in_memory(storage, federation_id: str = "fid-1") -> SimpleNamespace:
    return SimpleNamespace(storage=storage, federation_id=federation_id, _key_dir=None)


def _folder(fed: SimpleNamespace, client: str) -> Path:
    where = ParticipantKey.path(fed.federation_id, client, fed._key_dir)
    return where.parent / (where.stem + ".secagg")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_attempt_is_claimed_once_in_a_private_file_beside_the_key(tmp_path, monkeypatch):
    fed = _on_disk(tmp_path, monkeypatch)
    assert claims.claim(fed, "c0", 3, 2) is True
    assert claims.claim(fed, "c0", 3, 2) is False  # made before: stay out of that attempt
    folder = _folder(fed, "c0")
    assert sorted(p.name for p in folder.iterdir()) == ["000003-000002"]
    assert _mode(folder) == 0o700 and _mode(folder / "000003-000002") == 0o600
    assert claims.claim(fed, "c0", 3, 3) is True and claims.claim(fed, "c1", 3, 2) is True


def test_claims_two_rounds_old_or_more_are_cleared_and_newer_ones_kept(tmp_path, monkeypatch):
    fed = _on_disk(tmp_path, monkeypatch)
    for round_index, attempt in ((1, 7), (2, 8), (3, 9)):
        assert claims.claim(fed, "c0", round_index, attempt)
    assert claims.claim(fed, "c0", 5, 0)  # clears rounds below 5 - 2 = 3
    names = sorted(p.name for p in _folder(fed, "c0").iterdir())
    assert names == ["000003-000009", "000005-000000"]
    assert not claims.claim(fed, "c0", 5, 0) and not claims.claim(fed, "c0", 3, 9)
    assert claims.claim(fed, "c0", 2, 8)  # cleared: claimable again


def test_a_claim_cleared_by_another_worker_meanwhile_is_no_error(tmp_path, monkeypatch):
    fed = _on_disk(tmp_path, monkeypatch)
    real = claims._folder

    class Racing(type(tmp_path)):
        def glob(self, pattern):  # another worker deletes an old claim under our feet
            yield from super().glob(pattern)
            yield self / "000000-000001"

    monkeypatch.setattr(claims, "_folder", lambda f, c: Racing(real(f, c)))
    assert claims.claim(fed, "c0", 4, 0) is True


def test_in_memory_claims_are_per_storage_federation_and_participant() -> None:
    storage, other = optuna.storages.InMemoryStorage(), optuna.storages.InMemoryStorage()
    fed = _in_memory(storage)
    assert claims.claim(fed, "c0", 0, 0) is True
    assert claims.claim(_in_memory(storage), "c0", 0, 0) is False  # another handle of it
    assert claims.claim(fed, "c0", 0, 1) is True
    assert claims.claim(fed, "c1", 0, 0) is True
    assert claims.claim(_in_memory(storage, "fid-2"), "c0", 0, 0) is True
    assert claims.claim(_in_memory(other), "c0", 0, 0) is True


def test_the_reference_is_computed_once_kept_privately_and_read_back(tmp_path, monkeypatch):
    fed = _on_disk(tmp_path, monkeypatch)
    computed: list[int] = []

    def compute(value=(1.25, 0.5)):
        computed.append(1)
        return value

    assert claims.reference(fed, "c0", compute) == (1.25, 0.5)
    path = _folder(fed, "c0") / "reference.json"
    assert json.loads(path.read_text()) == [1.25, 0.5] and _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    assert sorted(p.name for p in path.parent.iterdir()) == ["reference.json"]  # no temporary
    again = claims.reference(fed, "c0", lambda: compute((9.0, 9.0)))
    assert again == (1.25, 0.5) and computed == [1]
    assert isinstance(again[0], float) and isinstance(again[1], float)
    assert claims.reference(fed, "c1", lambda: (2.0, 3.0)) == (2.0, 3.0)


def test_a_reference_another_worker_wrote_meanwhile_wins(tmp_path, monkeypatch):
    fed = _on_disk(tmp_path, monkeypatch)
    path = _folder(fed, "c0") / "reference.json"

    def compute():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("[7.0, 8.0]")  # the other worker linked its reference first
        return (1.0, 2.0)

    assert claims.reference(fed, "c0", compute) == (7.0, 8.0)
    assert json.loads(path.read_text()) == [7.0, 8.0]


def test_a_stale_temporary_of_this_pid_does_not_corrupt_the_reference(tmp_path, monkeypatch):
    fed = _on_disk(tmp_path, monkeypatch)
    path = _folder(fed, "c0") / "reference.json"
    path.parent.mkdir(parents=True)
    path.with_suffix(f".{os.getpid()}.tmp").write_text("[123456789.0, 987654321.0] and more")
    assert claims.reference(fed, "c0", lambda: (1.0, 2.0)) == (1.0, 2.0)
    assert json.loads(path.read_text()) == [1.0, 2.0]


@pytest.mark.parametrize("text", ["not json", "null", "[1.0]", '["a", 2.0]'])
def test_an_unreadable_reference_is_not_used(tmp_path, monkeypatch, text: str) -> None:
    fed = _on_disk(tmp_path, monkeypatch)
    path = _folder(fed, "c0") / "reference.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert claims.reference(fed, "c0", lambda: (1.0, 2.0)) == (1.0, 2.0)


def test_in_memory_references_are_kept_per_federation_and_participant() -> None:
    storage = optuna.storages.InMemoryStorage()
    fed = _in_memory(storage)
    assert claims.reference(fed, "c0", lambda: (1.0, 2.0)) == (1.0, 2.0)
    assert claims.reference(_in_memory(storage), "c0", lambda: (5.0, 6.0)) == (1.0, 2.0)
    assert claims.reference(fed, "c1", lambda: (3.0, 4.0)) == (3.0, 4.0)
    assert claims.reference(_in_memory(storage, "fid-2"), "c0", lambda: (0.0, 1.0)) == (0.0, 1.0)


def test_a_participant_named_references_keeps_claims_and_a_reference_in_memory() -> None:
    fed = _in_memory(optuna.storages.InMemoryStorage())
    assert claims.reference(fed, "c0", lambda: (1.0, 2.0)) == (1.0, 2.0)
    assert claims.claim(fed, "references", 0, 0) is True
    assert claims.claim(fed, "references", 0, 0) is False
    assert claims.reference(fed, "references", lambda: (3.0, 4.0)) == (3.0, 4.0)
    assert claims.reference(fed, "c0", lambda: (9.0, 9.0)) == (1.0, 2.0)
