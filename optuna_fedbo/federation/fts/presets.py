"""The papers' configurations (FTS, NeurIPS 2020; DP-FTS-DE, NeurIPS 2021).

The names say what they do. :func:`fts`, :func:`fts_synthetic`, :func:`fts_de`,
:func:`fts_de_synthetic`, :func:`modified_fts` and :func:`modified_fts_synthetic` return the
:class:`FTSConfig` of one paper's experiments (no privacy); :func:`dp_fts_de`, :func:`dp_fts`,
:func:`dp_fts_de_synthetic` and :func:`dp_fts_synthetic` return a
:class:`~optuna_fedbo.federation.preset.Preset`, the protocol together with the paper's
:class:`DPConfig` (:func:`dp_fts_de_privacy`, :func:`dp_fts_de_synthetic_privacy`), so
``Federation.create(..., protocol=presets.dp_fts_de())`` is DP-FTS-DE's real-world setting with
its privacy. Each preset cites where every value comes from. Every preset takes
keyword overrides of any field; an override with a value the paper does not use warns
(:class:`PaperDepartureWarning`): the result is no longer the paper's configuration. Values the
paper itself varies (e.g. ``P`` in 2, 3, 4 in DP-FTS-DE's Fig. 2a) do not warn.

What the presets share with the papers (:data:`PAPER_MODEL` and the papers' values): the
shared random Fourier features of one lengthscale (``phi(x) = sqrt(2/M) cos(s x + b)`` rescaled
to unit norm), a zero-mean model of the **raw** values (``normalization="raw"``: the papers' GP
and the authors' code fit raw values), uniform initial points, the ``p_t`` schedule between
local Thompson sampling and the broadcast (``transfer="schedule"``), the papers' lengthscale and
noise variance, ``M``, ``P``, ``n_init``, the schedules and the softmax weights.
:class:`FTSConfig`'s defaults go beyond the papers (multi-scale features, one value scale
shared by all participants, a local GP with the broadcast as prior mean); ``REPRODUCTION.md``
shows both side by side.

What still departs in every FTS-family preset (the participants' side, not configuration):

- the local model is Bayesian linear regression on the shared features with the preset's fixed
  lengthscale; the authors' code fits a GP (GPy) with hyperparameters refitted every 5
  observations (FACTS: "Local GP there");
- acquisition: :class:`~optuna_fedbo.FedThompsonSampler` scores ``n_candidates`` random points
  and refines the best ``n_refinements`` with L-BFGS-B; the authors' code scores 10,000 (FTS) or
  1,000 (DP-FTS-DE) random points and runs 50 or 20 L-BFGS-B restarts;
- every participant uploads every round and uses the newest broadcast (the synchronous rounds of
  DP-FTS-DE, and FTS's "most general setting", App. D.2.1); FTS's main experiments instead
  send the other agents' vectors once, before the target agent starts.

Clip norms are chosen the papers' way: so that a small fraction (DP-FTS-DE: 0.3-1%) of the
uploaded vectors is clipped (:func:`clip_norm_for_fraction`, from the server's
``RoundReport.upload_norms`` of a pilot run); the papers' own ``S`` (22 and 11) fit their
features and values, not necessarily yours, so ``clip_norm`` never warns.
"""

from __future__ import annotations

from dataclasses import fields
from dataclasses import replace
import math
from typing import Any

import numpy as np

from optuna_fedbo.federation._paper import paper_preset
from optuna_fedbo.federation._paper import PaperDepartureWarning
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.dp_config import PAPER_DELTA
from optuna_fedbo.federation.fts.config import FTSConfig
from optuna_fedbo.federation.preset import Preset

#: The papers' model, where :class:`FTSConfig`'s defaults go beyond it: a zero-mean model of
#: the raw values, uniform initial points, and the ``p_t`` schedule between local Thompson
#: sampling and the broadcast (every preset also fixes its paper's single lengthscale).
PAPER_MODEL: dict[str, Any] = {
    "normalization": "raw",
    "initial_design": "uniform",
    "transfer": "schedule",
}

#: The papers' algorithm as the first release ran it (one lengthscale of 0.2, values standardized
#: per participant): what the behaviour tests and the first-release benchmarks pin.
PAPER_ALGORITHM: dict[str, Any] = {
    "aggregation": "weighted",
    "lengthscale": 0.2,
    "normalization": "participant",
    "initial_design": "uniform",
    "transfer": "schedule",
}


