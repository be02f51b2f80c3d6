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
    # The round was accounted (by the old server, before the fence) exactly once.
    (entry,) = fed.ledger_entries()
    # ... and the new server published that very payload (accounted, never drawn again).
    assert entry.round == 0 and entry.payload == fed.store.broadcasts()[0].digest
    assert fed.privacy_spent()[0] == pytest.approx(fed.privacy.epsilon(1, 4))


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_servers_starting_at_once_get_distinct_epochs(tmp_path, kind: str) -> None:
    url = (
        f"sqlite:///{tmp_path / 'race.db'}"
        if kind == "sqlite"
        else f"journal:{tmp_path / 'race.log'}"
    )
    fed = _federation(storage=url)
    barrier = threading.Barrier(6)
    epochs: list[int] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            barrier.wait()
            epochs.append(Federation.load(fed.name, url).store.claim_server_epoch())
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert sorted(epochs) == list(range(1, 7))
    assert FederationServer(fed).epoch == 7


def test_a_fedpne_server_is_fenced_too() -> None:
    fed = Federation.create(
        f"epoch-pne-{next(_names)}",
        search_space=SPACE,
        n_clients=2,
        protocol=FedPNEConfig(horizon=100),
        seed=1,
    )
    first = FederationServer(fed)
    second = FederationServer(fed)
    assert (first.epoch, second.epoch) == (1, 2)
    with pytest.raises(ServerSupersededError):
        first.step()
    second.step()  # the newest server carries on


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
