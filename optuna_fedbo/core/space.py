"""The unit-cube encoding of a mixed search space, and boxes inside the cube.

Each dimension of a search space is mapped to one or more columns of ``[0, 1]^D``:

* a continuous dimension (linear or log) to one column, ``(v - low) / (high - low)`` after taking
  logarithms for a log dimension;
* a discrete numeric dimension (integers, or floats on a step grid) to one column in which every
  admissible value owns a cell of equal width (the bounds are widened by half a step, as Optuna's
  own ``_SearchSpaceTransform`` does), so that a uniform point of the cube is a uniform value;
* a categorical dimension with ``n`` choices to ``n`` one-hot columns.

Values are given and returned in their *internal* representation: the number itself for numeric
dimensions and the index of the choice for categorical ones. This module knows nothing of Optuna;
:mod:`optuna_fedbo.search_space` translates Optuna distributions into :class:`Dimension` objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
import math
from typing import Literal

import numpy as np

DimensionKind = Literal["float", "int", "categorical"]


@dataclass(frozen=True)
class Dimension:
    """One dimension of a search space, described by numbers only.

    Attributes:
        kind: ``"float"``, ``"int"`` or ``"categorical"``.
        low: Lower bound (numeric kinds); 0 for categorical.
        high: Upper bound (numeric kinds); ``n_choices - 1`` for categorical.
        log: Whether the dimension is searched on a log scale.
        step: Grid step of a discrete numeric dimension, ``None`` for a continuous one.
        n_choices: Number of choices of a categorical dimension (0 otherwise).
    """

    kind: DimensionKind
    low: float = 0.0
    high: float = 1.0
    log: bool = False
    step: float | None = None
    n_choices: int = 0

    def __post_init__(self) -> None:
        if self.kind == "categorical":
            if self.n_choices < 1:
                raise ValueError("A categorical dimension needs at least one choice.")
            return
        if self.kind not in ("float", "int"):
            raise ValueError(f"Unknown dimension kind {self.kind!r}.")
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise ValueError(f"Invalid bounds [{self.low}, {self.high}].")
        if self.log and self.low <= 0:
            raise ValueError(f"A log dimension needs a positive lower bound, got {self.low}.")
        if self.step is not None and self.step <= 0:
            raise ValueError(f"The step must be positive, got {self.step}.")
        if self.kind == "int" and self.step is None:
            raise ValueError("An integer dimension needs a step (1 for plain integers).")
        if self.log and self.step is not None and self.kind == "float":
            raise ValueError("A float dimension cannot have both log scale and a step.")

    @property
    def n_columns(self) -> int:
        """Number of unit-cube columns this dimension occupies."""
        return self.n_choices if self.kind == "categorical" else 1

    @property
    def is_discrete(self) -> bool:
        """Whether the dimension takes finitely many values."""
        return self.kind != "float" or self.step is not None

    def _transformed_bounds(self) -> tuple[float, float]:
        half = 0.5 * self.step if self.step is not None else 0.0
        if self.log:
            # Only integer log dimensions are discrete; widen the integer cell before the log.
            return math.log(self.low - half), math.log(self.high + half)
        return self.low - half, self.high + half

    def encode(self, values: np.ndarray) -> np.ndarray:
        """Map internal values of a numeric dimension to ``[0, 1]``."""
        lo, hi = self._transformed_bounds()
        if hi == lo:
            return np.full(values.shape, 0.5)
        transformed = np.log(values) if self.log else values.astype(float)
        return (transformed - lo) / (hi - lo)

    def decode(self, column: np.ndarray) -> np.ndarray:
        """Map ``[0, 1]`` to the nearest admissible internal value of a numeric dimension."""
        lo, hi = self._transformed_bounds()
        transformed = lo + np.clip(column, 0.0, 1.0) * (hi - lo)
        values = np.exp(transformed) if self.log else transformed
        if self.step is None:
            return np.clip(values, self.low, self.high)
        if self.log:  # integer log dimension
            return np.clip(np.round(values), self.low, self.high)
        # The same grid arithmetic as Optuna's own samplers, so that values compare exactly.
        grid = np.round((values - self.low) / self.step) * self.step + self.low
        return np.clip(grid, self.low, self.high)


@dataclass(frozen=True)
class Box:
    """An axis-aligned box ``[low, high]`` inside the unit cube (one entry per column)."""

    low: np.ndarray
    high: np.ndarray

    def __post_init__(self) -> None:
        low = np.asarray(self.low, dtype=float)
        high = np.asarray(self.high, dtype=float)
        if low.shape != high.shape or low.ndim != 1:
            raise ValueError("Box bounds must be two 1-D arrays of equal length.")
        if np.any(low < 0.0) or np.any(high > 1.0) or np.any(low > high):
            raise ValueError("A box must lie inside the unit cube with low <= high.")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @classmethod
    def unit(cls, n_columns: int) -> Box:
        """The whole unit cube ``[0, 1]^n_columns``."""
        return cls(np.zeros(n_columns), np.ones(n_columns))

    def contains(self, points: np.ndarray) -> np.ndarray:
        """Whether each row of ``points`` lies inside the box."""
        return np.all((points >= self.low) & (points <= self.high), axis=-1)


class UnitCubeEncoding:
    """Encode points of a mixed search space to ``[0, 1]^D`` and back.

    Args:
        dimensions: The dimensions, in the order of the internal value vectors.
    """

    def __init__(self, dimensions: Sequence[Dimension]) -> None:
        if len(dimensions) == 0:
            raise ValueError("A search space needs at least one dimension.")
        self.dimensions: tuple[Dimension, ...] = tuple(dimensions)
        starts = np.cumsum([0] + [d.n_columns for d in self.dimensions])
        self.column_slices: tuple[slice, ...] = tuple(
            slice(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])
        )
        self.n_columns: int = int(starts[-1])
        mask = np.zeros(self.n_columns, dtype=bool)
        for dim, cols in zip(self.dimensions, self.column_slices):
            mask[cols] = dim.kind == "categorical"
        self.categorical_columns: np.ndarray = mask
        # Whether snapping changes more than clipping does: a decoded continuous value encodes
        # back to its column up to rounding.
        self._snaps_to_a_grid = any(
            d.is_discrete or d.kind == "categorical" or d.low == d.high for d in self.dimensions
        )

    def encode(self, values: np.ndarray) -> np.ndarray:
        """Encode internal values.

        Args:
            values: Array of shape ``(n, len(dimensions))``; categorical entries are choice
                indices.

        Returns:
            Array of shape ``(n, n_columns)`` in ``[0, 1]``.
        """
        values = np.atleast_2d(np.asarray(values, dtype=float))
        if values.shape[1] != len(self.dimensions):
            raise ValueError(
                f"Expected {len(self.dimensions)} values per point, got {values.shape[1]}."
            )
        encoded = np.zeros((values.shape[0], self.n_columns))
        for j, (dim, cols) in enumerate(zip(self.dimensions, self.column_slices)):
            if dim.kind == "categorical":
                index = values[:, j].astype(int)
                if np.any((index < 0) | (index >= dim.n_choices)):
                    raise ValueError(f"Choice index out of range for dimension {j}.")
                encoded[np.arange(len(index)), cols.start + index] = 1.0
            else:
                encoded[:, cols.start] = dim.encode(values[:, j])
        return encoded

    def decode(self, points: np.ndarray) -> np.ndarray:
        """Decode unit-cube points to the nearest admissible internal values.

        Categorical columns decode to the choice with the largest entry; numeric columns are
        clipped into the cube, then rounded onto the dimension's grid.

        Args:
            points: Array of shape ``(n, n_columns)``.

        Returns:
            Array of shape ``(n, len(dimensions))``.
        """
        points = np.atleast_2d(np.asarray(points, dtype=float))
        if points.shape[1] != self.n_columns:
            raise ValueError(f"Expected {self.n_columns} columns, got {points.shape[1]}.")
        values = np.empty((points.shape[0], len(self.dimensions)))
        for j, (dim, cols) in enumerate(zip(self.dimensions, self.column_slices)):
            if dim.kind == "categorical":
                values[:, j] = np.argmax(points[:, cols], axis=1)
            else:
                values[:, j] = dim.decode(points[:, cols.start])
        return values

    def snap(self, points: np.ndarray) -> np.ndarray:
        """Move unit-cube points to the encoding of the admissible point they decode to.

        In a space of continuous dimensions only that is clipping into the cube, a tenth of the
        cost of decoding and encoding again (which an acquisition search does for hundreds of
        candidates per trial).
        """
        if not self._snaps_to_a_grid:
            return np.clip(np.atleast_2d(np.asarray(points, dtype=float)), 0.0, 1.0)
        return self.encode(self.decode(points))

    def sample(self, n: int, rng: np.random.Generator, box: Box | None = None) -> np.ndarray:
        """Draw ``n`` encoded points uniformly from a box of the cube.

        Numeric columns are uniform in the box; each categorical dimension is a one-hot vector of
        a uniformly chosen category (a box does not restrict categorical columns).

        Args:
            n: Number of points.
            rng: Source of randomness.
            box: Sub-box of the cube; the whole cube if ``None``.

        Returns:
            Array of shape ``(n, n_columns)``.
        """
        return self._from_uniform(rng.uniform(size=(n, len(self.dimensions))), box)

    def space_filling(
        self, n: int, rng: np.random.Generator, box: Box | None = None
    ) -> np.ndarray:
        """A randomized space-filling design of ``n`` encoded points in a box of the cube.

        A Latin hypercube over the dimensions (each numeric dimension's range is cut into ``n``
        equal slices holding one point each; a categorical dimension's choices are covered in
        turn), improved for centred discrepancy. Different generators give different designs.

        Args:
            n: Number of points.
            rng: Source of randomness (the design's seed).
            box: Sub-box of the cube; the whole cube if ``None``.

        Returns:
            Array of shape ``(n, n_columns)``.
        """
        import scipy.stats

        sampler = scipy.stats.qmc.LatinHypercube(
            d=len(self.dimensions), optimization="random-cd" if n > 1 else None, rng=rng
        )
        return self._from_uniform(sampler.random(n), box)

    def _from_uniform(self, uniform: np.ndarray, box: Box | None) -> np.ndarray:
        """Encoded points from ``U[0, 1)`` draws, one column per dimension."""
        box = box or Box.unit(self.n_columns)
        n = len(uniform)
        points = np.empty((n, self.n_columns))
        for j, (dim, cols) in enumerate(zip(self.dimensions, self.column_slices)):
            if dim.kind == "categorical":
                choice = np.minimum((uniform[:, j] * dim.n_choices).astype(int), dim.n_choices - 1)
                points[:, cols] = 0.0
                points[np.arange(n), cols.start + choice] = 1.0
            else:
                low, high = box.low[cols.start], box.high[cols.start]
                points[:, cols.start] = low + uniform[:, j] * (high - low)
        return points
