from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
from optuna.distributions import CategoricalDistribution
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution
import pytest

from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import presets
from optuna_fedbo.federation._codec import decode_array
from optuna_fedbo.federation._codec import encode_array
from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.fts.config import FTSConfig
from optuna_fedbo.federation.fts.schedules import local_probability
from optuna_fedbo.federation.fts.schedules import resolve_schedule
from optuna_fedbo.federation.fts.subregions import SubregionPartition
from optuna_fedbo.search_space import SearchSpaceEncoder

SPACE = {
    "C": FloatDistribution(1e-3, 1e3, log=True),
    "gamma": FloatDistribution(1e-4, 1.0, log=True),
    "kernel": CategoricalDistribution(["rbf", "poly"]),
}


def _config(**kwargs) -> FederationConfig:
    base = dict(name="fed", search_space=SPACE, n_clients=4, protocol=FTSConfig(), seed=0)
    base.update(kwargs)
    return FederationConfig(**base)


def test_config_round_trips_through_json_with_the_same_hash() -> None:
    config = _config(protocol=presets.fts_de())
    again = FederationConfig.from_json(config.to_json())
    assert again == config
    assert again.hash == config.hash
    assert list(again.search_space) == list(SPACE)
    assert again.protocol == presets.fts_de()


def test_a_configuration_stored_in_another_format_is_refused() -> None:
    record = _config().to_dict()
    record["format"] = 1  # multi-scale features of 0.02-0.5 in every dimension
    with pytest.raises(ValueError, match="format 1 .*reads format 2"):
        FederationConfig.from_json(json.dumps(record))


@pytest.mark.parametrize(
    "change",
    [
        {"name": "other"},
        {"n_clients": 5},
        {"seed": 1},
        {"protocol": FTSConfig(n_features=50)},
        {"search_space": {**SPACE, "C": FloatDistribution(1e-3, 1e2, log=True)}},
        {"search_space": dict(reversed(list(SPACE.items())))},
    ],
)
def test_any_change_changes_the_hash_and_is_described(change: dict) -> None:
    config, other = _config(), _config(**change)
    assert other.hash != config.hash
    differences = config.differences(other)
    assert differences
    assert all(isinstance(d, str) and d for d in differences)
    assert config.differences(_config()) == []


