"""The Fed-PNE server's commit path (``fedpne/server.py``), in process: what a published phase
says (forced or not, receipts of the uploads it used), that the next round opens with it (and no
later one), and that the heartbeat and the report say so at once (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import itertools
import logging
import time

from _upload_attacks import receipt
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation.fedpne.channel import FedPNEChannel
from optuna_fedbo.federation.store import BROADCAST_KEY
from optuna_fedbo.federation.store import LATEST_KEY
from optuna_fedbo.federation.store import PURGED
from optuna_fedbo.federation.trust import text_digest

_names = itertools.count()


def _federation() -> Federation:
    fed = Federation.create(
        f"pne-commit-{next(_names)}",
        search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=3,
        protocol=FedPNEConfig(horizon=60),
        seed=2,
    )
    for i in range(3):
        fed.join(f"c{i}")
    return fed


def _upload(fed: Federation, clients: range | list[int]) -> None:
    phase = FedPNEChannel(fed).view().phase
    for i in clients:
        assert FedPNEChannel(fed).upload(f"c{i}", phase, {n.key: 0.2 * i for n in phase.nodes})


def _study_exists(fed: Federation, round_index: int) -> bool:
    try:
        fed.storage.get_study_id_from_name(fed.store.uploads_study_name(round_index))
    except KeyError:
        return False
    return True


@pytest.mark.parametrize("force", [False, True])
def test_a_published_phase_says_whether_it_was_forced_and_whose_uploads_it_used(
    force: bool,
) -> None:
    fed = _federation()
    server = FederationServer(fed, discard_uploads=False, heartbeat_interval=3600.0)
    _upload(fed, range(2) if force else range(3))
    stored = fed.store.read_uploads(0)
    before = time.time()
    report = server.step(force=force)
    assert report is not None and report.round == 0
    assert report.reason == ("forced" if force else "complete")
    assert report.phase_report.forced is force
    assert report.n_contributors == len(stored) == (2 if force else 3)
    assert before <= report.published_at <= time.time()
    (broadcast,) = fed.store.broadcasts()
    # The receipts are what each participant computed of what it sent.
    assert sorted(broadcast.receipts) == sorted(receipt(fed.trust, t) for t in stored.values())
    assert FedPNEChannel(fed).view().phase.index == 2
    # The next round is open at once (its uploads study exists), no later one; and the
    # heartbeat says so now, not an interval later.
    assert _study_exists(fed, 1) and not _study_exists(fed, 2)
    assert fed.store.server_status()["open_round"] == 1


# ------------------------------------------------------------------------------ recovery
def _crash_after_completing(monkeypatch: pytest.MonkeyPatch, fed: Federation) -> None:
    """The server dies inside the commit: the trial is completed, the pointer not moved yet."""

    def complete_then_die(trial_id: int, round_index: int, n_contributors: int) -> None:
        fed.storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [float(n_contributors)])
        raise RuntimeError("power cut")

    monkeypatch.setattr(fed.store, "commit_broadcast", complete_then_die)


def _restart(fed: Federation, **kwargs: object) -> FederationServer:
    return FederationServer(Federation.load(fed.name, fed.storage), **kwargs)


@pytest.mark.parametrize("crashed_round", [0, 1])
def test_a_restart_moves_the_pointer_a_crash_left_behind(
    crashed_round: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    fed = _federation()
    server = FederationServer(fed)
    for round_index in range(crashed_round + 1):
        _upload(fed, range(3))
        if round_index == crashed_round:
            _crash_after_completing(monkeypatch, fed)
            with pytest.raises(RuntimeError, match="power cut"):
                server.step()
            monkeypatch.undo()
        else:
            assert server.step().round == round_index
    published = fed.store.broadcasts()
    assert [b.state for b in published] == [TrialState.COMPLETE] * (crashed_round + 1)
    kept = _restart(fed, discard_uploads=False)  # asked to keep the uploads: kept
    assert sorted(fed.store.read_uploads(crashed_round)) == ["c0", "c1", "c2"]
    assert kept.open_round == crashed_round + 1
    restarted = _restart(fed)  # the default: the published round's uploads are discarded
    assert fed.store.read_uploads(crashed_round) == {}
    # The signed pointer names the newest published broadcast, as a commit would have.
    stored = fed.store.main_attrs()[LATEST_KEY]
    pointer = fed.trust.verify("latest", stored)
    newest = published[-1]
    assert pointer["round"] == crashed_round and pointer["trial_id"] == newest.trial_id
    assert pointer["digest"] == text_digest(
        str(fed.storage.get_trial(newest.trial_id).system_attrs[BROADCAST_KEY])
    )
    assert restarted.open_round == crashed_round + 1 and restarted.step() is None
    assert len(fed.store.broadcasts()) == crashed_round + 1  # nothing published again
    # A restart with the pointer up to date leaves it as it is.
    _restart(fed)
    assert fed.store.main_attrs()[LATEST_KEY] == stored


def test_a_restart_stages_a_decided_phase_once_and_purges_stale_staged_broadcasts(
    monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    fed = _federation()
    server = FederationServer(fed)
    _upload(fed, range(3))
    assert server.step().round == 0
    # A stale staged broadcast of round 0 (a server that died before committing it) ...
    stale_early = fed.store.stage_broadcast(0, fed.store.sign_broadcast(0, "stale", epoch=1))
    _upload(fed, range(3))

    def die(*args: object, **kwargs: object) -> None:
        raise RuntimeError("power cut")

    # ... then round 1 is decided and saved, and the server dies before staging it.
    monkeypatch.setattr(fed.store, "stage_broadcast", die)
    with pytest.raises(RuntimeError, match="power cut"):
        server.step()
    monkeypatch.undo()
    assert [b.round for b in fed.store.broadcasts()] == [0, 0]
    with caplog.at_level(logging.WARNING):
        restarted = _restart(fed)  # stages the decided phase from the saved state
        pending = fed.store.broadcasts()[-1]
        assert (pending.round, pending.state) == (1, TrialState.RUNNING)
        # Another copy staged meanwhile (a second server that died) is purged next time.
        late = fed.store.stage_broadcast(1, fed.store.sign_broadcast(1, "late", epoch=1))
        restarted = _restart(fed)
    trials = {t._trial_id: t for t in fed.store.broadcast_trials()}
    for stale in (stale_early, late):
        assert trials[stale].state == TrialState.FAIL
        assert trials[stale].system_attrs[BROADCAST_KEY] == PURGED
    assert caplog.text.count("Purging a stale staged broadcast") == 2
    report = restarted.step()
    assert report.reason == "resumed" and report.round == 1 and report.rejected == ()
    assert fed.store.latest()["trial_id"] == pending.trial_id  # the decided phase, once
    assert FedPNEChannel(fed).view().phase.index == 3


def test_published_rounds_without_the_saved_server_state_are_refused() -> None:
    fed = _federation()
    server = FederationServer(fed)
    _upload(fed, range(3))
    assert server.step().round == 0
    study = fed.storage.get_study_id_from_name(f"{fed.name}:fedbo:fedpne:server")
    fed.storage.delete_study(study)
    with pytest.raises(ValueError, match="has published rounds but no saved Fed-PNE server"):
        _restart(fed)
