from __future__ import annotations

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.distributions import CategoricalDistribution
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution
import pytest

from optuna_fedbo.core.space import Box
from optuna_fedbo.core.space import Dimension
from optuna_fedbo.core.space import UnitCubeEncoding
from optuna_fedbo.search_space import SearchSpaceEncoder

DISTRIBUTIONS: list[BaseDistribution] = [
    FloatDistribution(-1.0, 1.0),
    FloatDistribution(1e-7, 1.0, log=True),
    FloatDistribution(-10, 10, step=0.5),
    FloatDistribution(0.0, 1.0, step=0.1),
    FloatDistribution(0.1, 0.3, step=0.1),
    IntDistribution(3, 10),
    IntDistribution(1, 100, log=True),
    IntDistribution(3, 9, step=2),
    IntDistribution(-5, 5),
    CategoricalDistribution([1, 10, 100]),
    CategoricalDistribution(["a", None, 2.5, True]),
]


def _optuna_values(distribution: BaseDistribution, n: int) -> list:
    """Values Optuna's own samplers produce for a distribution."""
    values = []
    for sampler in (optuna.samplers.RandomSampler(seed=0), optuna.samplers.TPESampler(seed=0)):
        study = optuna.create_study(sampler=sampler)
        for _ in range(n):
            trial = study.ask({"p": distribution})
            values.append(trial.params["p"])
            study.tell(trial, 0.0)
    return values


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_round_trip_is_exact_for_optuna_values(distribution: BaseDistribution) -> None:
    encoder = SearchSpaceEncoder({"p": distribution})
    values = _optuna_values(distribution, 40)
    encoded = encoder.encode([{"p": v} for v in values])
    assert np.all((encoded >= 0.0) & (encoded <= 1.0))
    for value, point in zip(values, encoded):
        decoded = encoder.decode(point)["p"]
        if isinstance(distribution, FloatDistribution) and distribution.step is None:
            assert decoded == pytest.approx(value, rel=1e-12, abs=1e-15)
        else:
            assert decoded == value
            assert type(decoded) is type(value)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_any_point_of_the_cube_decodes_inside_the_space(distribution: BaseDistribution) -> None:
    encoder = SearchSpaceEncoder({"p": distribution})
    rng = np.random.default_rng(1)
    points = rng.uniform(-0.2, 1.2, size=(200, encoder.n_columns))
    for point in points:
        params = encoder.decode(point)
        assert distribution._contains(distribution.to_internal_repr(params["p"]))


def test_discrete_cells_have_equal_width() -> None:
    # Every integer owns an equal share of the unit interval, so uniform points give uniform ints.
    dim = Dimension("int", 3, 9, step=2)
    columns = np.linspace(0.0, 1.0, 100001)
    counts = np.unique(dim.decode(columns), return_counts=True)[1]
    assert counts.max() - counts.min() <= 2


def test_categorical_is_one_hot_and_decodes_by_argmax() -> None:
    encoding = UnitCubeEncoding([Dimension("float", 0, 1), Dimension("categorical", n_choices=3)])
    encoded = encoding.encode(np.array([[0.25, 2.0], [0.5, 0.0]]))
    np.testing.assert_array_equal(encoded, [[0.25, 0, 0, 1], [0.5, 1, 0, 0]])
    np.testing.assert_array_equal(encoding.decode([[0.3, 0.2, 0.7, 0.1]]), [[0.3, 1.0]])
    sample = encoding.sample(50, np.random.default_rng(0))
    np.testing.assert_array_equal(sample[:, 1:].sum(axis=1), np.ones(50))


def test_sample_respects_a_sub_box() -> None:
    encoding = UnitCubeEncoding([Dimension("float", 0, 1), Dimension("float", -3, 3)])
    box = Box(np.array([0.5, 0.0]), np.array([1.0, 0.5]))
    points = encoding.sample(500, np.random.default_rng(0), box)
    assert np.all(box.contains(points))