def test_differences_name_the_parameter_that_differs() -> None:
    other = _config(search_space={**SPACE, "gamma": FloatDistribution(1e-5, 1.0, log=True)})
    (difference,) = _config().differences(other)
    assert "gamma" in difference
    (difference,) = _config().differences(_config(protocol=FTSConfig(n_subregions=2)))
    assert difference.startswith("protocol.n_subregions")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_features": 0},
        {"n_features": 2.5},
        {"lengthscale": 0.0},
        {"lengthscale": math.inf},
        {"noise_variance": -1.0},
        {"n_subregions": 0},
        {"n_subregions": True},
        {"weight_a": 0.0},
        {"weight_hold_rounds": -1},
        {"n_init": -1},
        {"aggregation": "mean"},
        {"aggregation": "sample", "n_subregions": 2},
        {"schedule": "1/t"},
        {"init_in_subregion": 1},
    ],
)
def test_fts_config_rejects_invalid_values(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        FTSConfig(**kwargs)


def test_fts_config_defaults_match_the_local_sampler() -> None:
    from optuna_fedbo.samplers._rff_thompson import DEFAULT_LENGTHSCALE
    from optuna_fedbo.samplers._rff_thompson import DEFAULT_NOISE_VARIANCE

    config = FTSConfig()
    assert config.lengthscale is None  # multi-scale shared features (issue 10)
    assert config.noise_variance == DEFAULT_NOISE_VARIANCE
    assert config.aggregation is None  # pooled statistics, or weighted vectors (resolve)
    assert presets.PAPER_ALGORITHM["lengthscale"] == DEFAULT_LENGTHSCALE


def test_the_default_aggregation_pools_statistics_unless_dp_or_subregions_need_vectors() -> None:
    encoder = SearchSpaceEncoder({"x": FloatDistribution(0.0, 1.0)})
    assert FTSConfig().resolve(encoder, None).aggregation == "pooled"
    assert FTSConfig().resolve(encoder, DPConfig(1.0, 0.5, 1.0)).aggregation == "weighted"
    assert FTSConfig(n_subregions=2).resolve(encoder, None).aggregation == "weighted"
    assert FTSConfig(aggregation="sample").resolve(encoder, None).aggregation == "sample"
    with pytest.raises(ValueError, match="no sub-regions"):
        FTSConfig(aggregation="pooled", n_subregions=2)
    with pytest.raises(ValueError, match="n_features <= 300"):
        FTSConfig(aggregation="pooled", n_features=301)
    with pytest.raises(ValueError, match="sufficient statistics"):
        FTSConfig(aggregation="pooled").check_privacy(DPConfig(1.0, 0.5, 1.0))
    with pytest.raises(ValueError, match="upload_length needs a resolved"):
        FTSConfig().upload_length  # noqa: B018
    pooled = FTSConfig().resolve(encoder, None)
    assert pooled.upload_length == 3 + 2 * 100 + 100 * 101 // 2 + 4 * (3 + 200 + 5050)


def test_protocol_registry_round_trip_and_unknown_kind() -> None:
    config = FTSConfig(n_subregions=3, schedule="1-1/t^2")
    record = config.to_dict()
    assert record["kind"] == "fts"
    assert ProtocolConfig.from_dict(record) == config
    with pytest.raises(ValueError, match="Unknown protocol kind"):
        ProtocolConfig.from_dict({"kind": "nope"})
    with pytest.raises(ValueError, match="Unknown fields"):
        ProtocolConfig.from_dict({**record, "surprise": 1})


def test_federation_config_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        _config(name="")
    with pytest.raises(ValueError):
        _config(n_clients=0)
    with pytest.raises(ValueError):
        _config(seed=-1)
    with pytest.raises(ValueError):
        _config(search_space={})
    with pytest.raises(ValueError):
        _config(search_space={"x": (0, 1)})
    with pytest.raises(ValueError, match="categorical"):
        _config(
            search_space={"k": CategoricalDistribution(["a", "b"])},
            protocol=FTSConfig(n_subregions=2),
        )


def test_schedules() -> None:
    inverse = resolve_schedule("1-1/t")
    assert [local_probability(inverse, t) for t in (1, 2, 4)] == [0.0, 0.5, 0.75]
    assert local_probability(resolve_schedule("1-1/sqrt(t)"), 4) == pytest.approx(0.5)
    assert local_probability(resolve_schedule("1-1/t^2"), 3) == pytest.approx(8 / 9)
    fts = resolve_schedule("fts")
    assert local_probability(fts, 1) == local_probability(fts, 2) == 0.75
    assert local_probability(resolve_schedule(lambda t: 0.3), 7) == 0.3
    with pytest.raises(ValueError, match="must lie in"):
        local_probability(resolve_schedule(lambda t: 1.5), 1)
    with pytest.raises(ValueError):
        local_probability(inverse, 0)
    with pytest.raises(ValueError):
        resolve_schedule("1/t")
    with pytest.raises(ValueError):
        resolve_schedule(3)


def _partition(space: dict, n: int) -> SubregionPartition:
    return SubregionPartition(SearchSpaceEncoder(space).encoding, n)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_one_dimensional_sub_regions_are_the_papers_intervals(n: int) -> None:
    partition = _partition({"x": FloatDistribution(0, 1)}, n)
    for i, box in enumerate(partition.boxes()):
        assert box.low[0] == pytest.approx(i / n) and box.high[0] == pytest.approx((i + 1) / n)
    points = np.linspace(0, 1, 1001)[:, None]
    expected = np.minimum(np.floor(points[:, 0] * n), n - 1).astype(int)
    np.testing.assert_array_equal(partition.index_of(points), expected)
    # [0, 0.5) and [0.5, 1]: the boundary belongs to the upper sub-region.
    if n == 2:
        assert partition.index_of(np.array([[0.5]]))[0] == 1


@pytest.mark.parametrize("n_dims", [2, 3])
def test_four_sub_regions_are_the_papers_two_by_two_grid(n_dims: int) -> None:
    space = {f"x{d}": FloatDistribution(0, 1) for d in range(n_dims)}
    boxes = _partition(space, 4).boxes()
    expected = [
        ([0, 0], [0.5, 0.5]),
        ([0, 0.5], [0.5, 1]),
        ([0.5, 0], [1, 0.5]),
        ([0.5, 0.5], [1, 1]),
    ]
    for box, (low, high) in zip(boxes, expected):
        np.testing.assert_allclose(box.low[:2], low)
        np.testing.assert_allclose(box.high[:2], high)
        if n_dims == 3:
            assert (box.low[2], box.high[2]) == (0.0, 1.0)


@pytest.mark.parametrize("n", [2, 4, 6, 8, 9])
def test_sub_regions_partition_the_cube_into_equal_volumes(n: int) -> None:
    space = {
        "a": FloatDistribution(0, 1),
        "k": CategoricalDistribution(["u", "v", "w"]),
        "b": IntDistribution(1, 100, log=True),
    }
    encoder = SearchSpaceEncoder(space)
    partition = SubregionPartition(encoder.encoding, n)
    volumes = [np.prod(b.high - b.low) for b in partition.boxes()]
    np.testing.assert_allclose(volumes, 1.0 / n)
    # Categorical one-hot columns are never split.
    for box in partition.boxes():
        assert np.all(box.low[encoder.encoding.categorical_columns] == 0.0)
        assert np.all(box.high[encoder.encoding.categorical_columns] == 1.0)
    rng = np.random.default_rng(0)
    points = encoder.encoding.sample(2000, rng)
    index = partition.index_of(points)
    for i in range(n):
        inside = partition.box(i).contains(points)
        assert np.all(inside[index == i])
    assert set(np.unique(index)) == set(range(n))


def test_sub_regions_reject_bad_input() -> None:
    encoding = SearchSpaceEncoder({"k": CategoricalDistribution(["a", "b"])}).encoding
    with pytest.raises(ValueError):
        SubregionPartition(encoding, 2)
    assert SubregionPartition(encoding, 1).n_subregions == 1
    partition = _partition({"x": FloatDistribution(0, 1)}, 3)
    with pytest.raises(ValueError):
        partition.box(3)
    with pytest.raises(ValueError):
        partition.index_of(np.zeros((1, 2)))


def test_array_codec_is_exact_and_strict() -> None:
    values = np.array([[0.1, -1e300, 5e-324], [np.pi, 0.0, -0.0]])
    record = encode_array(values)
    decoded = decode_array(record)
    assert decoded.shape == values.shape
    assert decoded.tobytes() == values.astype("<f8").tobytes()
    with pytest.raises(ValueError):
        decode_array({**record, "shape": [2, 2]})
    with pytest.raises(ValueError):
        decode_array({**record, "f8": "not base64!"})
    with pytest.raises(ValueError):
        decode_array({"shape": [1]})
    with pytest.raises(ValueError):
        decode_array([1.0])


def test_config_is_frozen() -> None:
    config = FTSConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.n_features = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "space, private, expected",
    [
        ({f"x{i}": FloatDistribution(0.0, 1.0) for i in range(3)}, False, 100),
        ({f"x{i}": FloatDistribution(0.0, 1.0) for i in range(4)}, False, 200),
        # Parameters that vary count, as in the features' lengthscale range: a categorical of
        # three choices is one dimension (three encoded columns), a fixed parameter none.
        (
            {"x": FloatDistribution(0.0, 1.0), "k": CategoricalDistribution(["a", "b", "c"])},
            False,
            100,
        ),
        (
            {
                **{f"x{i}": FloatDistribution(0.0, 1.0) for i in range(3)},
                "c": IntDistribution(3, 3),
            },
            False,
            100,
        ),
        ({f"x{i}": FloatDistribution(0.0, 1.0) for i in range(4)}, True, 100),  # DP: 100
    ],
)
def test_the_default_number_of_features_is_resolved_when_the_federation_is_created(
    space, private, expected
) -> None:
    assert FTSConfig().n_features is None
    privacy = DPConfig(noise_multiplier=1.0, sample_rate=0.5, clip_norm=10.0) if private else None
    fed = Federation.create(
        f"features-{len(space)}-{private}", search_space=space, n_clients=2, privacy=privacy
    )
    assert fed.fts.n_features == expected
    assert fed.features().n_features == expected
    # The stored configuration holds the number, and an explicit one is kept as given.
    assert FederationConfig.from_json(fed.config.to_json()).protocol.n_features == expected
    explicit = Federation.create(
        f"explicit-{len(space)}-{private}",
        search_space=space,
        n_clients=2,
        protocol=FTSConfig(n_features=50),
        privacy=privacy,
    )
    assert explicit.fts.n_features == 50
    with pytest.raises(ValueError, match="n_features must be a positive integer"):
        FTSConfig(n_features=0)


