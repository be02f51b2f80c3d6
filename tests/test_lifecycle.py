"""FedSampler, presets that say what they do, the storage boundary, leases, closing policy."""

from __future__ import annotations

import itertools
import json
import logging
import subprocess
import sys
import threading

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
import pytest

import optuna_fedbo as fb
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationNotFoundError
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import ParticipantBusyError
from optuna_fedbo.federation import presets
from optuna_fedbo.federation import server as server_module
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.fts.messages import parse_broadcast
from optuna_fedbo.federation.fts.messages import parse_upload
from optuna_fedbo.federation.lease import lease_book
from optuna_fedbo.federation.storages import resolve_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _fts(n_clients: int = 2, storage=None, **protocol) -> Federation:
    lone = {"min_contributors": 1} if n_clients == 1 else {}  # a round of one is published
    config = FTSConfig(
        **{"n_features": 20, "n_init": 2, "aggregation": "weighted", **lone, **protocol}
    )
    return Federation.create(
        f"life-{next(_names)}", search_space=SPACE, n_clients=n_clients, storage=storage,
        protocol=config, seed=4,
    )  # fmt: skip


# ------------------------------------------------------------------------------ FedSampler
def test_fed_sampler_is_the_protocols_sampler() -> None:
    fts = fb.FedSampler(_fts(), client_id="a", seed=0)
    assert type(fts) is fb.FedTransferSampler  # FTSConfig(transfer="prior"), the default
    assert isinstance(fts, fb.FedSampler) and isinstance(fts, optuna.samplers.BaseSampler)
    papers = fb.FedSampler(_fts(transfer="schedule"), client_id="a", seed=0)
    assert type(papers) is fb.FedThompsonSampler
    pne_fed = Federation.create(
        "pne-life", search_space=SPACE, n_clients=1, protocol=FedPNEConfig(horizon=40)
    )
    pne = fb.FedSampler(pne_fed, client_id="b", seed=0, phase_timeout=None)
    assert type(pne) is fb.FedPNESampler and isinstance(pne, fb.FedSampler)
    # The specific classes stay, and are FedSamplers too.
    assert isinstance(fb.FedThompsonSampler(_fts(transfer="schedule"), "c", seed=0), fb.FedSampler)
    assert isinstance(fb.FedTransferSampler(_fts(), "c", seed=0), fb.FedSampler)
    with pytest.raises(ValueError, match="must be a Federation"):
        fb.FedSampler("not a federation", client_id="a")


def test_each_fts_participant_class_runs_only_its_own_algorithm() -> None:
    # FedThompsonSampler built either participant until 0.1: on a transfer="prior" federation
    # it still builds that federation's participant, with a FutureWarning naming the fix.
    with pytest.warns(FutureWarning, match=r"use FedSampler\(\.\.\.\) or FedTransferSampler"):
        legacy = fb.FedThompsonSampler(_fts(), "a", seed=0)
    assert type(legacy) is fb.FedTransferSampler and legacy.client_id == "a"
    with pytest.raises(ValueError, match=r"uses transfer='schedule': use FedSampler"):
        fb.FedTransferSampler(_fts(transfer="schedule"), "b", seed=0)
    with pytest.warns(FutureWarning, match="schedule has no effect on FedTransferSampler"):
        fb.FedSampler(_fts(), client_id="c", schedule="1-1/t")
    with pytest.raises(ValueError, match="not FTS"):
        fb.FedThompsonSampler(
            Federation.create(
                "pne-x", search_space=SPACE, n_clients=1, protocol=FedPNEConfig(horizon=40)
            ),
            "d",
        )


