from __future__ import annotations

import json
import logging
import math

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.storages import InMemoryStorage
from optuna.trial import TrialState
import pytest

from optuna_fedbo.core.weights import subregion_weights
from optuna_fedbo.core.weights import WeightSchedule
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import presets
from optuna_fedbo.federation._codec import binary_frame
from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation._codec import encode_array
from optuna_fedbo.federation._codec import split_frame
from optuna_fedbo.federation._codec import vector_digest
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.fts.messages import encode_upload
from optuna_fedbo.federation.fts.messages import parse_upload

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(-5.0, 5.0)}
M = 8


@pytest.fixture(autouse=True)
def _propagate_optuna_logs(propagate):
    """caplog sees optuna-fedbo's records at every level (the ``propagate`` fixture)."""
    yield


def _federation(n_clients: int = 3, storage=None, **protocol) -> Federation:
    # Vector uploads (the pooled statistics' server path is tested in test_pooling.py).
    config = FTSConfig(**{"n_features": M, "n_init": 1, "aggregation": "weighted", **protocol})
    fed = Federation.create(
        "fed", search_space=SPACE, n_clients=n_clients, storage=storage, protocol=config, seed=7
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def _omega(i: int) -> np.ndarray:
    # Within the norm bound that every vector is clipped to without DP (6.5 for M = 8).
    return (np.arange(M, dtype=float) * (i + 1) - 3.0) / 10


def _upload_all(fed: Federation, n_observations: int = 5) -> None:
    for i in range(fed.n_clients):
        fed.upload(f"c{i}", _omega(i), n_observations=n_observations, iteration=0)


def _raw(
    fed: Federation,
    key: str,
    round_index: int = 0,
    *,
    omega: np.ndarray | None = None,
    tail: bytes | None = None,
    **changes,
) -> bytes:
    """An upload frame of ``key``, its header fields replaced by ``changes`` and its vector
    bytes by ``tail``."""
    header, body = split_frame(
        encode_upload(
            config_hash=fed.config_hash,
            round_index=round_index,
            client_id=key,
            omega=_omega(0) if omega is None else omega,
            n_observations=3,
            iteration=0,
        )
    )
    header.update(changes)
    return binary_frame(header, body if tail is None else tail)


def _format_1(fed: Federation, key: str) -> str:
    """An upload of format 1 (a JSON text, the vector in base64), as the release before sent."""
    return canonical_json(
        {
            "format": 1,
            "config": fed.config_hash,
            "round": 0,
            "client": key,
            "n_observations": 3,
            "iteration": 0,
            "sent_at": 0.0,
            "omega": encode_array(_omega(0)),
        }
    )


# --------------------------------------------------------------------------- federation
@pytest.mark.parametrize("kind", ["memory", "sqlite", "journal"])
def test_create_and_load_by_name(kind: str, tmp_path) -> None:
    storage = {
        "memory": InMemoryStorage(),
        "sqlite": f"sqlite:///{tmp_path / 'fed.db'}",
        "journal": f"journal:{tmp_path / 'fed.log'}",
    }[kind]
    fed = Federation.create(
        "svm", search_space=SPACE, n_clients=2, storage=storage, protocol=presets.fts_de()
    )
    loaded = Federation.load("svm", fed.storage if kind == "memory" else storage)
    assert loaded.config == fed.config
    assert loaded.config_hash == fed.config_hash
    assert loaded.search_space == SPACE
    assert loaded.protocol == presets.fts_de()
    assert loaded.open_round() == 0 and loaded.latest_broadcast() is None
    with pytest.raises(KeyError):
        Federation.load("other", loaded.storage)


def test_joining_with_a_different_configuration_is_refused() -> None:
    fed = _federation()
    storage = fed.storage
    with pytest.raises(ValueError, match="already exists"):
        Federation.create("fed", search_space=SPACE, n_clients=3, storage=storage)
    same = Federation.create(
        "fed",
        search_space=SPACE,
        n_clients=3,
        storage=storage,
        protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted"),
        seed=7,
        load_if_exists=True,
    )
    assert same.config_hash == fed.config_hash
    with pytest.raises(ValueError, match=r"search_space\['y'\]"):
        Federation.create(
            "fed",
            search_space={**SPACE, "y": FloatDistribution(-1.0, 1.0)},
            n_clients=3,
            storage=storage,
            protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted"),
            seed=7,
            load_if_exists=True,
        )
    with pytest.raises(ValueError, match="search_space"):
        Federation.load("fed", storage, search_space={"x": FloatDistribution(0.0, 2.0)})
    with pytest.raises(ValueError, match="protocol"):
        Federation.load("fed", storage, protocol=FTSConfig())
    with pytest.raises(ValueError, match="n_clients"):
        Federation.load("fed", storage, n_clients=4)
    assert Federation.load("fed", storage, search_space=SPACE, seed=7).n_clients == 3


def test_a_non_federation_study_is_not_loaded() -> None:
    storage = InMemoryStorage()
    optuna.create_study(study_name="plain", storage=storage)
    with pytest.raises(KeyError, match="not an optuna-fedbo federation"):
        Federation.load("plain", storage)


def test_privacy_other_than_none_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="privacy"):
        Federation.create("f", search_space=SPACE, n_clients=2, privacy={"noise_multiplier": 1})


