"""What one federation round costs over SQLite with and without secure aggregation (SecAgg+).

``benchmarks/secagg_cost.py`` times the protocol alone, in one process; this times a whole round
of the default protocol (pooled statistics, 2-D search space, ``M = 100`` shared features: 26,265
numbers per participant) through a federation on an SQLite file: every participant's upload and
its answers to the protocol's steps (sealed, signed, written and read back), the server's
steps, unmasking and the publication. Participants and the server run in turn in this process,
so the times are the work of each side, without waiting (wall seconds of a process that does
nothing else; ``uptime`` beside them says how loaded the machine was).

Secure rounds use SecAgg+'s graph of the smallest even degree whose failure bound is at most
``2**-30`` (:func:`optuna_fedbo.core.secagg.choose_degree`: 4 at N = 10, 12 at 50, 32 at 200)
and are run without dropouts and with 10% of the participants dropping out after sharing keys
(their masks are then removed with their neighbours' shares). Per participant: seconds (its
upload and its answers to every step) and the bytes of the protocol's entries it wrote and read
per round (not counted without secure aggregation), the mean and the largest; the server:
seconds of its steps, and of them those until the round's broadcast is committed (``publish
s``: the rest deletes the round's uploads and protocol studies, after the publication). Last,
what a participant's sampler costs per trial in the same federation (``FedSampler``, trials
21-30 of a study on the published round), the yard stick of the issue's target.

Usage::

    python benchmarks/secagg_federation_cost.py              # N = 10, 50, 200
    python benchmarks/secagg_federation_cost.py --n 50       # one size
"""

from __future__ import annotations

import argparse
from collections import defaultdict
import os
import subprocess
import tempfile
import time

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
import scipy.stats  # noqa: F401 (imported once by the server's first broadcast; not a round's cost)

from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.secagg.graph import choose_degree
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import SecureAggregation
from optuna_fedbo.federation.fts.secure import driver_of
from optuna_fedbo.federation.secagg import relay as relay_module
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.samplers import FedSampler

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}


def _packed(federation: Federation, seed: int, n: int = 20) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 2))
    y = np.sin(3 * x[:, 0]) + x[:, 1] ** 2
    blocks = []
    for features in federation.pooling_features():
        statistics = SufficientStatistics(features.n_features)
        statistics.add(features(x), y)
        blocks.append(statistics)
    return pack_blocks(blocks)


class _Meter:
    """Seconds and bytes per party: whoever is ``current`` is charged for storage traffic."""

    def __init__(self) -> None:
        self.current = "server"
        self.seconds: dict[str, float] = defaultdict(float)
        self.bytes: dict[str, int] = defaultdict(int)
        self._entries = relay_module.Relay.entries
        self._write = relay_module.Relay.write
        self._commit = FederationStore.commit_broadcast
        self.published_at: float | None = None

    def install(self) -> None:
        meter = self

        def entries(relay, round_index, **kinds):
            found = meter._entries(relay, round_index, **kinds)
            meter.bytes[meter.current] += sum(len(k) + len(v) for k, v in found.items())
            return found

        def write(relay, round_index, key, value):
            meter.bytes[meter.current] += len(key) + len(value)
            return meter._write(relay, round_index, key, value)

        def commit_broadcast(store, *args, **kwargs):
            try:
                return meter._commit(store, *args, **kwargs)
            finally:
                meter.published_at = time.perf_counter()

        relay_module.Relay.entries = entries  # type: ignore[method-assign]
        relay_module.Relay.write = write  # type: ignore[method-assign]
        FederationStore.commit_broadcast = commit_broadcast  # type: ignore[method-assign]

    def uninstall(self) -> None:
        relay_module.Relay.entries = self._entries  # type: ignore[method-assign]
        relay_module.Relay.write = self._write  # type: ignore[method-assign]
        FederationStore.commit_broadcast = self._commit  # type: ignore[method-assign]

    def run(self, party: str, call, *args, **kwargs):
        self.current = party
        self.published_at = None
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            end = time.perf_counter()
            self.seconds[party] += end - start
            if self.published_at is not None:  # what followed the publication: clean-up
                self.seconds["cleanup"] += end - self.published_at
            self.current = "server"


