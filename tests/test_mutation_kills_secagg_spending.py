"""Direct tests of a participant's own count of releases (``federation/secagg/spending.py``):
what it records, when it refuses, and which files it refuses to trust (no rounds are run)."""

from __future__ import annotations

import itertools
import json

import pytest
from test_secagg_dp import _federation

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation.secagg import spending
from optuna_fedbo.federation.secagg.spending import OwnLedger
from optuna_fedbo.federation.secagg.spending import OwnLedgerError
from optuna_fedbo.federation.secagg.spending import RELEASES_TYPE
from optuna_fedbo.federation.secagg.spending import ReplayedAttemptError

#: Epsilon of 1, 2, 3 releases: 4.75, 7.09, 9.09 (z = 1, N = 4, t = 3).
BUDGET = 8.0


_NAMES = itertools.count()


def _name() -> str:
    """A participant id no other test of the module's shared federation uses."""
    return f"p{next(_NAMES)}"


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Federation:
    """One federation over SQLite for the module (its files are per participant)."""
    folder = tmp_path_factory.mktemp("spending")
    return _federation(storage=f"sqlite:///{folder / 'f.db'}", epsilon_budget=BUDGET)


@pytest.fixture(params=["in-memory", "sqlite"])
def fed(request, stored) -> Federation:
    if request.param == "sqlite":
        return stored
    return _federation(epsilon_budget=BUDGET, name="spend")


def test_it_counts_every_masking_only_after_the_newest_and_refuses_past_the_budget(fed) -> None:
    own = OwnLedger(fed, _name())
    curve = fed.privacy_ledger().curve
    assert (own.releases(), own.epsilon(), own.would_exceed()) == (0, 0.0, False)
    assert own.newest() is None
    assert own.record(0, 0)
    with pytest.raises(ReplayedAttemptError, match="round 0 attempt 0 is not after round 0"):
        own.record(0, 0)  # the same attempt again: refused, never skipped as counted
    assert own.releases() == 1 and own.epsilon() == curve.epsilon(1)
    assert own.record(0, 1)  # another attempt of the round: one more
    assert own.releases() == 2 and own.epsilon() == curve.epsilon(2) <= BUDGET
    assert own.newest() == (0, 0, 1)
    assert own.would_exceed()  # a third would spend 9.09 > 8
    assert not own.record(1, 0)  # refused, and nothing written
    assert own.releases() == 2 and own.newest() == (0, 0, 1)
    with pytest.raises(ReplayedAttemptError):
        own.record(0, 1)  # one already counted is refused, not counted again
    assert own.releases() == 2
    assert own.epsilon(3) == curve.epsilon(3) > BUDGET
    other = OwnLedger(fed, _name())  # every participant has its own count
    assert other.releases() == 0 and other.record(0, 0) and other.releases() == 1
    assert (own.budget, own.delta) == (BUDGET, 1e-5)


def test_without_a_budget_it_counts_and_never_refuses() -> None:
    fed = _federation(name="unbounded")
    own = OwnLedger(fed, "c0")
    for attempt in range(4):
        assert own.record(0, attempt) and not own.would_exceed()
    assert own.releases() == 4 and own.budget is None


def test_the_count_is_kept_in_the_key_folder_as_this_participants(stored) -> None:
    fed, client = stored, _name()
    own = OwnLedger(fed, client)
    assert own.record(2, 0) and own.record(3, 1)
    assert own.path is not None and own.where() == f"in {own.path}"
    assert own.path.name == "releases.json" and own.path.parent.name.endswith(".secagg")
    assert fed.federation_id in str(own.path)
    assert own.path.stat().st_mode & 0o777 == 0o600
    record = json.loads(own.path.read_text())
    assert record == {
        "type": RELEASES_TYPE,
        "version": 1,
        "federation_id": fed.federation_id,
        "client_id": client,
        "releases": [[0, 2, 0], [0, 3, 1]],  # (restores, round, attempt)
    }
    again = Federation.load(fed.name, fed.storage)  # another process of this host
    assert OwnLedger(again, client).releases() == 2


def test_in_memory_it_is_kept_per_storage() -> None:
    fed = _federation(epsilon_budget=BUDGET)
    own = OwnLedger(fed, "c0")
    assert own.path is None and own.where() == "in memory"
    assert own.record(0, 0)
    assert OwnLedger(fed, "c0").releases() == 1  # another handle of the same storage


@pytest.mark.parametrize(
    "change",
    [
        {"type": "optuna-fedbo-ledger-mark"},
        {"version": 2},
        {"federation_id": "another"},
        {"client_id": "c1"},
        {"releases": [[0]]},
        {"releases": "0-0"},
        {"releases": [["a", 0, 0]]},
        {"releases": [[0, 0]]},
        {"releases": [[0, 0, 0], [0, 0, 0]]},
        {"releases": [[0, 1, 0], [0, 0, 3]]},
    ],
)
def test_a_count_that_is_not_this_participants_is_refused(stored, change) -> None:
    own = OwnLedger(stored, _name())
    assert own.record(0, 0) and own.path is not None
    record = json.loads(own.path.read_text())
    own.path.write_text(json.dumps({**record, **change}))
    own.path.chmod(0o600)
    with pytest.raises(OwnLedgerError, match="is corrupt or another participant's") as error:
        own.releases()
    assert str(error.value).endswith(
        ": restore it from the backup of your key folder; the participant takes no part in "
        "secure aggregation until then."
    )
    with pytest.raises(OwnLedgerError, match=str(own.path)):
        own.record(0, 1)
    assert json.loads(own.path.read_text()) == {**record, **change}  # nothing written


def test_a_missing_field_an_unreadable_file_or_one_others_can_read_is_refused(stored) -> None:
    own = OwnLedger(stored, _name())
    assert own.record(0, 0) and own.path is not None
    record = json.loads(own.path.read_text())
    for field in record:
        own.path.write_text(json.dumps({k: v for k, v in record.items() if k != field}))
        with pytest.raises(OwnLedgerError, match="is corrupt"):
            own.releases()
    own.path.write_bytes(b'{"type": "\xff"}')  # not UTF-8
    with pytest.raises(OwnLedgerError, match="is corrupt"):
        own.releases()
    own.path.write_text(json.dumps(record))
    own.path.chmod(0o640)
    with pytest.raises(OwnLedgerError, match="accessible by other users.*chmod 600"):
        own.would_exceed()
    own.path.unlink()
    own.path.mkdir()  # something that cannot be read as a file
    with pytest.raises(OwnLedgerError, match="cannot be read"):
        own.releases()


def test_only_a_federation_with_distributed_dp_has_one(tmp_path) -> None:
    import test_secagg_federation

    plain = test_secagg_federation._federation()
    assert spending.own_ledger(plain, "c0") is None
    dp = _federation(epsilon_budget=BUDGET)
    assert isinstance(spending.own_ledger(dp, "c0"), OwnLedger)


def test_a_budget_reached_exactly_is_not_exceeded() -> None:
    exact = _federation(name="exact").privacy_ledger().curve.epsilon(2)
    fed = _federation(epsilon_budget=exact)
    own = OwnLedger(fed, "c0")
    assert own.record(0, 0) and not own.would_exceed()  # a second release spends it exactly
    assert own.record(0, 1) and own.would_exceed() and not own.record(0, 2)