def test_join_gives_stable_indices_and_refuses_extra_participants() -> None:
    fed = Federation.create(
        "f", search_space=SPACE, n_clients=3, protocol=FTSConfig(n_subregions=2)
    )
    first = [fed.join(c) for c in ("b", "a", "c")]
    assert [p.index for p in first] == [0, 1, 2]
    assert [p.subregion for p in first] == [0, 1, 0]
    assert fed.join("a").index == 1
    assert fed.participants() == ["b", "a", "c"]
    with pytest.raises(ValueError, match="full"):
        fed.join("d")
    with pytest.raises(ValueError):
        fed.join("")
    with pytest.raises(ValueError):
        fed.join("x" * 129)
    other = Federation.load("f", fed.storage)
    assert other.index_of("c") == 2 and other.index_of("d") is None


def test_upload_checks_the_vector_locally() -> None:
    fed = _federation()
    with pytest.raises(ValueError, match="NaN"):
        fed.upload("c0", np.full(M, np.nan), n_observations=1, iteration=0)
    with pytest.raises(ValueError, match="shape"):
        fed.upload("c0", np.zeros(M + 1), n_observations=1, iteration=0)
    with pytest.raises(ValueError, match="has not joined"):
        fed.upload("stranger", np.zeros(M), n_observations=1, iteration=0)


# ------------------------------------------------------------------------- aggregation
def test_weighted_aggregation_is_the_softmax_weighted_sum() -> None:
    fed = _federation(n_clients=5, n_subregions=2)
    server = FederationServer(fed)
    _upload_all(fed)
    report = server.step()
    assert report is not None and report.reason == "complete" and report.n_contributors == 5
    broadcast = fed.latest_broadcast()
    assert broadcast is not None and broadcast.round == 0
    assignment = np.arange(5) % 2
    omegas = np.stack([_omega(i) for i in range(5)])
    # Round 0: exponent a + 1 = 16 inside the sub-region, 1 outside.
    for region in range(2):
        logits = np.where(assignment == region, 16.0, 1.0)
        weights = np.exp(logits - logits.max())
        weights /= weights.sum()
        np.testing.assert_allclose(broadcast.vectors[region], weights @ omegas, atol=1e-12)
    # The same as the shared weight function.
    expected = subregion_weights(
        assignment, 2, round_index=0, schedule=WeightSchedule(15.0, 10, 30)
    )
    np.testing.assert_allclose(broadcast.vectors, expected @ omegas, atol=1e-12)


def test_weights_become_uniform_as_rounds_pass() -> None:
    fed = _federation(n_clients=4, n_subregions=2, weight_hold_rounds=1, weight_decay_rounds=2)
    server = FederationServer(fed)
    omegas = np.stack([_omega(i) for i in range(4)])
    spreads = []
    for _ in range(4):
        _upload_all(fed)
        assert server.step() is not None
        vectors = fed.latest_broadcast().vectors
        spreads.append(float(np.abs(vectors[0] - vectors[1]).max()))
    assert spreads[0] > 0.1
    np.testing.assert_allclose(vectors, np.tile(omegas.mean(axis=0), (2, 1)))
    assert spreads[-1] < 1e-9


def test_one_sub_region_averages_and_missing_agents_are_renormalized() -> None:
    fed = _federation(n_clients=3)
    server = FederationServer(fed)
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    fed.upload("c2", _omega(2), n_observations=3, iteration=0)
    assert server.step() is None  # c1 missing
    report = server.step(force=True)
    assert report.reason == "forced" and report.contributors == ("c0", "c2")
    np.testing.assert_allclose(fed.latest_broadcast().vectors[0], (_omega(0) + _omega(2)) / 2)


