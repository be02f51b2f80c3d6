"""Paper presets: the papers' values (with their sources), warnings on departures, clip norms."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from optuna_fedbo.federation import presets
from optuna_fedbo.federation._paper import PaperDepartureWarning
from optuna_fedbo.federation.fedpne.presets import fed_pne


def test_dp_fts_de_real_world_preset_is_the_papers() -> None:
    de = presets.fts_de()
    assert (de.n_features, de.n_subregions, de.weight_a, de.n_init) == (100, 4, 15.0, 10)
    assert (de.weight_hold_rounds, de.weight_decay_rounds) == (10, 30)
    assert (de.lengthscale, de.noise_variance) == (0.01, 1e-6)
    assert de.schedule == "1-1/t" and de.aggregation == "weighted" and de.init_in_subregion
    # The papers' algorithm: raw values (zero-mean GP), uniform initial points, the p_t schedule.
    assert (de.normalization, de.initial_design, de.transfer) == ("raw", "uniform", "schedule")
    assert presets.modified_fts().n_subregions == 1
    assert presets.modified_fts().noise_variance == 1e-6


def test_dp_fts_de_synthetic_preset_is_the_papers() -> None:
    synthetic = presets.fts_de_synthetic()
    assert (synthetic.n_features, synthetic.n_subregions) == (50, 2)
    assert (synthetic.weight_hold_rounds, synthetic.weight_decay_rounds) == (5, 5)
    assert (synthetic.lengthscale, synthetic.noise_variance) == (0.03, 0.01)
    assert synthetic.schedule == "1-1/sqrt(t)" and synthetic.normalization == "raw"
    assert presets.modified_fts_synthetic().n_subregions == 1
    privacy = presets.dp_fts_de_synthetic_privacy()
    assert (privacy.noise_multiplier, privacy.sample_rate, privacy.accountant) == (
        1.0,
        0.25,
        "moments",
    )
    # Fig. 2c: 9.91 after T = 40 used broadcasts at N = 200.
    assert privacy.epsilon(40, 200) == pytest.approx(9.91, abs=0.01)


def test_fts_presets_are_the_papers() -> None:
    fts = presets.fts()
    assert fts.aggregation == "sample" and fts.n_subregions == 1 and fts.schedule == "fts"
    assert (fts.n_features, fts.lengthscale, fts.noise_variance, fts.n_init) == (
        100,
        0.01,
        1e-6,
        3,
    )
    synthetic = presets.fts_synthetic()
    assert (synthetic.lengthscale, synthetic.noise_variance, synthetic.n_init) == (0.03, 0.01, 1)
    assert synthetic.schedule == "1-1/sqrt(t)" and synthetic.normalization == "raw"
    assert (fts.transfer, synthetic.transfer) == ("schedule", "schedule")


def test_fed_pne_preset_is_the_papers() -> None:
    config = fed_pne(500)
    assert (config.horizon, config.nu1, config.rho, config.c, config.c1) == (
        500,
        1.0,
        0.5,
        0.1,
        1.0,
    )
    assert (config.branching, config.split, config.constants) == (2, "random", "experiments")


@pytest.mark.parametrize(
    "make, overrides",
    [
        (presets.fts_de_synthetic, {"n_subregions": 3}),  # Fig. 2a
        (presets.fts_de_synthetic, {"n_subregions": 4, "schedule": "1-1/t^2"}),  # Fig. 7b
        (presets.fts_de, {"n_subregions": 6, "weight_a": 9}),  # App. B.2.3
        (presets.fts, {"n_features": 200}),  # FTS Fig. 2
        (presets.dp_fts_de_privacy, {"noise_multiplier": 4, "clip_norm": 7.5}),  # Fig. 3
        (presets.dp_fts_de_synthetic_privacy, {"sample_rate": 0.5}),  # Fig. 2c
    ],
)
def test_values_the_paper_uses_do_not_warn(make, overrides) -> None:  # noqa: ANN001
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = make(**overrides)
    for key, value in overrides.items():
        assert getattr(config, key) == value


@pytest.mark.parametrize(
    "make, overrides, field",
    [
        (presets.fts_de_synthetic, {"lengthscale": 0.2}, "lengthscale"),
        (presets.fts_de_synthetic, {"normalization": "shared"}, "normalization"),
        (presets.fts_de, {"transfer": "prior"}, "transfer"),
        (presets.fts, {"lengthscale": None}, "lengthscale"),
        (presets.fts_de, {"weight_hold_rounds": 0, "weight_decay_rounds": 0}, "weight_"),
        (presets.modified_fts, {"n_subregions": 2}, "n_subregions"),
        (presets.fts, {"schedule": "1-1/t"}, "schedule"),
        (presets.dp_fts_de_privacy, {"accountant": "pld"}, "accountant"),
        (lambda **o: fed_pne(100, **o), {"rho": 0.75}, "rho"),
    ],
)
def test_a_departure_from_the_paper_warns(make, overrides, field: str) -> None:  # noqa: ANN001
    with pytest.warns(PaperDepartureWarning, match=f"{field}.*no longer the paper's"):
        config = make(**overrides)
    for key, value in overrides.items():
        assert getattr(config, key) == value  # the caller still gets what was asked for


def test_unknown_fields_are_errors() -> None:
    with pytest.raises(TypeError):
        presets.fts(unknown_field=1)


def test_clip_norm_for_fraction_clips_that_fraction() -> None:
    norms = np.random.default_rng(0).gamma(20.0, 0.4, size=10_000)
    for n_subregions in (1, 2, 4):
        clip = presets.clip_norm_for_fraction(
            norms, n_subregions=n_subregions, clipped_fraction=0.01
        )
        bound = clip / np.sqrt(n_subregions)  # the server clips to S / sqrt(P)
        assert np.mean(norms > bound) == pytest.approx(0.01, abs=0.001)
    with pytest.raises(ValueError, match="clipped_fraction"):
        presets.clip_norm_for_fraction(norms, clipped_fraction=0.0)
    with pytest.raises(ValueError, match="norms"):
        presets.clip_norm_for_fraction([], clipped_fraction=0.01)
    with pytest.raises(ValueError, match="norms"):
        presets.clip_norm_for_fraction([1.0, np.nan])
