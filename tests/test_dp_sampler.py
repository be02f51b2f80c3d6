"""Participants of a DP federation: local TS once the budget is exhausted, and no hanging."""

from __future__ import annotations

import logging
import threading

import optuna
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import simulate
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.fts.presets import PAPER_ALGORITHM
from optuna_fedbo.samplers import FedThompsonSampler

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
N_INIT = 2
SAMPLER = {"n_candidates": 64, "n_refinements": 0}


@pytest.fixture(autouse=True)
def _propagate_optuna_logs(propagate):
    """caplog sees optuna-fedbo's records at every level (the ``propagate`` fixture)."""
    yield


def _objective(shift: float):  # noqa: ANN202
    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        y = trial.suggest_float("y", 0.0, 1.0)
        return -((x - 0.3 - shift) ** 2) - (y - 0.6) ** 2

    return objective


def _budget_for(rounds: int, n_clients: int) -> DPConfig:
    base = DPConfig(1.0, 0.5, 10.0, accountant="moments")
    return DPConfig(
        1.0, 0.5, 10.0, accountant="moments", epsilon_budget=base.epsilon(rounds, n_clients)
    )


def test_synchronous_participants_do_not_hang_at_the_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Waiting without a timeout for a round the server refuses must end, then go local."""
    fed = Federation.create(
        "sync",
        search_space=SPACE,
        n_clients=2,
        protocol=FTSConfig(
            n_features=16, n_init=N_INIT, n_subregions=2, schedule="1-1/t^2", **PAPER_ALGORITHM
        ),
        privacy=_budget_for(3, 2),
        seed=5,
    )
    samplers = [
        FedThompsonSampler(
            fed, f"s{i}", synchronous=True, sync_timeout=None, poll_interval=0.01, seed=i,
            **SAMPLER,
        )
        for i in range(2)
    ]  # fmt: skip
    studies = [optuna.create_study(direction="maximize", sampler=s) for s in samplers]
    server = FederationServer(fed)
    stop = threading.Event()
    serving = threading.Thread(
        target=server.serve,
        kwargs={"poll_interval": 0.01, "timeout": 120.0, "stop": stop},
        daemon=True,
    )
    errors: list[BaseException] = []

    def run(study: optuna.Study, shift: float) -> None:
        try:
            study.optimize(_objective(shift), n_trials=N_INIT + 7)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    workers = [
        threading.Thread(target=run, args=(s, 0.1 * i), daemon=True) for i, s in enumerate(studies)
    ]
    with caplog.at_level(logging.WARNING):
        serving.start()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=90.0)
        hung = [w for w in workers if w.is_alive()]
        stop.set()
        serving.join(timeout=30.0)
    assert not hung, "a synchronous participant hung at the exhausted budget"
    assert errors == [] and not serving.is_alive()

    record = fed.budget_exhausted()
    assert record is not None and record["round"] == 3
    assert len(fed.ledger_entries()) == 3 and fed.latest_broadcast().round == 2
    for sampler, study in zip(samplers, studies):
        assert sampler.budget_exhausted
        assert sampler.last_upload_round == 3  # nothing uploaded after the refusal
        modes = [t.system_attrs["fedbo:mode"] for t in study.trials]
        assert len(modes) == N_INIT + 7 and modes[:N_INIT] == ["init"] * N_INIT
        rounds = [t.system_attrs.get("fedbo:broadcast_round") for t in study.trials]
        assert all(r is None or r <= 2 for r in rounds)
        # After the refused round every trial is local TS.
        after = modes[N_INIT + 4 :]
        assert after and set(after) <= {"local", "fallback"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    exhausted = [m for m in warnings if "budget" in m and "local Thompson sampling" in m]
    assert len([m for m in exhausted if "s0:" in m]) == 1  # once per participant
    assert not [m for m in warnings if "no broadcast for round" in m or "failed" in m]


def test_simulation_falls_back_to_local_ts_at_the_budget() -> None:
    n_clients, n_rounds = 4, 6
    result = simulate(
        [_objective(0.05 * i) for i in range(n_clients)],
        search_space=SPACE,
        n_rounds=n_rounds,
        protocol=FTSConfig(
            n_features=16, n_init=N_INIT, n_subregions=2, schedule="1-1/t", **PAPER_ALGORITHM
        ),
        privacy=_budget_for(3, n_clients),
        sampler_kwargs=SAMPLER,
        progress=False,
    )
    fed = result.federation
    assert [r.round for r in result.reports if r.published] == [0, 1, 2]
    assert [r.budget_exhausted for r in result.reports][-1]
    assert len(fed.ledger_entries()) == 3
    assert fed.privacy_spent()[0] <= fed.privacy.epsilon_budget
    for row in result.table():
        if row["round"] >= 4:  # trials after the refused round 3
            assert row["mode"] in ("local", "fallback")
        if row["round"] == 1:  # 1 - p_1 = 1: the first BO iteration uses the broadcast
            assert row["mode"] == "federated" and row["broadcast_round"] == 0


def test_without_a_budget_dp_rounds_are_used_and_accounted() -> None:
    n_clients, n_rounds = 4, 3
    privacy = DPConfig(1.0, 0.5, 10.0)
    result = simulate(
        [_objective(0.05 * i) for i in range(n_clients)],
        search_space=SPACE,
        n_rounds=n_rounds,
        protocol=FTSConfig(n_features=16, n_init=N_INIT, n_subregions=2, **PAPER_ALGORITHM),
        privacy=privacy,
        sampler_kwargs=SAMPLER,
        progress=False,
    )
    fed = result.federation
    # Rounds 0 .. n_rounds - 1: each broadcast is used by the next BO round; the last round's
    # would reach nobody, so it is neither published nor paid for.
    published = n_rounds
    assert [r.round for r in result.reports] == list(range(published))
    assert all(r.n_clipped is not None and r.epsilon is not None for r in result.reports)
    assert fed.privacy_spent()[0] == pytest.approx(privacy.epsilon(published, n_clients))
    assert [r.epsilon for r in result.reports] == [e.epsilon for e in fed.ledger_entries()]
    modes = {row["mode"] for row in result.table()}
    assert "federated" in modes and "fallback" not in modes
