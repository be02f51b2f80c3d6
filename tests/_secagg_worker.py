"""A participant process for tests/test_secagg_multiprocess.py.

Usage: python tests/_secagg_worker.py STORAGE NAME CLIENT_ID SEED

Uploads its pooled statistics (:func:`packed`) to round 0 under secure aggregation, then answers
the protocol's steps (polling every 20 ms) until round 0 is published; exits 0 then (the test
may SIGKILL it before).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import optuna

from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation.fts.secure import driver_of


def packed(federation: Federation, seed: int, n: int = 6) -> np.ndarray:
    """A participant's pooled statistics of ``n`` observations (seeded)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 2))
    y = np.sin(3 * x[:, 0]) + x[:, 1] ** 2 + seed
    blocks = []
    for features in federation.pooling_features():
        statistics = SufficientStatistics(features.n_features)
        statistics.add(features(x), y)
        blocks.append(statistics)
    return pack_blocks(blocks)


def main() -> int:
    storage, name, client_id, seed = sys.argv[1:5]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    federation = Federation.load(name, storage)
    driver = driver_of(federation.channel)
    driver.background = False
    federation.upload(client_id, packed(federation, int(seed)), n_observations=6, iteration=0)
    deadline = time.monotonic() + 240
    while federation.open_round() == 0 and time.monotonic() < deadline:
        driver.poll()
        time.sleep(0.02)
    return 0 if federation.open_round() > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
