"""Shared random Fourier features for the squared-exponential kernel and a scale mixture of it.

Following the FTS paper (Appendix A): frequencies ``s_i ~ N(0, I / l^2)`` and phases
``b_i ~ U(0, 2 pi)``, ``phi(x) = sqrt(2 / M) cos(s_i^T x + b_i)``, and every ``phi(x)`` rescaled to
unit norm so that the approximate kernel has ``k(x, x) = 1`` exactly. Every participant of a
federation draws identical features from the same public seed, which is all they need to share.

A single lengthscale fixed at creation decides what a federation can learn: features of
lengthscale 0.2 cannot represent a function of lengthscale 0.03, and features of 0.03 waste most
of their capacity on a smooth one. With a lengthscale *range* ``(l_min, l_max)`` every feature
gets its own lengthscale, log-uniform over the range (stratified: feature ``i`` of ``M`` draws
from the ``i``-th of ``M`` equal slices of ``[log l_min, log l_max]``). The features then
approximate the scale mixture of SE kernels (:func:`mixture_kernel`)::

    k(r) = E_{log l ~ U(log l_min, log l_max)} exp(-r^2 / (2 l^2))
         = (E1(r^2 / (2 l_max^2)) - E1(r^2 / (2 l_min^2))) / (2 log(l_max / l_min)),

with ``E1`` the exponential integral. A participant may also weight the scales differently in
its own prior (:func:`scale_window`) without changing the shared basis;
``benchmarks/fts_value.py --features`` measures that against equal weights.
"""

from __future__ import annotations

import math

import numpy as np

#: Lengthscale range (unit-cube coordinates) of the multi-scale shared features in 1-2 D.
MULTISCALE_RANGE = (0.02, 0.5)
#: From three dimensions on, the smallest lengthscale grows by this factor per dimension.
_LOW_GROWTH = 2.15


def multiscale_range(n_dims: int) -> tuple[float, float]:
    """The lengthscale range of the default multi-scale features in ``n_dims`` dimensions.

    :data:`MULTISCALE_RANGE` in one and two dimensions. From three on, the smallest lengthscale
    is ``0.02 * 2.15^(D - 1)`` (0.09 in 3-D, 0.2 in 4-D), at most half the largest: a function
    of lengthscale ``l`` has about ``(1 / l)^D`` bumps, so a fixed number of features spread
    down to 0.02 spends most of them on scales that neither they nor a few dozen trials per
    site can resolve in 3-4 D. Measured (``benchmarks/fts_value.py``, 10 sites, 10 seed
    functions, regret at 10 / 20 trials over the best stock sampler's): 4-D at lengthscale
    0.5 0.60x / 0.56x with this range against 0.85x / 0.81x with 0.02-0.5, at 0.2 0.82x / 0.77x
    against 0.95x / 1.07x; in 2-D the same rule (from 0.043) was worse at lengthscales 0.02
    and 0.05, so 1-2 D keep the full range.

    Args:
        n_dims: Number of search-space dimensions (parameters).

    Returns:
        ``(l_min, l_max)``.
    """
    low, high = MULTISCALE_RANGE
    if n_dims >= 3:
        low = min(low * _LOW_GROWTH ** (n_dims - 1), high / 2)
    return low, high


def se_kernel(distance: np.ndarray, lengthscale: float) -> np.ndarray:
    """The SE kernel ``exp(-r^2 / (2 l^2))`` at distances ``r``."""
    distance = np.asarray(distance, dtype=float)
    return np.exp(-(distance**2) / (2.0 * lengthscale**2))


def mixture_kernel(distance: np.ndarray, low: float, high: float) -> np.ndarray:
    """The SE kernel averaged over a log-uniform lengthscale on ``[low, high]``.

    Args:
        distance: Euclidean distances ``r >= 0``.
        low: Smallest lengthscale.
        high: Largest lengthscale (``> low``).

    Returns:
        ``k(r)`` of the same shape, with ``k(0) = 1``.
    """
    import scipy.special

    distance = np.asarray(distance, dtype=float)
    squared = distance**2
    out = np.ones_like(squared)
    positive = squared > 0
    half = squared[positive] / 2.0
    out[positive] = (scipy.special.exp1(half / high**2) - scipy.special.exp1(half / low**2)) / (
        2.0 * math.log(high / low)
    )
    return out


