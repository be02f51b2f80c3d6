"""A fast, seeded empirical privacy audit: a distinguishing attack on the shipped subsampled
Gaussian aggregation stays below the claimed epsilon, and flags a broken mechanism (the full
audit: ``benchmarks/privacy_audit.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "privacy_audit", Path(__file__).parents[1] / "benchmarks" / "privacy_audit.py"
)
audit = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(audit)


@pytest.mark.parametrize(("z", "q", "power"), [(1.0, 0.35, 0.0), (0.5, 1.0, 2.0)])
def test_the_attack_lower_bound_stays_below_the_claimed_epsilon(
    z: float, q: float, power: float
) -> None:
    lower, claimed = audit.audit_gaussian(z, q, runs=4_000, seed=1)
    assert power <= lower < claimed  # the attack finds no violation (and has power at z = 0.5)


def test_the_audit_flags_a_mechanism_weaker_than_claimed() -> None:
    lower, claimed = audit.audit_gaussian(1.0, 0.35, runs=4_000, seed=1, broken=True)
    assert lower > claimed
