"""FedPNEConfig, the Fed-PNE server over a federation storage, status, restarts, bad uploads."""

from __future__ import annotations

import itertools
import json
import logging
import math

import numpy as np
from optuna.distributions import CategoricalDistribution
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution
from optuna.study import StudyDirection
import pytest

from optuna_fedbo.core.fedpne import FedPNEParams
from optuna_fedbo.core.fedpne import FedPNEServerState
from optuna_fedbo.core.fedpne import Partition
from optuna_fedbo.core.fedpne import Phase
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import FedPNEServer
from optuna_fedbo.federation import ProtocolConfig
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.fedpne.channel import FedPNEChannel
from optuna_fedbo.federation.fedpne.config import NodeSpace
from optuna_fedbo.federation.fedpne.messages import encode_means_upload
from optuna_fedbo.search_space import SearchSpaceEncoder

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(-5.0, 5.0)}
_names = itertools.count()


@pytest.fixture(autouse=True)
def _propagate_optuna_logs(propagate):
    """caplog sees optuna-fedbo's records at every level (the ``propagate`` fixture)."""
    yield


def _federation(n_clients: int = 3, storage=None, join: bool = True, **protocol) -> Federation:
    config = FedPNEConfig(**{"horizon": 200, "variant": "paper", **protocol})
    fed = Federation.create(
        f"pne-{next(_names)}",
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=config,
        seed=5,
    )
    if join:
        for i in range(n_clients):
            fed.join(f"c{i}")
    return fed


def _means(phase: Phase, client: int) -> dict[str, float]:
    """Deterministic node means: node index i of client m gets a distinct value in [0, 1]."""
    return {node.key: ((node.index * 0.37 + client * 0.11) % 1.0) for node in phase.nodes}


def _upload_all(fed: Federation, channel: FedPNEChannel, phase: Phase, clients=None) -> None:
    for m in clients if clients is not None else range(fed.n_clients):
        assert channel.upload(f"c{m}", phase, _means(phase, m))


# ------------------------------------------------------------------------------ config
def test_config_round_trips_and_hashes_like_any_protocol() -> None:
    config = FedPNEConfig(horizon=500, value_range=[-1, 3], dp_epsilon=2, dp_delta=1e-6)
    assert config.value_range == (-1.0, 3.0)
    record = config.to_dict()
    assert record["kind"] == "fedpne"
    again = ProtocolConfig.from_dict(json.loads(json.dumps(record)))
    assert again == config
    a = FederationConfig("f", SPACE, 4, config)
    b = FederationConfig.from_json(a.to_json())
    assert b.hash == a.hash and b.protocol == config
    assert FedPNEConfig(horizon=500) != FedPNEConfig(horizon=501)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"horizon": 0}, "horizon"),
        ({"horizon": 10, "value_range": (1.0, 1.0)}, "lo < hi"),
        ({"horizon": 10, "value_range": (0.0, math.inf)}, "finite"),
        ({"horizon": 10, "value_range": (0.0,)}, "pair"),
        ({"horizon": 10, "branching": 1}, "branching"),
        ({"horizon": 10, "rho": 1.0}, "rho"),
        ({"horizon": 10, "nu1": 0.0}, "nu1"),
        ({"horizon": 10, "delta": 2.0}, "delta"),
        ({"horizon": 10, "constants": "paper"}, "constants"),
        ({"horizon": 10, "constants": "theory", "c": 2.0}, "theory"),
        ({"horizon": 10, "split": "median"}, "split"),
        ({"horizon": 10, "representative": "corner"}, "representative"),
        ({"horizon": 10, "dp_epsilon": 1.0}, "both"),
        ({"horizon": 10, "dp_epsilon": 1.0, "dp_delta": 1.0}, "dp_delta"),
        ({"horizon": 10, "dp_epsilon": -1.0, "dp_delta": 1e-5}, "dp_epsilon"),
        ({"horizon": 1}, "c1 \\* T / delta"),
    ],
)
def test_bad_configs_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FedPNEConfig(**kwargs)


