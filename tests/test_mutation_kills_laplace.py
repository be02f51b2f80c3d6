"""Fed-PNE's local DP (``privacy/_laplace.py``): a bad parameter is named in its error, and the
mechanism reports the epsilon it releases at (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from optuna_fedbo.privacy._laplace import laplace_scale
from optuna_fedbo.privacy._laplace import LaplaceMechanism


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((0.0, 1.0, 0.0), "epsilon must be a positive"),
        ((1.0, 0.0, 0.0), "value_bound must be a positive"),
        ((1.0, 1.0, -1.0), "noise_bound must be a non-negative"),
    ],
)
def test_a_bad_parameter_is_named(args: tuple[float, float, float], named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named}"):
        laplace_scale(*args)


def test_the_mechanism_reports_its_epsilon_and_scale() -> None:
    mechanism = LaplaceMechanism(2, value_bound=1.0, noise_bound=0.5, rng=np.random.default_rng(1))
    assert mechanism.epsilon == 2.0 and isinstance(mechanism.epsilon, float)
    assert mechanism.scale == pytest.approx(1.5)
    assert "epsilon=2.0" in repr(mechanism)