def _fts_paper(**values: Any) -> dict[str, tuple[Any, ...]]:
    """Paper values of every FTSConfig field: the given ones, else one value each."""
    return {key: value if isinstance(value, tuple) else (value,) for key, value in values.items()}


_FTS_REAL = _fts_paper(
    n_features=(100, 50, 150, 200),  # M = 100 (Fig. 3); Fig. 2 sweeps M = 50, 100, 150, 200
    lengthscale=0.01,  # App. D.2.2
    noise_variance=1e-6,  # App. D.2.2
    n_subregions=1,
    n_init=3,  # Fig. 2/3: "5 different initializations of 3 randomly selected inputs"
    init_in_subregion=(True, False),  # no sub-regions: the same draws either way
    aggregation="sample",  # P_N uniform over the agents (Sec. 5.2)
    schedule="fts",  # p_t = 1 - 1/t^2, p_1 = p_2 (Sec. 5.2)
    **{key: (value,) for key, value in PAPER_MODEL.items()},
)


def fts(**overrides: Any) -> FTSConfig:
    """FTS's real-world setting (FTS paper, Section 5.2 and Appendix D.2.2).

    ``M = 100`` shared features of lengthscale 0.01, noise variance ``1e-6``, raw values, no
    sub-regions, the server relays every agent's vector and a participant draws one uniformly
    (``P_N[n] = 1/N``), ``p_t = 1 - 1/t^2`` with ``p_1 = p_2`` (schedule ``"fts"``), 3 initial
    points.

    Departures besides the module's: the weight fields are unused (no sub-regions).
    """
    base = FTSConfig(
        n_features=100,
        lengthscale=0.01,
        noise_variance=1e-6,
        n_subregions=1,
        n_init=3,
        aggregation="sample",
        schedule="fts",
        **PAPER_MODEL,
    )
    return paper_preset("fts", base, _FTS_REAL, overrides)


_FTS_SYNTHETIC = {
    **_FTS_REAL,
    **_fts_paper(
        n_features=100,  # Fig. 1: "M = 100 is large"; Fig. 1a/b vary M
        lengthscale=0.03,  # App. D.1: the GP the functions are drawn from
        noise_variance=0.01,  # App. D.1: observation noise variance
        n_init=1,  # Fig. 1: "random initializations of 1 input"
        schedule=("1-1/sqrt(t)", "1-1/t^2"),  # Sec. 5.1; Fig. 1c: a faster-growing p_t
    ),
}


def fts_synthetic(**overrides: Any) -> FTSConfig:
    """FTS's synthetic setting (FTS paper, Section 5.1 and Appendix D.1).

    ``M = 100`` features of lengthscale 0.03 (the kernel the functions are drawn from), noise
    variance 0.01, raw values, the original FTS relay (``P_N`` uniform), ``1 - p_t = 1/sqrt(t)``,
    1 initial point.

    Departures besides the module's: the paper sets ``p_1 = p_2`` (schedule ``"1-1/sqrt(t)"``
    has ``p_1 = 0``: the first BO iteration uses the broadcast); the paper's other agents hold
    ``t_n`` random observations and send once, ours run FTS themselves and send every round.
    """
    base = FTSConfig(
        n_features=100,
        lengthscale=0.03,
        noise_variance=0.01,
        n_subregions=1,
        n_init=1,
        aggregation="sample",
        schedule="1-1/sqrt(t)",
        **PAPER_MODEL,
    )
    return paper_preset("fts_synthetic", base, _FTS_SYNTHETIC, overrides)


_DE_REAL = _fts_paper(
    n_features=100,  # Sec. 5.2
    lengthscale=0.01,  # App. B.2.1
    noise_variance=1e-6,  # App. B.2.1
    n_subregions=(4, 2, 3, 6),  # Sec. 5.2: P = 4; App. B.2.3 (Fig. 10): P = 2, 3, 6
    weight_a=(15.0, 9.0),  # App. B: a = 15; App. B.2.3 "weights 1": a = 9
    weight_hold_rounds=10,  # App. B: a_t = 16 for the first 10 iterations
    weight_decay_rounds=30,  # App. B: then linearly to 1 over 30 iterations
    n_init=10,  # Fig. 3: N_init = 10
    init_in_subregion=True,  # Sec. 3.2: each agent explores its own sub-region
    aggregation="weighted",  # Algorithm 1
    schedule="1-1/t",  # Sec. 5.2
    **{key: (value,) for key, value in PAPER_MODEL.items()},
)


