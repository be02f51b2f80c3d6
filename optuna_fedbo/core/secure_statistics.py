"""Pooled statistics as an input to secure aggregation: summed exactly, standardized after.

Without secure aggregation the server standardizes everyone's values together (their pooled
mean and spread, :func:`~optuna_fedbo.core.pooling.pooled_posterior`) before it pools them. The
server of a masked sum can do the same if the sum carries the raw sums of the values: the
count, ``sum y``, ``sum y^2``, ``Phi^T 1``, ``Phi^T y`` and ``Phi^T Phi`` of every feature
block. Two things stand in the way of summing them in a ring at a fixed-point step:

* the values have no bound to size a ring by (an objective may be a loss near ``1e-9`` or a cost
  near ``1e9``), so ``sum y``, ``sum y^2`` and ``Phi^T y`` cannot be clipped to a fixed range;
* standardizing subtracts ``mean * Phi^T 1`` from ``Phi^T y``: with values far from zero (say
  ``1000 +- 0.01``) that cancels all but a few digits, so ``Phi^T 1`` must be summed as exactly
  as ``Phi^T y``.

So those sums are encoded exactly: each as an integer number of units of ``2^-fraction_bits``
(:class:`DigitCode`), written in signed base-``2^32`` digits, one ring coordinate per digit.
The ring only has to hold the sum of ``N`` digits (``|sum| < N 2^32``, which
:meth:`~optuna_fedbo.SecureAggregation.bound` provides), and the server recombines the summed
digits into the exact integer sums (carries included: ``sum_k D_k 2^(32 k)``). The count and
the Gram matrices, bounded by the participant's weight cap, stay at the ring's own step.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace
import math
from typing import Final

import numpy as np

from optuna_fedbo.core.pooling import block_sizes
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import RingSpec
from optuna_fedbo.core.secagg.ring import to_ring

#: Bits of one digit: a digit is in ``(-2^32, 2^32)``.
DIGIT_BITS: Final[int] = 32
#: The largest absolute value of one digit.
DIGIT_MAX: Final[int] = (1 << DIGIT_BITS) - 1
#: The largest weight cap (observations) whose sums the codes below can hold.
MAX_CAP: Final[int] = 1 << 31


@dataclass(frozen=True)
class DigitCode:
    """Real numbers as exact integers of ``2^-fraction_bits`` units in ``digits`` signed digits.

    Attributes:
        fraction_bits: The unit is ``2^-fraction_bits``.
        digits: Base-``2^32`` digits per number (each one ring coordinate).
    """

    fraction_bits: int
    digits: int

    @property
    def limit(self) -> float:
        """The largest magnitude it represents (larger ones are clipped to it)."""
        return math.ldexp(1.0, DIGIT_BITS * self.digits - self.fraction_bits)

    def encode(self, values: np.ndarray) -> np.ndarray:
        """The digits of ``values`` (clipped to :attr:`limit`), ``digits`` per value, least
        significant first, as ``int64`` of shape ``(len(values) * digits,)``.

        Computed in floating point, exactly: ``|v| 2^fraction_bits`` rounded is an integer that
        a float holds exactly (a float's 53 significant bits, shifted), and so is each
        ``floor(units / 2^(32 k))`` and its remainder modulo ``2^32`` (``fmod`` is exact).

        Raises:
            ValueError: For a value that is not finite.
        """
        values = np.asarray(values, dtype=float).ravel()
        if not np.all(np.isfinite(values)):
            raise ValueError("only finite numbers can be summed exactly.")
        largest = np.nextafter(math.ldexp(1.0, DIGIT_BITS * self.digits), 0.0)
        units = np.minimum(np.rint(np.ldexp(np.abs(values), self.fraction_bits)), largest)
        shifts = -DIGIT_BITS * np.arange(self.digits)
        digits = np.fmod(np.floor(np.ldexp(units[:, None], shifts)), 2.0**DIGIT_BITS)
        return (np.sign(values)[:, None] * digits).astype(np.int64).ravel()

    def units(self, digit_sums: np.ndarray) -> list[int]:
        """The numbers, in units of ``2^-fraction_bits``, whose digits summed to ``digit_sums``
        (integers, ``digits`` per number, as :meth:`encode` lays them out): exact integers."""
        rows = np.asarray(digit_sums).reshape(-1, self.digits).tolist()
        return [sum(int(d) << (DIGIT_BITS * k) for k, d in enumerate(row)) for row in rows]

    def decode(self, digit_sums: np.ndarray) -> np.ndarray:
        """:meth:`units` as numbers, rounded to floats once."""
        return np.array(
            [math.ldexp(float(u), -self.fraction_bits) for u in self.units(digit_sums)]
        )


#: ``sum y`` and ``Phi^T y``: up to ``MAX_CAP`` observations of values up to ``2^64``, in units
#: of ``2^-64`` (five digits: ``2^96`` at most). :data:`FEATURE` has the same unit.
LINEAR: Final = DigitCode(fraction_bits=64, digits=5)
#: ``Phi^T 1`` of unit-norm features: at most ``MAX_CAP``, in units of ``2^-64``.
FEATURE: Final = DigitCode(fraction_bits=64, digits=3)
#: ``sum y^2``: up to ``2^160``, in units of ``2^-128`` (so that values near ``1e-19`` keep their
#: squares).
SQUARE: Final = DigitCode(fraction_bits=128, digits=9)


def _triangle(size: int) -> int:
    return size * (size + 1) // 2


def input_length(n_features: int) -> int:
    """Length of one participant's input with ``n_features`` shared features: the count, every
    block's Gram upper triangle, then the digits of ``sum y``, ``sum y^2`` and every block's
    ``Phi^T 1`` and ``Phi^T y``."""
    sizes = block_sizes(n_features)
    at_step = 1 + sum(_triangle(size) for size in sizes)
    return at_step + LINEAR.digits + SQUARE.digits + (FEATURE.digits + LINEAR.digits) * sum(sizes)


def encode_statistics(blocks: list[SufficientStatistics], ring: RingSpec) -> np.ndarray:
    """One participant's statistics (one per feature block, all of the same values) as ring
    elements laid out as :func:`input_length` says; the count and Gram entries clipped to the
    ring's bound, the sums with values exact (clipped only beyond :attr:`DigitCode.limit`).

    Raises:
        ValueError: If the blocks do not match the ring's dimension or a sum is not finite.
    """
    first = blocks[0]
    at_step = np.concatenate(
        [[float(first.count)]]
        + [block.gram[np.triu_indices(block.n_features)] for block in blocks]
    )
    digits = [
        LINEAR.encode(np.array([first.target_sum])),
        SQUARE.encode(np.array([first.target_square_sum])),
    ]
    for block in blocks:
        digits += [FEATURE.encode(block.feature_sum), LINEAR.encode(block.feature_target)]
    exact = np.concatenate(digits)
    if len(at_step) + len(exact) != ring.dimension:
        raise ValueError(
            f"the statistics need {len(at_step) + len(exact)} ring coordinates, the ring has "
            f"{ring.dimension}."
        )
    return np.concatenate(
        [
            encode(at_step, replace(ring, dimension=len(at_step))),
            to_ring(exact, replace(ring, dimension=len(exact))),
        ]
    )


def decode_statistics(
    values: np.ndarray, step: float, n_features: int
) -> list[SufficientStatistics]:
    """The summed statistics of every block from the decoded sum of inputs laid out as
    :func:`encode_statistics` does (``values``: the centred ring integers times ``step``), the
    values centred on their pooled mean.

    The count and Gram entries are the sum at the ring's step. The sums with values are exact,
    and so is their centring (``sum (y - c)^2`` and ``Phi^T (y - c)`` for the pooled mean ``c``,
    computed in integers), so that standardizing them cancels nothing however far the values
    are from zero; ``sum (y - c)`` is then 0. Nothing is checked: a sum of dishonest inputs can
    be anything (with a count that is not positive, the values are left uncentred).
    """
    values = np.asarray(values, dtype=float)
    sizes = block_sizes(n_features)
    if values.shape != (input_length(n_features),):
        raise ValueError(
            f"the sum must have length {input_length(n_features)}, got shape {values.shape}."
        )
    count = float(values[0])
    start, grams = 1, []
    for size in sizes:
        gram = np.zeros((size, size))
        gram[np.triu_indices(size)] = values[start : start + _triangle(size)]
        grams.append(gram + np.triu(gram, 1).T)
        start += _triangle(size)
    levels = np.rint(values[start:] / step).astype(np.int64)

    def take(code: DigitCode, n: int) -> list[int]:
        nonlocal levels
        part, levels = levels[: code.digits * n], levels[code.digits * n :]
        return code.units(part)

    # Exact integers: sum y = s / 2^64, sum y^2 = q / 2^128, Phi^T 1 = a / 2^64, Phi^T y = t / 2^64
    # and the count n = num / den. With the centre c = sum y / n:
    # Phi^T (y - c) = (t num 2^64 - s den a) / (2^128 num), sum (y - c)^2 = (q num - s^2 den) /
    # (2^128 num): integers, divided once (correctly rounded).
    (s,), (q,) = take(LINEAR, 1), take(SQUARE, 1)
    num, den = count.as_integer_ratio() if count > 0 else (1, 0)  # den 0: left uncentred
    scale = num << LINEAR.fraction_bits
    below = num << (2 * LINEAR.fraction_bits)
    blocks = []
    for size, gram in zip(sizes, grams):
        a, t = take(FEATURE, size), take(LINEAR, size)
        statistics = SufficientStatistics(size)
        statistics.count = count  # type: ignore[assignment]
        statistics.target_sum = 0.0 if den else math.ldexp(float(s), -LINEAR.fraction_bits)
        statistics.target_square_sum = (q * num - s * s * den) / below
        statistics.feature_sum = np.array(
            [math.ldexp(float(v), -FEATURE.fraction_bits) for v in a]
        )
        statistics.feature_target = np.array(
            [(tj * scale - s * den * aj) / below for tj, aj in zip(t, a)]
        )
        statistics.gram = gram
        blocks.append(statistics)
    return blocks


__all__ = [
    "DIGIT_MAX",
    "DigitCode",
    "FEATURE",
    "LINEAR",
    "MAX_CAP",
    "SQUARE",
    "decode_statistics",
    "encode_statistics",
    "input_length",
]