def scale_window(lengthscales: np.ndarray, center: float | None, width: float = 0.5) -> np.ndarray:
    """Prior standard deviations of features that favour lengthscales near ``center``.

    ``s_i^2`` is proportional to ``exp(-(log l_i - log center)^2 / (2 width^2))``, normalized to a
    mean of one, so that the prior variance of ``phi(x)^T omega`` (``omega_i ~ N(0, s_i^2)``)
    stays about one. ``center=None`` gives equal weights (the mixture kernel itself).

    Args:
        lengthscales: The features' lengthscales, shape ``(M,)``.
        center: Favoured lengthscale, or ``None``.
        width: Width of the window in natural-log units.

    Returns:
        Array of shape ``(M,)``.
    """
    lengthscales = np.asarray(lengthscales, dtype=float)
    if center is None:
        return np.ones_like(lengthscales)
    variance = np.exp(-((np.log(lengthscales) - math.log(center)) ** 2) / (2.0 * width**2))
    variance /= variance.mean()
    return np.sqrt(variance)


#: Rows of points whose features :meth:`RandomFourierFeatures.weighted_sum` computes at a time (a
#: multiple of the four rows OpenBLAS's matrix-vector kernels take together).
BLOCK_ROWS = 128


def fast_cos(z: np.ndarray) -> np.ndarray:
    """``cos(z)`` to about ``2e-7`` (absolute), about ten times faster than ``np.cos``.

    numpy vectorizes single-precision trigonometry but not double (``np.cos`` takes about 14 ns
    per float64 element on an AVX-512 machine, and ``z`` has ``n x M`` of them: 0.4 ms for 145
    candidates and 200 features). The argument is reduced to ``[-pi, pi]`` in double precision
    (exact to rounding, however large ``z``), and only the cosine of the reduced argument is
    taken in single precision.
    """
    reduced = np.multiply(z, 1.0 / (2.0 * math.pi))
    np.rint(reduced, out=reduced)
    reduced *= -2.0 * math.pi
    reduced += z
    single = reduced.astype(np.float32)
    np.cos(single, out=single)
    # Back into the float64 buffer: a fresh float64 array from ``astype`` made the whole
    # function four times slower (1.8 against 0.45 ms on 576 x 200, a loaded 2-core machine).
    reduced[...] = single
    return reduced


