"""The DP-FTS-DE aggregation (Algorithm 1) and the sub-region weights (Sec. 3.2, App. B)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optuna_fedbo.core.weights import round_robin_assignment
from optuna_fedbo.core.weights import subregion_weights
from optuna_fedbo.core.weights import WeightSchedule
from optuna_fedbo.privacy import _gaussian
from optuna_fedbo.privacy import aggregate
from optuna_fedbo.privacy import AggregationResult
from optuna_fedbo.privacy import clip_to_norm
from optuna_fedbo.privacy import subsampled_gaussian_aggregate
from optuna_fedbo.privacy import SubsampledGaussianEvent
from optuna_fedbo.privacy import SubsampledGaussianMechanism

TINY_Z = 1e-12  # noise negligible next to the sums, to check the deterministic part


def _uniform(n_subregions: int, n_agents: int) -> np.ndarray:
    return np.full((n_subregions, n_agents), 1.0 / n_agents)


# --- clipping -------------------------------------------------------------------------------


def test_clip_bounds_norm_and_keeps_direction() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(200, 30)) * rng.uniform(0.1, 10.0, size=(200, 1))
    clipped = clip_to_norm(vectors, 5.0)
    norms = np.linalg.norm(vectors, axis=1)
    clipped_norms = np.linalg.norm(clipped, axis=1)
    assert np.all(clipped_norms <= 5.0 * (1 + 1e-12))
    long = norms > 5.0
    assert long.any() and (~long).any()
    np.testing.assert_allclose(clipped_norms[long], 5.0, rtol=1e-12)
    np.testing.assert_array_equal(clipped[~long], vectors[~long])  # unchanged when under
    cosines = np.sum(clipped * vectors, axis=1) / (clipped_norms * norms)
    np.testing.assert_allclose(cosines, 1.0, rtol=1e-12)
    # The paper's formula v / max(1, |v| / S).
    expected = vectors / np.maximum(1.0, norms / 5.0)[:, None]
    np.testing.assert_allclose(clipped, expected, rtol=1e-12)


def test_clip_single_vector_zero_vector_and_copy() -> None:
    vector = np.array([3.0, 4.0])
    np.testing.assert_allclose(clip_to_norm(vector, 1.0), [0.6, 0.8])
    assert vector.tolist() == [3.0, 4.0]  # input untouched
    np.testing.assert_array_equal(clip_to_norm(np.zeros((2, 3)), 1.0), np.zeros((2, 3)))


@pytest.mark.parametrize("bound", [0.0, -1.0, float("nan"), float("inf")])
def test_clip_rejects_bad_bound(bound: float) -> None:
    with pytest.raises(ValueError, match="bound"):
        clip_to_norm(np.ones(3), bound)


def test_clip_rejects_nan_and_bad_shape() -> None:
    with pytest.raises(ValueError, match="finite"):
        clip_to_norm(np.array([1.0, np.nan]), 1.0)
    with pytest.raises(ValueError, match="1-D or 2-D"):
        clip_to_norm(np.ones((2, 2, 2)), 1.0)


# --- the private aggregation ------------------------------------------------------------------


def test_noise_std_matches_formula() -> None:
    n_agents, n_subregions, n_features = 29, 4, 5000
    weights = subregion_weights(
        round_robin_assignment(n_agents, n_subregions), n_subregions, round_index=0
    )
    q, clip, z = 0.35, 22.0, 1.3
    omegas = np.zeros((n_agents, n_features))  # the sums vanish: the output is the noise
    result = subsampled_gaussian_aggregate(
        omegas,
        np.arange(n_agents),
        weights,
        sample_rate=q,
        clip_norm=clip,
        noise_multiplier=z,
        rng=np.random.default_rng(1),
    )
    expected = z * weights.max() * clip / q
    assert weights.max() == pytest.approx(math.exp(16) / (7 * math.exp(16) + 22 * math.e))
    assert result.noise_std == pytest.approx(expected, rel=1e-12)
    samples = result.vectors.ravel()
    assert samples.size == 20_000
    assert np.std(samples) == pytest.approx(expected, rel=0.03)
    assert abs(np.mean(samples)) < 4 * expected / math.sqrt(samples.size)
    assert result.vectors.shape == (n_subregions, n_features)


def test_divides_by_q_not_by_number_selected() -> None:
    n_agents, q = 10, 0.5
    vector = np.array([1.0, -2.0, 0.5])
    omegas = np.tile(vector, (n_agents, 1))
    result = subsampled_gaussian_aggregate(
        omegas,
        np.arange(n_agents),
        _uniform(1, n_agents),
        sample_rate=q,
        clip_norm=100.0,
        noise_multiplier=TINY_Z,
        rng=np.random.default_rng(3),
    )
    k = result.selected.size
    assert k != n_agents * q  # the seed gives a count other than the expected one
    np.testing.assert_allclose(result.vectors[0], k / (n_agents * q) * vector, rtol=1e-9)
    assert not np.allclose(result.vectors[0], vector)  # what dividing by k would give


def test_aggregate_matches_algorithm_1_loop() -> None:
    rng = np.random.default_rng(5)
    n_agents, n_subregions, n_features = 40, 4, 8
    q, clip = 0.4, 6.0
    weights = subregion_weights(
        round_robin_assignment(n_agents, n_subregions), n_subregions, round_index=20
    )
    received = np.sort(rng.choice(n_agents, size=30, replace=False))  # 10 agents missing
    omegas = rng.normal(size=(30, n_features)) * rng.uniform(0.2, 3.0, size=(30, 1))
    result = subsampled_gaussian_aggregate(
        omegas,
        received,
        weights,
        sample_rate=q,
        clip_norm=clip,
        noise_multiplier=TINY_Z,
        rng=np.random.default_rng(11),
    )
    bound = clip / math.sqrt(n_subregions)
    expected = np.zeros((n_subregions, n_features))
    n_clipped = 0
    contributors = []
    for row, agent in enumerate(received):
        if agent not in set(result.selected.tolist()):
            continue
        contributors.append(agent)
        omega = omegas[row]
        norm = np.linalg.norm(omega)
        n_clipped += norm > bound
        clipped = omega / max(1.0, norm / bound)
        for i in range(n_subregions):
            expected[i] += weights[i, agent] / q * clipped
    np.testing.assert_allclose(result.vectors, expected, atol=1e-9)
    assert result.contributors.tolist() == contributors
    assert set(result.contributors) <= set(result.selected)
    assert result.selected.size > len(contributors)  # some selected agents had not uploaded
    assert result.n_clipped == n_clipped > 0
    assert result.event == SubsampledGaussianEvent(TINY_Z, q, "poisson", n_agents)


def test_selection_rate_is_q() -> None:
    n_agents, q = 2000, 0.3
    result = subsampled_gaussian_aggregate(
        np.zeros((0, 2)),
        np.zeros(0, dtype=int),
        _uniform(1, n_agents),
        sample_rate=q,
        clip_norm=1.0,
        noise_multiplier=1.0,
        rng=np.random.default_rng(7),
    )
    sd = math.sqrt(n_agents * q * (1 - q))
    assert abs(result.selected.size - n_agents * q) < 4 * sd
    assert result.contributors.size == 0


def test_nobody_selected_releases_data_independent_noise() -> None:
    n_agents = 5
    outputs = []
    for scale in (1.0, 1000.0):
        omegas = np.arange(n_agents * 3, dtype=float).reshape(n_agents, 3) * scale
        result = subsampled_gaussian_aggregate(
            omegas,
            np.arange(n_agents),
            _uniform(2, n_agents),
            sample_rate=1e-9,
            clip_norm=2.0,
            noise_multiplier=1.0,
            rng=np.random.default_rng(0),
        )
        assert result.nobody_selected
        assert result.contributors.size == 0 and result.n_clipped == 0
        assert result.private  # still a release: it must be accounted
        assert np.all(result.vectors != 0.0)
        outputs.append(result.vectors)
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_fixed_size_selects_round_nq_agents() -> None:
    n_agents, q = 29, 0.35
    for seed in range(5):
        result = subsampled_gaussian_aggregate(
            np.ones((n_agents, 2)),
            np.arange(n_agents),
            _uniform(1, n_agents),
            sample_rate=q,
            clip_norm=10.0,
            noise_multiplier=1.0,
            sampling="fixed_size",
            rng=np.random.default_rng(seed),
        )
        assert result.selected.size == 10
        assert np.unique(result.selected).size == 10
        assert result.event is not None and result.event.sampling == "fixed_size"
        assert result.event.sample_size == 10


def test_default_randomness_is_secure(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = _gaussian.secure_rng

    def spy() -> np.random.Generator:
        calls.append(1)
        return real()

    monkeypatch.setattr(_gaussian, "secure_rng", spy)
    kwargs = {"sample_rate": 1.0, "clip_norm": 1.0, "noise_multiplier": 1.0}
    first = subsampled_gaussian_aggregate(np.zeros((3, 4)), [0, 1, 2], _uniform(1, 3), **kwargs)
    second = subsampled_gaussian_aggregate(np.zeros((3, 4)), [0, 1, 2], _uniform(1, 3), **kwargs)
    assert len(calls) == 2
    assert not np.array_equal(first.vectors, second.vectors)


def test_result_is_immutable() -> None:
    result = subsampled_gaussian_aggregate(
        np.ones((3, 2)),
        [0, 1, 2],
        _uniform(1, 3),
        sample_rate=1.0,
        clip_norm=1.0,
        noise_multiplier=1.0,
        rng=np.random.default_rng(0),
    )
    assert isinstance(result, AggregationResult)
    with pytest.raises(ValueError):
        result.vectors[0, 0] = 1.0
    with pytest.raises(AttributeError):
        result.n_clipped = 5  # type: ignore[misc]


# --- the non-private aggregation ----------------------------------------------------------------


def test_non_private_is_the_weighted_sum() -> None:
    rng = np.random.default_rng(2)
    n_agents, n_subregions = 12, 3
    weights = subregion_weights(
        round_robin_assignment(n_agents, n_subregions), n_subregions, round_index=12
    )
    omegas = rng.normal(size=(n_agents, 6)) * 50.0  # no clipping either
    permutation = rng.permutation(n_agents)
    result = aggregate(omegas[permutation], permutation, weights, mechanism=None)
    np.testing.assert_allclose(result.vectors, weights @ omegas, rtol=1e-12)
    assert result.noise_std == 0.0 and result.event is None and not result.private
    assert result.selected.tolist() == list(range(n_agents))
    assert result.n_clipped == 0


def test_non_private_renormalises_over_received_agents() -> None:
    weights = np.array([[0.5, 0.25, 0.25]])
    omegas = np.array([[2.0], [4.0]])
    result = aggregate(omegas, [0, 2], weights, mechanism=None)
    np.testing.assert_allclose(result.vectors, [[(0.5 * 2 + 0.25 * 4) / 0.75]])
    with pytest.raises(ValueError, match="at least one"):
        aggregate(np.zeros((0, 1)), [], weights, mechanism=None)


def test_one_entry_point_for_both() -> None:
    mechanism = SubsampledGaussianMechanism(noise_multiplier=2, sample_rate=0.5, clip_norm=3)
    assert mechanism.noise_multiplier == 2.0 and isinstance(mechanism.noise_multiplier, float)
    weights = _uniform(2, 4)
    assert mechanism.noise_std(weights) == pytest.approx(2.0 * 0.25 * 3.0 / 0.5)
    result = aggregate(
        np.ones((4, 3)), range(4), weights, mechanism=mechanism, rng=np.random.default_rng(0)
    )
    assert result.private and result.noise_std == pytest.approx(3.0)
    assert result.event == mechanism.event(4)


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("omegas", "indices", "message"),
    [
        ([[1.0, 2.0], [3.0]], [0, 1], "ragged"),
        ([[1.0, np.nan], [3.0, 4.0]], [0, 1], "finite"),
        ([[1.0, np.inf], [3.0, 4.0]], [0, 1], "finite"),
        ([1.0, 2.0], [0, 1], "shape"),
        ([[1.0, 2.0], [3.0, 4.0]], [0], "entries"),
        ([[1.0, 2.0], [3.0, 4.0]], [0, 0], "distinct"),
        ([[1.0, 2.0], [3.0, 4.0]], [0, 3], r"\[0, 3\)"),
        ([[1.0, 2.0], [3.0, 4.0]], [-1, 0], r"\[0, 3\)"),
        ([[1.0, 2.0], [3.0, 4.0]], [0.0, 1.0], "integer"),
    ],
)
def test_input_validation(omegas: object, indices: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        subsampled_gaussian_aggregate(
            omegas,  # type: ignore[arg-type]
            indices,  # type: ignore[arg-type]
            _uniform(2, 3),
            sample_rate=0.5,
            clip_norm=1.0,
            noise_multiplier=1.0,
            rng=np.random.default_rng(0),
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sample_rate": 0.0}, "sample_rate"),
        ({"sample_rate": 1.2}, "sample_rate"),
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"clip_norm": float("nan")}, "clip_norm"),
        ({"sampling": "stratified"}, "sampling"),
        ({"sampling": "fixed_size", "sample_rate": 0.1}, "0 agents"),
    ],
)
def test_parameter_validation(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"sample_rate": 0.5, "clip_norm": 1.0, "noise_multiplier": 1.0}
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        subsampled_gaussian_aggregate(
            np.ones((3, 2)),
            [0, 1, 2],
            _uniform(1, 3),
            rng=np.random.default_rng(0),
            **arguments,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (np.array([[0.5, 0.6, 0.0]]), "sum to 1"),
        (np.array([[1.5, -0.5, 0.0]]), "non-negative"),
        (np.array([[np.nan, 0.5, 0.5]]), "finite"),
        (np.array([0.5, 0.5, 0.0]), "shape"),
    ],
)
def test_weight_validation(weights: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        aggregate(np.ones((3, 2)), [0, 1, 2], weights, mechanism=None)


# --- sub-region weights (optuna_fedbo.core.weights) ---------------------------------------------


def test_weights_rows_sum_to_one_and_favour_own_subregion() -> None:
    assignment = round_robin_assignment(29, 4)
    assert assignment.tolist()[:6] == [0, 1, 2, 3, 0, 1]
    for round_index in range(0, 45):
        weights = subregion_weights(assignment, 4, round_index=round_index)
        assert weights.shape == (4, 29)
        assert np.all(weights >= 0)
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
        inside = assignment[None, :] == np.arange(4)[:, None]
        if round_index < 39:
            assert np.all(weights[inside].min() > weights[~inside].max())


def test_weights_match_the_papers_softmax_and_the_authors_code() -> None:
    a = 15.0
    schedule = WeightSchedule.paper_real_world()
    assignment = round_robin_assignment(29, 4)
    indicator = (assignment[None, :] == np.arange(4)[:, None]).astype(float)
    for round_index in range(0, 39):
        weights = subregion_weights(assignment, 4, round_index=round_index)
        a_t = schedule.exponent(round_index)
        temperature = a / (a_t - 1.0)
        assert schedule.temperature(round_index) == pytest.approx(temperature)
        paper = np.exp((a * indicator + 1.0) / temperature)
        paper /= paper.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(weights, paper, rtol=1e-10)
        code = np.where(indicator == 1.0, np.exp(a_t), np.exp(1.0))
        code /= code.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(weights, code, rtol=1e-10)


def test_schedules_of_appendix_b() -> None:
    real = WeightSchedule.paper_real_world()
    exponents = [real.exponent(t) for t in range(45)]
    assert exponents[:11] == [16.0] * 11  # held for rounds 0-9; linspace starts at 16
    np.testing.assert_allclose(exponents[10:40], np.linspace(16.0, 1.0, 30))
    assert exponents[39:] == [1.0] * 6
    assert real.uniform_from == 39
    assert real.temperature(0) == pytest.approx(1.0)
    assert real.temperature(39) == math.inf

    synthetic = WeightSchedule.paper_synthetic()
    # Paper: a_t = 16 for t <= 5, then 16, 12.25, 8.5, 4.75, 1 for t = 6..10 (round = t - 1).
    expected = [16.0] * 5 + [16.0, 12.25, 8.5, 4.75, 1.0, 1.0]
    np.testing.assert_allclose([synthetic.exponent(t) for t in range(11)], expected)
    assert synthetic.uniform_from == 9
    assert WeightSchedule(hold_rounds=3, decay_rounds=0).uniform_from == 3
    assert WeightSchedule(hold_rounds=3, decay_rounds=1).uniform_from == 4


def test_weights_become_uniform() -> None:
    assignment = round_robin_assignment(29, 4)
    for schedule in (WeightSchedule.paper_real_world(), WeightSchedule.paper_synthetic()):
        for round_index in (schedule.uniform_from, schedule.uniform_from + 50):
            weights = schedule.weights(assignment, 4, round_index)
            np.testing.assert_allclose(weights, 1.0 / 29, rtol=1e-12)
        before = schedule.weights(assignment, 4, schedule.uniform_from - 1)
        assert before.max() > 1.0 / 29 + 1e-6


def test_single_subregion_is_uniform_dp_fts() -> None:
    for round_index in (0, 5, 100):
        weights = subregion_weights(np.zeros(7, dtype=int), 1, round_index=round_index)
        np.testing.assert_allclose(weights, np.full((1, 7), 1 / 7), rtol=1e-12)


def test_weight_input_validation() -> None:
    with pytest.raises(ValueError, match="assignment values"):
        subregion_weights(np.array([0, 4]), 4, round_index=0)
    with pytest.raises(ValueError, match="integers"):
        subregion_weights(np.array([0.0, 1.0]), 2, round_index=0)
    with pytest.raises(ValueError, match="round_index"):
        subregion_weights(np.array([0, 1]), 2, round_index=-1)
    with pytest.raises(ValueError, match="n_subregions"):
        subregion_weights(np.array([0, 1]), 0, round_index=0)
    with pytest.raises(ValueError, match="hold_rounds"):
        WeightSchedule(hold_rounds=-1)
    with pytest.raises(ValueError, match="a must"):
        WeightSchedule(a=0.0)
    with pytest.raises(ValueError, match="n_agents"):
        round_robin_assignment(0, 2)
