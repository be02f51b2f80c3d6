"""What one federation round costs over SQLite with and without secure aggregation.

``benchmarks/secagg_cost.py`` times the protocol alone, in one process; this times a whole round
of the default protocol (pooled statistics, 2-D search space, ``M = 100`` shared features: 26,265
numbers per participant) through a federation on an SQLite file: every participant's upload and
its answers to the protocol's steps (sealed, signed, written and read back), the server's
steps, unmasking and the publication. Participants and the server run in turn in this process
(:func:`optuna_fedbo.federation.fts.secure.close_in_turn`), so the times are the work of each
side, without waiting; CPU seconds (``time.process_time``) and wall seconds are both given.

Usage::

    python benchmarks/secagg_federation_cost.py            # N = 10, 30
    python benchmarks/secagg_federation_cost.py --n 10     # one size
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import optuna
from optuna.distributions import FloatDistribution

from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import SecureAggregation
from optuna_fedbo.federation.fts.secure import close_in_turn
from optuna_fedbo.federation.fts.secure import driver_of

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


def one_round(n_clients: int, secure: bool, folder: str) -> dict[str, float]:
    """Seconds of one round: the uploads, then the server's closing (with the protocol)."""
    url = f"sqlite:///{os.path.join(folder, f'cost-{n_clients}-{secure}.db')}"
    federation = Federation.create(
        "cost",
        search_space=SPACE,
        n_clients=n_clients,
        storage=url,
        secure_aggregation=SecureAggregation() if secure else None,
    )
    clients = [f"c{i:03d}" for i in range(n_clients)]
    for client in clients:
        federation.join(client)
    driver_of(federation.channel).background = False
    server = FederationServer(federation)
    vectors = {c: _packed(federation, i) for i, c in enumerate(clients)}
    cpu, wall = time.process_time(), time.perf_counter()
    for client in clients:
        federation.upload(client, vectors[client], n_observations=20, iteration=0)
    upload_cpu = time.process_time() - cpu
    report = close_in_turn(federation, server) if secure else server.step(force=True)
    assert report is not None and report.published and report.n_contributors == n_clients
    return {
        "upload cpu/participant": upload_cpu / n_clients,
        "round cpu": time.process_time() - cpu,
        "round wall": time.perf_counter() - wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="participants (repeatable)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sizes = args.n or [10, 30]
    print(f"{'N':>4} {'secure':>7} {'upload cpu/p':>13} {'round cpu':>10} {'round wall':>11}")
    with tempfile.TemporaryDirectory() as folder:
        for n in sizes:
            for secure in (False, True):
                costs = one_round(n, secure, folder)
                print(
                    f"{n:>4} {str(secure):>7} {costs['upload cpu/participant']:>12.3f}s "
                    f"{costs['round cpu']:>9.2f}s {costs['round wall']:>10.2f}s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