def fts_de(**overrides: Any) -> FTSConfig:
    """DP-FTS-DE's real-world setting, without privacy (FTS-DE; DP-FTS-DE paper Section 5.2).

    ``M = 100`` features of lengthscale 0.01 and noise variance ``1e-6`` (App. B.2.1), raw
    values, ``P = 4`` equal-volume sub-regions (the first two dimensions cut at 0.5, App.
    B.2.1), softmax weights with ``a = 15`` held 10 rounds then decayed to uniform over 30 (App.
    B), ``1 - p_t = 1/t``, 10 initial points in the agent's sub-region. Add
    :func:`dp_fts_de_privacy` for DP-FTS-DE (or use :func:`dp_fts_de`).

    Departures besides the module's: with lengthscale 0.01 a shared vector carries almost no
    signal about a function on ``[0, 1]^D`` (FACTS), which is the paper's choice and kept here.
    """
    base = FTSConfig(
        n_features=100,
        lengthscale=0.01,
        noise_variance=1e-6,
        n_subregions=4,
        weight_a=15.0,
        weight_hold_rounds=10,
        weight_decay_rounds=30,
        n_init=10,
        init_in_subregion=True,
        aggregation="weighted",
        schedule="1-1/t",
        **PAPER_MODEL,
    )
    return paper_preset("fts_de", base, _DE_REAL, overrides)


def modified_fts(**overrides: Any) -> FTSConfig:
    """DP-FTS's real-world setting without privacy (FTS without DE, DP-FTS-DE paper App. B.2.2).

    :func:`fts_de` with ``P = 1`` (no sub-regions, hence no weights).
    """
    paper = {**_DE_REAL, "n_subregions": (1,)}
    return paper_preset("modified_fts", replace(fts_de(), n_subregions=1), paper, overrides)


_DE_SYNTHETIC = {
    **_DE_REAL,
    **_fts_paper(
        n_features=50,  # Sec. 5.1
        lengthscale=0.03,  # App. B.1.1: the GP the functions are drawn from
        noise_variance=0.01,  # App. B.1.1: observation noise variance
        n_subregions=(2, 3, 4),  # Fig. 2a: P = 2, 3, 4; Fig. 4/7/12: P = 2; Fig. 6 varies P
        weight_a=15.0,
        weight_hold_rounds=5,  # App. B: a_t = 16 for t <= 5
        weight_decay_rounds=5,  # App. B: decayed to 1 over t = 6..10
        # Sec. 5.1; Fig. 7b: 1 - p_t decreasing faster on heterogeneous agents
        schedule=("1-1/sqrt(t)", "1-1/t", "1-1/t^2"),
    ),
}


def fts_de_synthetic(**overrides: Any) -> FTSConfig:
    """DP-FTS-DE's synthetic setting, without privacy (DP-FTS-DE paper Sec. 5.1, App. B.1.1).

    ``M = 50`` features of lengthscale 0.03 (the SE kernel the functions are drawn from), noise
    variance 0.01 (the observation noise), raw values, ``P = 2`` sub-regions of ``[0, 1]``,
    weights ``a = 15`` held 5 rounds and decayed over 5, ``1 - p_t = 1/sqrt(t)``, 10 initial
    points in the agent's sub-region. Add :func:`dp_fts_de_synthetic_privacy` for DP-FTS-DE.

    Departures besides the module's: none in the configuration; Fig. 7b's "faster" schedule is
    not named in the paper (``"1-1/t"`` and ``"1-1/t^2"`` are both accepted).
    """
    base = FTSConfig(
        n_features=50,
        lengthscale=0.03,
        noise_variance=0.01,
        n_subregions=2,
        weight_a=15.0,
        weight_hold_rounds=5,
        weight_decay_rounds=5,
        n_init=10,
        init_in_subregion=True,
        aggregation="weighted",
        schedule="1-1/sqrt(t)",
        **PAPER_MODEL,
    )
    return paper_preset("fts_de_synthetic", base, _DE_SYNTHETIC, overrides)