def test_counts_tell_initial_local_and_federated_trials() -> None:
    fed = _fts(n_clients=1, schedule="1-1/t", transfer="schedule")  # p_1 = 0: federated first
    sampler = fb.FedSampler(fed, client_id="solo", seed=1, n_candidates=64)
    server = FederationServer(fed)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        return -((trial.suggest_float("x", 0, 1) - 0.3) ** 2) - trial.suggest_float("y", 0, 1)

    study.optimize(objective, n_trials=2)
    assert server.step() is not None  # round 0: the initial design is in
    study.optimize(objective, n_trials=4)
    modes = [t.system_attrs["fedbo:mode"] for t in study.trials]
    counts = sampler.counts
    assert counts.initial == modes.count("init") == 2
    assert counts.federated == modes.count("federated") >= 1 and modes[2] == "federated"
    assert counts.local == modes.count("local") + modes.count("fallback")
    assert counts.total == 6
    sampler.finish()
    state = lease_book(fed).states()["solo"]
    assert state.status == "finished" and state.counts == counts.to_dict()


# ------------------------------------------------------------------------------- presets
def test_the_dp_preset_turns_differential_privacy_on() -> None:
    private = Federation.create(
        "dp-preset", search_space=SPACE, n_clients=4, protocol=presets.dp_fts_de(n_init=3)
    )
    assert private.privacy is not None and private.privacy.noise_multiplier == 1.0
    assert private.protocol == presets.fts_de(n_init=3)
    plain = Federation.create("plain-preset", search_space=SPACE, n_clients=4,
                              protocol=presets.fts_de())  # fmt: skip
    assert plain.privacy is None
    budget = presets.dp_fts_de(epsilon_budget=8.0, n_features=50)
    assert budget.privacy.epsilon_budget == 8.0 and budget.protocol.n_features == 50
    assert presets.dp_fts().protocol.n_subregions == 1


