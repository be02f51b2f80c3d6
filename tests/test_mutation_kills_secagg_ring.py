"""The ring (``core/secagg/ring.py``), in process: a ring record or plan with a bad field is
refused with its own message, the ring is exactly the smallest that holds the sum (up to 64
bits), the centred representative of ``2^(k-1)`` is ``-2^(k-1)``, and ring arithmetic and decoding
give ring elements and floats whatever integers they get (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from optuna_fedbo.core.secagg.ring import centred
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.ring import ring_add
from optuna_fedbo.core.secagg.ring import ring_sub
from optuna_fedbo.core.secagg.ring import RingSpec
from optuna_fedbo.core.secagg.ring import to_ring

GOOD = {"bits": 8, "step": 0.5, "bound": 1.0, "dimension": 2}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("bits", 8.0, "bits must be an integer"),
        ("bits", 1, r"bits must be in \[2, 64\]"),
        ("step", float("inf"), "step must be a positive number"),
        ("step", -1.0, "step must be a positive number"),
        ("step", 0.0, "step must be a positive number"),
        ("bound", float("inf"), "bound must be a positive number"),
        ("bound", -1.0, "bound must be a positive number"),
        ("bound", 0.0, "bound must be a positive number"),
        ("dimension", 2.0, "dimension must be an integer"),
        ("dimension", 0, "dimension must be >= 1"),
    ],
)
def test_a_ring_with_a_bad_field_is_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RingSpec(**{**GOOD, field: value})


def test_the_smallest_rings_are_accepted_and_a_record_must_have_exactly_its_fields() -> None:
    assert RingSpec(**{**GOOD, "bits": 2, "dimension": 1}).mask == 3
    assert RingSpec.from_dict(GOOD) == RingSpec(**GOOD)
    with pytest.raises(ValueError, match="exactly bits, step, bound and dimension"):
        RingSpec.from_dict({**GOOD, "extra": 1})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_inputs": 0}, "n_inputs must be a positive integer"),
        ({"n_inputs": True}, "n_inputs must be a positive integer"),
        ({"noise_bound": -1}, "noise_bound must be a non-negative integer"),
        ({"noise_bound": True}, "noise_bound must be a non-negative integer"),
        ({"bound": float("inf")}, "bound and step must be positive numbers"),
        ({"bound": 0.0}, "bound and step must be positive numbers"),
        ({"step": float("inf")}, "bound and step must be positive numbers"),
        ({"step": -1.0}, "bound and step must be positive numbers"),
        ({"step": 0.0}, "bound and step must be positive numbers"),
    ],
)
def test_a_plan_with_a_bad_argument_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_ring(**{"n_inputs": 3, "bound": 1.0, "step": 1.0, "dimension": 1, **kwargs})


def test_the_ring_is_exactly_the_smallest_that_holds_the_sum() -> None:
    # The largest |sum| A needs 2^(k-1) > A: A = 1 -> 2 bits, A = 3 -> 3 bits (not 4).
    assert plan_ring(n_inputs=1, bound=1.0, step=1.0, dimension=1).bits == 2
    assert plan_ring(n_inputs=3, bound=1.0, step=1.0, dimension=1).bits == 3
    # A = 2^62 needs exactly 64 bits: still a ring of uint64.
    widest = plan_ring(n_inputs=1, bound=1.0, step=1.0, dimension=1, noise_bound=2**62 - 1)
    assert widest.bits == 64
    top = np.array([2**63], dtype=np.uint64)
    assert centred(top, widest)[0] == -(2**63)
    assert decode(top, widest).dtype == np.float64
    assert decode(top, widest)[0] == -(2.0**63)


def test_the_centred_representative_of_the_half_is_negative() -> None:
    ring = RingSpec(**GOOD)
    values = centred(np.array([128, 127], dtype=np.uint64), ring)
    assert values.dtype == np.int64
    assert values.tolist() == [-128, 127]


def test_ring_arithmetic_takes_any_integers() -> None:
    ring = RingSpec(**GOOD)
    assert ring_add([255, 1], [1, 1], ring).tolist() == [0, 2]
    assert ring_sub([0, 2], [1, 1], ring).tolist() == [255, 1]
    assert ring_add(np.array([255, 1], dtype=np.uint64), [1, 1], ring).tolist() == [0, 2]
    assert ring_sub(np.array([0, 2], dtype=np.uint64), [1, 1], ring).tolist() == [255, 1]


@pytest.mark.parametrize(
    ("convert", "what"),
    [(encode, "the input"), (to_ring, "the integers"), (centred, "the ring elements")],
)
def test_a_vector_of_the_wrong_shape_is_refused_by_name(convert: object, what: str) -> None:
    with pytest.raises(ValueError, match=rf"^{what} must have shape \(2,\)"):
        convert(np.zeros(3, dtype=np.uint64), RingSpec(**GOOD))  # type: ignore[operator]
