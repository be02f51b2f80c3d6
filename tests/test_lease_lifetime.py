"""A lease writes nothing once it is released: no heartbeat outlives a simulation (a heartbeat
that did would land, by SQLite's reuse of a deleted study's id, in a later federation's leases
study of the same storage), and a heartbeat racing the release never brings a finished lease
back to active."""

from __future__ import annotations

import threading

import optuna

from optuna_fedbo import FTSConfig
from optuna_fedbo.federation.lease_book import lease_book
from optuna_fedbo.simulation import simulate


def _heartbeats() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("fedbo-lease-")}


def test_a_released_lease_writes_nothing_more(tmp_path) -> None:
    before = _heartbeats()
    result = simulate(
        [lambda t, k=k: (t.suggest_float("x", -1.0, 1.0) - 0.1 * k) ** 2 for k in range(2)],
        search_space={"x": optuna.distributions.FloatDistribution(-1.0, 1.0)},
        n_rounds=0,
        protocol=FTSConfig(n_init=2),
        direction="minimize",
        seed=0,
        storage=f"sqlite:///{tmp_path / 'fed.db'}",
        name="lifetime",
        progress=False,
    )
    assert _heartbeats() <= before  # the simulation finished its participants
    book = lease_book(result.federation)
    assert {s.status for s in book.states().values()} == {"finished"}
    assert set(book.states()) == set(result.client_ids)

    lease = result.studies[0].sampler._lease
    stored = book.records()[lease.client_id]
    lease.renew()  # what the heartbeat thread does if it wakes just after the release
    assert book.records()[lease.client_id] == stored
    assert book.states()[lease.client_id].status == "finished"