def test_params_presets_and_dp_constants() -> None:
    params = FedPNEConfig(horizon=1000).params(10)
    assert (params.nu1, params.rho, params.c, params.c1) == (1.0, 0.5, 0.1, 1.0)
    assert params.confidence_delta == pytest.approx(0.1)
    theory = FedPNEConfig(horizon=1000, constants="theory").params(10)
    assert theory.c == 2.0 and theory.c1 == pytest.approx(20**0.125)
    assert theory.confidence_delta == pytest.approx(0.1)
    dp = FedPNEConfig(horizon=1000, constants="theory", dp_epsilon=1.0, dp_delta=1e-5)
    sigma = math.sqrt(2 * math.log(1.25e5))
    # Lemma D.3: c = sqrt(4 + 16 sigma^2).
    assert dp.params(10).effective_c == pytest.approx(math.sqrt(4 + 16 * sigma**2))
    assert dp.guarantee(10).sigma == pytest.approx(sigma)
    assert FedPNEConfig(horizon=10).guarantee(10) is None


def test_dp_with_one_participant_is_refused_at_the_channel() -> None:
    config = FedPNEConfig(horizon=50, dp_epsilon=1.0, dp_delta=1e-5)
    fed = Federation.create(f"dp-{next(_names)}", search_space=SPACE, n_clients=1, protocol=config)
    with pytest.raises(ValueError, match="at least two"):
        FedPNEChannel(fed)


def test_federation_level_privacy_is_refused_for_fedpne() -> None:
    # DP-Fed-PNE's noise is configured in FedPNEConfig (client side), not with privacy=.
    with pytest.raises(ValueError):
        Federation.create(
            f"priv-{next(_names)}",
            search_space=SPACE,
            n_clients=2,
            protocol=FedPNEConfig(horizon=10),
            privacy={"noise_multiplier": 1.0},
        )


def test_reward_map_with_direction_and_clipping() -> None:
    config = FedPNEConfig(horizon=10, value_range=(10.0, 20.0))
    assert config.reward(15.0, StudyDirection.MAXIMIZE) == (0.5, False)
    assert config.reward(12.0, StudyDirection.MINIMIZE) == (pytest.approx(0.8), False)
    assert config.reward(25.0, StudyDirection.MAXIMIZE) == (1.0, True)
    assert config.reward(25.0, StudyDirection.MINIMIZE) == (0.0, True)
    assert config.reward(10.0, StudyDirection.MAXIMIZE) == (0.0, False)
    with pytest.raises(ValueError, match="finite"):
        config.reward(float("nan"), StudyDirection.MAXIMIZE)


def test_node_space_decodes_numeric_and_category_set_coordinates() -> None:
    space = {
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "layers": IntDistribution(1, 4),
        "act": CategoricalDistribution(["relu", "tanh", "gelu"]),
        "const": IntDistribution(3, 3),
    }
    nodes = NodeSpace(SearchSpaceEncoder(space))
    assert nodes.names == ("lr", "layers", "act") and nodes.dim == 3
    params = nodes.decode(np.array([0.5, 0.0, 0.5]))
    assert params["lr"] == pytest.approx(10**-2.5)
    assert params["layers"] == 1 and params["act"] == "tanh" and params["const"] == 3
    assert nodes.decode(np.array([1.0, 1.0, 1.0]))["act"] == "gelu"
    assert nodes.decode(np.array([0.0, 0.99, 0.33]))["act"] == "relu"
    assert nodes.decode(np.array([0.0, 0.99, 0.33]))["layers"] == 4
    # Binary splits of the category coordinate reach every choice (category sets).
    partition = Partition(3, split="longest")
    leaves = list(partition.descendants(partition.root(), 9))
    choices = {nodes.decode(partition.centre(n))["act"] for n in leaves}
    assert choices == {"relu", "tanh", "gelu"}
    with pytest.raises(ValueError, match="constant"):
        Federation.create(
            f"const-{next(_names)}",
            search_space={"a": FloatDistribution(1.0, 1.0)},
            n_clients=2,
            protocol=FedPNEConfig(horizon=10),
        )