def test_cli_preset_dp_fts_de_turns_privacy_on(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    space = json.dumps({"x": json.loads(optuna.distributions.distribution_to_json(SPACE["x"]))})
    args = ["create", "--storage", url, "--search-space", space, "--n-clients", "3"]
    assert cli_main([*args, "--name", "dp", "--preset", "dp-fts-de"]) == 0
    assert "differential privacy: z 1, q 0.35, S 22" in capsys.readouterr().out
    assert cli_main([*args, "--name", "plain", "--preset", "fts-de"]) == 0
    assert Federation.load("plain", url).privacy is None


# ------------------------------------------------------------------- storage boundary
@pytest.mark.parametrize("scheme", ["sqlite", "journal"])
def test_load_never_creates_a_file(tmp_path, scheme) -> None:
    path = tmp_path / ("typo.db" if scheme == "sqlite" else "typo.log")
    url = f"sqlite:///{path}" if scheme == "sqlite" else f"journal:{path}"
    with pytest.raises(FederationNotFoundError, match="does not exist"):
        Federation.load("svm", url)
    assert not path.exists()


def test_processes_opening_one_new_sqlite_file_at_once_all_succeed(tmp_path) -> None:
    # Optuna creates a new database's schema without a lock; a server and participants started
    # together used to collide ("table studies already exists", a duplicate schema version).
    for k in range(8):
        url = f"sqlite:///{tmp_path / f'fresh{k}.db'}"
        errors: list[Exception] = []

        def open_storage(url: str = url, errors: list[Exception] = errors) -> None:
            try:
                resolve_storage(url).get_all_studies()
            except Exception as error:  # noqa: BLE001 - collected for the assertion below
                errors.append(error)

        threads = [threading.Thread(target=open_storage) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []


@pytest.mark.parametrize(
    "argv,message",
    [
        (["status", "--storage", "sqlte:///x.db", "--name", "a"], "Cannot open storage"),
        (["status", "--storage", "not a url", "--name", "a"], "not a URL"),
        (["status", "--storage", "sqlite:///{tmp}/missing.db", "--name", "a"], "does not exist"),
        (["serve", "--storage", "sqlite:///{tmp}/missing.db", "--name", "a"], "does not exist"),
        (
            ["create", "--storage", "sqlite:///{tmp}/no/such/dir/f.db", "--name", "a"]
            + [
                "--n-clients",
                "2",
                "--search-space",
                '{"C": {"name": "FloatDistribution", '
                '"attributes": {"low": 0.001, "high": 1000, "log": true}}}',
            ],
            "directory",
        ),
        (
            ["create", "--storage", "sqlite:///{tmp}/f.db", "--name", "a", "--n-clients", "2"]
            + ["--search-space", '{"C": [0.001, 1000]}'],
            "--search-space: parameter 'C' is [0.001, 1000], not an Optuna distribution",
        ),
        (
            ["create", "--storage", "sqlite:///{tmp}/f.db", "--name", "a", "--n-clients", "2"]
            + ["--search-space", "{C: 1"],
            "--search-space is not valid JSON",
        ),
    ],
)
def test_cli_errors_are_one_line_with_exit_status_2(tmp_path, capsys, argv, message) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert cli_main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], captured.err
    assert lines[0].startswith(f"optuna-fedbo {argv[0]}: error: ")
    assert "Traceback" not in captured.err and captured.out == ""
    if argv[0] != "create":
        assert not any(tmp_path.iterdir())  # no file created at a path without a federation


# ----------------------------------------------------------------- the upload race
def test_an_upload_during_the_rounds_deletion_goes_to_the_open_round(monkeypatch) -> None:
    from sqlalchemy.orm.exc import StaleDataError

    fed = _fts(n_clients=1, n_init=1)
    fed.join("a")
    server = FederationServer(fed)
    store = fed.store
    original = store.write_upload
    calls = []

    def racing(round_index, client_id, payload):
        calls.append(round_index)
        if len(calls) == 1:  # the server closes round 0 while this write is in flight
            original(round_index, client_id, payload)
            assert server.step(force=True) is not None
            raise StaleDataError("UPDATE statement on table 'study_system_attributes' ...")
        return original(round_index, client_id, payload)

    fed.upload("a", np.ones(20), n_observations=1, iteration=0)
    monkeypatch.setattr(store, "write_upload", racing)
    assert fed.upload("a", np.ones(20), n_observations=2, iteration=1) == 1
    assert calls == [1, 2] or calls == [0, 1]


# --------------------------------------------------------------- out-of-range message
def test_a_narrower_range_is_reported_accurately(propagate, caplog) -> None:
    fed = _fts(n_clients=1, n_init=1)
    sampler = fb.FedSampler(fed, client_id="a", seed=0, n_candidates=32)
    study = optuna.create_study(sampler=sampler)
    with caplog.at_level(logging.WARNING):
        study.optimize(
            lambda t: t.suggest_float("x", 0.2, 0.4) + t.suggest_float("y", 0, 1), n_trials=3
        )
    text = " ".join(r.getMessage() for r in caplog.records if "'x'" in r.getMessage())
    assert "these trials are still modelled and shared" in text
    assert "not modelled" not in text
    # They are modelled and shared: the upload after the third trial stands on three trials.
    upload = parse_upload(
        fed.read_upload(0, "a"), client_id="a", round_index=0,
        config_hash=fed.config_hash, length=20,
    )  # fmt: skip
    assert upload.n_observations == 3


# ----------------------------------------------------------------- reproducibility
def _sample_round(seed: int) -> np.ndarray:
    fed = Federation.create(
        f"rep-{next(_names)}", search_space=SPACE, n_clients=4,
        protocol=presets.fts(n_features=8, n_init=1), seed=seed,
    )  # fmt: skip
    for k in range(4):
        fed.join(f"c{k}")
        fed.upload(f"c{k}", np.full(8, k / 4), n_observations=1, iteration=0)  # within the bound
    FederationServer(fed).step()
    latest = fed.store.latest()
    return parse_broadcast(fed.store.read_broadcast(int(latest["trial_id"]))[1]).vectors[:, 0]


def test_the_sample_order_does_not_come_from_the_public_seed() -> None:
    # Secret to the server (issue 26): one public seed, five orders (all equal: chance 24^-4).
    orders = [tuple(_sample_round(0)) for _ in range(5)]
    assert len(set(orders)) > 1
    assert all(sorted(order) == [0.0, 0.25, 0.5, 0.75] for order in orders)


# -------------------------------------------------------------------------- leases
def test_each_worker_process_has_its_own_lease_and_threads_share_one(
    tmp_path, monkeypatch
) -> None:
    fed = _fts(storage=f"sqlite:///{tmp_path / 'l.db'}")
    fed.join("a")
    lease = fed.lease("a", ttl=30.0)
    again = fed.lease("a", ttl=30.0)  # the same process: shared, not a second worker
    assert again.epoch == lease.epoch == 1
    another_process = "optuna_fedbo.federation.lease_record._SECRET"
    monkeypatch.setattr(another_process, b"another process")
    second = fed.lease("a", ttl=30.0)  # a second worker of the site: welcome, its own lease
    assert second.epoch == 2
    book = lease_book(fed)
    assert book.states()["a"].workers == 2
    lease.release()
    assert book.states()["a"].status == "active"  # alive while any worker is
    second.release()
    assert book.states()["a"].status == "finished" and book.states()["a"].workers == 0


def test_a_named_worker_live_elsewhere_is_refused_with_the_fix(tmp_path, monkeypatch) -> None:
    fed = _fts(storage=f"sqlite:///{tmp_path / 'l.db'}")
    fed.join("a")
    first = fed.lease("a", ttl=30.0, worker="gpu-0")
    monkeypatch.setattr("optuna_fedbo.federation.lease_record._SECRET", b"another process")
    with pytest.raises(ParticipantBusyError, match=r"on this host \(pid \d+\).*another worker"):
        fed.lease("a", ttl=30.0, worker="gpu-0")  # alive here: refused
    first._notes.remove(first.epoch)  # as if it ran on another host: no note here
    with pytest.raises(ParticipantBusyError) as refused:
        fed.lease("a", ttl=30.0, worker="gpu-0")
    message = str(refused.value)
    assert "'gpu-0' of participant 'a'" in message and "on another host" in message
    assert "stop it first, or start this process under another worker name" in message
    assert "\n" not in message
    other = fed.lease("a", ttl=30.0, worker="gpu-1")  # another name is welcome
    assert other.epoch == 2 and lease_book(fed).states()["a"].workers == 2
    first.release()
    monkeypatch.setattr("optuna_fedbo.federation.lease_record._SECRET", b"a third process")
    taken = fed.lease("a", ttl=30.0, worker="gpu-0")  # finished: the name is free again
    assert taken.epoch == 3
    taken.release()
    other.release()


def test_a_dead_workers_lease_on_this_host_is_taken_over_at_once(tmp_path, monkeypatch) -> None:
    fed = _fts(storage=f"sqlite:///{tmp_path / 'l.db'}")
    fed.join("a")
    dead = fed.lease("a", ttl=300.0, worker="gpu-0")
    dead._stop.set()  # its process dies: no more heartbeats, no release
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that is (for real) no process on this host any more
    (note,) = dead._notes.notes()
    path = dead._notes._path(note.epoch)
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": gone.pid}))
    monkeypatch.setattr("optuna_fedbo.federation.lease_record._SECRET", b"restarted")
    restarted = fed.lease("a", ttl=300.0, worker="gpu-0")  # not refused: the pid is gone
    assert restarted.taken_over == [1] and restarted.epoch == 2
    states = lease_book(fed).workers("a")
    assert states[1].status(0.0) == "lost"  # at once, not 300 s later
    assert [n.epoch for n in restarted._notes.notes()] == [2]
    restarted.release()


# ------------------------------------------------------------------ closing policy
def test_auto_round_timeout_follows_the_slowest_running_participant(monkeypatch) -> None:
    fed = _fts(n_clients=5)
    server = FederationServer(fed)
    assert server._min_uploads == 3  # half of 5, rounded up
    assert server.current_round_timeout() is None  # no trial time reported yet: wait
    leases = {}
    for client, seconds in (("a", 0.5), ("b", 4.0)):
        fed.join(client)
        leases[client] = fed.lease(client, public=lambda s=seconds: {"trial_seconds": s})
    server._checked.clear()
    assert server.current_round_timeout() == pytest.approx(3 * 4.0)
    # An enrolled participant that reports a huge duration counts as 10x the median at most.
    fed.join("c")
    leases["c"] = fed.lease("c", public=lambda: {"trial_seconds": 1e6})
    server._checked.clear()
    assert server.current_round_timeout() == pytest.approx(3 * 10 * 4.0)
    leases.pop("c").release()
    leases["b"].release(finished=False)  # lost
    server._checked.clear()
    assert server.current_round_timeout() == server_module.AUTO_TIMEOUT_FLOOR
    fixed = FederationServer(fed, round_timeout=7.5)
    assert fixed.current_round_timeout() == 7.5
    fixed.announce()
    assert fed.store.server_status()["closing"] == {"round_timeout": 7.5, "min_uploads": 3}
    with pytest.raises(ValueError, match="round_timeout"):
        FederationServer(fed, round_timeout="soon")


@pytest.mark.parametrize("min_contributors", [1, 2])
def test_too_few_running_to_publish_a_round_is_a_roster_problem(min_contributors: int) -> None:
    # The server closes a round of one upload (min_uploads=1) but, without differential
    # privacy, publishes none of fewer than min_contributors: with one site left running, no
    # round can be published, and a waiting participant must hear so (not wait out each round).
    fed = _fts(n_clients=2, min_contributors=min_contributors)
    FederationServer(fed, min_uploads=1).announce()
    for client in "ab":
        fed.join(client)
    running = fed.lease("a")
    fed.lease("b").release()  # b finished
    problems = {p.kind: p.text for p in fed.lifecycle().problems}
    if min_contributors == 1:
        assert problems == {}
    else:
        assert list(problems) == ["roster"]
        assert "2 of 2 participants have joined and 1 run" in problems["roster"]
        rule = "publishes no round of fewer than 2 participants (FTSConfig.min_contributors)"
        assert rule in problems["roster"]
    running.release()


def test_dp_noise_stays_os_entropy_whatever_the_seed() -> None:
    def noisy_round() -> np.ndarray:
        fed = Federation.create(
            f"dp-rep-{next(_names)}", search_space=SPACE, n_clients=2,
            protocol=FTSConfig(n_features=8, n_init=1), privacy=fb.DPConfig(1.0, 1.0, 5.0),
            seed=0,
        )  # fmt: skip
        for k in range(2):
            fed.join(f"c{k}")
            fed.upload(f"c{k}", np.ones(8), n_observations=1, iteration=0)
        FederationServer(fed).step()
        latest = fed.store.latest()
        return parse_broadcast(fed.store.read_broadcast(int(latest["trial_id"]))[1]).vectors

    assert not np.allclose(noisy_round(), noisy_round())  # same seed, same uploads: new noise


def test_status_shows_the_lifecycle_for_every_protocol(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    fed = Federation.create("pne-status", search_space=SPACE, n_clients=2, storage=url,
                            protocol=FedPNEConfig(horizon=40))  # fmt: skip
    sampler = fb.FedSampler(fed, client_id="a", seed=0, phase_timeout=None, lease_ttl=30.0)
    sampler.finish()
    assert cli_main(["status", "--storage", url, "--name", "pne-status", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["lifecycle"]["participants"]["a"]["status"] == "finished"
    assert record["lifecycle"]["not_joined"] == 1 and not record["lifecycle"]["ended"]
    assert cli_main(["status", "--storage", url, "--name", "pne-status"]) == 0
    text = capsys.readouterr().out
    assert "a                    finished  0 trials" in text
    assert "problem        no server has been seen" in text
