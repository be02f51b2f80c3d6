"""The generic server (``federation/server.py``), in process: bad arguments and a finished
federation are refused before anything is written, the closing arguments are kept, an upload
sealed before its round opened never counts, an upload opens with its receipt (and not under an
id that is not enrolled), a stopping server records it, and a superseded one
leaves the newer server's heartbeat alone (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import itertools
import logging
import time
from types import SimpleNamespace

import numpy as np
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import server as server_module
from optuna_fedbo.federation import ServerSupersededError
from optuna_fedbo.federation._openings import FIRST_OPENING
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.finished import FederationFinishedError
from optuna_fedbo.federation.fts.messages import encode_upload

M = 4
_names = itertools.count()


def _federation(n_clients: int = 2) -> Federation:
    fed = Federation.create(
        f"server-{next(_names)}",
        search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=n_clients,
        protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted"),
        seed=5,
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def _upload_all(fed: Federation, round_index: int = 0) -> None:
    for i in range(fed.n_clients):
        omega = np.linspace(-1.0, 1.0, M) * (i + 1)
        fed.upload(f"c{i}", omega, n_observations=3, iteration=round_index)


def _c0_payload(fed: Federation, round_index: int) -> bytes:
    """c0's upload of ones for ``round_index``, encoded (not yet sealed)."""
    return encode_upload(
        config_hash=fed.config_hash,
        round_index=round_index,
        client_id="c0",
        omega=np.ones(M),
        n_observations=3,
        iteration=round_index,
    )


def _nothing_written(fed: Federation) -> bool:
    """No epoch claimed and no heartbeat: the refused server wrote nothing."""
    return fed.store.superseded(0) is None and fed.store.server_status() is None


@pytest.mark.parametrize("bad", [-1.0, -0.5, "soon", float("nan")])
def test_a_bad_round_timeout_is_refused_before_anything_is_written(bad: object) -> None:
    fed = _federation()
    with pytest.raises(ValueError, match="round_timeout must be 'auto', None or >= 0"):
        FederationServer(fed, round_timeout=bad)
    assert _nothing_written(fed)


@pytest.mark.parametrize("bad", [0, -2, True, "3"])
def test_a_bad_min_uploads_is_refused_before_anything_is_written(bad: object) -> None:
    fed = _federation()
    with pytest.raises(ValueError, match="min_uploads must be 'auto' or at least 1"):
        FederationServer(fed, min_uploads=bad)
    assert _nothing_written(fed)


@pytest.mark.parametrize("timeout", [0.0, 0.5, None])
def test_the_closing_arguments_are_kept(timeout: float | None) -> None:
    server = FederationServer(_federation(), round_timeout=timeout, min_uploads=2)
    assert server.current_round_timeout() == timeout
    server.announce()
    status = server.federation.store.server_status()
    assert status["closing"] == {"round_timeout": timeout, "min_uploads": 2}
    assert "stopped" not in status and "finished" not in status  # a running server's


@pytest.mark.parametrize("discard", [True, False])
def test_a_published_rounds_uploads_are_discarded_only_when_asked(discard: bool) -> None:
    fed = _federation()
    server = FederationServer(fed, discard_uploads=discard)
    _upload_all(fed)
    assert server.step().round == 0
    assert sorted(fed.store.read_uploads(0)) == ([] if discard else ["c0", "c1"])


def test_a_finished_federation_is_refused_before_the_epoch_claim() -> None:
    fed = _federation()
    fed.store.write_server_status({"epoch": 0, "finished": {"at": 1.0, "rounds": 3}})
    with pytest.raises(FederationFinishedError, match="Nothing to serve"):
        FederationServer(fed)
    assert fed.store.superseded(0) is None  # no epoch claimed


def test_an_upload_sealed_before_its_round_opened_never_counts(caplog) -> None:
    fed = _federation()
    server = FederationServer(fed)
    _upload_all(fed)
    assert server.step().round == 0  # round 1 opens with the broadcast of round 0
    # c0's genuine upload for round 1, but sealed while round 0 was open (bound to its opening).
    payload = _c0_payload(fed, 1)
    early = fed.trust.seal_upload(fed._participant_key("c0"), 1, 1, payload, FIRST_OPENING)
    fed.store.write_upload(1, "c0", early)
    with caplog.at_level(logging.WARNING):
        assert server.step(force=True) is None  # nothing valid: nothing published
    assert fed.open_round() == 1
    assert "written before round 1 opened" in caplog.text


def test_the_server_opens_an_enrolled_participants_upload_with_its_receipt() -> None:
    """``(counter, plaintext, receipt)``: the receipt the participant got when it sent it; an
    upload under an id that is not enrolled is refused before anything is checked."""
    fed = _federation()
    server = FederationServer(fed)
    payload = _c0_payload(fed, 0)
    receipt = fed.send_upload("c0", 0, payload)
    text = fed.store.read_uploads(0)["c0"]
    counter, plaintext, opened_receipt = server._open_upload_with_receipt("c0", text, 0)
    assert (plaintext, opened_receipt) == (payload, receipt) and counter >= 1
    assert server._open_upload_bytes("c0", text, 0) == (counter, payload)
    with pytest.raises(UploadRejected, match="unknown participant"):
        server._open_upload_with_receipt("c9", text, 0)
    with pytest.raises(UploadRejected, match="written under participant 'c1'"):
        server._open_upload_with_receipt("c1", text, 0)
    with pytest.raises(UploadRejected, match="found in round 1"):
        server._open_upload_with_receipt("c0", text, 1)


def test_a_stopping_server_records_it_at_once() -> None:
    fed = _federation()
    server = FederationServer(fed, heartbeat_interval=3600.0)
    server.announce()  # a heartbeat just written: the next one is an hour away ...
    server.announce(stopped="error")  # ... but a stop is recorded now
    status = fed.store.server_status()
    assert status["stopped"] == "error" and status["epoch"] == server.epoch


def test_a_superseded_server_leaves_the_newer_servers_heartbeat_alone() -> None:
    fed = _federation()
    old = FederationServer(fed)
    new = FederationServer(Federation.load(fed.name, fed.storage))
    new.announce()
    old.announce(stopped="superseded")
    status = fed.store.server_status()
    assert status["epoch"] == new.epoch == 2 and "stopped" not in status


def test_a_newer_server_known_only_by_its_heartbeat_stops_this_one_within_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A newer server whose epoch claim is gone from the storage still signs its heartbeat: the
    server reads that heartbeat at most once a second (not at every check) and stops on it."""
    now = [100.0]
    monkeypatch.setattr(
        server_module, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time)
    )
    fed = _federation()
    server = FederationServer(fed)
    reads: list[int] = []
    status = fed.store.server_status
    monkeypatch.setattr(fed.store, "server_status", lambda: reads.append(1) or status())
    for _ in range(3):
        server._ensure_current()
    assert len(reads) == 1  # once within the second
    fed.store.write_server_status({"epoch": server.epoch + 1})  # the newer server's heartbeat
    now[0] = 101.0
    with pytest.raises(ServerSupersededError, match=f"epoch {server.epoch + 1}"):
        server._ensure_current()
    assert len(reads) == 2