# ------------------------------------------------------------------------------ server
def test_the_server_is_dispatched_and_phase_one_is_public() -> None:
    fed = _federation()
    server = FederationServer(fed)
    assert isinstance(server, FedPNEServer)
    channel = FedPNEChannel(fed)
    core = FedPNEServerState(
        FedPNEConfig(horizon=200, variant="paper").params(3), Partition(2, seed=5)
    )
    assert server.phase == channel.view().phase == core.current_phase()
    assert server.open_round == 0 and not server.finished


def test_a_phase_closes_only_when_everyone_uploaded_and_matches_the_core() -> None:
    fed = _federation()
    server = FederationServer(fed)
    channel = FedPNEChannel(fed)
    phase = channel.view().phase
    core = FedPNEServerState(
        FedPNEConfig(horizon=200, variant="paper").params(3),
        Partition(2, seed=5),
        ["c0", "c1", "c2"],
    )
    _upload_all(fed, channel, phase, clients=[0, 1])
    assert server.step() is None
    assert FedPNEChannel(fed).status().missing == ("c2",)
    # A missing participant that has finished will not upload: the status says so.
    fed.lease("c2", ttl=60.0).release()
    status = FedPNEChannel(fed).status()
    assert status.departed == {"c2": "finished"} and "missing        1: c2 (finished)" in (
        status.format()
    )
    _upload_all(fed, channel, phase, clients=[2])
    report = server.step()
    assert report is not None and report.reason == "complete" and report.round == 0
    for m in range(3):
        core.submit(f"c{m}", _means(phase, m))
    expected = core.close_phase()
    assert report.phase_report.means == pytest.approx(expected.means)
    assert report.phase_report.eliminated == expected.eliminated
    assert report.phase_report.best == expected.best
    assert report.next_phase == core.current_phase()
    view = channel.view()
    assert view.phase == core.current_phase() and view.best == expected.best
    # The broadcast carries no global means (they stay in the server's private state).
    raw = fed.store.read_broadcast(int(fed.store.latest()["trial_id"]))[1]
    assert "means" not in json.loads(raw)
    # The raw uploads of the closed round are gone; a late upload is refused.
    assert fed.store.read_uploads(0) == {}
    assert channel.upload("c0", phase, _means(phase, 0)) is False


def test_bad_uploads_are_rejected_and_leave_the_participant_missing(caplog) -> None:
    fed = _federation()
    server = FederationServer(fed)
    channel = FedPNEChannel(fed)
    phase = channel.view().phase
    _upload_all(fed, channel, phase, clients=[0])
    good = _means(phase, 1)
    bad = {
        "c1": encode_means_upload(
            config_hash=fed.config_hash,
            round_index=0,
            phase_index=2,
            client_id="c1",
            means=good,
        ),
        "c2": encode_means_upload(
            config_hash=fed.config_hash,
            round_index=0,
            phase_index=1,
            client_id="c2",
            means=dict(list(good.items())[1:]),
        ),
        "intruder": encode_means_upload(
            config_hash=fed.config_hash,
            round_index=0,
            phase_index=1,
            client_id="intruder",
            means=good,
        ),
    }
    for key, payload in bad.items():
        if key == "intruder":  # not enrolled: it cannot seal, so it writes straight to the storage
            fed.store.write_upload(0, key, payload)
        else:
            fed.send_upload(key, 0, payload)
    nan = json.loads(bad["c1"])
    nan["phase"] = 1
    nan["means"][phase.nodes[0].key] = "NaN"
    fed.send_upload("c1", 0, json.dumps(nan))
    with caplog.at_level(logging.WARNING, logger="optuna_fedbo"):
        assert server.step() is None
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "must be a number" in messages
    assert "nodes differ" in messages
    assert "unknown participant" in messages
    other = json.loads(bad["c1"])
    other["config"] = "0" * 64
    other["phase"] = 1
    fed.send_upload("c1", 0, json.dumps(other))
    assert server.step() is None
    assert "configuration mismatch" in " ".join(r.getMessage() for r in caplog.records)
    assert server.state().missing() == ["c1", "c2"]
    report = server.step(force=True)
    assert report is not None and report.reason == "forced"
    assert report.contributors == ("c0",) and report.phase_report.forced
    assert {c for c, _ in report.rejected} == {"c1", "c2", "intruder"}


