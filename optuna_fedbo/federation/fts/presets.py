"""Settings of the papers (FTS, NeurIPS 2020; DP-FTS-DE, NeurIPS 2021).

The protocol presets return an :class:`FTSConfig`; :func:`dp_fts_de_privacy` returns the
DP-FTS-DE paper's :class:`DPConfig` (pass both: ``Federation.create(...,
protocol=presets.dp_fts_de(), privacy=presets.dp_fts_de_privacy())`` is the paper's real-world
setting: ``M = 100``, ``P = 4``, ``S = 22``, ``q = 0.35``, ``z = 1``, ``1 - p_t = 1/t``,
``n_init = 10``, ``delta = 1/N^1.1``, moments accountant).

Every preset takes keyword overrides of any field of the configuration it returns. The presets
run the papers' algorithms (:data:`PAPER_ALGORITHM`: single-lengthscale features, uniform
initial points, the ``p_t`` schedule between local Thompson sampling and the broadcast) rather
than :class:`FTSConfig`'s defaults. The shared features keep this package's lengthscale (0.2 in
unit-cube coordinates) rather than the papers' 0.01, with which a shared vector carries almost no
signal about a function on ``[0, 1]^D``, and values are standardized per participant; pass
``lengthscale=0.01`` and ``normalization="raw"`` for the papers' features and values.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.fts.config import FTSConfig

#: The fields that select the papers' algorithms instead of the package's default sampler.
PAPER_ALGORITHM: dict[str, Any] = {
    "lengthscale": 0.2,
    "normalization": "participant",
    "initial_design": "uniform",
    "transfer": "schedule",
}


def fts(**overrides: Any) -> FTSConfig:
    """The original FTS (real-world experiments of the FTS paper).

    ``M = 100``, no sub-regions, the server relays every agent's vector and each participant
    draws one uniformly (``P_N`` uniform over the agents that uploaded), ``p_t = 1 - 1/t^2``
    with ``p_1 = p_2`` (schedule ``"fts"``), 10 initial points.
    """
    base = FTSConfig(
        n_features=100,
        n_subregions=1,
        aggregation="sample",
        schedule="fts",
        n_init=10,
        **PAPER_ALGORITHM,
    )
    return dataclasses.replace(base, **overrides)


def dp_fts_de(**overrides: Any) -> FTSConfig:
    """DP-FTS-DE's real-world setting without privacy (FTS-DE).

    ``M = 100``, ``P = 4`` sub-regions, softmax weights with ``a = 15`` held 10 rounds then
    decayed to uniform over 30 rounds, ``1 - p_t = 1/t``, 10 initial points in the agent's
    sub-region, weighted aggregation.
    """
    base = FTSConfig(
        n_features=100,
        n_subregions=4,
        weight_a=15.0,
        weight_hold_rounds=10,
        weight_decay_rounds=30,
        n_init=10,
        init_in_subregion=True,
        aggregation="weighted",
        schedule="1-1/t",
        **PAPER_ALGORITHM,
    )
    return dataclasses.replace(base, **overrides)


def dp_fts(**overrides: Any) -> FTSConfig:
    """Modified FTS of DP-FTS-DE without privacy: :func:`dp_fts_de` with ``P = 1``."""
    return dp_fts_de(**{"n_subregions": 1, **overrides})


def dp_fts_de_synthetic(**overrides: Any) -> FTSConfig:
    """DP-FTS-DE's synthetic setting without privacy.

    ``M = 50``, ``P = 2``, weights held 5 rounds and decayed over 5, ``1 - p_t = 1/sqrt(t)``,
    10 initial points in the agent's sub-region.
    """
    base = dp_fts_de(
        n_features=50,
        n_subregions=2,
        weight_hold_rounds=5,
        weight_decay_rounds=5,
        schedule="1-1/sqrt(t)",
    )
    return dataclasses.replace(base, **overrides)


def dp_fts_de_privacy(**overrides: Any) -> DPConfig:
    """DP-FTS-DE's privacy settings (real-world experiments, Section 5.2).

    ``z = 1``, ``q = 0.35``, ``S = 22``, Poisson subsampling, ``delta = 1/N^1.1`` and the
    papers' moments accountant, which reproduces their reported privacy losses (``"pld"``,
    the library default, gives about 30% less epsilon for the same rounds). No budget unless
    ``epsilon_budget`` is passed.
    """
    base = DPConfig(
        noise_multiplier=1.0,
        sample_rate=0.35,
        clip_norm=22.0,
        delta=None,
        accountant="moments",
        sampling="poisson",
        epsilon_budget=None,
    )
    return dataclasses.replace(base, **overrides)


#: Privacy presets by name (for the command line).
PRIVACY_PRESETS = {"dp-fts-de": dp_fts_de_privacy}

#: Presets by name (for the command line).
PRESETS = {
    "fts": fts,
    "dp-fts": dp_fts,
    "dp-fts-de": dp_fts_de,
    "dp-fts-de-synthetic": dp_fts_de_synthetic,
}
