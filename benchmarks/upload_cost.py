"""Cost of one fresh pooled upload on each side: the participant's sending (encode, seal, sign,
write, receipt) and the server's collecting it (check, verify, open, parse, hold).

A one-site 4-D federation with the default protocol (pooled statistics on five feature blocks,
41,515 numbers); each repeat uploads statistics that differ from the last (so they go in full,
not by reference) and the server collects the open round. Prints the fastest and the median
wall time of each side over the repeats, in ms::

    python benchmarks/upload_cost.py [--repeats 40] [--dims 4]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import optuna

from optuna_fedbo import Federation
from optuna_fedbo import FederationServer
from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.federation.fts.config import FTSConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--dims", type=int, default=4)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    space = {f"x{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(args.dims)}
    fed = Federation.create(
        f"upload-cost-{time.time_ns()}",
        search_space=space,
        n_clients=1,
        protocol=FTSConfig(min_contributors=1),
    )
    fed.join("c0")
    server = FederationServer(fed, discard_uploads=False)
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(15, args.dims))
    y = np.sin(3 * x[:, 0]) + x[:, 1] ** 2
    blocks = []
    for features in fed.pooling_features():
        statistics = SufficientStatistics(features.n_features)
        statistics.add(features(x), y)
        blocks.append(statistics)
    packed = pack_blocks(blocks)
    send, collect = [], []
    for i in range(args.repeats):
        vector = packed.copy()
        vector[1] += 1e-9 * (i + 1)  # other statistics each time: sent in full
        start = time.perf_counter()
        fed.upload("c0", vector, n_observations=15, iteration=i)
        send.append(time.perf_counter() - start)
        start = time.perf_counter()
        server._collect(fed.open_round())
        collect.append(time.perf_counter() - start)
    send_ms, collect_ms = 1000 * np.array(send), 1000 * np.array(collect)
    print(
        f"{args.dims}-D fresh upload of {len(packed):,} numbers: participant sends in "
        f"{send_ms.min():.2f} ms (median {np.median(send_ms):.2f}), the server collects it in "
        f"{collect_ms.min():.2f} ms (median {np.median(collect_ms):.2f})"
    )


if __name__ == "__main__":
    main()
