"""The noise source (``privacy/_rng.py``): a fresh generator from 256 bits of the ``secrets``
module (the operating system's entropy) at every call, and the research seed's bounds (written to
kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from optuna_fedbo.privacy import _rng
from optuna_fedbo.privacy._rng import check_insecure_noise_seed
from optuna_fedbo.privacy._rng import research_rng
from optuna_fedbo.privacy._rng import secure_rng


def test_the_noise_generator_is_seeded_with_256_bits_from_the_secrets_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    def randbits(k: int) -> int:
        asked.append(k)
        return 2**255 + len(asked)

    monkeypatch.setattr(_rng, "secrets", SimpleNamespace(randbits=randbits))
    first, second = secure_rng().standard_normal(4), secure_rng().standard_normal(4)
    assert asked == [256, 256]  # fresh entropy at every call, 256 bits each
    assert np.array_equal(first, np.random.default_rng(2**255 + 1).standard_normal(4))
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("seed", [0, 1, np.int64(7)])
def test_a_research_seed_may_be_any_non_negative_integer(seed: int) -> None:
    assert check_insecure_noise_seed(seed) == int(seed)
    assert np.array_equal(research_rng(seed, 1).random(3), research_rng(int(seed), 1).random(3))


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3"])
def test_a_research_seed_that_is_not_a_non_negative_integer_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="insecure_noise_seed must be None or a non-negative"):
        check_insecure_noise_seed(bad)
