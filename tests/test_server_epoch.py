"""One server at a time: server epochs and the fence that stops a superseded server."""

from __future__ import annotations

import itertools
import threading

import numpy as np
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
import pytest

from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import ServerSupersededError
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.records import LATEST_KEY

M = 6
SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _federation(
    n_clients: int = 3, *, storage: object = None, privacy: DPConfig | None = None
) -> Federation:
    fed = Federation.create(
        f"epoch-{next(_names)}",
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted"),
        privacy=privacy,
        seed=2,
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def _upload_all(fed: Federation, round_index: int = 0) -> None:
    for i in range(fed.n_clients):
        omega = np.linspace(-1.0, 1.0, M) * (i + 1)
        fed.upload(f"c{i}", omega, n_observations=3, iteration=round_index)


def test_each_server_claims_the_next_epoch_and_the_older_one_stops() -> None:
    fed = _federation()
    first = FederationServer(fed)
    assert first.epoch == 1
    _upload_all(fed)
    assert first.step().round == 0
    second = FederationServer(Federation.load(fed.name, fed.storage))
    assert second.epoch == 2
    _upload_all(fed, 1)
    with pytest.raises(ServerSupersededError, match="epoch 2"):
        first.step()
    with pytest.raises(ServerSupersededError):
        first.step(force=True)  # stays stopped
    report = second.step()
    assert report.round == 1 and report.n_contributors == 3
    assert [t.state for t in fed.store.broadcast_trials()] == [TrialState.COMPLETE] * 2
    assert fed.status().server["epoch"] == 2
    assert "epoch 2, last seen" in fed.status().format()


def test_a_superseded_serve_loop_raises_at_once_instead_of_retrying() -> None:
    fed = _federation()
    old = FederationServer(fed)
    FederationServer(fed)
    with pytest.raises(ServerSupersededError):
        old.serve(poll_interval=0.01, timeout=30.0, max_consecutive_errors=1000)


def test_a_server_superseded_during_aggregation_releases_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DP: the newer server starts while the older one noises a round; only one is released."""
    fed = _federation(4, privacy=DPConfig(noise_multiplier=1.0, sample_rate=1.0, clip_norm=5.0))
    old = FederationServer(fed)
    _upload_all(fed)
    started: list[FederationServer] = []
    original = old._privatize

    def privatize_then_be_superseded(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        result = original(*args, **kwargs)
        started.append(FederationServer(Federation.load(fed.name, fed.storage)))
        return result

    monkeypatch.setattr(old, "_privatize", privatize_then_be_superseded)
    with pytest.raises(ServerSupersededError):
        old.step()
    assert fed.store.broadcast_trials() == []  # the old server staged nothing
    (new,) = started
    report = new.step()
    assert report.round == 0 and report.published
    (trial,) = fed.store.broadcast_trials()
    assert trial.state == TrialState.COMPLETE
    # The old server was fenced before accounting: the round was accounted once, by the new
    # server, for the very payload it published.
    (entry,) = fed.ledger_entries()
    assert entry.round == 0 and entry.payload == fed.store.broadcasts()[0].digest
    assert fed.privacy_spent()[0] == pytest.approx(fed.privacy.epsilon(1, 4))


# ------------------------------------------- superseded exactly before staging / commit
def _supersede(fed: Federation) -> None:
    """Another server claims a newer epoch (from its own process's view of the storage)."""
    Federation.load(fed.name, fed.storage).store.claim_server_epoch()


def _once_after(monkeypatch: pytest.MonkeyPatch, obj: object, name: str, hook) -> None:  # noqa: ANN001
    """Run ``hook()`` right after the first call of ``obj.name`` (a deterministic interleaving)."""
    original = getattr(obj, name)
    fired: list[bool] = []

    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        result = original(*args, **kwargs)
        if not fired:
            fired.append(True)
            hook()
        return result

    monkeypatch.setattr(obj, name, wrapped)


def _pne_federation() -> Federation:
    fed = Federation.create(
        f"epoch-pne-{next(_names)}",
        search_space=SPACE,
        n_clients=2,
        protocol=FedPNEConfig(horizon=40),
        seed=1,
    )
    for i in range(2):
        fed.join(f"c{i}")
    return fed


def _pne_upload_all(fed: Federation) -> None:
    phase = fed.channel.view().phase
    for i in range(2):
        means = {node.key: 0.1 * (i + 1) for node in phase.nodes}
        assert fed.channel.upload(f"c{i}", phase, means)


_DP = DPConfig(noise_multiplier=1.0, sample_rate=1.0, clip_norm=5.0)
#: (protocol, the store method right after which the server is superseded, the fence it meets)
_FENCES = [
    # FTS: signing is the last step before staging (after the DP accounting).
    pytest.param("fts", "sign_broadcast", "staging", id="fts-before-staging"),
    pytest.param("fts-dp", "sign_broadcast", "staging", id="fts-dp-before-staging"),
    pytest.param("fts", "stage_broadcast", "commit", id="fts-before-commit"),
    pytest.param("fts-dp", "stage_broadcast", "commit", id="fts-dp-before-commit"),
    # Fed-PNE: the phase is decided from the uploads just read, then saved and staged.
    pytest.param("pne", "read_uploads", "staging", id="pne-before-staging"),
    pytest.param("pne", "stage_broadcast", "commit", id="pne-before-commit"),
]


@pytest.mark.parametrize(("kind", "method", "fence"), _FENCES)
def test_a_server_superseded_right_before_staging_or_commit_publishes_nothing(
    kind: str, method: str, fence: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind == "pne":
        fed = _pne_federation()
        old = FederationServer(fed)
        _pne_upload_all(fed)
    else:
        fed = _federation(4 if kind == "fts-dp" else 3, privacy=_DP if kind == "fts-dp" else None)
        old = FederationServer(fed)
        _upload_all(fed)
    participant = Federation.load(fed.name, fed.storage)
    assert participant.open_round() == 0
    _once_after(monkeypatch, old._store, method, lambda: _supersede(fed))
    with pytest.raises(ServerSupersededError, match="epoch 2"):
        old.step()
    monkeypatch.undo()
    # Nothing published: no completed broadcast, no pointer, the participants wait in round 0.
    trials = fed.store.broadcast_trials()
    assert [t.state for t in trials] == ([] if fence == "staging" else [TrialState.RUNNING])
    assert LATEST_KEY not in fed.store.main_attrs()
    assert participant.open_round() == 0 and participant.store.latest() is None
    if kind != "pne":
        assert participant.latest_broadcast() is None
    with pytest.raises(ServerSupersededError):
        old.step(force=True)  # and it stays stopped
    assert [t.state for t in fed.store.broadcast_trials()] == [t.state for t in trials]
    # The newest server publishes round 0 once (what the old one staged, if it staged).
    new = FederationServer(Federation.load(fed.name, fed.storage))
    report = new.step()
    assert report is not None and report.round == 0
    assert participant.open_round() == 1
    published = fed.store.broadcasts()
    assert [b.state for b in published] == [TrialState.COMPLETE]
    if fence == "commit":
        assert published[0].trial_id == trials[0]._trial_id and report.reason == "resumed"
    if kind == "fts-dp":  # accounted once, and what is readable is what was accounted
        (entry,) = fed.ledger_entries()
        assert entry.payload == published[0].digest
        assert fed.privacy_spent()[0] == pytest.approx(fed.privacy.epsilon(1, 4))


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_servers_starting_at_once_get_distinct_epochs(
    tmp_path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race injected, not hoped for: each time server A has found an epoch free and is about
    to create it, another server claims that very epoch first (three times in a row)."""
    url = (
        f"sqlite:///{tmp_path / 'race.db'}"
        if kind == "sqlite"
        else f"journal:{tmp_path / 'race.log'}"
    )
    fed = _federation(storage=url)
    a = Federation.load(fed.name, url).store
    others: list[int] = []
    scan = a.has_server_epoch

    def scan_then_lose_the_race(epoch: int) -> bool:
        free = not scan(epoch)
        if free and len(others) < 3:  # A found `epoch` free: another server takes it now
            others.append(Federation.load(fed.name, url).store.claim_server_epoch())
        return not free

    monkeypatch.setattr(a, "has_server_epoch", scan_then_lose_the_race)
    epoch_a = a.claim_server_epoch()
    assert others == [1, 2, 3] and epoch_a == 4  # each lost race moved A on, never shared
    assert [fed.store._signed_epoch(e) for e in range(1, 5)] == [True] * 4
    assert fed.store.superseded(3) == 4 and fed.store.superseded(4) is None
    assert FederationServer(fed).epoch == 5


def test_a_fedpne_server_is_fenced_too() -> None:
    fed = _pne_federation()
    first = FederationServer(fed)
    second = FederationServer(fed)
    assert (first.epoch, second.epoch) == (1, 2)
    _pne_upload_all(fed)
    with pytest.raises(ServerSupersededError):
        first.step(force=True)
    assert fed.store.broadcast_trials() == [] and fed.open_round() == 0
    report = second.step()  # the newest server carries on
    assert report.round == 0 and sorted(report.contributors) == ["c0", "c1"]
    assert fed.open_round() == 1
    with pytest.raises(ServerSupersededError):
        first.step()


def test_the_cli_server_exits_with_status_3_when_superseded(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    fed = _federation(storage=url)
    outcome: list[int] = []
    thread = threading.Thread(
        target=lambda: outcome.append(
            cli_main(["serve", "--storage", url, "--name", fed.name, "--poll-interval", "0.01"])
        )
    )
    thread.start()
    try:
        # Wait until the CLI's server has claimed epoch 1, then start a newer one.
        for _ in range(3000):
            if fed.store.has_server_epoch(1):
                break
            threading.Event().wait(0.01)
        assert fed.store.has_server_epoch(1)
        FederationServer(Federation.load(fed.name, url))
    finally:
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert outcome == [3]
    assert "epoch 2" in capsys.readouterr().err
