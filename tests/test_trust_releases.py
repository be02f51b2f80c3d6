"""Signed releases: a tampered ledger, broadcast, pointer, budget flag or epoch is detected; the
server fails closed on its own ledger; a second server starting at any step of the first one's
round never makes a payload readable that the ledger does not count."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path

from _trust_federation import federation
from _trust_federation import publish
from _trust_federation import SPACE
from _trust_federation import upload_all
from optuna.trial import TrialState
import pytest

from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import ServerSupersededError
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.ledger import LedgerIntegrityError
from optuna_fedbo.federation.records import BUDGET_EXHAUSTED_KEY
from optuna_fedbo.federation.records import LATEST_KEY
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.federation.trust import UntrustedRecordError

_names = itertools.count()


def _forge(fed: Federation, purpose: str, body: dict) -> str:
    keys = ServerKeys.generate()
    forger = Trust(keys.identity, fed.config_hash, keys)
    return forger.sign(purpose, body)


# ----------------------------------------------------------------------------- ledger
def test_a_tampered_ledger_entry_makes_the_server_fail_closed(caplog) -> None:
    fed = federation()
    server = publish(fed, 2)
    upload_all(fed)  # (after the tampering participants refuse to upload: tested elsewhere)
    ledger_id = fed.storage.get_study_id_from_name(fed.store.ledger_study_name)
    attrs = fed.storage.get_study_system_attrs(ledger_id)
    key = sorted(k for k in attrs if k.startswith("r:"))[0]
    record = json.loads(attrs[key])
    record["body"]["epsilon"] = 0.0  # "nothing was spent"
    fed.storage.set_study_system_attr(ledger_id, key, json.dumps(record))
    with pytest.raises(LedgerIntegrityError, match="refuses to publish"):
        server.step()
    with pytest.raises(LedgerIntegrityError, match="does not verify"):
        FederationServer(Federation.load(fed.name, fed.storage))
    assert fed.open_round() == 2  # nothing more was published
    # Participants ignore the entry, with a warning: they never count it as zero spent.
    with caplog.at_level(logging.WARNING):
        assert [e.round for e in fed.ledger_entries()] == [1]
    assert any("does not verify" in r.getMessage() for r in caplog.records)


def test_a_ledger_copied_under_another_key_or_deleted_fails_closed(tmp_path: Path) -> None:
    fed = federation(storage=f"sqlite:///{tmp_path / 'l.db'}")
    publish(fed, 2)
    ledger_id = fed.storage.get_study_id_from_name(fed.store.ledger_study_name)
    attrs = fed.storage.get_study_system_attrs(ledger_id)
    first, second = sorted(k for k in attrs if k.startswith("r:"))
    fed.storage.set_study_system_attr(ledger_id, second, attrs[first])  # a valid entry, copied
    with pytest.raises(LedgerIntegrityError, match="another key"):
        FederationServer(Federation.load(fed.name, fed.storage))
    fed.storage.delete_study(ledger_id)  # "epsilon 0": the ledger is gone
    with pytest.raises(LedgerIntegrityError, match="entries were deleted"):
        FederationServer(Federation.load(fed.name, fed.storage))


def test_the_cli_server_refuses_to_publish_on_a_tampered_ledger(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    fed = federation(storage=url)
    publish(fed, 1)
    fed.storage.delete_study(fed.storage.get_study_id_from_name(fed.store.ledger_study_name))
    assert cli_main(["serve", "--storage", url, "--name", fed.name, "--timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert "refuses to publish" in err and err.strip().count("\n") == 0


# ------------------------------------------------------------------- broadcasts, pointer
def test_a_forged_broadcast_and_pointer_are_ignored_by_participants(caplog) -> None:
    fed = federation(privacy=None)
    publish(fed, 1)
    genuine = fed.latest_broadcast()
    participant = Federation.load(fed.name, fed.storage)
    assert participant.latest_broadcast().round == 0
    # A forged round-1 broadcast (signed by another key) and a pointer to it.
    payload = json.loads(fed.store.read_broadcast(int(fed.store.latest()["trial_id"]))[1])
    payload["round"] = 1
    forged = _forge(
        fed,
        "broadcast",
        {"round": 1, "payload": json.dumps(payload), "epoch": 1, "receipts": [],
         "ledger_count": 0},
    )  # fmt: skip
    trial_id = fed.store.stage_broadcast(1, forged)
    fed.storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [3.0])
    main_id = fed.storage.get_study_id_from_name(fed.name)
    pointer = _forge(fed, "latest", {"round": 1, "trial_id": trial_id, "digest": "0" * 64})
    fed.storage.set_study_system_attr(main_id, LATEST_KEY, pointer)
    with caplog.at_level(logging.WARNING):
        assert participant.latest_broadcast().round == genuine.round == 0
        assert participant.open_round() == 1
    assert any("Ignoring the 'latest' pointer" in r.getMessage() for r in caplog.records)
    # The genuine pointer pointing at the forged trial: the trial itself does not verify.
    fed.store.commit_broadcast(trial_id, 1, 3)
    fresh = Federation.load(fed.name, fed.storage)
    with caplog.at_level(logging.WARNING):
        assert fresh.latest_broadcast() is None
    assert any("Ignoring broadcast trial" in r.getMessage() for r in caplog.records)
    # The server ignores the forged trial too: round 1 is still open.
    restarted = FederationServer(Federation.load(fed.name, fed.storage))
    assert restarted.open_round == 1


def test_an_older_genuine_pointer_written_back_is_refused_with_a_warning(caplog) -> None:
    """A process that saw round 1's pointer never goes back to round 0's, though it verifies."""
    fed = federation(privacy=None)
    server = publish(fed, 1)
    main_id = fed.storage.get_study_id_from_name(fed.name)
    old_pointer = fed.storage.get_study_system_attrs(main_id)[LATEST_KEY]
    participant = Federation.load(fed.name, fed.storage)
    assert participant.open_round() == 1
    upload_all(fed)
    assert server.step().round == 1
    assert participant.open_round() == 2 and participant.latest_broadcast().round == 1
    fed.storage.set_study_system_attr(main_id, LATEST_KEY, old_pointer)  # signed, but older
    assert participant.store.trust.verify("latest", old_pointer)["round"] == 0
    with caplog.at_level(logging.WARNING):
        assert participant.open_round() == 2
        assert participant.latest_broadcast().round == 1
        assert participant.open_round() == 2
    warnings = [
        m
        for m in (r.getMessage() for r in caplog.records)
        if "'latest' pointer" in m and "older" in m and "round 0" in m and "round 1" in m
    ]
    assert len(warnings) == 1  # once, saying which round it refused and which it keeps


def test_a_forged_budget_flag_is_ignored_and_the_server_keeps_publishing(caplog) -> None:
    fed = federation(privacy=DPConfig(1.0, 1.0, 5.0, epsilon_budget=100.0))
    server = publish(fed, 1)
    main_id = fed.storage.get_study_id_from_name(fed.name)
    fake = {"round": 1, "rounds_accounted": 1, "epsilon": 99.0, "epsilon_next": 101.0}
    fed.storage.set_study_system_attr(main_id, BUDGET_EXHAUSTED_KEY, _forge(fed, "budget", fake))
    participant = Federation.load(fed.name, fed.storage)
    with caplog.at_level(logging.WARNING):
        assert participant.budget_exhausted() is None
    assert any("budget-exhausted record" in r.getMessage() for r in caplog.records)
    upload_all(fed)
    assert server.step().round == 1
    assert FederationServer(Federation.load(fed.name, fed.storage)).budget_exhausted is None


def test_an_unsigned_epoch_does_not_stop_the_server() -> None:
    fed = federation(privacy=None)
    server = publish(fed, 1)
    fed.storage.create_new_study([], fed.store.server_epoch_study_name(server.epoch + 1))
    upload_all(fed)
    assert server.step().round == 1  # a study anyone can create is not a server
    newer = FederationServer(Federation.load(fed.name, fed.storage))
    assert newer.epoch == server.epoch + 2  # a signed claim after it does stop it
    with pytest.raises(ServerSupersededError):
        server.step()


def test_fedpne_server_state_is_sealed_and_a_tampered_one_fails_closed() -> None:
    fed = Federation.create(
        f"pne-{next(_names)}", search_space=SPACE, n_clients=2, protocol=FedPNEConfig(horizon=40)
    )
    server = FederationServer(fed)
    study_id = fed.storage.get_study_id_from_name(f"{fed.name}:fedbo:fedpne:server")
    (key,) = fed.storage.get_study_system_attrs(study_id)
    stored = fed.storage.get_study_system_attrs(study_id)[key]
    assert '"history"' not in stored and '"ct"' in stored  # the global means are sealed
    fed.storage.set_study_system_attr(study_id, key, '{"history": []}')
    with pytest.raises(UntrustedRecordError, match="does not verify"):
        server._recover()


# ------------------------------------------------------------------------ two servers
#: Where, in the old server's step, the new server starts: (object, method); the new server
#: starts right after the old one's first call of it. Together they cover every boundary of
#: collect -> privatize -> account -> stage -> commit.
_INTERLEAVINGS = [
    ("store", "read_uploads"),  # collected, not yet noised
    ("server", "_privatize"),  # noised, not yet accounted
    ("ledger", "account"),  # accounted, not yet staged
    ("store", "stage_broadcast"),  # staged, not yet committed
    ("store", "commit_broadcast"),  # committed
]


@pytest.mark.parametrize(("owner", "method"), _INTERLEAVINGS)
def test_two_servers_never_release_an_unaccounted_payload(
    owner: str, method: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second server starts (a restart while the first still runs) at each step boundary of
    the first one's round, on SQLite, each process with its own connection: every readable
    payload is accounted, each round is published once and accounted once."""
    url = f"sqlite:///{tmp_path / 'race.db'}"
    fed = federation(n_clients=3, storage=url)
    old = FederationServer(Federation.load(fed.name, url))
    target = {"store": old._store, "server": old, "ledger": old._ledger}[owner]
    original = getattr(target, method)
    started: list[FederationServer] = []

    def then_start_another(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        result = original(*args, **kwargs)
        if not started:
            started.append(FederationServer(Federation.load(fed.name, url)))
        return result

    monkeypatch.setattr(target, method, then_start_another)
    upload_all(fed)
    if method == "commit_broadcast":
        assert old.step().round == 0  # the new server started after the release
    else:
        with pytest.raises(ServerSupersededError):
            old.step()
    (new,) = started
    while fed.open_round() < 2:
        upload_all(fed)
        assert new.step() is not None
        with pytest.raises(ServerSupersededError):
            old.step(force=True)
    readable = fed.store.broadcasts()  # every payload anyone can read, any state
    accounted = [entry.payload for entry in fed.ledger_entries()]
    assert sorted(b.round for b in readable) == [0, 1]
    assert all(b.state == TrialState.COMPLETE for b in readable)
    assert sorted(e.round for e in fed.ledger_entries()) == [0, 1]  # none paid twice
    assert {b.digest for b in readable} == set(accounted)
    assert fed.privacy_spent()[0] == pytest.approx(fed.privacy.epsilon(2, 3))
