"""Fed-PNE constants and phase sizing: ``tau_h``, pulls per client, widths, expansion.

All formulas are from Section 3.1 and Appendix B.1 of the Fed-PNE paper:

* ``tau_h = ceil(c^2 log(c1 T / delta) rho^(-2h) / nu1^2)`` (Eqn. 3), the number of pulls a node
  of depth ``h`` needs in total over all clients;
* ``t_{m,h,i} = ceil(tau_h / M)`` pulls per client and node (Algorithm 2, line 8), so a node is
  pulled ``T_{h,i} = M t_{m,h,i}`` times in total;
* ``b_{h,i} = c sqrt(log(c1 T / delta) / T_{h,i})`` (Eqn. 1);
* the expansion loop (Algorithm 2, lines 5-7): replace the node set by its children while
  ``|K^p| tau_h <= M`` or ``tau_h <= 1``, ``M`` being the number of clients.

Depth convention (a choice): ``h`` is the depth of the nodes in ``K^p``. The pseudo-code of
Algorithm 2 increments ``h`` at the start of every phase (line 4) before the loop, which read
literally evaluates ``tau`` one level below the nodes; the analysis (Lemma B.6, Eqn. 17:
``|T^p| = |K^p| ceil(tau_{h^p} / M)`` with ``h^p`` "the depth sampled at phase p") and the text of
Section 3.1 ("tau_h is the minimum required number of times each node on depth h needs to be
pulled") use the nodes' own depth, which we follow.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import math

from optuna_fedbo.core.fedpne.partition import Node
from optuna_fedbo.core.fedpne.partition import Partition


def log_term(c1: float, horizon: int, delta: float) -> float:
    """``log(c1 T / delta)``, the logarithm shared by ``tau_h`` and ``b_{h,i}``.

    Raises:
        ValueError: If ``c1 T / delta <= 1`` (the thresholds would never grow past 1).
    """
    value = float(c1) * float(horizon) / float(delta)
    if not math.isfinite(value) or value <= 1.0:
        raise ValueError(
            f"c1 * T / delta must be a finite number > 1 for log(c1 T / delta) > 0, got {value!r}."
        )
    return math.log(value)


def threshold(depth: int, *, c: float, log_c1t_delta: float, nu1: float, rho: float) -> int:
    """``tau_h = ceil(c^2 log(c1 T / delta) rho^(-2h) / nu1^2)`` (Eqn. 3).

    Args:
        depth: ``h >= 0``.
        c: The confidence constant (already adjusted for DP if applicable).
        log_c1t_delta: ``log(c1 T / delta)`` (:func:`log_term`).
        nu1: Smoothness constant ``nu1 > 0``.
        rho: Smoothness constant ``0 < rho < 1``.

    Returns:
        The integer threshold.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}.")
    value = c**2 * log_c1t_delta * rho ** (-2 * depth) / nu1**2
    if not math.isfinite(value):
        raise ValueError(f"tau_h overflowed at depth {depth}.")
    return math.ceil(value)


def pulls_per_client(tau: int, n_clients: int) -> int:
    """``t_{m,h,i} = ceil(tau_h / M)`` (Algorithm 2, line 8)."""
    if n_clients < 1:
        raise ValueError(f"n_clients must be >= 1, got {n_clients}.")
    return -(-int(tau) // int(n_clients))


def confidence_width(*, c: float, log_c1t_delta: float, total_pulls: int) -> float:
    """``b_{h,i} = c sqrt(log(c1 T / delta) / T_{h,i})`` (Eqn. 1).

    Args:
        c: The confidence constant.
        log_c1t_delta: ``log(c1 T / delta)``.
        total_pulls: ``T_{h,i}``, the pulls of the node over all contributing clients (> 0).
    """
    if total_pulls < 1:
        raise ValueError(f"total_pulls must be >= 1, got {total_pulls}.")
    return c * math.sqrt(log_c1t_delta / total_pulls)


def expand_until_enough(
    nodes: Sequence[Node],
    partition: Partition,
    *,
    n_clients: int,
    tau_of_depth: Callable[[int], int],
    max_nodes: int,
) -> tuple[tuple[Node, ...], int]:
    """Algorithm 2, lines 5-7: expand ``K^p`` while ``|K^p| tau_h <= M`` or ``tau_h <= 1``
    (and the nodes are shallower than :attr:`Partition.max_depth`).

    Args:
        nodes: The node set ``K^p`` (all of one depth ``h``, non-empty).
        partition: The partition (for the children).
        n_clients: ``M``.
        tau_of_depth: ``h -> tau_h``.
        max_nodes: Safety bound on ``|K^p|``: a ValueError is raised instead of building a
            larger phase (tiny ``c`` or huge ``M`` would otherwise expand for a very long time).

    Returns:
        ``(K^p, h)``: the expanded node set, sorted by index, and its depth.
    """
    if not nodes:
        raise ValueError("The node set of a phase cannot be empty.")
    depths = {node.depth for node in nodes}
    if len(depths) != 1:
        raise ValueError(
            f"All nodes of a phase must share one depth, got depths {sorted(depths)}."
        )
    depth = depths.pop()
    current = tuple(sorted(nodes))
    while depth < partition.max_depth and (
        len(current) * tau_of_depth(depth) <= n_clients or tau_of_depth(depth) <= 1
    ):
        if len(current) * partition.branching > max_nodes:
            raise ValueError(
                f"Expanding the phase at depth {depth} would exceed max_phase_nodes={max_nodes} "
                f"nodes (tau_h={tau_of_depth(depth)}, M={n_clients}); increase c, log(c1 T/delta) "
                "or max_phase_nodes."
            )
        current = tuple(child for node in current for child in partition.children(node))
        depth += 1
    return current, depth
