"""The DP server: Algorithm 1 of DP-FTS-DE, the persistent ledger, crashes, the budget, status."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
import subprocess
import sys

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
from optuna_fedbo.federation import ledger as ledger_module
from optuna_fedbo.federation._codec import split_frame
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.dp_config import PAPER_DELTA
from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.privacy import _gaussian

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(-5.0, 5.0)}
M = 6
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}


@pytest.fixture(autouse=True)
def _propagate_optuna_logs(propagate):
    """caplog sees optuna-fedbo's records at every level (the ``propagate`` fixture)."""
    yield


def _federation(
    n_clients: int = 6,
    *,
    privacy: DPConfig | None = None,
    storage: object = None,
    join: int | None = None,
    **protocol: object,
) -> Federation:
    config = FTSConfig(**{"n_features": M, "n_init": 1, **protocol})  # type: ignore[arg-type]
    fed = Federation.create(
        "dp",
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,  # type: ignore[arg-type]
        protocol=config,
        privacy=privacy or DPConfig(1.0, 0.5, 4.0, accountant="moments"),
        seed=3,
    )
    for i in range(n_clients if join is None else join):
        fed.join(f"c{i}")
    return fed


def _omega(i: int, scale: float = 1.0) -> np.ndarray:
    return scale * (np.arange(M, dtype=float) - 2.5) * (1 + 0.5 * i)


def _upload(fed: Federation, clients: list[int] | None = None, scale: float = 1.0) -> None:
    for i in range(fed.n_clients) if clients is None else clients:
        fed.upload(f"c{i}", _omega(i, scale), n_observations=3, iteration=0)


class _SeededOS:
    """Stands in for ``secure_rng`` (tests only): fresh seeded generators, recorded."""

    def __init__(self, seed: int) -> None:
        self.sequence = np.random.SeedSequence(seed)
        self.seeds: list[np.random.SeedSequence] = []

    def __call__(self) -> np.random.Generator:
        child = self.sequence.spawn(1)[0]
        self.seeds.append(child)
        return np.random.default_rng(child)


# ------------------------------------------------------------------------- Algorithm 1
def test_a_round_is_algorithm_1_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Poisson selection over all N, clip to S/sqrt(P), phi/q sums, noise z phi_max S / q."""
    z, q, clip = 0.7, 0.6, 9.0
    fed = _federation(8, privacy=DPConfig(z, q, clip), n_subregions=2)
    source = _SeededOS(2024)
    monkeypatch.setattr(_gaussian, "secure_rng", source)
    uploaded = [0, 1, 2, 4, 5, 7]  # c3 and c6 never upload: they still count in N and weights
    _upload(fed, uploaded, scale=3.0)
    report = FederationServer(fed).step(force=True)
    assert report is not None and report.published and len(source.seeds) == 1

    replay = np.random.default_rng(source.seeds[0])
    selected = replay.random(8) < q
    weights = subregion_weights(
        np.arange(8) % 2, 2, round_index=0, schedule=WeightSchedule(15.0, 10, 30)
    )
    bound = clip / math.sqrt(2)
    expected = np.zeros((2, M))
    n_clipped = 0
    for i in range(2):
        for n in uploaded:
            if not selected[n]:
                continue
            omega = _omega(n, 3.0)
            norm = np.linalg.norm(omega)
            n_clipped += int(norm > bound) if i == 0 else 0
            expected[i] += weights[i, n] / q * omega / max(1.0, norm / bound)
    std = z * weights.max() * clip / q
    expected += replay.normal(0.0, std, size=(2, M))

    broadcast = fed.latest_broadcast()
    assert broadcast is not None
    np.testing.assert_allclose(broadcast.vectors, expected, rtol=0, atol=1e-12)
    contributors = [n for n in uploaded if selected[n]]
    assert report.n_selected == int(selected.sum())
    assert report.contributors == tuple(f"c{n}" for n in contributors)
    assert report.n_clipped == n_clipped > 0
    assert report.noise_std == pytest.approx(std)
    assert report.epsilon == pytest.approx(DPConfig(z, q, clip).epsilon(1, 8))


def test_sums_are_divided_by_q_and_weights_are_not_renormalized(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With q = 1 and negligible noise, a lone uploader's vector enters with weight 1/N."""
    fed = _federation(5, privacy=DPConfig(1e-6, 1.0, 100.0, accountant="moments"))
    _upload(fed, [2])
    FederationServer(fed).step(force=True)
    broadcast = fed.latest_broadcast()
    assert broadcast is not None
    # Non-private FTS would renormalize to omega_2 itself; DP keeps phi = 1/N over all N.
    np.testing.assert_allclose(broadcast.vectors[0], _omega(2) / 5, atol=2e-4)  # std 2e-5