def test_timeout_policy_closes_with_the_reporters() -> None:
    fed = _federation()
    channel = FedPNEChannel(fed)
    phase = channel.view().phase
    server = FederationServer(fed, round_timeout=0.0, min_uploads=2)
    _upload_all(fed, channel, phase, clients=[0])
    assert server.step() is None  # min_uploads not reached
    _upload_all(fed, channel, phase, clients=[1])
    report = server.step()
    assert report is not None and report.reason == "timeout"
    params = FedPNEConfig(horizon=200, variant="paper").params(3)
    # A forced close uses T_{h,i} = M' t with the M' = 2 reporters.
    assert report.phase_report.total_pulls == 2 * phase.pulls_per_node
    assert report.phase_report.width == pytest.approx(params.width(2 * phase.pulls_per_node))


def test_participants_that_have_not_joined_block_a_complete_close() -> None:
    fed = _federation(join=False)
    fed.join("c0")
    fed.join("c1")
    channel = FedPNEChannel(fed)
    phase = channel.view().phase
    server = FederationServer(fed)
    _upload_all(fed, channel, phase, clients=[0, 1])
    assert server.step() is None
    status = channel.status()
    assert status.missing == () and status.not_joined == 1
    assert "1 not joined" in status.format()


# ----------------------------------------------------------------------------- restarts
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_server_restart_mid_phase_keeps_the_uploads(tmp_path, kind: str) -> None:
    # (Over a journal file too: the multi-process Fed-PNE test runs on SQLite and PostgreSQL.)
    storage = (
        f"sqlite:///{tmp_path / 'fed.db'}" if kind == "sqlite" else f"journal:{tmp_path / 'f.log'}"
    )
    fed = _federation(storage=storage)
    channel = FedPNEChannel(fed)
    phase = channel.view().phase
    FederationServer(fed)
    _upload_all(fed, channel, phase, clients=[0, 1])
    # The server process dies; a new one (new Federation object) resumes the phase.
    fed2 = Federation.load(fed.name, storage)
    server2 = FederationServer(fed2)
    assert server2.state().missing() == ["c2"]
    _upload_all(fed, channel, phase, clients=[2])
    report = server2.step()
    assert report is not None and report.reason == "complete"
    assert report.contributors == ("c0", "c1", "c2")
    fed3 = Federation.load(fed.name, storage)
    server3 = FederationServer(fed3)
    assert server3.open_round == 1 and server3.phase == report.next_phase


def test_a_crash_between_decision_and_publication_is_finished_once(monkeypatch) -> None:
    fed = _federation()
    channel = FedPNEChannel(fed)
    phase = channel.view().phase
    server = FederationServer(fed)
    _upload_all(fed, channel, phase)

    def crash(*args, **kwargs):
        raise RuntimeError("power cut")

    monkeypatch.setattr(fed.store, "commit_broadcast", crash)
    with pytest.raises(RuntimeError, match="power cut"):
        server.step()
    monkeypatch.undo()
    assert fed.store.latest() is None  # nothing published yet
    restarted = FederationServer(fed)
    report = restarted.step()
    assert report is not None and report.reason == "resumed" and report.round == 0
    assert restarted.step() is None
    published = [t for t in fed.store.broadcast_trials() if t.state.name == "COMPLETE"]
    assert len(published) == 1
    assert channel.view().phase.index == 2


def test_a_full_run_reaches_the_final_phase_and_stops(tmp_path) -> None:
    fed = _federation(n_clients=2, horizon=60)
    server = FederationServer(fed)
    channel = FedPNEChannel(fed)
    pulls = 0
    while not server.finished:
        phase = channel.view().phase
        pulls += phase.budget
        _upload_all(fed, channel, phase)
        assert server.step() is not None
    final = channel.view().phase
    assert final.final and pulls + final.budget == 60
    assert server.step() is None and server.serve(timeout=1.0) == []
    status = channel.status()
    assert status.missing == () and "final phase" in status.format()
    with pytest.raises(ValueError, match="final"):
        channel.upload("c0", final, _means(final, 0))


