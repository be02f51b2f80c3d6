"""The k-ary hierarchical partition of the unit cube used by Fed-PNE.

Section 2.2 of the Fed-PNE paper (Li et al., "Federated X-Armed Bandit") defines the partition
recursively: ``P_{0,1} = X`` and ``P_{h,i} = union_{j=0}^{k-1} P_{h+1, k i - j}``, so the node
``(h, i)`` (depth ``h``, 1-based index ``i`` in ``1..k^h``) has the children
``(h+1, k(i-1)+1), ..., (h+1, k i)``. The partition is public and shared by the server and every
client (Section 2.2: "the partition itself reveals no information of the reward distributions").

Choices the paper leaves open, made here:

* **Cells.** A node is split into ``k`` equal-width slabs along one dimension (Appendix E.1.5 and
  E.1.1: "a random binary partition ... uniformly randomly selects a dimension ... and then splits
  the node into two equal-sized children"; we generalise "two" to ``k``). Child ``j`` (0-based, in
  index order) is the ``j``-th slab counted from the lower end of that dimension.
* **Split dimension.** ``split="random"`` (default, as the paper's experiments) draws the dimension
  uniformly, but deterministically from ``(seed, h, i)`` with :class:`numpy.random.SeedSequence`,
  so that every party that knows the public seed builds the same tree without communicating it.
  ``split="longest"`` splits the longest side (ties: lowest dimension index), which makes the
  cells as round as possible (in 1-D both rules coincide).
* **Representative point.** ``representative="centre"`` (default) pulls the cell centre, the
  "pre-defined point in the node as in Azar et al. [2014]" used by the analysis (Section 3.1);
  ``"uniform"`` draws a fresh uniform point in the cell for every pull ("uniformly sampled from
  the node as in Bubeck et al. [2011]"), which needs an explicit ``rng``.

Why uniform pulls keep the analysis (Section 3.1 says "the regret analysis will only be
slightly different"; the argument, spelled out): with uniform pulls a node's global mean
estimates the cell average ``fbar_{h,i} = E_{x ~ U(P_{h,i})} f(x)`` instead of
``f(x_{h,i})``. Every client still pulls every node ``t`` times with independent bounded rewards,
so Lemma B.2 (Hoeffding) holds for ``|fbar_{h,i} - mu_{h,i}|`` with the same width ``b_{h,i}``.
Lemma B.3 needs ``fbar + nu1 rho^h >= f*`` for the node holding ``x*``: Assumption 2 with
``x = x*`` gives ``f* - f(y) <= max(0, l(x*, y)) <= diam(P_{h,i}) <= nu1 rho^h`` for *every*
``y`` of that cell, hence for its average. Lemma B.4 then bounds ``f* - fbar_{h,i} <=
6 nu1 rho^h`` for survivors, so ``f* - sup_{P_{h,i}} f <= 6 nu1 rho^h`` and Lemma B.5 makes
every point of their children ``12 nu1 rho^h``-optimal: Eqn. (24), which is all the regret
proof (Eqns. 25-31) uses of a pulled point. The bound of Theorem 3.1 is unchanged. What changes
in practice: pulls explore the whole cell, so the points tried are not restricted to dyadic
centres, while nodes are ranked by their average value rather than their centre's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
import math
from typing import Any

import numpy as np

SPLIT_RULES = ("random", "longest")
REPRESENTATIVES = ("centre", "uniform")

# A constant mixed into every split-dimension seed so that these draws never coincide with other
# uses of the same public seed in the project.
_SPLIT_DOMAIN_TAG = 0x46504E45  # "FPNE"


@dataclass(frozen=True, order=True)
class Node:
    """A node ``P_{h,i}`` of the partition.

    Attributes:
        depth: The depth ``h >= 0`` (the root has depth 0).
        index: The 1-based index ``i`` in ``1..k^h`` (the root is ``(0, 1)``).
    """

    depth: int
    index: int

    def __post_init__(self) -> None:
        if isinstance(self.depth, bool) or not isinstance(self.depth, int | np.integer):
            raise ValueError(f"Node depth must be an int, got {self.depth!r}.")
        if isinstance(self.index, bool) or not isinstance(self.index, int | np.integer):
            raise ValueError(f"Node index must be an int, got {self.index!r}.")
        object.__setattr__(self, "depth", int(self.depth))
        object.__setattr__(self, "index", int(self.index))
        if self.depth < 0:
            raise ValueError(f"Node depth must be >= 0, got {self.depth}.")
        if self.index < 1:
            raise ValueError(f"Node index is 1-based and must be >= 1, got {self.index}.")

    @property
    def key(self) -> str:
        """The JSON-friendly identifier ``"h:i"``."""
        return f"{self.depth}:{self.index}"

    @classmethod
    def from_key(cls, key: str) -> Node:
        """Parse a key made by :attr:`key`.

        Args:
            key: A string ``"h:i"``.

        Returns:
            The node.

        Raises:
            ValueError: If ``key`` is not of the form ``"h:i"`` with integers.
        """
        if not isinstance(key, str):
            raise ValueError(f"A node key must be a string 'h:i', got {key!r}.")
        parts = key.split(":")
        if len(parts) != 2:
            raise ValueError(f"A node key must look like 'h:i', got {key!r}.")
        try:
            depth, index = int(parts[0]), int(parts[1])
        except ValueError as exc:
            raise ValueError(
                f"A node key must look like 'h:i' with integers, got {key!r}."
            ) from exc
        return cls(depth, index)

    def is_ancestor_of(self, other: Node, branching: int) -> bool:
        """Whether this node is a strict ancestor of ``other`` in a ``branching``-ary tree."""
        if other.depth <= self.depth:
            return False
        shift = other.depth - self.depth
        return (other.index - 1) // branching**shift + 1 == self.index


def as_node(node: Node | str) -> Node:
    """Return ``node`` as a :class:`Node` (accepting a ``"h:i"`` key).

    Args:
        node: A node or its key.

    Returns:
        The node.
    """
    if isinstance(node, Node):
        return node
    return Node.from_key(node)


class Partition:
    """The k-ary hierarchical partition of ``[0, 1]^dim`` (Section 2.2).

    Args:
        dim: The dimension ``D`` of the unit cube.
        branching: The number ``k >= 2`` of children of every node.
        split: ``"random"`` (default, the paper's experiments) or ``"longest"``.
        seed: The public seed of the ``"random"`` split rule (ignored by ``"longest"``).
        representative: ``"centre"`` (default) or ``"uniform"``.

    Raises:
        ValueError: On an invalid argument.
    """

    def __init__(
        self,
        dim: int,
        *,
        branching: int = 2,
        split: str = "random",
        seed: int = 0,
        representative: str = "centre",
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}.")
        if isinstance(branching, bool) or not isinstance(branching, int | np.integer):
            raise ValueError(f"branching must be an int >= 2, got {branching!r}.")
        if branching < 2:
            raise ValueError(f"branching must be an int >= 2, got {branching!r}.")
        if split not in SPLIT_RULES:
            raise ValueError(f"split must be one of {SPLIT_RULES}, got {split!r}.")
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}.")
        if representative not in REPRESENTATIVES:
            raise ValueError(
                f"representative must be one of {REPRESENTATIVES}, got {representative!r}."
            )
        self.dim = int(dim)
        self.branching = int(branching)
        self.split = split
        self.seed = int(seed)
        self.representative = representative
        self._bounds_cache: dict[Node, tuple[np.ndarray, np.ndarray]] = {}

    # ----------------------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """Return the partition as JSON-able plain data."""
        return {
            "dim": self.dim,
            "branching": self.branching,
            "split": self.split,
            "seed": self.seed,
            "representative": self.representative,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Partition:
        """Rebuild a partition from :meth:`to_dict` output.

        Args:
            data: The plain data.

        Returns:
            The partition.
        """
        expected = {"dim", "branching", "split", "seed", "representative"}
        if not isinstance(data, dict) or set(data) != expected:
            raise ValueError(f"Partition data must be a dict with keys {sorted(expected)}.")
        return cls(
            data["dim"],
            branching=data["branching"],
            split=data["split"],
            seed=data["seed"],
            representative=data["representative"],
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Partition) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.to_dict().items())))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"Partition({args})"

    # ----------------------------------------------------------------------------- tree
    @property
    def max_depth(self) -> int:
        """The deepest depth that is split further: cells shrink by ``2^-40`` per coordinate.

        The paper's tree is infinite; in floating point a cell narrower than about ``1e-12``
        of the unit interval would collapse. Fed-PNE's phases stop refining there and pull the
        surviving nodes again (only runs of thousands of phases get that deep).
        """
        return math.ceil(40 * self.dim / math.log2(self.branching))

    def root(self) -> Node:
        """The root ``(0, 1)``: the whole cube."""
        return Node(0, 1)

    def check(self, node: Node) -> Node:
        """Validate that ``node`` exists in this tree.

        Args:
            node: The node.

        Returns:
            The node.

        Raises:
            ValueError: If its index exceeds ``k^h``.
        """
        if node.index > self.branching**node.depth:
            raise ValueError(
                f"Node {node.key} does not exist: index must be <= {self.branching}^{node.depth}."
            )
        return node

    def children(self, node: Node) -> tuple[Node, ...]:
        """The ``k`` children ``(h+1, k(i-1)+1), ..., (h+1, k i)`` in index order.

        Algorithm 2 line 6 writes ``j in [k - 1]``, which would drop one child; Section 2.2
        (``j = 0..k-1``) is the definition and is used here.
        """
        self.check(node)
        k = self.branching
        first = k * (node.index - 1) + 1
        return tuple(Node(node.depth + 1, first + j) for j in range(k))

    def parent(self, node: Node) -> Node:
        """The parent of a non-root node."""
        if node.depth == 0:
            raise ValueError("The root has no parent.")
        return Node(node.depth - 1, (node.index - 1) // self.branching + 1)

    def path(self, node: Node) -> list[int]:
        """The 0-based child positions from the root down to ``node`` (length ``h``)."""
        self.check(node)
        digits = []
        offset = node.index - 1
        for _ in range(node.depth):
            offset, digit = divmod(offset, self.branching)
            digits.append(digit)
        return digits[::-1]

    def split_dimension(self, node: Node, lower: np.ndarray, upper: np.ndarray) -> int:
        """The dimension along which ``node`` (with the given bounds) is split.

        Args:
            node: The node being split.
            lower: Its lower bounds.
            upper: Its upper bounds.

        Returns:
            The 0-based dimension.
        """
        if self.dim == 1:
            return 0
        if self.split == "longest":
            return int(np.argmax(upper - lower))
        state = np.random.SeedSequence(
            [_SPLIT_DOMAIN_TAG, self.seed, node.depth, node.index]
        ).generate_state(1, dtype=np.uint64)
        return int(state[0] % np.uint64(self.dim))

    def bounds(self, node: Node) -> tuple[np.ndarray, np.ndarray]:
        """The cell ``[lower, upper]`` of ``node`` (copies; safe to modify).

        Args:
            node: The node.

        Returns:
            ``(lower, upper)``, two arrays of shape ``(dim,)``.
        """
        node = as_node(node)
        cached = self._bounds_cache.get(node)
        if cached is None:
            if node.depth == 0:
                cached = (np.zeros(self.dim), np.ones(self.dim))
            else:
                parent = self.parent(node)
                lower, upper = self.bounds(parent)
                d = self.split_dimension(parent, lower, upper)
                j = (node.index - 1) % self.branching
                width = (upper[d] - lower[d]) / self.branching
                new_lower = lower[d] + j * width
                # The last slab ends exactly at the parent's upper bound (no rounding gap).
                new_upper = upper[d] if j == self.branching - 1 else lower[d] + (j + 1) * width
                lower[d], upper[d] = new_lower, new_upper
                cached = (lower, upper)
            self.check(node)
            if len(self._bounds_cache) < 1_000_000:
                self._bounds_cache[node] = cached
        return cached[0].copy(), cached[1].copy()

    def centre(self, node: Node) -> np.ndarray:
        """The centre of the cell of ``node``."""
        lower, upper = self.bounds(node)
        return (lower + upper) / 2.0

    def sample(self, node: Node, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draw ``size`` points uniformly in the cell of ``node``.

        Returns:
            An array of shape ``(size, dim)``.
        """
        lower, upper = self.bounds(node)
        return lower + (upper - lower) * rng.random((int(size), self.dim))

    def points(self, node: Node, size: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """``size`` representative points of ``node`` (one per pull).

        Args:
            node: The node.
            size: The number of pulls.
            rng: Required when ``representative == "uniform"``.

        Returns:
            An array of shape ``(size, dim)``: the centre repeated, or uniform draws.
        """
        node = as_node(node)
        if self.representative == "centre":
            return np.tile(self.centre(node), (int(size), 1))
        if rng is None:
            raise ValueError("representative='uniform' needs an explicit rng.")
        return self.sample(node, rng, size)

    def contains(self, node: Node, x: np.ndarray) -> bool:
        """Whether ``x`` lies in the cell of ``node`` (half-open, the top face of the cube in)."""
        lower, upper = self.bounds(node)
        x = np.asarray(x, dtype=float)
        inside_upper = (x < upper) | ((upper >= 1.0) & (x <= upper))
        return bool(np.all((x >= lower) & inside_upper))

    def locate(self, x: np.ndarray, depth: int) -> Node:
        """The node of depth ``depth`` whose cell contains ``x``.

        Args:
            x: A point of ``[0, 1]^dim``.
            depth: The depth.

        Returns:
            The node.
        """
        x = np.asarray(x, dtype=float).reshape(-1)
        if x.shape != (self.dim,) or np.any(x < 0.0) or np.any(x > 1.0):
            raise ValueError(f"x must be a point of [0, 1]^{self.dim}, got {x!r}.")
        node = self.root()
        for _ in range(int(depth)):
            children = self.children(node)
            # Pick the child whose half-open cell holds x, using the very bounds reported by
            # bounds(), so that locate() and contains() always agree.
            node = next((c for c in children if self.contains(c, x)), children[-1])
        return node

    def descendants(self, node: Node, depth: int) -> Iterator[Node]:
        """All descendants of ``node`` at ``depth`` (``depth >= node.depth``), in index order."""
        shift = int(depth) - node.depth
        if shift < 0:
            raise ValueError("depth must be >= the node's depth.")
        first = (node.index - 1) * self.branching**shift + 1
        for index in range(first, first + self.branching**shift):
            yield Node(int(depth), index)