class RandomFourierFeatures:
    """Random Fourier features ``phi: [0, 1]^D -> R^M`` of an SE kernel or a mixture of them.

    Frequencies are stored for lengthscale 1 and divided by the lengthscale on use, so features
    of different lengthscales drawn from the same seed share their random numbers.

    Args:
        n_dims: Input dimension ``D``.
        n_features: Number of features ``M``.
        lengthscale: SE kernel lengthscale ``l`` in unit-cube coordinates, or a range
            ``(l_min, l_max)`` for multi-scale features (each feature's lengthscale log-uniform
            over the range, stratified; see the module docstring).
        seed: Public seed of the features; equal seeds give identical features everywhere.
        column_scales: Factors of the input columns, shape ``(D,)`` (each column's lengthscale
            divided by its factor; 0 leaves the column out), or ``None`` (default) for all 1:
            e.g. the one-hot columns of a categorical parameter scaled down, so that its
            choices are not further apart than any lengthscale.
    """

    def __init__(
        self,
        n_dims: int,
        n_features: int,
        lengthscale: float | tuple[float, float],
        *,
        seed: int,
        column_scales: np.ndarray | None = None,
    ) -> None:
        if n_dims < 1 or n_features < 1:
            raise ValueError("n_dims and n_features must be positive.")
        rng = np.random.default_rng(seed)
        self.unit_frequencies = rng.standard_normal((n_dims, n_features))
        self.phases = rng.uniform(0.0, 2.0 * np.pi, size=n_features)
        self.seed = seed
        if isinstance(lengthscale, tuple):
            low, high = (float(v) for v in lengthscale)
            if not 0 < low < high:
                raise ValueError(f"A lengthscale range needs 0 < low < high, got {lengthscale}.")
            slices = (np.arange(n_features) + rng.uniform(size=n_features)) / n_features
            self.lengthscales = low * (high / low) ** slices
            self.lengthscale: float | tuple[float, float] = (low, high)
        else:
            if not lengthscale > 0:
                raise ValueError(f"The lengthscale must be positive, got {lengthscale}.")
            self.lengthscale = float(lengthscale)
            self.lengthscales = np.full(n_features, self.lengthscale)
        self._frequencies = self.unit_frequencies / self.lengthscales
        self.column_scales: np.ndarray | None = None
        if column_scales is not None:
            scales = np.asarray(column_scales, dtype=float)
            if scales.shape != (n_dims,) or not np.all(np.isfinite(scales) & (scales >= 0)):
                raise ValueError(f"column_scales must be {n_dims} non-negative numbers.")
            self.column_scales = scales
            self._frequencies = self._frequencies * scales[:, None]
        # In turns (units of 2 pi) for the single-precision weighted sums (weighted_sum).
        self._turn_frequencies = self._frequencies / (2.0 * math.pi)
        self._turn_phases = self.phases / (2.0 * math.pi)

    @property
    def n_dims(self) -> int:
        """Input dimension ``D``."""
        return self.unit_frequencies.shape[0]

    @property
    def n_features(self) -> int:
        """Number of features ``M``."""
        return self.unit_frequencies.shape[1]

    def with_lengthscale(self, lengthscale: float | tuple[float, float]) -> RandomFourierFeatures:
        """The same random draws at another lengthscale."""
        return RandomFourierFeatures(
            self.n_dims,
            self.n_features,
            lengthscale,
            seed=self.seed,
            column_scales=self.column_scales,
        )

    def __call__(self, x: np.ndarray, *, fast: bool = False) -> np.ndarray:
        """Feature matrix ``Phi`` of shape ``(n, M)`` for points ``x`` of shape ``(n, D)``.

        ``fast``: cosines accurate to about ``2e-7`` at a tenth of the cost (:func:`fast_cos`),
        for scoring many candidates in an acquisition search. The model's statistics use
        exact features.
        """
        cosines = self._check(x) @ self._frequencies
        cosines += self.phases
        if fast:
            cosines = fast_cos(cosines)
        else:
            np.cos(cosines, out=cosines)
        cosines /= np.sqrt(np.einsum("nm,nm->n", cosines, cosines))[:, None]
        return cosines

    def weighted_sum(
        self, x: np.ndarray, weights: np.ndarray, *, fast: bool = False
    ) -> np.ndarray:
        """``phi(x)^T w`` at points ``x`` of shape ``(n, D)``, in blocks of :data:`BLOCK_ROWS`
        rows.

        Exact (``fast=False``): the numbers of ``self(x) @ weights``. Every block starts at a
        multiple of :data:`BLOCK_ROWS` and the last one takes the rows left over, so that each
        row meets the same BLAS kernels as in one product (a product of one row takes another
        path, whose sums differ in the last bit).

        ``fast=True`` scores candidates in an acquisition search, to about ``1e-7 |w|``
        (``phi(x)`` has unit norm): the arguments ``s_i^T x + b_i`` in turns (units of
        ``2 pi``) in double precision, less their nearest integer (exact), then the cosines,
        their norm and the weighted sum in single precision. On 128 points and 200 features
        (4-D) that took two thirds of the time of ``self(x, fast=True) @ weights`` (0.23
        against 0.33 ms; 0.91 against 1.40 ms on 577 points), which reduces in radians and
        normalizes in double precision (to about ``3e-8 |w|``).

        Blocks keep the temporaries (``n x M`` numbers each) small: where the allocator hands
        memory back to the system, larger ones come back page by page, and those page faults
        cost more than the arithmetic (576 candidates and 200 features: about half the time).

        Args:
            x: Points of shape ``(n, D)``.
            weights: The vector ``w`` of shape ``(M,)``.
            fast: Single precision, as above.

        Returns:
            Array of shape ``(n,)``.
        """
        x = self._check(x)
        if fast:
            weights = np.asarray(weights, dtype=np.float32)
        n_blocks = max(len(x) // BLOCK_ROWS, 1)
        if n_blocks == 1:
            return self._fast_weighted_sum(x, weights) if fast else self(x) @ weights
        out = np.empty(len(x))
        for k in range(n_blocks):
            rows = slice(k * BLOCK_ROWS, (k + 1) * BLOCK_ROWS if k + 1 < n_blocks else len(x))
            if fast:
                out[rows] = self._fast_weighted_sum(x[rows], weights)
            else:
                out[rows] = self(x[rows]) @ weights
        return out

    def _fast_weighted_sum(self, x: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """:meth:`weighted_sum`'s single-precision path on one block (``weights`` float32)."""
        turns = x @ self._turn_frequencies
        turns += self._turn_phases
        turns -= np.rint(turns)  # in [-1/2, 1/2], exactly (Sterbenz)
        cosines = turns.astype(np.float32)
        cosines *= np.float32(2.0 * math.pi)
        np.cos(cosines, out=cosines)
        sums = (cosines @ weights).astype(np.float64)
        sums /= np.sqrt(np.einsum("nm,nm->n", cosines, cosines))
        return sums

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        """The Jacobian ``d phi_j / d x_k``, shape ``(n, M, D)``, at points of shape ``(n, D)``."""
        z = self._check(x) @ self._frequencies + self.phases
        cosines = np.cos(z)
        norm = np.linalg.norm(cosines, axis=1)
        features = cosines / norm[:, None]
        # Unnormalized: d cos(z_j) / dx = -sin(z_j) s_j; then the quotient rule for c / ||c||.
        raw = -np.sin(z)[:, :, None] * self._frequencies.T[None, :, :]
        norm_grad = np.einsum("nm,nmd->nd", features, raw)
        return (raw - features[:, :, None] * norm_grad[:, None, :]) / norm[:, None, None]

    def value_and_grad(self, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values of ``phi(x)^T w`` and their gradients with respect to ``x``.

        Args:
            x: Points of shape ``(n, D)``.
            w: Weight vector of shape ``(M,)``, or one per point, shape ``(n, M)``.

        Returns:
            ``(values, grads)`` of shapes ``(n,)`` and ``(n, D)``.
        """
        # With c = cos(z), phi = c / |c| and s = -sin(z) (so dc_j / dx = s_j f_j, f_j the
        # j-th frequency): d(phi^T w) / dx = ((s w) F^T - (phi^T w) (s phi) F^T) / |c|,
        # two (n, M) x (M, D) products instead of the (n, M, D) Jacobian.
        z = self._check(x) @ self._frequencies
        z += self.phases
        cosines = np.cos(z)
        norms = np.sqrt(np.einsum("nm,nm->n", cosines, cosines))
        cosines /= norms[:, None]
        # One weight vector: "nm,m->n" gives the same sums as broadcasting it to (n, M), at
        # a third of the cost on the few points of an L-BFGS-B evaluation.
        values = np.einsum("nm,m->n" if np.ndim(w) == 1 else "nm,nm->n", cosines, w)
        slopes = np.sin(z)
        np.negative(slopes, out=slopes)
        cosines *= slopes
        slopes *= w
        slopes -= values[:, None] * cosines
        grads = slopes @ self._frequencies.T
        grads /= norms[:, None]
        return values, grads

    def _check(self, x: np.ndarray) -> np.ndarray:
        if not (type(x) is np.ndarray and x.ndim == 2 and x.dtype == np.float64):
            x = np.atleast_2d(np.asarray(x, dtype=float))
        if x.shape[1] != self.n_dims:
            raise ValueError(f"Expected points with {self.n_dims} columns, got {x.shape[1]}.")
        return x