def test_log_scale_encoding() -> None:
    dim = Dimension("float", 1e-3, 1e3, log=True)
    np.testing.assert_allclose(dim.encode(np.array([1e-3, 1.0, 1e3])), [0.0, 0.5, 1.0])


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kind="float", low=1.0, high=0.0),
        dict(kind="float", low=0.0, high=1.0, log=True),
        dict(kind="float", low=0.0, high=1.0, step=-1.0),
        dict(kind="int", low=0, high=3),
        dict(kind="categorical", n_choices=0),
        dict(kind="complex"),
    ],
)
def test_invalid_dimensions_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Dimension(**kwargs)


def test_unknown_distribution_type_is_a_clear_error() -> None:
    class Weird(BaseDistribution):
        def to_external_repr(self, v):  # pragma: no cover - never called
            return v

        def to_internal_repr(self, v):  # pragma: no cover - never called
            return v

        def single(self) -> bool:  # pragma: no cover - never called
            return False

        def _contains(self, v) -> bool:  # pragma: no cover - never called
            return True

    with pytest.raises(TypeError, match="cannot encode"):
        SearchSpaceEncoder({"w": Weird()})
    with pytest.raises(ValueError, match="empty"):
        SearchSpaceEncoder({})


def test_contains_detects_values_outside_the_space() -> None:
    encoder = SearchSpaceEncoder(
        {"x": FloatDistribution(0, 1), "c": CategoricalDistribution(["a", "b"])}
    )
    assert encoder.contains({"x": 0.5, "c": "a"})
    assert not encoder.contains({"x": 1.5, "c": "a"})
    assert not encoder.contains({"x": 0.5, "c": "z"})
    assert not encoder.contains({"x": 0.5})


def test_wrong_shapes_are_rejected() -> None:
    encoding = UnitCubeEncoding([Dimension("float", 0, 1)])
    with pytest.raises(ValueError):
        encoding.encode(np.zeros((2, 3)))
    with pytest.raises(ValueError):
        encoding.decode(np.zeros((2, 3)))
    with pytest.raises(ValueError):
        Box(np.array([0.5]), np.array([0.2]))


def test_space_filling_design_is_a_latin_hypercube_in_the_box() -> None:
    encoding = UnitCubeEncoding(
        [Dimension("float", 0, 1), Dimension("float", 0, 1), Dimension("categorical", n_choices=3)]
    )
    box = Box(np.array([0.5, 0.0, 0.0, 0.0, 0.0]), np.array([1.0, 0.5, 1.0, 1.0, 1.0]))
    design = encoding.space_filling(6, np.random.default_rng(0), box)
    assert box.contains(design).all()
    # One point in each sixth of each numeric range; each category twice.
    np.testing.assert_array_equal(np.sort(np.floor((design[:, 0] - 0.5) * 12)), np.arange(6))
    np.testing.assert_array_equal(np.sort(np.floor(design[:, 1] * 12)), np.arange(6))
    np.testing.assert_array_equal(design[:, 2:].sum(axis=0), [2, 2, 2])
    again = encoding.space_filling(6, np.random.default_rng(0), box)
    np.testing.assert_array_equal(design, again)
    assert not np.allclose(design, encoding.space_filling(6, np.random.default_rng(1), box))


@pytest.mark.parametrize(
    "space",
    [
        {"a": FloatDistribution(0.0, 1.0), "b": FloatDistribution(1e-3, 10.0, log=True)},
        {"a": FloatDistribution(-2.0, 3.0), "b": IntDistribution(1, 9)},
        {"a": FloatDistribution(0.0, 1.0), "c": CategoricalDistribution(["p", "q", "r"])},
        {"a": FloatDistribution(0.5, 0.5), "b": FloatDistribution(0.0, 1.0)},
    ],
)
def test_snapping_moves_points_onto_what_they_decode_to(space: dict) -> None:
    encoding = SearchSpaceEncoder(space).encoding
    rng = np.random.default_rng(0)
    points = rng.uniform(-0.2, 1.2, size=(200, encoding.n_columns))
    snapped = encoding.snap(points)
    np.testing.assert_allclose(snapped, encoding.encode(encoding.decode(points)), atol=1e-12)
    np.testing.assert_allclose(encoding.snap(snapped), snapped, atol=1e-12)
    assert snapped.min() >= 0.0 and snapped.max() <= 1.0