def test_serve_loop_closes_phases_and_stops_at_the_horizon() -> None:
    import threading

    fed = _federation(n_clients=2, horizon=40)
    server = FederationServer(fed)
    channel = FedPNEChannel(fed)
    done = threading.Event()
    reports = []

    def participants() -> None:
        while not done.is_set():
            phase = channel.view().phase
            if phase.final:
                return
            for m in range(2):
                if not channel.has_uploaded(f"c{m}", phase.index):
                    channel.upload(f"c{m}", phase, _means(phase, m))
            done.wait(0.01)

    worker = threading.Thread(target=participants)
    worker.start()
    reports = server.serve(poll_interval=0.01, timeout=30)
    done.set()
    worker.join()
    assert server.finished and reports[-1].final
    assert [r.round for r in reports] == list(range(len(reports)))


# ---------------------------------------------------------------------- status and CLI
def test_cli_creates_serves_and_shows_a_fedpne_federation(tmp_path, capsys) -> None:
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    space = json.dumps(
        {"x": {"name": "FloatDistribution", "attributes": {"low": 0, "high": 1, "log": False}}}
    )
    protocol = json.dumps({"kind": "fedpne", "horizon": 30, "value_range": [0, 2]})
    code = cli_main(
        [
            "create",
            "--storage",
            storage,
            "--name",
            "cli",
            "--n-clients",
            "2",
            "--search-space",
            space,
            "--protocol",
            protocol,
        ]
    )
    assert code == 0
    fed = Federation.load("cli", storage)
    assert fed.protocol == FedPNEConfig(horizon=30, value_range=(0.0, 2.0))
    fed.join("a")
    fed.join("b")
    channel = FedPNEChannel(fed)
    phase = channel.view().phase
    channel.upload("a", phase, {n.key: 0.5 for n in phase.nodes})
    capsys.readouterr()
    assert cli_main(["status", "--storage", storage, "--name", "cli"]) == 0
    out = capsys.readouterr().out
    assert "Fed-PNE" in out and "missing        1: b" in out
    assert cli_main(["status", "--storage", storage, "--name", "cli", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["missing"] == ["b"] and record["phase"]["index"] == 1
    channel.upload("b", phase, {n.key: 0.25 for n in phase.nodes})
    assert (
        cli_main(
            ["serve", "--storage", storage, "--name", "cli", "--poll-interval", "0.01"]
            + ["--max-rounds", "1", "--timeout", "20"]
        )
        == 0
    )
    assert "round 0: 2 contributors (complete)" in capsys.readouterr().out


def test_privacy_spent_reports_the_federated_guarantee() -> None:
    plain = _federation()
    assert plain.privacy_spent() == (math.inf, 0.0)
    private = _federation(dp_epsilon=0.5, dp_delta=1e-6)
    guarantee = FedPNEConfig(horizon=200, dp_epsilon=0.5, dp_delta=1e-6).guarantee(3)
    eps, delta = private.privacy_spent()
    assert delta == 1e-6 and eps == pytest.approx(guarantee.tight_epsilon) and eps <= 0.5
    status = FedPNEChannel(private).status()
    assert status.privacy is not None and "federated DP" in status.format()


def test_load_checks_and_other_protocol_apis_refuse_fedpne() -> None:
    fed = _federation()
    with pytest.raises(ValueError, match="not FTS"):
        fed.features()
    again = Federation.load(fed.name, fed.storage, search_space=SPACE)
    assert again.protocol == fed.protocol
    with pytest.raises(ValueError, match="search_space"):
        Federation.load(fed.name, fed.storage, search_space={"x": FloatDistribution(0, 2)})
    params = FedPNEParams(horizon=200, n_clients=3, max_phase_nodes=10_000)
    assert FedPNEChannel(fed).params == params
