"""Cost of the federation: server round time, upload time, and a whole simulation end to end.

1. Server round (``FederationServer.step``: read and check every upload, aggregate, publish) for
   ``N = 200`` and ``1,000`` participants, ``M = 100``, ``P = 4`` (DP-FTS-DE preset), on the
   in-memory storage and on an SQLite file; also the original FTS (``aggregation="sample"``),
   whose broadcast relays all ``N`` vectors. Median over rounds; every participant uploads in
   every round (the uploads' own write time is reported separately, per upload).
2. End to end: the DP-FTS-DE synthetic problem (1-D, 1,000-point grid) with ``N = 200`` agents and
   60 BO rounds after the 10-point initial design, ``M = 100``, ``P = 4``, in one process
   (``optuna_fedbo.simulate``), with the acquisition settings of the synthetic benchmark (500
   random candidates, no gradient refinement: the domain is a 1,000-point grid) and, on fewer
   rounds, with the library defaults (1,024 candidates and 4 L-BFGS-B refinements).

Run: ``python benchmarks/federation_cost.py`` (about 5 minutes on two cores).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import optuna

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import presets
from optuna_fedbo.federation import simulate

SPACE = {
    "C": optuna.distributions.FloatDistribution(1e-3, 1e3, log=True),
    "gamma": optuna.distributions.FloatDistribution(1e-5, 1e1, log=True),
    "degree": optuna.distributions.IntDistribution(1, 5),
}


def server_rounds(
    n_clients: int, storage: str | None, aggregation: str, n_rounds: int
) -> tuple[float, float]:
    """Median seconds of one server round and mean seconds of one upload write."""
    protocol = presets.fts_de() if aggregation == "weighted" else presets.fts()  # M = 100 in both
    federation = Federation.create(
        f"cost-{aggregation}-{n_clients}",
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=protocol,
    )
    ids = [f"site-{i:04d}" for i in range(n_clients)]
    for client in ids:
        federation.join(client)
    server = FederationServer(federation)
    rng = np.random.default_rng(0)
    step_times, upload_times = [], []
    for round_index in range(n_rounds):
        start = time.perf_counter()
        for client in ids:
            federation.upload(
                client, rng.normal(size=100), n_observations=10 + round_index, iteration=0
            )
        upload_times.append((time.perf_counter() - start) / n_clients)
        start = time.perf_counter()
        report = server.step()
        step_times.append(time.perf_counter() - start)
        assert report is not None and report.n_contributors == n_clients
    return float(np.median(step_times)), float(np.mean(upload_times))


def end_to_end(n_agents: int, n_rounds: int, sampler_kwargs: dict) -> tuple[float, int]:
    """Seconds of a whole synthetic simulation and its number of trials."""
    import federation_synthetic as synthetic

    rng = np.random.default_rng(0)
    functions = synthetic.homogeneous(n_agents, rng)
    objectives = [synthetic.make_objective(v, n) for n, v in enumerate(functions)]
    start = time.perf_counter()
    result = simulate(
        objectives,
        search_space=synthetic.SPACE,
        n_rounds=n_rounds,
        protocol=presets.fts_de(),
        sampler_kwargs=sampler_kwargs,
        progress=False,
    )
    elapsed = time.perf_counter() - start
    return elapsed, sum(len(s.trials) for s in result.studies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-rounds", type=int, default=5)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--default-rounds", type=int, default=10)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    print("Server round (read + check + aggregate + publish), M = 100")
    print(f"{'storage':10s}{'aggregation':>12s}{'N':>7s}{'round (ms)':>12s}{'upload (ms)':>13s}")
    with tempfile.TemporaryDirectory() as tmp:
        for storage_name in ("memory", "sqlite"):
            for aggregation, n_clients in (
                ("weighted", 200),
                ("weighted", 1000),
                ("sample", 200),
                ("sample", 1000),
            ):
                storage = (
                    None
                    if storage_name == "memory"
                    else f"sqlite:///{os.path.join(tmp, f'{aggregation}-{n_clients}.db')}"
                )
                step, upload = server_rounds(n_clients, storage, aggregation, args.server_rounds)
                print(
                    f"{storage_name:10s}{aggregation:>12s}{n_clients:7d}"
                    f"{1e3 * step:12.1f}{1e3 * upload:13.2f}",
                    flush=True,
                )

    print(f"\nEnd to end: {args.agents} agents, M = 100, P = 4, in-memory federation")
    print(f"{'acquisition':34s}{'rounds':>7s}{'trials':>8s}{'seconds':>9s}{'ms/trial':>10s}")
    for label, rounds, kwargs in (
        ("500 candidates, no refinement", args.rounds, {"n_candidates": 500, "n_refinements": 0}),
        ("defaults (1024 cand., 4 L-BFGS-B)", args.default_rounds, {}),
    ):
        seconds, trials = end_to_end(args.agents, rounds, kwargs)
        print(f"{label:34s}{rounds:7d}{trials:8d}{seconds:9.1f}{1e3 * seconds / trials:10.2f}")


if __name__ == "__main__":
    main()