def one_round(n_clients: int, secure: bool, dropout: float, folder: str) -> dict[str, float]:
    """One round's costs (see the module docstring)."""
    url = f"sqlite:///{os.path.join(folder, f'cost-{n_clients}-{secure}-{dropout}.db')}"
    secagg = (
        SecureAggregation(degree=choose_degree(n_clients), step_timeout=0.0) if secure else None
    )
    federation = Federation.create(
        "cost", search_space=SPACE, n_clients=n_clients, storage=url, secure_aggregation=secagg
    )
    clients = [f"c{i:03d}" for i in range(n_clients)]
    for client in clients:
        federation.join(client)
    driver = driver_of(federation.channel)
    driver.background = False
    server = FederationServer(federation)
    vectors = {c: _packed(federation, i) for i, c in enumerate(clients)}
    dropped = set(clients[:: round(1 / dropout)] if dropout else ())
    meter = _Meter()
    meter.install()
    try:
        for client in clients:
            meter.run(
                client, federation.upload, client, vectors[client], n_observations=20, iteration=0
            )
        report = None
        for _ in range(12 if secure else 1):
            for client, participant in driver._participants.items():
                step = participant._client.step if participant._client else "advertise"
                if client in dropped and step not in ("advertise", "share_keys"):
                    continue  # it sent its keys and shares, then vanished
                meter.run(client, participant.poll)
            report = meter.run("server", server.step, force=True)
            if report is not None:
                break
    finally:
        meter.uninstall()
    assert report is not None and report.published, report
    assert report.n_contributors == n_clients - len(dropped)
    costs = {
        "p mean s": float(np.mean([meter.seconds[c] for c in clients])),
        "p max s": max(meter.seconds[c] for c in clients),
        "p mean kB": float(np.mean([meter.bytes[c] for c in clients])) / 1e3,
        "p max kB": max(meter.bytes[c] for c in clients) / 1e3,
        "server s": meter.seconds["server"],
        "publish s": meter.seconds["server"] - meter.seconds["cleanup"],
        "recovered": float(report.n_recovered),
    }
    if secure and not dropout:
        costs["trial s"] = _trial_cost(federation, clients[0])
    return costs


def _trial_cost(federation: Federation, client: str, warm: int = 20, timed: int = 10) -> float:
    """Seconds per trial of ``client``'s sampler, trials ``warm + 1 .. warm + timed``."""
    sampler = FedSampler(federation, client_id=client, seed=0)
    study = optuna.create_study(sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        return float(np.sin(3 * trial.suggest_float("x", 0, 1)) + trial.suggest_float("y", 0, 1))

    study.optimize(objective, n_trials=warm)
    start = time.perf_counter()
    study.optimize(objective, n_trials=timed)
    return (time.perf_counter() - start) / timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="participants (repeatable)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sizes = args.n or [10, 50, 200]
    header = ("p mean s", "p max s", "p mean kB", "p max kB", "server s", "publish s", "recovered")
    print(f"{'N':>4} {'secure':>7} {'drop':>5} " + " ".join(f"{h:>10}" for h in header))
    with tempfile.TemporaryDirectory() as folder:
        for n in sizes:
            for secure, dropout in ((False, 0.0), (True, 0.0), (True, 0.1)):
                load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
                costs = one_round(n, secure, dropout, folder)
                cells = " ".join(
                    f"{'-':>10}" if not secure and h.endswith("kB") else f"{costs[h]:>10.3f}"
                    for h in header
                )
                print(f"{n:>4} {str(secure):>7} {dropout:>5.1f} {cells}", flush=True)
                print(f"     [{load}]", flush=True)
                if "trial s" in costs:
                    print(f"     a participant's trial: {costs['trial s']:.3f} s", flush=True)


if __name__ == "__main__":
    main()
