"""Settings of the papers (FTS, NeurIPS 2020; DP-FTS-DE, NeurIPS 2021).

The names say what they do: :func:`fts`, :func:`fts_de` and :func:`fts_de_synthetic` return an
:class:`FTSConfig` (no privacy); :func:`dp_fts_de` and :func:`dp_fts` return a
:class:`~optuna_fedbo.federation.preset.Preset` (the protocol together with the paper's
:class:`DPConfig`), so ``Federation.create(..., protocol=presets.dp_fts_de())`` is the paper's
real-world setting with its privacy: ``M = 100``, ``P = 4``, ``S = 22``, ``q = 0.35``, ``z = 1``,
``1 - p_t = 1/t``, ``n_init = 10``, ``delta = 1/N^1.1``, moments accountant.
:func:`dp_fts_de_privacy` returns that :class:`DPConfig` alone.

Every preset takes keyword overrides of any field of the configuration(s) it returns. The presets
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
from optuna_fedbo.federation.dp_config import PAPER_DELTA
from optuna_fedbo.federation.fts.config import FTSConfig
from optuna_fedbo.federation.preset import Preset

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


def fts_de(**overrides: Any) -> FTSConfig:
    """DP-FTS-DE's real-world setting without privacy (FTS-DE).

    ``M = 100``, ``P = 4`` sub-regions, softmax weights with ``a = 15`` held 10 rounds then
    decayed to uniform over 30 rounds, ``1 - p_t = 1/t``, 10 initial points in the agent's
    sub-region, weighted aggregation. :func:`dp_fts_de` adds the paper's privacy.
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


def fts_de_synthetic(**overrides: Any) -> FTSConfig:
    """DP-FTS-DE's synthetic setting without privacy.

    ``M = 50``, ``P = 2``, weights held 5 rounds and decayed over 5, ``1 - p_t = 1/sqrt(t)``,
    10 initial points in the agent's sub-region.
    """
    base = fts_de(
        n_features=50,
        n_subregions=2,
        weight_hold_rounds=5,
        weight_decay_rounds=5,
        schedule="1-1/sqrt(t)",
    )
    return dataclasses.replace(base, **overrides)


def dp_fts_de(**overrides: Any) -> Preset:
    """DP-FTS-DE (real-world setting): :func:`fts_de` with :func:`dp_fts_de_privacy`.

    ``Federation.create(..., protocol=presets.dp_fts_de())`` turns differential privacy on.
    Overrides go to whichever of :class:`FTSConfig` and :class:`DPConfig` has the field (e.g.
    ``dp_fts_de(n_init=5, epsilon_budget=8.0)``).
    """
    return _private(fts_de, overrides)


def dp_fts(**overrides: Any) -> Preset:
    """DP-FTS (the modified FTS of DP-FTS-DE, with privacy): :func:`dp_fts_de` with ``P = 1``."""
    return _private(fts_de, {"n_subregions": 1, **overrides})


def _private(protocol: Any, overrides: dict[str, Any]) -> Preset:
    privacy_fields = {f.name for f in dataclasses.fields(DPConfig)}
    privacy = {k: v for k, v in overrides.items() if k in privacy_fields}
    rest = {k: v for k, v in overrides.items() if k not in privacy_fields}
    return Preset(protocol=protocol(**rest), privacy=dp_fts_de_privacy(**privacy))


def dp_fts_de_privacy(**overrides: Any) -> DPConfig:
    """DP-FTS-DE's privacy settings (real-world experiments, Section 5.2).

    ``z = 1``, ``q = 0.35``, ``S = 22``, Poisson subsampling, ``delta = 1/N^1.1`` (a weak
    guarantee, kept to reproduce the papers; creating the federation warns) and the papers'
    moments accountant, which reproduces their reported privacy losses (``"pld"``,
    the library default, gives about 30% less epsilon for the same rounds). No budget unless
    ``epsilon_budget`` is passed.
    """
    base = DPConfig(
        noise_multiplier=1.0,
        sample_rate=0.35,
        clip_norm=22.0,
        delta=PAPER_DELTA,
        accountant="moments",
        sampling="poisson",
        epsilon_budget=None,
    )
    return dataclasses.replace(base, **overrides)


#: Privacy presets by name (for the command line).
PRIVACY_PRESETS = {"dp-fts-de": dp_fts_de_privacy}

#: Presets by name (for the command line); the ``dp-`` ones turn differential privacy on.
PRESETS = {
    "fts": fts,
    "fts-de": fts_de,
    "fts-de-synthetic": fts_de_synthetic,
    "dp-fts": dp_fts,
    "dp-fts-de": dp_fts_de,
}