def test_noise_comes_from_the_os_for_every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = _gaussian.secure_rng

    def counting() -> np.random.Generator:
        calls.append(1)
        return real()

    monkeypatch.setattr(_gaussian, "secure_rng", counting)
    feds = [_federation(storage=InMemoryStorage()) for _ in range(2)]
    for fed in feds:  # same public seed, same uploads
        server = FederationServer(fed)
        for _ in range(2):
            _upload(fed)
            assert server.step() is not None
    assert len(calls) == 4  # a fresh OS-seeded generator per round and federation
    first, second = (fed.latest_broadcast().vectors for fed in feds)
    assert not np.allclose(first, second)


def test_empirical_noise_std_matches_the_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    """All uploads zero: every published coordinate is pure noise of std z phi_max S / q."""
    z, q, clip, n_clients, n_features = 1.3, 0.4, 5.0, 4, 40
    fed = _federation(
        n_clients,
        privacy=DPConfig(z, q, clip),
        n_features=n_features,
        n_subregions=2,
        weight_hold_rounds=0,
        weight_decay_rounds=0,
    )
    monkeypatch.setattr(_gaussian, "secure_rng", _SeededOS(7))
    server = FederationServer(fed)
    samples = []
    for _ in range(25):
        for i in range(n_clients):
            fed.upload(f"c{i}", np.zeros(n_features), n_observations=3, iteration=0)
        assert server.step() is not None
        samples.append(np.array(fed.latest_broadcast().vectors))
    values = np.concatenate([s.ravel() for s in samples])  # 25 * 2 * 40 = 2,000 coordinates
    expected = z * (1.0 / n_clients) * clip / q  # uniform weights: phi_max = 1/N
    standard_error = expected / math.sqrt(2 * values.size)
    assert abs(values.std() - expected) < 5 * standard_error
    assert abs(values.mean()) < 5 * expected / math.sqrt(values.size)
    assert [e.noise_std for e in fed.ledger_entries()] == [pytest.approx(expected)] * 25


def test_ledger_records_the_rounds_public_noise_scale() -> None:
    fed = _federation(4, n_subregions=2, weight_hold_rounds=1, weight_decay_rounds=2)
    server = FederationServer(fed)
    for _ in range(3):
        _upload(fed)
        server.step()
    schedule = WeightSchedule(15.0, 1, 2)
    for entry in fed.ledger_entries():
        weights = subregion_weights(
            np.arange(4) % 2, 2, round_index=entry.round, schedule=schedule
        )
        assert entry.phi_max == pytest.approx(weights.max())
        assert entry.noise_std == pytest.approx(1.0 * weights.max() * 4.0 / 0.5)
    phi = [e.phi_max for e in fed.ledger_entries()]
    assert phi[0] > phi[-1] == pytest.approx(0.25)


def test_what_is_published_reveals_no_participation(monkeypatch: pytest.MonkeyPatch) -> None:
    fed = _federation(6)
    server = FederationServer(fed)
    _upload(fed, [0, 1, 2])
    report = server.step(force=True)
    assert report.n_selected is not None and report.n_clipped is not None  # server side
    broadcast = fed.latest_broadcast()
    assert broadcast.n_contributors == -1
    assert [t.value for t in fed.store.broadcast_trials()] == [-1.0]
    (entry,) = fed.ledger_entries()
    record = entry.to_dict()
    for key in ("selected", "contributors", "n_clipped", "n_selected", "n_contributors"):
        assert key not in record
    assert record["round"] == 0 and record["n_accounted"] == 1


