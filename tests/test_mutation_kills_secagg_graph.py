"""SecAgg+ graphs (``core/secagg/graph.py``), in process: the degree bounds, the hypergeometric
tails and the failure bounds equal their definitions (checked against scipy), each capped at 1,
and the chosen degree is the smallest sparse one meeting the target (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import math

import pytest
from scipy.stats import hypergeom

from optuna_fedbo.core.secagg.graph import _upper_tail
from optuna_fedbo.core.secagg.graph import check_degree
from optuna_fedbo.core.secagg.graph import choose_degree
from optuna_fedbo.core.secagg.graph import secagg_plus_failure_bounds


def test_the_degree_is_even_at_least_two_and_below_n() -> None:
    check_degree(5, 2)
    check_degree(5, 4)
    for n, degree in ((5, 0), (5, 3), (4, 4), (4, 6)):
        with pytest.raises(ValueError, match="must be even, >= 2 and < N"):
            check_degree(n, degree)


@pytest.mark.parametrize(
    ("population", "marked", "draws", "at_least"),
    [(19, 3, 6, 0), (19, 3, 6, 1), (19, 3, 6, 3), (19, 8, 6, 6), (10, 4, 5, 2)],
)
def test_the_upper_tail_is_the_hypergeometric_one(
    population: int, marked: int, draws: int, at_least: int
) -> None:
    expected = hypergeom.sf(at_least - 1, population, marked, draws)
    assert float(_upper_tail(population, marked, draws, at_least)) == pytest.approx(expected)


def _bounds(n: int, degree: int, threshold: int, dropout: float, corrupt: float) -> dict:
    dropped, bad = math.floor(dropout * n), math.floor(corrupt * n)
    correctness = n * hypergeom.sf(degree - threshold, n - 1, max(dropped - 1, 0), degree)
    secrecy = n * hypergeom.sf(threshold - 1, n - 1, bad, degree)
    removed = min(dropped + bad, n)
    runs = math.comb(removed, degree) / math.comb(n, degree)
    connectivity = n * n / 2 * runs if degree < n - 1 else 0.0
    bounds = {
        "correctness": min(correctness, 1.0),
        "share_secrecy": min(secrecy, 1.0),
        "connectivity": min(connectivity, 1.0),
    }
    return {**bounds, "total": min(1.0, sum(bounds.values()))}


@pytest.mark.parametrize(
    ("n", "degree", "threshold", "dropout", "corrupt"),
    [
        (40, 12, 7, 0.1, 0.1),  # all three bounds small
        (40, 6, 4, 0.3, 0.3),  # correctness and secrecy above 1: capped
        (12, 10, 6, 0.5, 0.5),  # degree N - 2: connectivity counts, capped
        (12, 11, 6, 0.5, 0.5),  # degree N - 1 (odd: the bound alone): connected by definition
        (100, 10, 6, 0.1, 0.1),  # all three strictly between 0 and 1
        (40, 4, 4, 0.0, 0.1),  # no dropout: correct, even with every share needed
    ],
)
def test_the_failure_bounds_are_their_definitions(
    n: int, degree: int, threshold: int, dropout: float, corrupt: float
) -> None:
    found = secagg_plus_failure_bounds(
        n, degree, threshold, dropout_fraction=dropout, corrupt_fraction=corrupt
    )
    expected = _bounds(n, degree, threshold, dropout, corrupt)
    assert set(found) == set(expected)
    for name, value in expected.items():
        assert found[name] == pytest.approx(value, rel=1e-9, abs=1e-300), name
    assert all(0.0 <= v <= 1.0 for v in found.values())


def test_the_chosen_degree_is_the_smallest_sparse_one_meeting_the_target() -> None:
    n = 30
    best = choose_degree(n)
    assert best is not None
    assert all(
        secagg_plus_failure_bounds(n, k, (k + 1) // 2 + 1)["total"] > 2.0**-30
        for k in range(2, best, 2)
    )
    # A target met exactly (not only strictly) picks that degree.
    exact = secagg_plus_failure_bounds(n, 4, 3, dropout_fraction=0.2, corrupt_fraction=0.2)
    assert exact["total"] > 0.0
    picked = choose_degree(n, target=exact["total"], dropout_fraction=0.2, corrupt_fraction=0.2)
    assert picked is not None and picked <= 4
    # The largest sparse degree, N - 2, is a candidate ...
    assert choose_degree(6, dropout_fraction=0.2, corrupt_fraction=0.2) == 4
    # ... and N - 1 or more never is: nothing sparse meets the target, use the complete graph.
    assert choose_degree(8, target=0.0, dropout_fraction=0.5, corrupt_fraction=0.5) is None
