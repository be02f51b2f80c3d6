"""The client side of Fed-PNE / DP-Fed-PNE (Algorithms 1 and 3 of the Fed-PNE paper)."""

from __future__ import annotations

from collections.abc import Sequence
import math

import numpy as np

from optuna_fedbo.core.fedpne.partition import as_node
from optuna_fedbo.core.fedpne.partition import Node
from optuna_fedbo.core.fedpne.partition import Partition
from optuna_fedbo.core.fedpne.privacy import privatize_rewards
from optuna_fedbo.core.fedpne.privacy import RewardPrivacy
from optuna_fedbo.core.fedpne.protocol import Phase


def pull_plan(
    phase: Phase, partition: Partition, rng: np.random.Generator | None = None
) -> tuple[list[Node], np.ndarray]:
    """The pulls of one client in ``phase`` (Algorithm 1, lines 6-7).

    Args:
        phase: The published phase.
        partition: The public partition.
        rng: Needed only for ``representative="uniform"`` (each pull a fresh uniform point).

    Returns:
        ``(nodes, points)``: the node of each pull (each node ``t`` times in a row, index order,
        cut at the phase's budget) and the points to evaluate, shape ``(budget, dim)``.
    """
    nodes = phase.schedule()
    if not nodes:
        return [], np.empty((0, partition.dim))
    blocks = []
    start = 0
    while start < len(nodes):
        node = nodes[start]
        stop = start
        while stop < len(nodes) and nodes[stop] == node:
            stop += 1
        blocks.append(partition.points(node, stop - start, rng))
        start = stop
    return nodes, np.concatenate(blocks, axis=0)


def local_node_means(
    phase: Phase,
    nodes: Sequence[Node | str],
    rewards: Sequence[float] | np.ndarray,
    *,
    privacy: RewardPrivacy | None = None,
    noise_rng: np.random.Generator | None = None,
) -> dict[str, float]:
    """The local estimates ``mu_{m,h,i}`` a client uploads (Algorithm 1 line 8; Alg. 3 l. 8-9).

    Args:
        phase: The published (non-final) phase.
        nodes: The node of each pull.
        rewards: The observed reward of each pull, same length.
        privacy: For DP-Fed-PNE: add ``N(0, sigma^2)`` to each reward before averaging
            (rewards must then lie in ``[0, 1]``).
        noise_rng: DP noise source; defaults to OS entropy (``secure_rng``). Inject only in
            tests.

    Returns:
        ``node key -> mean`` for every node of ``K^p``.

    Raises:
        ValueError: If the phase is final, the lengths differ, a reward is not finite, or a
            node of ``K^p`` was not pulled exactly ``t`` times (or an unknown node was pulled).
    """
    if phase.final:
        raise ValueError("The final phase has no upload.")
    rewards = np.asarray(rewards, dtype=float).reshape(-1)
    if len(nodes) != rewards.shape[0]:
        raise ValueError(f"{len(nodes)} nodes but {rewards.shape[0]} rewards.")
    if not np.all(np.isfinite(rewards)):
        raise ValueError("Rewards must be finite.")
    if privacy is not None:
        rewards = privatize_rewards(rewards, privacy.sigma, noise_rng)
    sums: dict[Node, list[float]] = {node: [] for node in phase.nodes}
    for key, reward in zip(nodes, rewards, strict=True):
        node = as_node(key)
        if node not in sums:
            raise ValueError(f"Node {node.key} is not in phase {phase.index}.")
        sums[node].append(float(reward))
    result = {}
    for node, values in sums.items():
        if len(values) != phase.pulls_per_node:
            raise ValueError(
                f"Node {node.key} was pulled {len(values)} times; phase {phase.index} needs "
                f"exactly {phase.pulls_per_node}."
            )
        result[node.key] = math.fsum(values) / len(values)
    return result
