"""The server's statistics of one Fed-PNE phase: global means, elimination, next node set.

Algorithm 2, lines 11-16 of the Fed-PNE paper:

* ``mu_{h,i} = (1/M) sum_m mu_{m,h,i}`` (line 12);
* ``(h^p, i^p) = argmax mu_{h,i}`` (line 14); ties go to the first node in index order (a choice);
* ``E^p = {(h,i) : mu_{h,i} + b_{h,i} + nu1 rho^h < mu_{h^p,i^p} - b_{h^p,i^p}}`` (line 15,
  Eqn. 1), a strict inequality, so the best node is never eliminated;
* ``K^{p+1}`` = the children of ``K^p \\ E^p`` (line 16).

The tuning preset (:meth:`FedPNEParams.tuning`) adds a beam after Eqn. (1): at most
``max_survivors`` nodes survive: the best node, then the largest scores (ties: index order);
the rest join ``E^p``. The score is the global mean plus ``spread_bonus`` times the sample
standard deviation of the participants' means of the node (:func:`beam_scores`). Without
``max_survivors`` this module is exactly the paper's rule.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
import math

from optuna_fedbo.core.fedpne.partition import Node
from optuna_fedbo.core.fedpne.partition import Partition


def global_means(
    client_means: Mapping[str, Mapping[Node, float]], nodes: Sequence[Node]
) -> dict[Node, float]:
    """Average the clients' node means (Algorithm 2, line 12).

    Args:
        client_means: ``client -> {node -> local mean}``; each must cover exactly ``nodes``.
        nodes: The node set of the phase.

    Returns:
        ``node -> global mean`` over the given clients.
    """
    if not client_means:
        raise ValueError("At least one client's node means are needed.")
    expected = set(nodes)
    for client, means in client_means.items():
        if set(means) != expected:
            raise ValueError(f"Client {client!r} reported nodes that differ from the phase's.")
    n = len(client_means)
    return {
        node: math.fsum(float(means[node]) for means in client_means.values()) / n
        for node in nodes
    }


@dataclass(frozen=True)
class Elimination:
    """The outcome of Eqn. (1) on one phase.

    Attributes:
        best: ``(h^p, i^p)``, the node with the largest global mean.
        eliminated: ``E^p`` in index order.
        survivors: ``K^p \\ E^p`` in index order (always contains ``best``).
    """

    best: Node
    eliminated: tuple[Node, ...]
    survivors: tuple[Node, ...]


def eliminate(
    means: Mapping[Node, float],
    widths: Mapping[Node, float],
    smoothness: Callable[[int], float],
    max_survivors: int | None = None,
    scores: Mapping[Node, float] | None = None,
) -> Elimination:
    """Apply the elimination rule (Algorithm 2, lines 14-15).

    Args:
        means: ``node -> mu_{h,i}``.
        widths: ``node -> b_{h,i}`` (same keys).
        smoothness: ``h -> nu1 rho^h``.
        max_survivors: Keep at most this many survivors of Eqn. (1), the largest scores first
            (``None``: the paper, no limit).
        scores: The beam's ranking (default: the means); see :func:`beam_scores`.

    Returns:
        The best node, the eliminated nodes and the survivors.
    """
    if not means:
        raise ValueError("Cannot eliminate from an empty node set.")
    if set(means) != set(widths):
        raise ValueError("means and widths must have the same nodes.")
    nodes = sorted(means)
    for node in nodes:
        if not math.isfinite(means[node]) or not math.isfinite(widths[node]) or widths[node] < 0:
            raise ValueError(f"Node {node.key}: mean and width must be finite, width >= 0.")
    best = nodes[0]
    for node in nodes[1:]:
        if means[node] > means[best]:
            best = node
    bar = means[best] - widths[best]
    eliminated = tuple(
        node for node in nodes if means[node] + widths[node] + smoothness(node.depth) < bar
    )
    gone = set(eliminated)
    if max_survivors is not None:
        if max_survivors < 1:
            raise ValueError(f"max_survivors must be >= 1, got {max_survivors}.")
        rank = means if scores is None else scores
        # The best node (the recommendation) always survives; the others by their score.
        ranked = [best] + sorted(
            (n for n in nodes if n not in gone and n != best), key=lambda n: (-rank[n], n)
        )
        gone.update(ranked[max_survivors:])
        eliminated = tuple(node for node in nodes if node in gone)
    survivors = tuple(node for node in nodes if node not in gone)
    return Elimination(best=best, eliminated=eliminated, survivors=survivors)


def beam_scores(
    client_means: Mapping[str, Mapping[Node, float]],
    means: Mapping[Node, float],
    spread_bonus: float | None,
) -> dict[Node, float] | None:
    """The beam's ranking: ``mu_{h,i} + spread_bonus * sd_m(mu_{m,h,i})`` (``None``: the means).

    With uniform pulls, the participants' means of one node are values at different points of
    its cell, so their spread grows with the variation of ``f`` inside the cell (plus noise
    and heterogeneity, which are alike for every node). A cell holding a narrow peak has a
    lower *average* than a cell on a broad plateau, but a larger spread: the bonus keeps it in
    the beam until its cells are small enough for the average to show the peak. (The paper's
    closing section names empirical variances, as in VHCT, as a way to speed Fed-PNE up.)

    Args:
        client_means: ``client -> {node -> local mean}``.
        means: ``node -> global mean``.
        spread_bonus: The weight of the spread; ``None`` or 0 (or a single client): no bonus.
    """
    if not spread_bonus or len(client_means) < 2:
        return None
    n = len(client_means)
    scores = {}
    for node, mean in means.items():
        values = [float(m[node]) for m in client_means.values()]
        centre = math.fsum(values) / n
        spread = math.sqrt(math.fsum((v - centre) ** 2 for v in values) / (n - 1))
        scores[node] = mean + spread_bonus * spread
    return scores


def children_of(nodes: Sequence[Node], partition: Partition) -> tuple[Node, ...]:
    """``{(h+1, k i - j) : (h, i) in nodes, j = 0..k-1}`` in index order (line 16)."""
    return tuple(sorted(child for node in nodes for child in partition.children(node)))
