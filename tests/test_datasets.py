from __future__ import annotations

import numpy as np
import pytest

from optuna_fedbo.datasets import label_skewed_shards


def test_shards_partition_the_samples_and_are_skewed() -> None:
    labels = np.repeat(np.arange(10), 100)
    shards = label_skewed_shards(labels, 8, concentration=0.3, seed=0)
    joined = np.sort(np.concatenate(shards))
    np.testing.assert_array_equal(joined, np.arange(1000))
    assert all(len(np.unique(labels[s])) >= 2 for s in shards)
    # Skewed: some client's most common label is far above the 10% of an IID split.
    top_share = [np.bincount(labels[s]).max() / len(s) for s in shards]
    assert max(top_share) > 0.3
    np.testing.assert_array_equal(
        shards[0], label_skewed_shards(labels, 8, concentration=0.3, seed=0)[0]
    )


def test_large_concentration_is_nearly_iid() -> None:
    labels = np.repeat(np.arange(5), 400)
    shards = label_skewed_shards(labels, 4, concentration=1000.0, seed=1)
    for s in shards:
        assert np.bincount(labels[s], minlength=5).min() / len(s) > 0.15


@pytest.mark.parametrize("kwargs", [{"n_clients": 0}, {"n_clients": 3, "concentration": 0.0}])
def test_invalid(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        label_skewed_shards(np.arange(10) % 2, **kwargs)