def modified_fts_synthetic(**overrides: Any) -> FTSConfig:
    """DP-FTS (no DE) in the synthetic setting, without privacy (DP-FTS-DE paper App. B.1.2).

    :func:`fts_de_synthetic` with ``P = 1``.
    """
    paper = {**_DE_SYNTHETIC, "n_subregions": (1,)}
    base = replace(fts_de_synthetic(), n_subregions=1)
    return paper_preset("modified_fts_synthetic", base, paper, overrides)


_PRIVACY_REAL = {
    "noise_multiplier": (1.0, 1.6, 2.0, 3.0, 4.0),  # Sec. 5.2, Fig. 3 (green: q = 0.35)
    "sample_rate": (0.35, 0.1, 0.15, 0.2, 0.25),  # Sec. 5.2, Fig. 3 (red: z = 1)
    "delta": (PAPER_DELTA,),  # Sec. 5: delta = 1/N^1.1
    "accountant": ("moments", "rdp"),  # Sec. 5: moments accountant; App. B.2.4: Renyi DP
    "sampling": ("poisson", "fixed_size"),  # Algorithm 1; footnote 14: Nq agents (Renyi DP)
}


def dp_fts_de_privacy(**overrides: Any) -> DPConfig:
    """DP-FTS-DE's privacy setting (DP-FTS-DE paper Section 5.2 and Algorithm 1).

    ``z = 1``, ``q = 0.35``, ``S = 22`` (1.02% of the vectors clipped, App. B.2.2), Poisson
    subsampling, ``delta = 1/N^1.1`` and the papers' moments accountant (integer orders, the
    classic conversion), which reproduces their reported privacy losses (15.17 for the landmine
    default, ``N = 29`` and 60 used broadcasts). No budget.

    Departures: none in the mechanism; choose ``clip_norm`` for your own features and values
    with :func:`clip_norm_for_fraction` (the paper's ``S = 22`` fits its own). PLD accounting
    (the library default) needs 14-21% less noise for the same epsilon (FACTS).
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
    return paper_preset("dp_fts_de_privacy", base, _PRIVACY_REAL, overrides)


_PRIVACY_SYNTHETIC = {
    **_PRIVACY_REAL,
    "noise_multiplier": (1.0, 1.2, 1.5),  # Fig. 2d
    "sample_rate": (0.25, 0.15, 0.5),  # Fig. 2c; Fig. 6: q = 0.25
}


def dp_fts_de_synthetic_privacy(**overrides: Any) -> DPConfig:
    """DP-FTS-DE's synthetic privacy setting (DP-FTS-DE paper Sec. 5.1, Figs. 2b-d, 4, 6).

    ``z = 1``, ``q = 0.25``, ``S = 11`` (0.8% of the vectors clipped in the paper), Poisson
    subsampling, ``delta = 1/N^1.1``, moments accountant: epsilon 9.91 after ``T = 40`` used
    broadcasts at ``N = 200`` (Fig. 2c).

    Departures: none in the mechanism; ``clip_norm`` should be chosen by the clipped fraction
    (:func:`clip_norm_for_fraction`); DP-FTS (Fig. 4) uses ``S = 8`` in the paper.
    """
    base = replace(dp_fts_de_privacy(), sample_rate=0.25, clip_norm=11.0)
    return paper_preset("dp_fts_de_synthetic_privacy", base, _PRIVACY_SYNTHETIC, overrides)


def dp_fts_de(**overrides: Any) -> Preset:
    """DP-FTS-DE, real-world setting: :func:`fts_de` with :func:`dp_fts_de_privacy`.

    ``Federation.create(..., protocol=presets.dp_fts_de())`` turns differential privacy on.
    Overrides go to whichever of :class:`FTSConfig` and :class:`DPConfig` has the field (e.g.
    ``dp_fts_de(n_init=5, epsilon_budget=8.0)``).
    """
    return _private(fts_de, dp_fts_de_privacy, overrides)


def dp_fts(**overrides: Any) -> Preset:
    """DP-FTS, real-world setting: :func:`modified_fts` with :func:`dp_fts_de_privacy`."""
    return _private(modified_fts, dp_fts_de_privacy, overrides)


def dp_fts_de_synthetic(**overrides: Any) -> Preset:
    """DP-FTS-DE, synthetic setting: :func:`fts_de_synthetic` with its privacy."""
    return _private(fts_de_synthetic, dp_fts_de_synthetic_privacy, overrides)


def dp_fts_synthetic(**overrides: Any) -> Preset:
    """DP-FTS, synthetic setting: :func:`modified_fts_synthetic` with its privacy."""
    return _private(modified_fts_synthetic, dp_fts_de_synthetic_privacy, overrides)


def _private(protocol: Any, privacy: Any, overrides: dict[str, Any]) -> Preset:
    privacy_fields = {f.name for f in fields(DPConfig)}
    private = {k: v for k, v in overrides.items() if k in privacy_fields}
    rest = {k: v for k, v in overrides.items() if k not in privacy_fields}
    return Preset(protocol=protocol(**rest), privacy=privacy(**private))


def clip_norm_for_fraction(
    norms: Any, *, n_subregions: int = 1, clipped_fraction: float = 0.01
) -> float:
    """The clip norm ``S`` that clips a given fraction of vectors, as the papers choose it.

    DP-FTS-DE clips every selected vector to ``S / sqrt(P)`` and advises "a small value while
    ensuring that a small number of vectors are clipped" (Sec. 4); its experiments clip 0.3-1%.
    Use the norms of a pilot run's uploads (``RoundReport.upload_norms`` in a simulation); the
    pilot's privacy cost is the caller's to account.

    Args:
        norms: L2 norms of uploaded vectors.
        n_subregions: ``P``.
        clipped_fraction: Fraction of vectors to clip, in ``(0, 1)``.

    Returns:
        ``S = sqrt(P) * quantile(norms, 1 - clipped_fraction)``.

    Raises:
        ValueError: Without finite positive norms or for a fraction outside ``(0, 1)``.
    """
    values = np.asarray(norms, dtype=float).ravel()
    if values.size == 0 or not np.all(np.isfinite(values)) or not np.all(values >= 0):
        raise ValueError("clip_norm_for_fraction needs finite non-negative norms.")
    if not 0.0 < clipped_fraction < 1.0:
        raise ValueError(f"clipped_fraction must lie in (0, 1), got {clipped_fraction!r}.")
    if isinstance(n_subregions, bool) or not isinstance(n_subregions, int) or n_subregions < 1:
        raise ValueError(f"n_subregions must be a positive integer, got {n_subregions!r}.")
    bound = float(np.quantile(values, 1.0 - clipped_fraction))
    if bound <= 0:
        raise ValueError("The norms are all zero: no clip norm clips a fraction of them.")
    return math.sqrt(n_subregions) * bound


#: Privacy presets by name (for the command line).
PRIVACY_PRESETS = {
    "dp-fts-de": dp_fts_de_privacy,
    "dp-fts-de-synthetic": dp_fts_de_synthetic_privacy,
}

#: Presets by name (for the command line); the ``dp-`` ones turn differential privacy on.
PRESETS = {
    "fts": fts,
    "fts-synthetic": fts_synthetic,
    "fts-de": fts_de,
    "fts-de-synthetic": fts_de_synthetic,
    "modified-fts": modified_fts,
    "modified-fts-synthetic": modified_fts_synthetic,
    "dp-fts": dp_fts,
    "dp-fts-de": dp_fts_de,
    "dp-fts-synthetic": dp_fts_synthetic,
    "dp-fts-de-synthetic": dp_fts_de_synthetic,
}

__all__ = [
    "PRESETS",
    "PRIVACY_PRESETS",
    "PaperDepartureWarning",
    "PAPER_ALGORITHM",
    "PAPER_MODEL",
    "clip_norm_for_fraction",
    "dp_fts",
    "dp_fts_de",
    "dp_fts_de_privacy",
    "dp_fts_de_synthetic",
    "dp_fts_de_synthetic_privacy",
    "dp_fts_synthetic",
    "fts",
    "fts_de",
    "fts_de_synthetic",
    "fts_synthetic",
    "modified_fts",
    "modified_fts_synthetic",
]
