"""Equal-volume sub-regions of the unit cube for distributed exploration (DP-FTS-DE, Sec. 3.2).

``P`` is factored into primes; the factors, largest first, are handed out to the numeric
dimensions (one column each; categorical one-hot columns are never split), each factor going to
the dimension with the fewest cells so far (the first such dimension on ties). A dimension with
``k`` cells is cut at ``1/k, 2/k, ...``. This reproduces the paper's layouts: ``P`` intervals
in 1-D (``[0, 1/P), ..., [(P-1)/P, 1]``), and for ``P = 4`` in 2-D or 3-D the 2 x 2 grid on the
first two dimensions, numbered ``X_1 = [0, .5] x [0, .5]``, ``X_2 = [0, .5] x [.5, 1]``,
``X_3 = [.5, 1] x [0, .5]``, ``X_4 = [.5, 1] x [.5, 1]`` (first dimension most significant).
Pure numpy, no Optuna.
"""

from __future__ import annotations

import numpy as np

from optuna_fedbo.core.space import Box
from optuna_fedbo.core.space import UnitCubeEncoding


def _prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    if n > 1:
        factors.append(n)
    return sorted(factors, reverse=True)


class SubregionPartition:
    """A partition of ``[0, 1]^D`` into ``P`` equal-volume boxes.

    Args:
        encoding: The unit-cube encoding of the search space.
        n_subregions: Number of sub-regions ``P >= 1``.

    Raises:
        ValueError: If ``P > 1`` and the space has no numeric dimension to split.
    """

    def __init__(self, encoding: UnitCubeEncoding, n_subregions: int) -> None:
        if isinstance(n_subregions, bool) or not isinstance(n_subregions, int) or n_subregions < 1:
            raise ValueError(f"n_subregions must be a positive integer, got {n_subregions!r}.")
        numeric = [
            cols.start
            for dim, cols in zip(encoding.dimensions, encoding.column_slices)
            if dim.kind != "categorical"
        ]
        if n_subregions > 1 and not numeric:
            raise ValueError("Only numeric dimensions can be split into sub-regions.")
        cells = {column: 1 for column in numeric}
        for factor in _prime_factors(n_subregions):
            column = min(numeric, key=lambda c: (cells[c], numeric.index(c)))
            cells[column] *= factor
        self.n_columns: int = encoding.n_columns
        self.n_subregions: int = n_subregions
        #: ``(column, number of cells)`` of every split column, most significant first.
        self.splits: tuple[tuple[int, int], ...] = tuple((c, k) for c, k in cells.items() if k > 1)

    def cell_indices(self, index: int) -> list[int]:
        """The cell of each split column for a sub-region index (mixed radix)."""
        if not 0 <= index < self.n_subregions:
            raise ValueError(f"Sub-region index {index} is outside [0, {self.n_subregions}).")
        out = []
        for _, k in reversed(self.splits):
            out.append(index % k)
            index //= k
        return out[::-1]

    def box(self, index: int) -> Box:
        """The box of sub-region ``index``."""
        low, high = np.zeros(self.n_columns), np.ones(self.n_columns)
        for (column, k), cell in zip(self.splits, self.cell_indices(index)):
            low[column], high[column] = cell / k, (cell + 1) / k
        return Box(low, high)

    def boxes(self) -> list[Box]:
        """All ``P`` boxes, in index order."""
        return [self.box(i) for i in range(self.n_subregions)]

    def index_of(self, points: np.ndarray) -> np.ndarray:
        """The sub-region of each encoded point (boundaries belong to the upper cell).

        Args:
            points: Array of shape ``(n, D)``.

        Returns:
            Integer array of shape ``(n,)``.
        """
        points = np.atleast_2d(np.asarray(points, dtype=float))
        if points.shape[1] != self.n_columns:
            raise ValueError(f"Expected points with {self.n_columns} columns.")
        index = np.zeros(len(points), dtype=int)
        for column, k in self.splits:
            cell = np.clip(np.floor(np.clip(points[:, column], 0.0, 1.0) * k), 0, k - 1)
            index = index * k + cell.astype(int)
        return index
