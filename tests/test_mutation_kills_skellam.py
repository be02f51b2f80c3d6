"""The distributed DP noise draw (``privacy/_skellam.py``): integer noise for the ring, and only a
positive finite variance (written to kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optuna_fedbo.privacy._skellam import skellam_noise


@pytest.mark.parametrize("variance", [0.0, -1.0, math.inf, math.nan])
def test_a_variance_that_is_not_positive_and_finite_is_refused(variance: float) -> None:
    with pytest.raises(ValueError, match="The Skellam variance must be a positive number"):
        skellam_noise(variance, 4, np.random.default_rng(0))


@pytest.mark.parametrize("variance", [0.5, 1.0, 40.0])
def test_the_noise_is_integers_with_the_variance_asked(variance: float) -> None:
    noise = skellam_noise(variance, 20_000, np.random.default_rng(3))
    assert noise.dtype == np.int64 and noise.shape == (20_000,)
    assert float(noise.var()) == pytest.approx(variance, rel=0.05)