def test_every_round_is_accounted_before_its_broadcast_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = _federation(3)
    store = fed.store
    stage = store.stage_broadcast
    seen: list[tuple[int, list[int]]] = []

    def checked(round_index: int, payload: str) -> int:
        seen.append((round_index, sorted(e.round for e in fed.ledger_entries())))
        return stage(round_index, payload)

    monkeypatch.setattr(store, "stage_broadcast", checked)
    server = FederationServer(fed)
    for _ in range(3):
        _upload(fed)
        server.step()
    assert seen == [(0, [0]), (1, [0, 1]), (2, [0, 1, 2])]
    assert fed.privacy_spent()[0] == pytest.approx(fed.privacy.epsilon(3, 3))
    assert [e.n_accounted for e in fed.ledger_entries()] == [1, 2, 3]
    epsilons = [e.epsilon for e in fed.ledger_entries()]
    assert epsilons == sorted(epsilons) and epsilons[-1] == fed.privacy_spent()[0]


# --------------------------------------------------------------------- crash and resume
def _crash_at(monkeypatch: pytest.MonkeyPatch, fed: Federation, point: str) -> None:
    store, storage = fed.store, fed.storage
    fired = []

    def once(original, condition=lambda *a, **k: True):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if not fired and condition(*args, **kwargs):
                fired.append(point)
                raise RuntimeError(f"power cut at {point}")
            return original(*args, **kwargs)

        return wrapper

    if point == "ledger write":
        monkeypatch.setattr(
            storage,
            "set_study_system_attr",
            once(storage.set_study_system_attr, lambda _s, key, _v: key.startswith("r:")),
        )
    elif point == "stage (after account)":
        monkeypatch.setattr(store, "stage_broadcast", once(store.stage_broadcast))
    elif point == "open next round (after stage)":
        monkeypatch.setattr(
            store, "open_uploads", once(store.open_uploads, lambda round_index: round_index == 1)
        )
    elif point == "commit (after stage)":
        monkeypatch.setattr(store, "commit_broadcast", once(store.commit_broadcast))
    elif point == "pointer (after publish)":
        monkeypatch.setattr(
            storage,
            "set_study_system_attr",
            once(storage.set_study_system_attr, lambda _s, key, _v: key == "fedbo:latest"),
        )
    elif point == "discard (before round advance)":
        monkeypatch.setattr(store, "discard_uploads", once(store.discard_uploads))
    else:
        raise AssertionError(point)


def _assert_no_unaccounted_broadcast(fed: Federation) -> None:
    """Every readable payload (staged, published or abandoned unpurged) is in the ledger."""
    accounted = {entry.payload for entry in fed.ledger_entries()}
    for broadcast in fed.store.broadcasts():
        assert broadcast.digest in accounted