def test_sample_aggregation_relays_every_vector() -> None:
    fed = _federation(n_clients=3, aggregation="sample")
    server = FederationServer(fed)
    _upload_all(fed)
    server.step()
    vectors = fed.latest_broadcast().vectors
    assert vectors.shape == (3, M)
    relayed = sorted(map(tuple, vectors))
    assert relayed == sorted(tuple(_omega(i)) for i in range(3))


def test_round_zero_waits_for_the_initial_designs() -> None:
    fed = _federation(n_clients=2, n_init=4)
    server = FederationServer(fed)
    fed.upload("c0", _omega(0), n_observations=4, iteration=0)
    fed.upload("c1", _omega(1), n_observations=2, iteration=-2)
    assert server.step() is None
    fed.upload("c1", _omega(1), n_observations=4, iteration=0)
    assert server.step().reason == "complete"
    # Later rounds only need every participant in.
    fed.upload("c0", _omega(0), n_observations=5, iteration=1)
    fed.upload("c1", _omega(1), n_observations=5, iteration=1)
    assert server.step().round == 1


def test_round_timeout_leaves_stragglers_out(monkeypatch) -> None:
    fed = _federation(n_clients=3)
    server = FederationServer(fed, round_timeout=30.0, min_uploads=1)
    clock = [1000.0]
    monkeypatch.setattr("optuna_fedbo.federation.server.time.monotonic", lambda: clock[0])
    assert server.step() is None  # nothing uploaded: never closed
    fed.upload("c1", _omega(1), n_observations=3, iteration=0)
    fed.upload("c2", _omega(2), n_observations=3, iteration=0)
    assert server.step() is None
    clock[0] += 29.0
    assert server.step() is None
    clock[0] += 2.0
    report = server.step()
    assert report.reason == "timeout" and report.contributors == ("c1", "c2")
    assert server.step(force=True) is None  # empty round: nothing to publish


# ----------------------------------------------------------------------- reliability
@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"omega": np.array([1.0] * (M - 1) + [np.nan])}, "NaN or infinity"),
        ({"omega": np.array([1.0] * (M - 1) + [np.inf])}, "NaN or infinity"),
        ({"omega": np.array([1.0] * (M - 1) + [2e12])}, "absurd value"),
        ({"omega": np.ones(M + 2)}, "shape"),
        ({"config": "0" * 64}, "configuration mismatch"),
        ({"round": 3}, "round"),
        ({"client": "c2"}, "signed"),
        ({"format": 99}, "upload format 99, this server reads format 2"),
        ({"format": 1}, "upload format 1, this server reads format 2"),
        ({"tail": _omega(0).tobytes()[:-1]}, "declares 8 values, carries 63 bytes"),  # truncated
        ({"tail": _omega(0).tobytes() + bytes(8)}, "declares 8 values, carries 72 bytes"),
        ({"tail": b""}, "malformed vector"),
        ({"length": M + 1}, "malformed vector"),
        ({"length": "8"}, "'length' must be an integer"),
        ({"same_as": "0" * 32}, "either a vector or 'same_as'"),
        ({"length": None, "same_as": "0" * 32}, "either a vector or 'same_as'"),
    ],
)
def test_bad_uploads_are_rejected_logged_and_never_aggregated(changes, reason, caplog) -> None:
    fed = _federation(n_clients=2, min_contributors=1)  # one contributor's round
    server = FederationServer(fed)
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    raw = _raw(fed, "c1", **changes)
    if changes.get("length", 0) is None:  # a header with 'same_as' and no 'length' ...
        header, tail = split_frame(raw)
        del header["length"]
        raw = binary_frame(header, tail)  # ... but with the vector's bytes
    fed.send_upload("c1", 0, raw)
    with caplog.at_level(logging.WARNING):
        assert server.step() is None  # c1's upload does not count: the round is not complete
    assert any(reason in r.getMessage() and "'c1'" in r.getMessage() for r in caplog.records)
    report = server.step(force=True)
    assert report.contributors == ("c0",)
    assert report.rejected[0][0] == "c1" and reason in report.rejected[0][1]
    np.testing.assert_allclose(fed.latest_broadcast().vectors[0], _omega(0))


def test_an_upload_of_the_previous_format_is_refused_naming_both_formats(caplog) -> None:
    fed = _federation(n_clients=2, min_contributors=1)  # one contributor's round
    server = FederationServer(fed)
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    fed.send_upload("c1", 0, _format_1(fed, "c1"))
    with caplog.at_level(logging.WARNING):
        report = server.step(force=True)
    assert report.contributors == ("c0",)
    reason = dict(report.rejected)["c1"]
    assert "upload format 1, this server reads format 2" in reason and "release" in reason
    assert any("format 1" in r.getMessage() for r in caplog.records)


