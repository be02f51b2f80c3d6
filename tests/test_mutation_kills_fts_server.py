"""The FTS server's commit and recovery paths (``fts/server.py``), in process: a restart moves the
signed pointer a crash left behind (or an older one written back) to the newest published
broadcast, publishes a staged broadcast of the open round once as it is, purges any other staged
one, and opens the next round's uploads study (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import itertools
import logging
import time

import numpy as np
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.fts.messages import encode_broadcast
from optuna_fedbo.federation.records import BROADCAST_KEY
from optuna_fedbo.federation.records import LATEST_KEY
from optuna_fedbo.federation.records import PURGED
from optuna_fedbo.federation.trust import text_digest

M = 4
_names = itertools.count()


def _federation(privacy: DPConfig | None = None) -> Federation:
    fed = Federation.create(
        f"fts-commit-{next(_names)}",
        search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=2,
        protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted"),
        privacy=privacy,
        seed=2,
    )
    for i in range(2):
        fed.join(f"c{i}")
    return fed


def _upload(fed: Federation, iteration: int = 0) -> None:
    for i in range(2):
        fed.upload(f"c{i}", np.linspace(-1.0, 1.0, M) * (i + 1), n_observations=3,
                   iteration=iteration)  # fmt: skip


def _restart(fed: Federation, **kwargs: object) -> FederationServer:
    return FederationServer(Federation.load(fed.name, fed.storage), **kwargs)


def _uploads_study_exists(fed: Federation, round_index: int) -> bool:
    try:
        fed.storage.get_study_id_from_name(fed.store.uploads_study_name(round_index))
    except KeyError:
        return False
    return True


@pytest.mark.parametrize("crashed_round", [0, 1])
def test_a_restart_moves_the_pointer_a_crash_left_behind(
    crashed_round: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    fed = _federation()
    server = FederationServer(fed, discard_uploads=False)
    for round_index in range(crashed_round + 1):
        _upload(fed, round_index)
        if round_index == crashed_round:

            def complete_then_die(trial_id: int, round_index: int, n: int) -> None:
                fed.storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [float(n)])
                raise RuntimeError("power cut")

            monkeypatch.setattr(fed.store, "commit_broadcast", complete_then_die)
            with pytest.raises(RuntimeError, match="power cut"):
                server.step()
            monkeypatch.undo()
        else:
            assert server.step().round == round_index
    published = fed.store.broadcasts()
    assert [b.state for b in published] == [TrialState.COMPLETE] * (crashed_round + 1)
    kept = _restart(fed, discard_uploads=False)
    assert sorted(fed.store.read_uploads(crashed_round)) == ["c0", "c1"]
    assert kept.open_round == crashed_round + 1
    restarted = _restart(fed)  # the default: the published round's uploads are discarded
    assert fed.store.read_uploads(crashed_round) == {}
    assert _uploads_study_exists(fed, crashed_round + 1)
    pointer = fed.trust.verify("latest", fed.store.main_attrs()[LATEST_KEY])
    newest = published[-1]
    assert pointer["round"] == crashed_round and pointer["trial_id"] == newest.trial_id
    assert pointer["digest"] == text_digest(
        str(fed.storage.get_trial(newest.trial_id).system_attrs[BROADCAST_KEY])
    )
    assert fed.storage.get_trial(newest.trial_id).value == 2.0  # its count, kept
    assert restarted.open_round == crashed_round + 1 and restarted.step() is None
    assert len(fed.store.broadcasts()) == crashed_round + 1  # nothing published again
    stored = fed.store.main_attrs()[LATEST_KEY]
    _restart(fed)  # the pointer up to date: left as it is
    assert fed.store.main_attrs()[LATEST_KEY] == stored


def test_a_restart_moves_an_older_pointer_written_back_to_the_newest_round() -> None:
    fed = _federation()
    server = FederationServer(fed)
    _upload(fed, 0)
    assert server.step().round == 0
    old = fed.store.main_attrs()[LATEST_KEY]
    _upload(fed, 1)
    assert server.step().round == 1
    main = fed.storage.get_study_id_from_name(fed.name)
    fed.storage.set_study_system_attr(main, LATEST_KEY, old)  # rolled back by someone
    open_uploads = fed.store.uploads_study_name(2)
    fed.storage.delete_study(fed.storage.get_study_id_from_name(open_uploads))  # and deleted
    restarted = _restart(fed)
    assert restarted.open_round == 2 and _uploads_study_exists(fed, 2)  # open again
    pointer = fed.trust.verify("latest", fed.store.main_attrs()[LATEST_KEY])
    assert pointer["round"] == 1


def test_a_restart_publishes_the_open_round_s_staged_broadcast_once_and_purges_others(
    propagate, caplog
) -> None:
    fed = _federation()
    server = FederationServer(fed)
    _upload(fed, 0)
    assert server.step().round == 0
    stale = fed.store.stage_broadcast(0, fed.store.sign_broadcast(0, "stale", epoch=1))
    staged_payload = encode_broadcast(
        round_index=1,
        aggregation="weighted",
        vectors=np.ones((1, M)),
        n_contributors=2,
        config_hash=fed.config_hash,
        feature_block=0,
    )
    pending = fed.store.stage_broadcast(1, fed.store.sign_broadcast(1, staged_payload, epoch=1))
    second = fed.store.stage_broadcast(1, fed.store.sign_broadcast(1, staged_payload, epoch=1))
    with caplog.at_level(logging.WARNING):
        restarted = _restart(fed)
    trials = {t._trial_id: t for t in fed.store.broadcast_trials()}
    for purged in (stale, second):
        assert trials[purged].state == TrialState.FAIL
        assert trials[purged].system_attrs[BROADCAST_KEY] == PURGED
    assert trials[pending].state == TrialState.RUNNING
    assert caplog.text.count("Purging a stale staged broadcast") == 2
    report = restarted.step()  # published as it is, with nothing collected
    assert (report.round, report.reason, report.rejected) == (1, "resumed", ())
    assert report.n_contributors == 2
    assert report.contributors == ()
    assert fed.store.latest()["trial_id"] == pending and restarted.open_round == 2
    assert fed.storage.get_trial(pending).state == TrialState.COMPLETE
    assert _uploads_study_exists(fed, 2)


def test_a_round_refused_for_the_budget_releases_nothing_and_says_so_at_once() -> None:
    base = DPConfig(1.0, 0.5, 4.0, accountant="moments")
    budget = base.epsilon(1, 2)  # exactly one round
    fed = _federation(DPConfig(1.0, 0.5, 4.0, accountant="moments", epsilon_budget=budget))
    server = FederationServer(fed, heartbeat_interval=3600.0)
    _upload(fed, 0)
    assert server.step().round == 0
    beat = fed.store.server_status()["heartbeat"]
    _upload(fed, 1)
    before = time.time()
    report = server.step()
    record = fed.budget_exhausted()
    assert report.budget_exhausted is True and report.published is False
    assert (report.round, report.reason) == (1, "budget")
    assert (report.n_contributors, report.contributors, report.rejected) == (0, (), ())
    assert report.epsilon == record["epsilon"] == pytest.approx(budget)
    assert report.delta == record["delta"] and type(report.delta) is float
    assert before <= report.published_at <= time.time()
    assert fed.store.server_status()["heartbeat"] > beat  # the operator sees it at once
    assert not _uploads_study_exists(fed, 1)  # discarded, and not opened again by a restart
    assert _restart(fed).budget_exhausted is not None and not _uploads_study_exists(fed, 1)


_PRIVACY = DPConfig(1.0, 0.5, 4.0, accountant="moments")


def _restart_after_a_crash_at_commit(
    fed: Federation, monkeypatch: pytest.MonkeyPatch
) -> FederationServer:
    """Round 0 is accounted and staged, then the server dies before committing it."""
    server = FederationServer(fed)
    _upload(fed, 0)
    monkeypatch.setattr(
        fed.store, "commit_broadcast", lambda *a: (_ for _ in ()).throw(OSError("power cut"))
    )
    with pytest.raises(OSError, match="power cut"):
        server.step()
    monkeypatch.undo()
    return _restart(fed)


def test_a_staged_accounted_round_found_at_restart_is_published_with_its_entry(
    monkeypatch: pytest.MonkeyPatch, propagate, caplog
) -> None:
    fed = _federation(_PRIVACY)
    with caplog.at_level(logging.WARNING):
        restarted = _restart_after_a_crash_at_commit(fed, monkeypatch)
        report = restarted.step()
    (entry,) = fed.ledger_entries()  # accounted once, not again at restart
    assert (report.round, report.reason) == (0, "resumed")
    assert report.epsilon == entry.epsilon and report.delta == entry.delta is not None
    assert report.noise_std == entry.noise_std is not None
    assert fed.storage.get_trial(fed.store.latest()["trial_id"]).value == -1.0  # withheld
    assert "staged unaccounted" not in caplog.text


def test_a_staged_unaccounted_round_found_at_restart_is_accounted_before_it_is_published(
    propagate, caplog
) -> None:
    fed = _federation(_PRIVACY)
    FederationServer(fed)  # claims epoch 1
    payload = encode_broadcast(
        round_index=0,
        aggregation="weighted",
        vectors=np.ones((1, M)),
        n_contributors=-1,
        config_hash=fed.config_hash,
        feature_block=0,
    )
    fed.store.stage_broadcast(0, fed.store.sign_broadcast(0, payload, epoch=1))
    with caplog.at_level(logging.WARNING):
        restarted = _restart(fed)  # epoch 2
        report = restarted.step()
    assert "Round 0 was staged unaccounted; accounting it now" in caplog.text
    (entry,) = fed.ledger_entries()
    assert entry.payload == text_digest(payload) and entry.epoch == 2
    phi_max = float(restarted._subregion_weights(0).max())
    assert entry.phi_max == phi_max > 0.0
    assert entry.noise_std == pytest.approx(1.0 * phi_max * 4.0 / 0.5)
    assert report.epsilon == entry.epsilon and report.noise_std == entry.noise_std


def test_a_published_round_reports_when_and_what_and_heartbeats_at_once() -> None:
    fed = _federation()
    server = FederationServer(fed, heartbeat_interval=3600.0)
    assert server.step() is None  # nothing uploaded yet: the first heartbeat only
    assert fed.store.server_status()["open_round"] == 0
    _upload(fed, 0)
    before = time.time()
    report = server.step()
    assert before <= report.published_at <= time.time()
    omegas = [np.linalg.norm(np.linspace(-1.0, 1.0, M) * (i + 1)) for i in range(2)]
    assert report.upload_norms == pytest.approx(tuple(omegas))
    assert (report.epsilon, report.delta, report.noise_std) == (None, None, None)
    assert fed.store.server_status()["open_round"] == 1  # not an hour later
