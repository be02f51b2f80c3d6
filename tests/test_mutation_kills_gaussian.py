"""The DP-FTS-DE release (``privacy/_gaussian.py``): a sub-region nobody who uploaded weighs is
refused, a vector exactly at the clip bound is not counted as clipped, and the server-side index
arrays are integer indices (written to kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from optuna_fedbo.privacy import aggregate
from optuna_fedbo.privacy._gaussian import clip_to_norm
from optuna_fedbo.privacy._gaussian import SubsampledGaussianMechanism


def test_a_sub_region_that_no_uploader_weighs_is_refused_by_name() -> None:
    weights = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])  # sub-region 1: agent 2 only
    with pytest.raises(ValueError, match=r"positive weight for sub-region\(s\) \[1\]\."):
        aggregate(np.ones((2, 3)), [0, 1], weights, mechanism=None)


def test_the_non_private_release_names_its_contributors_as_integer_indices() -> None:
    weights = np.full((1, 3), 1.0 / 3.0)
    result = aggregate(np.eye(2, 3), [2, 0], weights, mechanism=None)
    assert result.contributors.tolist() == result.selected.tolist() == [0, 2]


def test_a_vector_exactly_at_the_bound_is_not_clipped_and_indices_are_integers() -> None:
    mechanism = SubsampledGaussianMechanism(noise_multiplier=1.0, sample_rate=1.0, clip_norm=5.0)
    weights = np.array([[0.5, 0.5]])
    vectors = np.array([[3.0, 4.0], [6.0, 8.0]])  # norms 5 (the bound, P = 1) and 10
    result = aggregate(vectors, [0, 1], weights, mechanism=mechanism, rng=np.random.default_rng(0))
    assert result.n_clipped == 1
    assert result.selected.dtype == np.int64 and result.contributors.dtype == np.int64
    assert result.contributors.tolist() == [0, 1]


def test_a_bad_clip_bound_is_named() -> None:
    with pytest.raises(ValueError, match="^bound must be positive"):
        clip_to_norm(np.ones(3), 0.0)


def test_a_vector_at_the_bound_is_returned_unchanged_to_the_last_bit() -> None:
    vector = np.array([-0.65, -0.13, 0.78])
    bound = float(np.linalg.norm(vector / 0.78) * 0.78)  # its norm, as clip_to_norm computes it
    assert np.array_equal(clip_to_norm(vector, bound), vector)


@pytest.mark.parametrize(
    ("vectors", "bound"),
    [
        ([[1e-200, 1e-200]], 1e-250),  # squares underflow: the norm needs the rescaling
        ([[1e-150, 0.0], [1e200, 0.0]], 1e-200),  # rescaled per row, not by the largest row
        ([[1.5e308, 1.5e308, 1.5e308]], 1.0),  # the norm overflows: no warning, still clipped
    ],
)
def test_tiny_and_huge_vectors_are_clipped_to_the_bound_without_warnings(
    vectors: list, bound: float
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clipped = clip_to_norm(np.array(vectors), bound)
    norms = [
        float(np.linalg.norm(row / np.max(np.abs(row))) * np.max(np.abs(row))) for row in clipped
    ]
    assert norms == pytest.approx([bound] * len(vectors), rel=1e-9, abs=0.0)


def test_a_zero_vector_is_left_alone_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.array_equal(clip_to_norm(np.zeros((2, 3)), 1.0), np.zeros((2, 3)))
