"""Tests of the Fed-PNE k-ary partition (Section 2.2 of the Fed-PNE paper)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from optuna_fedbo.core.fedpne.partition import Node
from optuna_fedbo.core.fedpne.partition import Partition


def _volume(partition: Partition, node: Node) -> float:
    lower, upper = partition.bounds(node)
    return float(np.prod(upper - lower))


def test_binary_1d_cells_match_the_papers_example() -> None:
    # Section 2.2: "a binary equal-sized partition on [0, 1], each node on depth h has length
    # 0.5^h"; node (h, i) is [(i-1)/2^h, i/2^h].
    part = Partition(1)
    for depth in range(6):
        for index in range(1, 2**depth + 1):
            lower, upper = part.bounds(Node(depth, index))
            assert lower[0] == pytest.approx((index - 1) / 2**depth, abs=1e-15)
            assert upper[0] == pytest.approx(index / 2**depth, abs=1e-15)
            assert part.centre(Node(depth, index))[0] == pytest.approx(
                (index - 0.5) / 2**depth, abs=1e-15
            )


@pytest.mark.parametrize("split", ["random", "longest"])
@pytest.mark.parametrize("branching", [2, 3])
def test_children_tile_the_parent_exactly(split: str, branching: int) -> None:
    part = Partition(3, branching=branching, split=split, seed=7)
    rng = np.random.default_rng(0)
    frontier = [part.root()]
    for _ in range(4):
        next_frontier = []
        for node in frontier:
            children = part.children(node)
            assert len(children) == branching
            assert [c.index for c in children] == [
                branching * (node.index - 1) + 1 + j for j in range(branching)
            ]
            assert all(part.parent(c) == node for c in children)
            p_lower, p_upper = part.bounds(node)
            # Children differ from the parent in exactly one dimension, are contiguous there,
            # equal-width, and cover it from the parent's lower to its upper bound.
            bounds = [part.bounds(c) for c in children]
            changed = {
                d
                for lo, hi in bounds
                for d in range(3)
                if lo[d] != p_lower[d] or hi[d] != p_upper[d]
            }
            assert len(changed) == 1
            d = changed.pop()
            assert bounds[0][0][d] == p_lower[d]
            assert bounds[-1][1][d] == p_upper[d]
            for (_, hi), (lo, _) in zip(bounds[:-1], bounds[1:], strict=True):
                assert hi[d] == lo[d]
            widths = [hi[d] - lo[d] for lo, hi in bounds]
            np.testing.assert_allclose(widths, (p_upper[d] - p_lower[d]) / branching)
            assert sum(_volume(part, c) for c in children) == pytest.approx(_volume(part, node))
            # Every point of the parent lies in exactly one child.
            xs = part.sample(node, rng, 200)
            for x in xs:
                assert sum(part.contains(c, x) for c in children) == 1
            next_frontier.extend(children)
        frontier = next_frontier
    # The whole depth tiles the cube.
    assert sum(_volume(part, n) for n in frontier) == pytest.approx(1.0)


def test_random_split_is_deterministic_in_the_public_seed_and_uniform() -> None:
    a, b, c = Partition(3, seed=11), Partition(3, seed=11), Partition(3, seed=12)
    nodes = [Node(6, i) for i in range(1, 65)]
    assert all(np.array_equal(a.bounds(n)[0], b.bounds(n)[0]) for n in nodes)
    assert any(not np.array_equal(a.bounds(n)[0], c.bounds(n)[0]) for n in nodes)
    counts = np.zeros(3)
    for index in range(1, 3001):
        node = Node(12, index)
        lower, upper = a.bounds(node)
        counts[a.split_dimension(node, lower, upper)] += 1
    assert np.all(np.abs(counts / counts.sum() - 1 / 3) < 0.04)


def test_longest_side_split_gives_cubes() -> None:
    part = Partition(3, split="longest")
    for index in (1, 5, 17, 64):
        lower, upper = part.bounds(Node(6, index))  # 6 = 2 halvings per dimension
        np.testing.assert_allclose(upper - lower, 0.25)


def test_locate_contains_and_ancestry_agree() -> None:
    part = Partition(2, branching=3, seed=3)
    rng = np.random.default_rng(1)
    for x in rng.random((50, 2)):
        node = part.locate(x, 5)
        assert node.depth == 5
        assert part.contains(node, x)
        anc = part.locate(x, 2)
        assert anc.is_ancestor_of(node, 3)
        assert not node.is_ancestor_of(anc, 3)
        assert node in set(part.descendants(anc, 5))
    corner = np.array([1.0, 1.0])
    assert part.contains(part.locate(corner, 4), corner)
    assert part.path(Node(2, 6)) == [1, 2]


def test_points_centre_and_uniform() -> None:
    part = Partition(2, seed=5)
    node = Node(3, 6)
    pts = part.points(node, 4)
    assert pts.shape == (4, 2)
    np.testing.assert_array_equal(pts, np.tile(part.centre(node), (4, 1)))
    uniform = Partition(2, seed=5, representative="uniform")
    with pytest.raises(ValueError, match="rng"):
        uniform.points(node, 3)
    draws = uniform.points(node, 500, np.random.default_rng(0))
    lower, upper = part.bounds(node)
    assert np.all(draws >= lower) and np.all(draws <= upper)
    assert np.ptp(draws[:, 0]) > 0.8 * (upper - lower)[0]


def test_serialization_round_trip_and_node_keys() -> None:
    part = Partition(4, branching=3, split="longest", seed=9, representative="uniform")
    again = Partition.from_dict(json.loads(json.dumps(part.to_dict())))
    assert again == part
    assert Node.from_key(Node(12, 345).key) == Node(12, 345)
    with pytest.raises(ValueError):
        Node.from_key("3-4")
    with pytest.raises(ValueError):
        Node(0, 0)
    with pytest.raises(ValueError):
        part.children(Node(1, 4))  # only 3 nodes at depth 1
    with pytest.raises(ValueError):
        Partition.from_dict({"dim": 1})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dim": 0},
        {"dim": 1, "branching": 1},
        {"dim": 1, "split": "middle"},
        {"dim": 1, "seed": -1},
        {"dim": 1, "representative": "corner"},
    ],
)
def test_bad_partition_arguments(kwargs: dict) -> None:
    dim = kwargs.pop("dim")
    with pytest.raises(ValueError):
        Partition(dim, **kwargs)
