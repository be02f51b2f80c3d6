"""SecAgg+ neighbour graphs: regular, symmetric, placed by public randomness, and failure bounds
that are upper bounds (checked by simulation) and small at the degree chosen for N = 200."""

from __future__ import annotations

import numpy as np

from optuna_fedbo.core.secagg.graph import choose_degree
from optuna_fedbo.core.secagg.graph import harary_graph
from optuna_fedbo.core.secagg.graph import majority
from optuna_fedbo.core.secagg.graph import secagg_plus_failure_bounds


def _connected(graph: dict[str, tuple[str, ...]], alive: set[str]) -> bool:
    start = next(iter(alive))
    seen, stack = {start}, [start]
    while stack:
        for q in graph[stack.pop()]:
            if q in alive and q not in seen:
                seen.add(q)
                stack.append(q)
    return seen == alive


def test_harary_graph_is_regular_symmetric_and_seeded() -> None:
    ids = tuple(f"p{i}" for i in range(30))
    graph = harary_graph(ids, 6, b"seed")
    assert all(len(n) == 6 and p not in n for p, n in graph.items())
    assert all(p in graph[q] for p in ids for q in graph[p])
    assert harary_graph(ids, 6, b"seed") == graph
    assert harary_graph(ids, 6, b"other") != graph


def test_connectivity_bound_is_an_upper_bound() -> None:
    # 20 participants, degree 4, 6 removed (dropped or corrupt): simulate the removal. The
    # bound is not vacuous here (0.62) and the event is frequent (about 0.35).
    ids = tuple(f"p{i}" for i in range(20))
    rng = np.random.default_rng(0)
    graph = harary_graph(ids, 4, b"x")
    trials = 2000
    split = sum(
        not _connected(graph, set(ids) - set(rng.choice(ids, 6, replace=False)))
        for _ in range(trials)
    )
    bound = secagg_plus_failure_bounds(20, 4, 3, dropout_fraction=0.3, corrupt_fraction=0.0)
    assert 0.1 < split / trials <= bound["connectivity"] < 1.0


def test_failure_bounds_at_the_chosen_degrees() -> None:
    # At N = 10 (one dropout, one corrupt participant) degree 4 already has no failure event.
    assert choose_degree(10) == 4
    assert secagg_plus_failure_bounds(10, 4, 3)["total"] == 0.0
    k = choose_degree(200)
    assert k is not None and k < 40  # O(log N): 4 log2(200) is about 31
    bounds = secagg_plus_failure_bounds(200, k, majority(k + 1))
    assert bounds["total"] <= 2.0**-30
    smaller = secagg_plus_failure_bounds(200, k - 2, majority(k - 1))
    assert smaller["total"] > 2.0**-30