def test_an_upload_frame_round_trips_exactly() -> None:
    fed = _federation()
    omega = np.random.default_rng(0).normal(size=M) * 1e3
    frame = _raw(fed, "c1", omega=omega)
    header, tail = split_frame(frame)
    assert (
        header["format"] == 2 and header["length"] == M and tail == omega.astype("<f8").tobytes()
    )
    assert b"omega" not in frame and len(frame) < 8 * M + 250  # no base64: raw bytes
    upload = parse_upload(
        frame, client_id="c1", round_index=0, config_hash=fed.config_hash, length=M
    )
    assert upload.omega.tobytes() == omega.tobytes() and upload.n_observations == 3
    assert vector_digest(upload.omega) == vector_digest(omega)
    by_digest = encode_upload(
        config_hash=fed.config_hash,
        round_index=0,
        client_id="c1",
        omega=omega,
        n_observations=4,
        iteration=1,
        same_as=vector_digest(omega),
    )
    assert by_digest.endswith(b"\n")  # no vector bytes
    held = (vector_digest(omega), upload.omega)
    again = parse_upload(
        by_digest, client_id="c1", round_index=0, config_hash=fed.config_hash, length=M, held=held
    )
    assert again.omega is upload.omega and again.n_observations == 4
    for bad, reason in (
        (b"no newline", "malformed upload"),
        ("text\n", "malformed upload"),
        (b"[1]\n", "not a JSON object"),
        (b"{\n", "malformed upload"),
    ):
        with pytest.raises(UploadRejected, match=reason):
            parse_upload(bad, client_id="c1", round_index=0, config_hash=fed.config_hash, length=M)


def test_garbage_and_unknown_participants_are_rejected(caplog) -> None:
    fed = _federation(n_clients=2, min_contributors=1)  # one contributor's round
    server = FederationServer(fed)
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    fed.send_upload("c1", 0, "{not json")
    fed.store.write_upload(0, "intruder", _raw(fed, "intruder"))
    with caplog.at_level(logging.WARNING):
        report = server.step(force=True)
    assert report.contributors == ("c0",)
    reasons = dict(report.rejected)
    assert "malformed" in reasons["c1"] and "unknown participant" in reasons["intruder"]
    # Logged once per upload, not at every poll.
    messages = [r.getMessage() for r in caplog.records if "Rejected" in r.getMessage()]
    assert len(messages) == 2


def test_a_second_upload_in_the_same_round_does_not_count_twice() -> None:
    fed = _federation(n_clients=2, min_contributors=1)  # one contributor's round
    server = FederationServer(fed)
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    fed.upload("c0", _omega(5), n_observations=4, iteration=0)
    assert server.step() is None  # still only one of two participants
    report = server.step(force=True)
    assert report.n_contributors == 1
    np.testing.assert_allclose(fed.latest_broadcast().vectors[0], _omega(5))


@pytest.mark.parametrize("discard", [True, False])
def test_an_upload_for_a_closed_round_is_ignored(discard: bool) -> None:
    fed = _federation(n_clients=2, min_contributors=1)  # one contributor's round
    server = FederationServer(fed, discard_uploads=discard)
    _upload_all(fed)
    assert server.step().round == 0
    late = _raw(fed, "c0", round_index=0)
    if discard:
        with pytest.raises(KeyError):
            fed.store.write_upload(0, "c0", late)
    else:
        fed.store.write_upload(0, "c0", late)
    # The participants' uploads go to the open round.
    assert fed.upload("c1", _omega(1), n_observations=4, iteration=1) == 1
    report = server.step(force=True)
    assert report.round == 1 and report.contributors == ("c1",)
    np.testing.assert_allclose(fed.latest_broadcast().vectors[0], _omega(1))


def test_a_restarted_server_resumes_the_open_round() -> None:
    fed = _federation(n_clients=3)
    FederationServer(fed).step()  # nothing yet
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    fed.upload("c1", _omega(1), n_observations=3, iteration=0)
    first = FederationServer(fed)
    assert first.step() is None
    del first  # "crash"
    fed.upload("c2", _omega(2), n_observations=3, iteration=0)
    report = FederationServer(Federation.load("fed", fed.storage)).step()
    assert report.round == 0 and report.n_contributors == 3


