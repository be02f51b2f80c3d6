"""Label-skewed partitions of a labelled data set, for simulating federations of sites."""

from __future__ import annotations

import numpy as np


def label_skewed_shards(
    labels: np.ndarray, n_clients: int, *, concentration: float = 0.5, seed: int = 0
) -> list[np.ndarray]:
    """Split sample indices among clients with a Dirichlet label skew.

    For every class, the class's samples are divided among the clients in proportions drawn
    from ``Dirichlet(concentration)``: a small concentration gives each client a few dominant
    labels (non-IID sites), a large one approaches an IID split. Every sample goes to exactly one
    client, and every client receives at least two classes' worth of samples where possible.

    Args:
        labels: Class label of each sample, shape ``(n,)``.
        n_clients: Number of clients.
        concentration: Dirichlet concentration ``alpha`` (> 0).
        seed: Seed of the split.

    Returns:
        One sorted index array per client.
    """
    labels = np.asarray(labels)
    if n_clients < 1:
        raise ValueError(f"n_clients must be positive, got {n_clients}.")
    if concentration <= 0:
        raise ValueError(f"concentration must be positive, got {concentration}.")
    if len(labels) < 2 * n_clients:
        raise ValueError(f"{len(labels)} samples are too few for {n_clients} clients.")
    rng = np.random.default_rng(seed)
    for _ in range(100):
        shards: list[list[int]] = [[] for _ in range(n_clients)]
        for label in np.unique(labels):
            members = rng.permutation(np.flatnonzero(labels == label))
            proportions = rng.dirichlet(np.full(n_clients, concentration))
            cuts = (np.cumsum(proportions)[:-1] * len(members)).astype(int)
            for shard, part in zip(shards, np.split(members, cuts)):
                shard.extend(part.tolist())
        if all(len(np.unique(labels[s])) >= 2 for s in shards):
            break
    return [np.sort(np.array(s, dtype=int)) for s in shards]
