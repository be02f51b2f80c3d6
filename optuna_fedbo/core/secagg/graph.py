"""Neighbour graphs: the complete graph (SecAgg) and a sparse Harary graph (SecAgg+).

SecAgg+ (Bell, Bonawitz, Gascon, Lepoint and Raykova, CCS 2020) replaces the complete graph of
SecAgg by a sparse graph on which every participant masks with, and secret-shares to, only its
``k`` neighbours; Bell et al. show that a Harary graph ``H(k, N)`` whose nodes are placed by a
random permutation is secure and correct, except with a probability exponentially small in the
statistical security parameters, with ``k = O(log N)`` against a constant fraction of corrupt
participants and a constant fraction of dropouts. :func:`secagg_plus_failure_bounds` computes
explicit union bounds of the three failure events for *this* construction (exact hypergeometric
tails, no asymptotics), which is what the library states:

* **correctness**: a participant whose masks must be removed has fewer than ``share_threshold``
  surviving holders of its shares among its ``k`` neighbours;
* **share secrecy**: an honest participant has ``share_threshold`` or more corrupt neighbours
  (they could pool its shares);
* **connectivity**: removing the corrupt and dropped participants disconnects the mask graph, so
  the sum of one component (a partial sum) is exposed. ``H(k, N)`` links positions ``i`` and
  ``i +- 1 .. k/2`` on a cycle; the survivors stay connected unless two runs of ``k/2`` consecutive
  positions are entirely removed, which a union over the ``N^2 / 2`` pairs of runs bounds.

Placement uses public randomness: SHA-256 of the round's binding context (federation, round,
participants), which every participant recomputes; the server influences it only through whom it
admits to the round.
"""

from __future__ import annotations

from fractions import Fraction
import hashlib
import math


def full_graph(participants: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Every participant's neighbours in the complete graph (all the others)."""
    return {p: tuple(q for q in participants if q != p) for p in participants}


def check_degree(n: int, degree: int) -> None:
    """Raise ``ValueError`` unless ``degree`` is even, at least 2 and below ``n``."""
    if degree < 2 or degree % 2 or degree >= n:
        raise ValueError(f"The SecAgg+ degree must be even, >= 2 and < N = {n}; got {degree}.")


def harary_graph(
    participants: tuple[str, ...], degree: int, public_seed: bytes
) -> dict[str, tuple[str, ...]]:
    """The Harary graph ``H(degree, N)`` on participants placed by a seeded permutation.

    Raises:
        ValueError: If ``degree`` is odd, below 2 or not below ``N``.
    """
    n = len(participants)
    check_degree(n, degree)
    order = sorted(participants, key=lambda p: hashlib.sha256(public_seed + p.encode()).digest())
    half = degree // 2
    graph: dict[str, tuple[str, ...]] = {}
    for i, p in enumerate(order):
        near = {order[(i + j) % n] for j in range(-half, half + 1) if j != 0}
        graph[p] = tuple(sorted(near))
    return graph


def _upper_tail(population: int, marked: int, draws: int, at_least: int) -> Fraction:
    """``P(X >= at_least)`` for ``X`` hypergeometric (``draws`` from ``population``)."""
    total = math.comb(population, draws)
    return Fraction(
        sum(
            math.comb(marked, j) * math.comb(population - marked, draws - j)
            for j in range(max(at_least, 0), min(marked, draws) + 1)
        ),
        total,
    )


def secagg_plus_failure_bounds(
    n: int,
    degree: int,
    share_threshold: int,
    *,
    dropout_fraction: float = 0.1,
    corrupt_fraction: float = 0.1,
) -> dict[str, float]:
    """Union bounds on the failure events of SecAgg+ on ``H(degree, n)`` (see module docstring).

    Args:
        n: Participants.
        degree: Neighbours per participant (``k``).
        share_threshold: Shares needed to reconstruct a participant's secret (out of its
            ``k`` neighbours and itself).
        dropout_fraction: At most ``floor(dropout_fraction n)`` participants drop.
        corrupt_fraction: At most ``floor(corrupt_fraction n)`` participants collude with the
            server.

    Returns:
        ``{"correctness", "share_secrecy", "connectivity", "total"}`` probabilities (upper
        bounds, each at most 1).
    """
    dropped = math.floor(dropout_fraction * n)
    corrupt = math.floor(corrupt_fraction * n)
    # A dropped participant (itself gone) needs share_threshold live holders among k neighbours.
    correctness = n * _upper_tail(n - 1, max(dropped - 1, 0), degree, degree - share_threshold + 1)
    secrecy = n * _upper_tail(n - 1, corrupt, degree, share_threshold)
    removed = min(dropped + corrupt, n)
    runs = Fraction(math.comb(removed, degree), math.comb(n, degree)) if removed >= degree else 0
    connectivity = Fraction(n * n, 2) * runs if degree < n - 1 else Fraction(0)
    bounds = {
        "correctness": float(min(correctness, 1)),
        "share_secrecy": float(min(secrecy, 1)),
        "connectivity": float(min(connectivity, 1)),
    }
    bounds["total"] = min(1.0, sum(bounds.values()))
    return bounds


def choose_degree(
    n: int,
    *,
    target: float = 2.0**-30,
    dropout_fraction: float = 0.1,
    corrupt_fraction: float = 0.1,
) -> int | None:
    """The smallest even SecAgg+ degree whose failure bound is at most ``target``.

    The share threshold is a strict majority of the neighbourhood, ``(k + 1) // 2 + 1``.

    Returns:
        The degree, or ``None`` when no sparse graph (``k < N - 1``) meets ``target``: use the
        complete graph.
    """
    for degree in range(2, n - 1, 2):
        bounds = secagg_plus_failure_bounds(
            n,
            degree,
            majority(degree + 1),
            dropout_fraction=dropout_fraction,
            corrupt_fraction=corrupt_fraction,
        )
        if bounds["total"] <= target:
            return degree
    return None


def majority(holders: int) -> int:
    """The smallest strict majority of ``holders``: ``holders // 2 + 1``."""
    return holders // 2 + 1