def test_a_crash_during_publication_never_publishes_twice(monkeypatch) -> None:
    fed = _federation(n_clients=2)
    _upload_all(fed)
    server = FederationServer(fed)
    store = fed.store
    original = store.commit_broadcast

    def crash(*args, **kwargs):
        raise RuntimeError("power cut")

    monkeypatch.setattr(store, "commit_broadcast", crash)
    with pytest.raises(RuntimeError):
        server.step()
    assert fed.latest_broadcast() is None  # staged, not published
    monkeypatch.setattr(store, "commit_broadcast", original)
    restarted = FederationServer(Federation.load("fed", fed.storage))
    report = restarted.step()
    assert report.round == 0 and report.reason == "resumed" and report.n_contributors == 2
    assert restarted.step() is None  # round 1 is open and empty
    trials = store.broadcast_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE]
    assert fed.open_round() == 1


def test_a_crash_after_completion_repairs_the_pointer(monkeypatch) -> None:
    fed = _federation(n_clients=2)
    _upload_all(fed)
    server = FederationServer(fed)
    store = fed.store
    original_set = store.storage.set_study_system_attr

    def drop_pointer(study_id, key, value):
        if key == "fedbo:latest":
            raise RuntimeError("power cut")
        return original_set(study_id, key, value)

    monkeypatch.setattr(store.storage, "set_study_system_attr", drop_pointer)
    with pytest.raises(RuntimeError):
        server.step()
    monkeypatch.setattr(store.storage, "set_study_system_attr", original_set)
    restarted = FederationServer(Federation.load("fed", fed.storage))
    assert fed.open_round() == 1 and restarted.open_round == 1
    assert restarted.step() is None
    assert len(store.broadcast_trials()) == 1


def test_raw_uploads_are_discarded_after_publication() -> None:
    fed = _federation(n_clients=2)
    server = FederationServer(fed)
    _upload_all(fed)
    server.step()
    names = {s.study_name for s in fed.storage.get_all_studies()}
    assert "fed:fedbo:uploads:000000" not in names
    assert "fed:fedbo:uploads:000001" in names


# ---------------------------------------------------------------------- status and CLI
def test_status_lists_who_is_missing() -> None:
    fed = _federation(n_clients=4)
    fed.upload("c1", _omega(1), n_observations=3, iteration=0)
    status = fed.status()
    assert status.open_round == 0 and status.n_published == 0
    assert status.uploaded == ("c1",)
    assert status.missing == ("c0", "c2", "c3")
    text = status.format()
    assert "c0, c2, c3" in text and "never seen" in text
    assert status.to_dict()["not_joined"] == 0
    assert math.isinf(fed.privacy_spent()[0])


def test_cli_create_serve_and_status(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    space = json.dumps({"x": json.loads(optuna.distributions.distribution_to_json(SPACE["x"]))})
    assert (
        cli_main(
            [
                "create",
                "--storage",
                url,
                "--name",
                "cli",
                "--search-space",
                space,
                "--n-clients",
                "2",
                "--preset",
                "fts-de",
                "--protocol",
                json.dumps({"n_features": M, "n_init": 1}),
            ]
        )
        == 0
    )
    assert "created cli" in capsys.readouterr().out
    fed = Federation.load("cli", url)
    assert fed.fts.n_subregions == 4 and fed.fts.n_features == M
    fed.join("a")
    fed.join("b")
    _upload_all_ids(fed, ["a", "b"])
    assert cli_main(["status", "--storage", url, "--name", "cli", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["uploaded"] == ["a", "b"] and status["missing"] == []
    code = cli_main(
        [
            "serve",
            "--storage",
            url,
            "--name",
            "cli",
            "--poll-interval",
            "0.01",
            "--max-rounds",
            "1",
            "--timeout",
            "30",
        ]
    )
    assert code == 0
    assert "round 0: 2 contributors (complete)" in capsys.readouterr().out
    assert cli_main(["status", "--storage", url, "--name", "cli"]) == 0
    out = capsys.readouterr().out
    assert "1 published; round 1 open" in out and "missing        2: a, b" in out
    assert cli_main(["status", "--storage", url, "--name", "nope"]) == 2
    assert "No federation named" in capsys.readouterr().err


def _upload_all_ids(fed: Federation, ids: list[str]) -> None:
    for i, client in enumerate(ids):
        fed.upload(client, _omega(i), n_observations=3, iteration=0)


def test_status_text_counts_participants_not_joined_yet() -> None:
    fed = Federation.create("f", search_space=SPACE, n_clients=3)
    fed.join("a")
    text = fed.status().format()
    assert "1 of 3 joined" in text
    assert "missing        1: a (and 2 not joined yet)" in text
