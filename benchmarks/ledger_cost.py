"""What rollback-proof accounting costs a DP server round: the hash chain and the high-water mark.

A DP-FTS-DE federation of ``N`` participants on a SQLite file publishes ``R`` rounds (every
participant uploads an ``M = 100`` vector each round; the uploads are written before the timed
``step()``). Reported per round: the whole ``step()``, and the part of it spent reading the ledger
as a hash chain (``read_chain``), checking it against the server's high-water mark
(``ServerMark.check``) and moving the mark (``ServerMark.advance``: lock, read, sign, atomic
write beside the key file).

Usage::

    python benchmarks/ledger_cost.py                 # N = 200, 20 rounds
    python benchmarks/ledger_cost.py --n 50 --rounds 5
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import os
from pathlib import Path
import tempfile
import time
from typing import Any

import numpy as np
import optuna
from optuna.distributions import FloatDistribution

M = 100
SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}


def _timed(owner: Any, name: str, spent: list[float]) -> None:
    """Wrap ``owner.name`` so that its time is added to ``spent[0]``."""
    original: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="Participants N.")
    parser.add_argument("--rounds", type=int, default=20, help="Rounds timed.")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as directory:
        os.environ["OPTUNA_FEDBO_HOME"] = str(Path(directory) / "keys")
        from optuna_fedbo.federation import _chain
        from optuna_fedbo.federation import DPConfig
        from optuna_fedbo.federation import Federation
        from optuna_fedbo.federation import FederationServer
        from optuna_fedbo.federation import FTSConfig
        from optuna_fedbo.federation import ledger
        from optuna_fedbo.federation.watermark import ServerMark

        fed = Federation.create(
            "ledger-cost",
            search_space=SPACE,
            n_clients=args.n,
            storage=f"sqlite:///{Path(directory) / 'cost.db'}",
            protocol=FTSConfig(n_features=M, n_init=1),
            privacy=DPConfig(1.0, 0.35, 22.0, accountant="rdp"),
        )
        for i in range(args.n):
            fed.join(f"c{i}")
        spent = [0.0]
        _timed(ledger, "read_chain", spent)  # the name ledger.py calls
        _timed(ServerMark, "check", spent)
        _timed(ServerMark, "advance", spent)
        server = FederationServer(Federation.load(fed.name, fed.storage))  # its own reads
        rng = np.random.default_rng(0)
        steps, extra = [], []
        for _ in range(args.rounds):
            for i in range(args.n):
                fed.upload(f"c{i}", rng.normal(size=M), n_observations=3, iteration=0)
            spent[0] = 0.0
            start = time.perf_counter()
            report = server.step()
            steps.append(time.perf_counter() - start)
            extra.append(spent[0])
            assert report is not None and report.published
        entries = len(fed.ledger_entries())
        print(f"DP server round on SQLite, N = {args.n}, M = {M}, {args.rounds} rounds "
              f"({entries} ledger entries at the end)")  # fmt: skip
        print(f"  step(), median ms:                          {1e3 * np.median(steps):8.2f}")
        print(f"  hash chain + high-water mark, median ms:    {1e3 * np.median(extra):8.3f}")
        print(f"  hash chain + high-water mark, max ms:       {1e3 * np.max(extra):8.3f}")
        # A long ledger: reading 1,000 verified entries as a chain (their digests cached).
        bodies = {f"r:{i:06d}": {**fed.ledger_entries()[-1].to_dict(), "round": i,
                                 "n_accounted": i + 1} for i in range(1000)}  # fmt: skip
        cache: dict = {}
        _chain.read_chain(bodies, cache)
        start = time.perf_counter()
        for _ in range(20):
            _chain.read_chain(bodies, cache)
        chain_ms = 1e3 * (time.perf_counter() - start) / 20
        print(f"  read_chain of 1,000 entries, ms:            {chain_ms:8.3f}")


if __name__ == "__main__":
    main()
