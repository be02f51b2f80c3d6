"""What secure aggregation costs per round: each participant's time and bytes, the server's.

One round of :mod:`optuna_fedbo.core.secagg` in one process (every message serialised to JSON and
parsed back, as over the storage relay; signatures are Ed25519), at ``N = 10, 50`` (SecAgg's
complete graph) and ``N = 200`` (SecAgg+ Harary graph of the degree :func:`choose_degree` picks),
without dropouts and with 10% of the participants dropping after sharing their keys (the costliest
case for the server: their pairwise masks are rebuilt from their neighbours' shares), for vectors
of ``M = 100`` and ``M = 500`` numbers (DP-FTS / DP-FTS-DE) and of 41,500 numbers (the default
protocol's pooled statistics in 4-D; ``--pooled``).

Reported (medians over participants and repeats): a participant's protocol CPU time (its five
steps, excluding the wait for others) and bytes (sent plus received, JSON), the server's time for
the whole round and for the final unmasking alone (CPU seconds, its worker processes included),
and the unmasking's wall seconds (its Shamir combinations run in a pool of the usable cores;
``--workers 1`` runs them in the server's process). Storage round-trips are not included.

Usage::

    python benchmarks/secagg_cost.py             # N = 10, 50, 200; M = 100, 500
    python benchmarks/secagg_cost.py --pooled    # adds 41,500 numbers at N = 10 and 50
    python benchmarks/secagg_cost.py --quick     # N = 10, 50 only, one repeat
    python benchmarks/secagg_cost.py --n 200 --workers 1   # one size, combinations in-process
"""

from __future__ import annotations

import argparse

import numpy as np

from optuna_fedbo.core.secagg import choose_degree
from optuna_fedbo.core.secagg import encode
from optuna_fedbo.core.secagg import plan_ring
from optuna_fedbo.core.secagg import RoundSetup
from optuna_fedbo.core.secagg import secagg_plus_failure_bounds
from optuna_fedbo.core.secagg.graph import majority
from optuna_fedbo.core.secagg.local import run_local_round


def measure(
    n: int, dimension: int, dropout: float, repeats: int, workers: int | None = None
) -> dict[str, float]:
    """Median costs of ``repeats`` rounds."""
    ids = tuple(f"p{i:03d}" for i in range(n))
    degree = choose_degree(n) if n > 100 else None
    ring = plan_ring(n_inputs=n, bound=1.0, step=1e-6, dimension=dimension)
    setup = RoundSetup("bench", 0, ids, majority(n), ring, degree=degree)
    rng = np.random.default_rng(0)
    encoded = {p: encode(rng.uniform(-1, 1, dimension), ring) for p in ids}
    dropped = rng.choice(ids, int(round(dropout * n)), replace=False)
    rows = []
    for _ in range(repeats):
        run = run_local_round(
            setup, encoded, drop_after=dict.fromkeys(dropped, "share_keys"), workers=workers
        )
        live = [p for p in ids if p not in dropped]
        rows.append(
            (
                float(np.median([run.client_seconds[p] for p in live])),
                float(np.median([run.client_bytes[p] for p in live])),
                run.server_seconds,
                run.unmask_seconds,
                run.unmask_wall_seconds,
            )
        )
    client_s, client_b, server_s, unmask_s, unmask_wall = np.median(np.array(rows), axis=0)
    return {
        "degree": float(degree or n - 1),
        "client_ms": 1e3 * client_s,
        "client_kb": client_b / 1e3,
        "server_s": server_s,
        "unmask_s": unmask_s,
        "unmask_wall": unmask_wall,
        "bits": float(ring.bits),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pooled", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, action="append", help="participants (repeatable)")
    parser.add_argument("--workers", type=int, default=None, help="server's processes")
    args = parser.parse_args()
    sizes = tuple(args.n or ((10, 50) if args.quick else (10, 50, 200)))
    repeats = 1 if args.quick else args.repeats
    configs = [(n, m) for n in sizes for m in (100, 500)]
    if args.pooled:
        configs += [(n, 41_500) for n in (10, 50)]
    print(
        f"{'N':>4} {'k':>4} {'M':>6} {'drop':>5} {'client ms':>10} {'client kB':>10} "
        f"{'server s':>9} {'unmask s':>9} {'wall s':>7}"
    )
    for n, m in configs:
        for dropout in (0.0, 0.1):
            row = measure(n, m, dropout, 1 if n >= 200 else repeats, args.workers)
            print(
                f"{n:>4} {int(row['degree']):>4} {m:>6} {dropout:>5.0%} {row['client_ms']:>10.1f} "
                f"{row['client_kb']:>10.1f} {row['server_s']:>9.2f} {row['unmask_s']:>9.2f} "
                f"{row['unmask_wall']:>7.2f}"
            )
    for n in sizes:
        k = choose_degree(n)
        if k is not None:
            bounds = secagg_plus_failure_bounds(n, k, majority(k + 1))
            print(f"SecAgg+ N={n} k={k} failure bounds (10% dropout, 10% corrupt): {bounds}")


if __name__ == "__main__":
    main()