def test_categorical_columns_are_scaled_in_the_shared_features() -> None:
    from optuna_fedbo.core.pooling import pooling_feature_maps
    from optuna_fedbo.core.rff import mixture_kernel
    from optuna_fedbo.federation.fts.config import CATEGORICAL_SCALE

    space = {
        **{f"x{i}": FloatDistribution(0.0, 1.0) for i in range(3)},
        "k": CategoricalDistribution(["a", "b"]),
    }
    assert FTSConfig().categorical_scale is None
    fed = Federation.create("categorical-scale", search_space=space, n_clients=2)
    # Resolved and stored at creation.
    assert fed.fts.categorical_scale == CATEGORICAL_SCALE
    stored = FederationConfig.from_json(fed.config.to_json()).protocol
    assert stored.categorical_scale == CATEGORICAL_SCALE
    features = fed.features()
    assert np.array_equal(features.column_scales, [1.0] * 3 + [CATEGORICAL_SCALE] * 2)
    for block in pooling_feature_maps(features)[1:]:  # the pooled single-scale blocks too
        assert np.array_equal(block.column_scales, features.column_scales)
    # Two choices at one x: the features' kernel is that of points sqrt(2) * scale apart
    # (unscaled, sqrt(2): about independent).
    a, b = np.array([[0.3, 0.6, 0.9, 1.0, 0.0]]), np.array([[0.3, 0.6, 0.9, 0.0, 1.0]])
    low, high = features.lengthscale
    expected = mixture_kernel(np.array(math.sqrt(2) * CATEGORICAL_SCALE), low, high)
    assert float((features(a) @ features(b).T)[0, 0]) == pytest.approx(float(expected), abs=0.1)
    plain = Federation.create(
        "categorical-unscaled",
        search_space=space,
        n_clients=2,
        protocol=FTSConfig(categorical_scale=1.0),
    ).features()
    assert plain.column_scales is None
    assert abs(float((plain(a) @ plain(b).T)[0, 0])) < 0.1
    assert float(expected) > 0.4
    # A configuration stored before the field keeps the one-hot columns as they are.
    record = json.loads(fed.config.to_json())
    del record["protocol"]["categorical_scale"]
    old = FederationConfig.from_json(json.dumps(record)).protocol
    assert old.categorical_scale is None
    # Numeric spaces are not touched.
    numeric = Federation.create(
        "categorical-none", search_space={"x": FloatDistribution(0.0, 1.0)}, n_clients=2
    )
    assert numeric.features().column_scales is None
    for bad in (-0.5, float("nan"), True, "0"):
        with pytest.raises(ValueError, match="categorical_scale"):
            FTSConfig(categorical_scale=bad)