CRASH_POINTS = [
    "ledger write",
    "stage (after account)",
    "open next round (after stage)",
    "commit (after stage)",
    "pointer (after publish)",
    "discard (before round advance)",
]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_at_any_step_neither_undercounts_nor_publishes_twice(
    point: str, kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    storage = InMemoryStorage() if kind == "memory" else f"sqlite:///{tmp_path / 'dp.db'}"
    fed = _federation(3, storage=storage)
    _upload(fed)
    server = FederationServer(fed)
    _crash_at(monkeypatch, fed, point)
    with pytest.raises(RuntimeError, match="power cut"):
        server.step()
    _assert_no_unaccounted_broadcast(fed)
    staged = [b for b in fed.store.broadcasts() if b.state == TrialState.RUNNING]
    staged_payload = staged[0].payload if staged else None
    monkeypatch.undo()

    restarted = FederationServer(Federation.load("dp", fed.storage))
    if fed.open_round() == 0:
        report = restarted.step()
        assert report is not None and report.round == 0
    assert restarted.step() is None and restarted.open_round == 1
    published = fed.latest_broadcast()
    assert published.round == 0
    if staged_payload is not None:  # the staged (accounted) vectors, not a fresh draw
        assert (
            json.loads(staged_payload)["vectors"]
            == json.loads(fed.store.read_broadcast(fed.store.latest()["trial_id"])[1])["vectors"]
        )
    _upload(fed)
    assert restarted.step().round == 1

    trials = fed.store.broadcast_trials()
    rounds = [int(t.system_attrs["fedbo:round"]) for t in trials if t.state == TrialState.COMPLETE]
    assert rounds == [0, 1]
    assert [e.round for e in fed.ledger_entries()] == [0, 1]
    assert [e.n_accounted for e in fed.ledger_entries()] == [1, 2]
    assert fed.privacy_spent()[0] == pytest.approx(fed.privacy.epsilon(2, 3))


_KILL_SCRIPT = """
import os, sys
from optuna_fedbo.federation import Federation, FederationServer
fed = Federation.load("dp", sys.argv[1])
store, point = fed.store, sys.argv[2]
def die(*args, **kwargs):
    os._exit(9)
if point == "stage":
    store.stage_broadcast = die
else:
    original = store.storage.set_study_system_attr
    def maybe(study_id, key, value):
        if key == "fedbo:latest":
            os._exit(9)
        return original(study_id, key, value)
    store.storage.set_study_system_attr = maybe
FederationServer(fed).step()
"""


@pytest.mark.parametrize("point", ["stage", "latest"])
def test_a_killed_server_process_resumes_without_double_counting(
    point: str, tmp_path: Path
) -> None:
    """A real kill (os._exit, no cleanup): between account and publish, and after publishing."""
    url = f"sqlite:///{tmp_path / 'kill.db'}"
    fed = _federation(3, storage=url)
    _upload(fed)
    done = subprocess.run(
        [sys.executable, "-c", _KILL_SCRIPT, url, point],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 9, done.stderr[-2000:]
    fed = Federation.load("dp", url)
    assert [e.round for e in fed.ledger_entries()] == [0]
    _assert_no_unaccounted_broadcast(fed)
    server = FederationServer(fed)
    if point == "stage":
        assert fed.latest_broadcast() is None
        assert server.step().round == 0
    assert fed.latest_broadcast().round == 0 and server.open_round == 1
    _upload(fed)
    assert server.step().round == 1
    assert [e.n_accounted for e in fed.ledger_entries()] == [1, 2]
    complete = [t for t in fed.store.broadcast_trials() if t.state == TrialState.COMPLETE]
    assert len(complete) == 2


_PARTICIPANT_SCRIPT = """
import sys
import optuna
from optuna_fedbo import FedSampler
from optuna_fedbo.federation import Federation
optuna.logging.set_verbosity(optuna.logging.ERROR)
fed = Federation.load("dp", sys.argv[1])
study = optuna.create_study(sampler=FedSampler(fed, client_id="c0", seed=0))
study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_float("y", -5, 5), n_trials=1)
assert fed.has_sent("c0", 0), "no upload"
print("dp_accounting" in sys.modules)
"""


def test_a_participant_checks_the_ledger_without_loading_the_accountant(tmp_path: Path) -> None:
    # Before an upload a participant checks the ledger's chain (not epsilon): importing
    # dp-accounting (scipy.signal, scipy.stats) takes seconds in every participant process.
    url = f"sqlite:///{tmp_path / 'dp.db'}"
    _federation(3, storage=url, join=0)
    done = subprocess.run(
        [sys.executable, "-c", _PARTICIPANT_SCRIPT, url],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False"]


# ---------------------------------------------------------------------------- the budget
@pytest.mark.parametrize("kind", ["memory", "journal"])
def test_the_server_never_publishes_past_the_budget(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, kind: str
) -> None:
    # (Over a journal file too: the multi-process DP test runs on SQLite and PostgreSQL.)
    privacy = DPConfig(1.0, 0.5, 4.0, accountant="moments")
    budget = privacy.epsilon(3, 4)  # exactly three rounds (the bound is inclusive)
    fed = _federation(
        4,
        privacy=DPConfig(1.0, 0.5, 4.0, accountant="moments", epsilon_budget=budget),
        storage=InMemoryStorage() if kind == "memory" else f"journal:{tmp_path / 'dp.log'}",
    )
    server = FederationServer(fed)
    reports = []
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            _upload(fed)
            reports.append(server.step())
        _upload(fed)
        refusal = server.step()
    assert [r.round for r in reports] == [0, 1, 2] and all(r.published for r in reports)
    assert refusal.budget_exhausted and not refusal.published and refusal.reason == "budget"
    assert refusal.round == 3 and refusal.epsilon == pytest.approx(budget)
    assert any(
        "budget" in r.getMessage() and "exhausted" in r.getMessage() for r in caplog.records
    )
    assert fed.latest_broadcast().round == 2 and fed.open_round() == 3
    assert len(fed.ledger_entries()) == 3
    spent, delta = fed.privacy_spent()
    assert spent == pytest.approx(budget) and spent <= budget and delta == pytest.approx(1e-5)
    record = fed.budget_exhausted()
    assert record["round"] == 3 and record["epsilon_next"] > budget
    # Nothing more: no step, no upload, and a restarted server stays stopped.
    assert server.step() is None and server.step(force=True) is None
    with pytest.raises(ValueError, match="budget"):
        _upload(fed)
    names = {s.study_name for s in fed.storage.get_all_studies()}
    assert "dp:fedbo:uploads:000003" not in names  # the refused round's uploads are discarded
    restarted = FederationServer(Federation.load("dp", fed.storage))
    assert restarted.budget_exhausted is not None and restarted.step(force=True) is None
    assert restarted.serve(poll_interval=0.01, timeout=5.0) == []
    assert len(fed.store.broadcast_trials()) == 3


def test_a_round_accounted_before_a_crash_is_published_even_at_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = DPConfig(1.0, 0.5, 4.0, accountant="moments")
    fed = _federation(
        3, privacy=DPConfig(1.0, 0.5, 4.0, accountant="moments", epsilon_budget=base.epsilon(1, 3))
    )
    _upload(fed)
    monkeypatch.setattr(fed.store, "stage_broadcast", lambda *a: (_ for _ in ()).throw(OSError()))
    with pytest.raises(OSError):
        FederationServer(fed).step()
    monkeypatch.undo()
    server = FederationServer(Federation.load("dp", fed.storage))
    assert server.step().round == 0  # already paid for: published
    _upload(fed)
    assert server.step().budget_exhausted  # round 1 would exceed
    assert len(fed.ledger_entries()) == 1


def test_serve_stops_when_the_budget_is_exhausted() -> None:
    privacy = DPConfig(1.0, 0.5, 4.0, accountant="moments")
    fed = _federation(
        2,
        privacy=DPConfig(
            1.0, 0.5, 4.0, epsilon_budget=privacy.epsilon(1, 2) * 1.01, accountant="moments"
        ),
    )
    _upload(fed)
    server = FederationServer(fed)
    assert server.step().round == 0
    _upload(fed)
    reports = server.serve(poll_interval=0.01, timeout=30.0)
    assert [r.budget_exhausted for r in reports] == [True]


@pytest.mark.parametrize("accountant", ["moments", "rdp", "pld"])
def test_a_budgeted_server_precomputes_its_horizon(accountant: str, monkeypatch) -> None:
    # The walk is time-boxed; on a loaded machine 2 s may not reach the horizon.
    monkeypatch.setattr(ledger_module, "PRECOMPUTE_SECONDS", 600.0)
    privacy = DPConfig(1.0, 0.5, 4.0, delta=PAPER_DELTA, accountant=accountant, epsilon_budget=6.0)
    fed = _federation(4, privacy=privacy)
    FederationServer(fed)
    curve = fed.privacy_ledger().curve
    horizon = curve.max_rounds(6.0)
    assert horizon >= 2 and curve.horizon >= horizon + 1
    # Then accounting is a lookup: the curve does not grow while the rounds are published.
    server = FederationServer(fed)
    before = curve.horizon
    for _ in range(2):
        _upload(fed)
        assert server.step().published
    assert curve.horizon == before


def test_precomputation_is_bounded_in_time() -> None:
    """A huge budget does not make the server start slowly: the walk stops after `seconds`."""
    privacy = DPConfig(1.0, 0.5, 4.0, epsilon_budget=1e6)
    fed = _federation(4, privacy=privacy)
    ledger = fed.privacy_ledger()
    known = ledger.prepare(seconds=0.3)
    assert 1 <= known < 10_000 and ledger.curve.horizon >= known


# ------------------------------------------------------------------------ status and CLI
def test_status_shows_the_ledger() -> None:
    fed = _federation(3, privacy=DPConfig(1.0, 0.5, 4.0, epsilon_budget=50.0))
    server = FederationServer(fed)
    for _ in range(2):
        _upload(fed)
        server.step()
    status = fed.status()
    summary = status.privacy
    assert summary["rounds_accounted"] == 2 and summary["accountant"] == "pld"
    assert summary["epsilon"] == pytest.approx(fed.privacy_spent()[0])
    assert summary["neighbouring_relation"] == "add/remove-one"
    assert summary["budget_exhausted"] is None and summary["epsilon_budget"] == 50.0
    text = status.format()
    assert "of budget 50" in text and "2 accounted round(s)" in text and "add/remove-one" in text
    assert "subsampled gaussian: z 1, S 4, q 0.5, poisson sampling (add/remove-one)" in text
    assert status.to_dict()["privacy"] == summary


def test_cli_create_serve_and_status_with_privacy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    space = json.dumps({"x": json.loads(optuna.distributions.distribution_to_json(SPACE["x"]))})
    budget = DPConfig(1.0, 0.35, 22.0, delta=PAPER_DELTA, accountant="moments").epsilon(1, 2)
    budget *= 1.001
    code = cli_main(
        [
            "create", "--storage", url, "--name", "cli", "--search-space", space,
            "--n-clients", "2", "--preset", "dp-fts-de",
            "--protocol", json.dumps({"n_features": M, "n_init": 1}),
            "--privacy-preset", "dp-fts-de",
            "--privacy", json.dumps({"epsilon_budget": budget}),
        ]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "differential privacy: z 1, q 0.35, S 22" in out and "moments" in out
    fed = Federation.load("cli", url)
    assert fed.privacy.epsilon_budget == pytest.approx(budget)
    for client in ("a", "b"):
        fed.join(client)
        fed.upload(client, _omega(0), n_observations=3, iteration=0)
    serve = ["serve", "--storage", url, "--name", "cli", "--poll-interval", "0.01"]
    assert cli_main([*serve, "--max-rounds", "1", "--timeout", "30"]) == 0
    out = capsys.readouterr().out
    assert "round 0: " in out and "clipped" in out and "epsilon " in out
    for client in ("a", "b"):
        fed.upload(client, _omega(1), n_observations=4, iteration=1)
    assert cli_main([*serve, "--timeout", "30"]) == 0  # returns at the budget
    assert "round 1: not published: privacy budget exhausted" in capsys.readouterr().out
    assert cli_main(["status", "--storage", url, "--name", "cli", "--ledger"]) == 0
    out = capsys.readouterr().out
    assert "privacy        epsilon" in out and "budget         exhausted: round 1" in out
    assert "round    epsilon" in out
    assert cli_main(["status", "--storage", url, "--name", "cli", "--json", "--ledger"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert len(record["ledger"]) == 1 and record["ledger"][0]["round"] == 0
    assert record["privacy"]["rounds_accounted"] == 1
    bad = ["create", "--storage", url, "--name", "x", "--search-space", space]
    assert cli_main([*bad, "--n-clients", "2", "--privacy", json.dumps({"z": 1})]) == 2
    assert "--privacy" in capsys.readouterr().err


def test_a_dp_round_of_binary_uploads_is_aggregated_and_accounted() -> None:
    fed = _federation(3)
    server = FederationServer(fed)
    _upload(fed)
    header, tail = split_frame(fed.read_upload(0, "c0"))  # the upload is a binary frame
    assert header["format"] == 2 and np.frombuffer(tail, "<f8").size == fed.fts.upload_length
    report = server.step(force=True)
    # Every upload parsed and clipped (Poisson subsampling may still select none of the three).
    assert report.rejected == () and len(report.upload_norms) == 3
    (entry,) = fed.ledger_entries()
    (stored,) = [b for b in fed.store.broadcasts() if b.state == TrialState.COMPLETE]
    assert entry.round == 0 and entry.payload == text_digest(stored.payload)
    assert fed.privacy_spent()[0] == entry.epsilon > 0
