"""What a secure-aggregation participant keeps outside the storage
(``federation/secagg/claims.py``), in process: an attempt is claimed once (so a restarted
participant never answers twice) and old claims are cleared without touching newer ones (written
to kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from pathlib import Path
import stat
from types import SimpleNamespace

import optuna

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


def test_a_participant_named_releases_keeps_its_claims_apart_from_the_release_counts() -> None:
    fed = _in_memory(optuna.storages.InMemoryStorage())
    claims._memory(fed, "releases")["c0"] = 3
    assert claims.claim(fed, "releases", 0, 0) is True
    assert claims.claim(fed, "releases", 0, 0) is False
    assert claims._memory(fed, "releases") == {"c0": 3}
