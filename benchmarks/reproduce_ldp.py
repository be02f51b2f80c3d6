"""The LDP-BO part of ``reproduce.py``: its runs (jobs) and its report section.

Each (setting, seed) runs the three algorithms twice: with the sampler's practical defaults
(``ldp_common.PRESETS["practical"]``: ``moma-k`` is MoMA with the practical epoch length) and
with the paper's parameters (``PRESETS["paper"]``: ``lambda = 1``, ``beta_scale = 1``, the
theorem's epoch length ``k = ceil(24 ln(4eT/delta))``, an unbounded dictionary), the setting
that reproduces Figure 2's ordering (see :data:`DIAGNOSIS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ldp_common import DELTA
import numpy as np
from reproduce_infra import Timed
from reproduce_infra import timed
import seedstats as st

from optuna_fedbo.core.ldp import parameters as ldp_parameters

#: The practical methods (the sampler's defaults) and the paper's (``ldp_common.PRESETS``).
LDP_METHODS = ("tgp", "ata", "moma", "moma-k")
PAPER_METHODS = ("tgp:paper", "ata:paper", "moma:paper", "random")
LDP_EPSILONS = (0.5, 1.0, 2.0)
#: Our check beside the paper's claims: with the paper's parameters, does MoMA learn at all?
PAPER_LEARNS = "paper's parameters: MoMA learns (beats random search)"
NAMES = {"tgp": "TGP", "ata": "ATA", "moma": "MoMA", "random": "random search"}
#: What ``benchmarks/ldp_paper_settings.py`` measured (2026-11-27, T = 1000 unless said, final
#: cumulative regret, mean +- s.e. over seeds 0-2, or 0-9 where said): why MoMA is not lowest.
DIAGNOSIS = (
    "**Why MoMA is not lowest (measured separately by `benchmarks/ldp_paper_settings.py`, "
    "2026-11-27; T = 1000 unless said; 3 seeds, 10 where said).** "
    "(1) With the paper's parameters (theorems' beta, lambda = 1, theorem's k) all three "
    "algorithms are at the level of random search: beta is hundreds of times the range of f, so "
    "the UCB is the posterior width and the 100 points are explored almost uniformly. SE, "
    "eps = 1, 10 seeds: TGP 2488 +- 392, ATA 2530 +- 400, MoMA 2748 +- 492, random search "
    "2529 +- 424; heavy-tailed SE, 10 seeds: TGP 2300 +- 355, ATA 2413 +- 378, MoMA "
    "2628 +- 515, random 2529 +- 424. Which is lowest there is noise (on 3 seeds MoMA was "
    "lowest for SE and Matern at eps = 1: 2184 vs TGP 2210, 2167 vs 2258). The same at "
    "T = 5000 (k = 334, 14 epochs; SE, eps = 1): TGP 10810, MoMA 11347, random 12159. "
    "(2) The practical default that changes the ordering is `beta_scale`: with it alone "
    "(`paper+beta`) TGP drops to 277 +- 96 (SE, eps = 1), 783 +- 595 (Matern, eps = 1) and "
    "118 +- 51 (heavy-tailed SE) while MoMA with the theorem's k stays near random "
    "(1998, 1751, 1461): k = 295 plays per epoch leaves it 3 epochs (3 distinct points) in "
    "T = 1000. Our lambda alone (`paper+lambda`) changes nothing (TGP 2120, MoMA 2166, SE). "
    "(3) The practical epoch length (k = 13, 76 epochs) helps MoMA (practical defaults, SE, "
    "eps = 1: MoMA-k 1345 +- 254 vs theorem-k MoMA 2009 +- 683) but every epoch still plays one "
    "point k times, and TGP stays 2.4-5x lower (554 +- 75; T = 5000: TGP 1115, MoMA-k 3417). "
    'The paper\'s Fig. 2 uses parameters "order-wise similar" to the theorems without giving '
    "them; with the stated ones its ordering is a tie at random-search level, not a MoMA win. "
    "The rows with `paper's parameters` below test it at this report's scale.\n"
)


def ldp_settings() -> list[str]:
    return [f"LDP {k}, eps={e:g}" for k in ("SE", "Matern") for e in LDP_EPSILONS] + [
        f"heavy-tailed {k}, Student-t(3)" for k in ("SE", "Matern")
    ]


def _group(preset: str, horizon: int) -> str:
    # The methods are part of the key: a record holds every method of its preset.
    methods = LDP_METHODS if preset == "practical" else PAPER_METHODS
    return f"ldp-{preset}-T{horizon}-{'+'.join(m.split(':')[0] for m in methods)}"


def _curves(setting: str, seed: int, horizon: int, methods: tuple[str, ...]) -> dict[str, Any]:
    import ldp_heavy_tailed as lh
    import ldp_synthetic as ls

    kernel = "SE" if " SE" in setting else "Matern"
    if setting.startswith("LDP"):
        epsilon = float(setting.split("eps=")[1])
        curves = ls.run_setting(kernel, epsilon, [seed], horizon, methods)
    else:
        curves = lh.run_setting(kernel, [seed], horizon, methods)
    return {m: curves[m][0].tolist() for m in methods}


def ldp_jobs(scale: Any) -> list[tuple[tuple[str, str, int], Callable[[], dict[str, Any]]]]:
    """Every LDP run as ``(cache key, make record)``, in a fixed order."""
    jobs = []
    horizon = scale.ldp_horizon
    for preset, methods in (("practical", LDP_METHODS), ("paper", PAPER_METHODS)):
        for setting in ldp_settings():
            for seed in range(scale.ldp_seeds):
                jobs.append(
                    (
                        (_group(preset, horizon), setting, seed),
                        lambda s=setting, d=seed, m=methods: timed(
                            lambda: _curves(s, d, horizon, m)
                        ),
                    )
                )
    return jobs


def _finals(values: dict[int, dict[str, Any]], method: str, preset: str) -> Timed:
    # Each record holds every method of its preset: its time is split evenly among them.
    share = len(LDP_METHODS if preset == "practical" else PAPER_METHODS)
    return Timed(
        {s: v[method][-1] for s, v in values.items()},
        sum(v.get("seconds", 0.0) for v in values.values()) / share,
    )


def ldp_section(
    report: Any,
    cache: st.ResultCache,
    figure: Callable[[int], tuple[Any, Any]],
    save: Callable[[Any, str], str],
) -> None:
    scale = report.scale
    paper = "LDP-BO"
    horizon = scale.ldp_horizon
    text = [
        "## LDP-BO (Zhou and Tan, AAAI 2021)\n",
        f'The synthetic problem of "Datasets and Settings" (100 points of [0, 1], f a sum of '
        f"100 kernel bumps, SE and Matern(2.5) kernels with l = 0.2): rewards through CTL(eps) "
        f"with U[-1, 1] noise (Fig. 2a-c) and, without privacy, Student-t(3) noise (Fig. 2d-f); "
        f"T = {horizon}, {scale.ldp_seeds} seeds, a new f per seed (as in the paper). Two "
        "parameter sets: the sampler's practical defaults (lambda = 4c/B^2, tuned beta_scale, "
        '64-column dictionary; `moma-k` is MoMA with the "order-wise similar" epoch length '
        "ceil(ln(4eT/delta)), `moma` with the theorem's 24x longer one), and the paper's "
        "(`:paper`: lambda = 1, beta_scale = 1, the theorem's epoch length, unbounded "
        "dictionary; `ldp_common.PRESETS`).\n",
    ]
    if DIAGNOSIS:
        text.append(DIAGNOSIS)
    fig, axes = figure(4)
    rows = []
    for preset, methods, moma in (
        ("practical", LDP_METHODS, "moma-k"),
        ("paper", PAPER_METHODS, "moma:paper"),
    ):
        group = _group(preset, horizon)
        for index, setting in enumerate(ldp_settings()):
            where = "Fig. 2a-c" if setting.startswith("LDP") else "Fig. 2d-f"
            label = "paper's parameters" if preset == "paper" else "practical defaults"
            values = [cache.get(group, setting, s) for s in range(scale.ldp_seeds)]
            values = {s: v for s, v in enumerate(values) if v is not None}
            claims = [
                f"{label}: MoMA ({moma}) beats {m.split(':')[0].upper()}" for m in methods[:2]
            ]
            if preset == "paper":
                claims.append(PAPER_LEARNS)
            if len(values) < 2:
                for claim in claims:
                    owner = "(ours)" if "learns" in claim else paper
                    theirs = "-" if owner == "(ours)" else "MoMA lowest"
                    report.runs_missing(owner, f"{where} ({setting})", claim, theirs, len(values))
                continue
            final = {m: _finals(values, m, preset) for m in methods}
            rows.append(
                [f"{setting} ({label})", len(values)]
                + [st.cell(list(final[m].values()), 0) for m in methods]
                + [""] * (len(LDP_METHODS) - len(methods))
            )
            for other in methods[:2]:
                report.ordering(
                    paper,
                    f"{where} ({setting})",
                    f"{label}: MoMA ({moma}) beats {other.split(':')[0].upper()}",
                    "MoMA lowest",
                    final[moma],
                    final[other],
                    digits=4,
                )
            if preset == "paper":
                epoch = ldp_parameters.moma_epoch_length(horizon, DELTA)
                means = ", ".join(
                    f"{NAMES[m.split(':')[0]]} {np.mean(list(final[m].values())):.4g}"
                    for m in methods
                )
                report.measured[(f"{where} ({setting})", PAPER_LEARNS)] = (
                    "with the paper's parameters every algorithm is at random search's level "
                    f"here ({means}; mean final regret over {len(values)} seeds): the "
                    "diagnosis above, (1): the theorems' beta is hundreds of times the range "
                    "of f, so the UCB is the posterior width and the points are explored "
                    "almost uniformly, and the theorem's epoch length "
                    f"(k = {epoch}) leaves MoMA {horizon // epoch} epochs in T = {horizon}"
                )
                report.ordering(
                    "(ours)",
                    f"{where} ({setting})",
                    PAPER_LEARNS,
                    "-",
                    final[moma],
                    final["random"],
                    digits=4,
                )
            if preset == "practical" and index in (1, 4, 6, 7):
                axis = axes[[1, 4, 6, 7].index(index)]
                runs = {m: np.stack([np.asarray(v[m]) for v in values.values()]) for m in methods}
                runs["moma:paper"] = np.stack(
                    [
                        np.asarray(v["moma:paper"])
                        for s in values
                        if (v := cache.get(_group("paper", horizon), setting, s)) is not None
                    ]
                    or [np.full(horizon, np.nan)]
                )
                st.plot_curves(
                    axis,
                    runs,
                    x=np.arange(1, horizon + 1),
                    title=setting,
                    xlabel="t",
                    ylabel="cumulative regret",
                    log=False,
                )
    text.append(
        "Final cumulative regret R_T; practical rows: tgp, ata, moma, moma-k; paper rows: "
        "tgp, ata, moma (the theorem's k) with the paper's parameters, and random search.\n"
    )
    text.append(
        st.markdown_table(
            ["setting", "seeds", *[f"method {i + 1}: R_T" for i in range(len(LDP_METHODS))]],
            rows,
        )
    )
    text.append(save(fig, "ldp_fig2.png") + "\n")
    report.missing(
        paper,
        "Fig. 2c, 2e-f",
        "light-sensor and stock data",
        "MoMA lowest",
        "not run: the data sets are not shipped (benchmarks/ldp_dataset.py runs an "
        "analogue on scikit-learn's digits)",
    )
    report.sections.append("\n".join(text))
