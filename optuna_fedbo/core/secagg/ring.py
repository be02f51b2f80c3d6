"""Fixed-point encoding into the ring ``Z_{2^k}``, sized so that the sum cannot wrap.

A value ``v`` clipped to ``[-bound, bound]`` is encoded as the integer ``round(v / step)`` (so
``|q| <= ceil(bound / step)``) taken modulo ``2^k``; elements are ``uint64`` and ring addition is
``uint64`` addition (which wraps modulo ``2^64``) masked to ``k`` bits. The sum of ``N`` encoded
inputs plus integer noise of absolute value at most ``noise_bound`` per coordinate has absolute
value at most ``A = N ceil(bound / step) + noise_bound``; :func:`plan_ring` picks the smallest
``k`` with ``2^(k-1) > A``, so the centred representative of the ring sum (in
``[-2^(k-1), 2^(k-1))``) *is* the integer sum. Decoding multiplies by ``step``: the decoded sum of
``N`` inputs equals their plain sum within ``N step / 2`` (each rounding moves a value by at most
``step / 2``).
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any
from typing import Final

import numpy as np

#: Ring elements are ``uint64``, so the modulus is at most ``2^64``.
MAX_BITS: Final[int] = 64


@dataclass(frozen=True)
class RingSpec:
    """The ring ``Z_{2^bits}`` and the fixed-point encoding of ``dimension`` values.

    Attributes:
        bits: The ring is ``Z_{2^bits}``.
        step: The fixed-point step (value of one integer unit).
        bound: Every input coordinate is clipped to ``[-bound, bound]``.
        dimension: Length of every encoded vector.
    """

    bits: int
    step: float
    bound: float
    dimension: int

    def __post_init__(self) -> None:
        if isinstance(self.bits, bool) or not isinstance(self.bits, int):
            raise ValueError(f"bits must be an integer, got {self.bits!r}.")
        if not 2 <= self.bits <= MAX_BITS:
            raise ValueError(f"bits must be in [2, {MAX_BITS}], got {self.bits}.")
        if not (math.isfinite(self.step) and self.step > 0.0):
            raise ValueError(f"step must be a positive number, got {self.step!r}.")
        if not (math.isfinite(self.bound) and self.bound > 0.0):
            raise ValueError(f"bound must be a positive number, got {self.bound!r}.")
        if isinstance(self.dimension, bool) or not isinstance(self.dimension, int):
            raise ValueError(f"dimension must be an integer, got {self.dimension!r}.")
        if self.dimension < 1:
            raise ValueError(f"dimension must be >= 1, got {self.dimension}.")

    @property
    def mask(self) -> np.uint64:
        """``2^bits - 1`` (reduction modulo ``2^bits`` is ``& mask``)."""
        return np.uint64((1 << self.bits) - 1)

    @property
    def max_level(self) -> int:
        """The largest absolute integer one encoded input can take: ``ceil(bound / step)``."""
        return int(math.ceil(self.bound / self.step))

    def to_dict(self) -> dict[str, Any]:
        return {
            "bits": self.bits,
            "step": float(self.step),
            "bound": float(self.bound),
            "dimension": self.dimension,
        }

    @classmethod
    def from_dict(cls, record: Any) -> RingSpec:
        if not isinstance(record, dict) or set(record) != {"bits", "step", "bound", "dimension"}:
            raise ValueError("a ring record must have exactly bits, step, bound and dimension.")
        return cls(
            bits=record["bits"],
            step=float(record["step"]),
            bound=float(record["bound"]),
            dimension=record["dimension"],
        )


def plan_ring(
    *,
    n_inputs: int,
    bound: float,
    step: float,
    dimension: int,
    noise_bound: int = 0,
) -> RingSpec:
    """The smallest ring in which the sum of ``n_inputs`` clipped inputs plus noise cannot wrap.

    Args:
        n_inputs: The most inputs ever summed (the number of participants ``N``).
        bound: Per-coordinate clipping bound of one input.
        step: Fixed-point step.
        dimension: Vector length.
        noise_bound: Bound on the absolute value of the *summed* integer noise per coordinate
            (e.g. :func:`~optuna_fedbo.privacy._skellam.skellam_tail_bound`); 0 without noise.

    Raises:
        ValueError: If an argument is invalid or the sum would need more than 64 bits (the
            message names the largest sum and what to change).
    """
    if isinstance(n_inputs, bool) or not isinstance(n_inputs, int) or n_inputs < 1:
        raise ValueError(f"n_inputs must be a positive integer, got {n_inputs!r}.")
    if isinstance(noise_bound, bool) or not isinstance(noise_bound, int) or noise_bound < 0:
        raise ValueError(f"noise_bound must be a non-negative integer, got {noise_bound!r}.")
    if not (math.isfinite(step) and step > 0.0 and math.isfinite(bound) and bound > 0.0):
        raise ValueError(f"bound and step must be positive numbers, got {bound!r} and {step!r}.")
    largest = n_inputs * int(math.ceil(bound / step)) + noise_bound
    bits = max(2, (2 * largest).bit_length())
    if bits > MAX_BITS:
        raise ValueError(
            f"The sum of {n_inputs} inputs bounded by {bound:g} at step {step:g} plus noise up to "
            f"{noise_bound} units can reach {largest:.3e} units and would wrap the ring Z_2^"
            f"{MAX_BITS}: use a coarser step, a smaller bound or fewer participants."
        )
    return RingSpec(bits=bits, step=float(step), bound=float(bound), dimension=dimension)


def _check_vector(values: np.ndarray, ring: RingSpec, what: str) -> np.ndarray:
    array = np.asarray(values)
    if array.shape != (ring.dimension,):
        raise ValueError(f"{what} must have shape ({ring.dimension},), got {array.shape}.")
    return array


def encode(values: np.ndarray, ring: RingSpec) -> np.ndarray:
    """Clip to ``[-bound, bound]``, round to the step and reduce into the ring.

    Raises:
        ValueError: For a wrong shape or a non-finite value.
    """
    array = _check_vector(values, ring, "the input").astype(float)
    if not np.all(np.isfinite(array)):
        raise ValueError("the input has non-finite values; secure aggregation needs numbers.")
    levels = np.rint(np.clip(array, -ring.bound, ring.bound) / ring.step).astype(np.int64)
    return to_ring(levels, ring)


def to_ring(levels: np.ndarray, ring: RingSpec) -> np.ndarray:
    """Reduce signed integers (``int64``) modulo ``2^bits`` (two's complement, then masked)."""
    array = _check_vector(levels, ring, "the integers").astype(np.int64)
    return array.view(np.uint64) & ring.mask


def ring_add(a: np.ndarray, b: np.ndarray, ring: RingSpec) -> np.ndarray:
    """``a + b`` in the ring."""
    return (np.asarray(a, dtype=np.uint64) + np.asarray(b, dtype=np.uint64)) & ring.mask


def ring_sub(a: np.ndarray, b: np.ndarray, ring: RingSpec) -> np.ndarray:
    """``a - b`` in the ring."""
    return (np.asarray(a, dtype=np.uint64) - np.asarray(b, dtype=np.uint64)) & ring.mask


def centred(elements: np.ndarray, ring: RingSpec) -> np.ndarray:
    """The representative of each element in ``[-2^(bits-1), 2^(bits-1))`` as ``int64``/object.

    For ``bits = 64`` the result is computed with Python integers so that it cannot overflow.
    """
    array = _check_vector(elements, ring, "the ring elements").astype(np.uint64) & ring.mask
    half = 1 << (ring.bits - 1)
    if ring.bits < MAX_BITS:
        signed = array.astype(np.int64)
        return np.where(signed >= half, signed - (1 << ring.bits), signed)
    wide = [int(x) - (1 << 64) if int(x) >= half else int(x) for x in array]
    return np.array(wide, dtype=object)


def decode(elements: np.ndarray, ring: RingSpec) -> np.ndarray:
    """The real values of ring elements: the centred integers times ``step``."""
    return np.asarray(centred(elements, ring), dtype=float) * ring.step
