"""Reasons ``reproduce.py`` measures from its own runs, for rows that do not reproduce.

Each function turns per-function values (``{function: mean simple regret}``) of the runs behind
a claim and of the runs added to test its candidate causes into the sentence the report
quotes in that row's 'why' (:attr:`reproduce_report.Report.measured`); each returns ``''``
while the runs it needs are missing (the row then keeps its static reason).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import seedstats as st

#: Fewer paired functions than this: no measured reason yet.
MIN_PAIRED = 3


def _paired(*sides: Mapping[int, float]) -> list[int]:
    seeds = sorted(set.intersection(*(set(side) for side in sides)))
    return seeds if len(seeds) >= MIN_PAIRED else []


def _compare(a: Mapping[int, float], b: Mapping[int, float], seeds: list[int]) -> st.Comparison:
    return st.compare([a[s] for s in seeds], [b[s] for s in seeds])


#: ``1 - p_t`` of Fig. 7b's schedules, by the label's suffix ("1-p_t=1/t").
SCHEDULE_DECAYS = {
    "1/sqrt(t)": lambda t: t**-0.5,
    "1/t": lambda t: 1.0 / t,
    "1/t^2": lambda t: t**-2.0,
}


def schedule_costs(
    metric: Mapping[str, Mapping[int, float]], labels: list[str], rounds: int
) -> str:
    """Fig. 7b measured: what each schedule of ``1 - p_t`` costs against TS on independent
    agents, beside the rounds it follows the federation ('' without every run)."""
    ts, *schedules = labels
    parts, fast = [], []
    for label in schedules:
        decay = SCHEDULE_DECAYS[label.rsplit("=", 1)[1]]
        seeds = sorted(set(metric[label]) & set(metric[ts]))
        if len(seeds) < 2:
            return ""
        ours = st.compare([metric[label][s] for s in seeds], [metric[ts][s] for s in seeds])
        rounds_followed = sum(decay(t) for t in range(1, rounds + 1))
        parts.append(
            f"1-p_t = {label.rsplit('=', 1)[1]}: {rounds_followed:.1f} rounds, "
            f"{ours.ratio:.2f}x TS (two-sided p = {ours.p_two_sided:.2g})"
        )
        fast.append((rounds_followed, ours.ratio))
    low, high = sorted(ratio for _, ratio in sorted(fast)[:2])  # the faster-decaying two
    return (
        "the paper's own mechanism, measured: on independent agents every round that follows "
        f"the federation costs; expected rounds following it (sum of 1-p_t over {rounds} "
        "rounds) and regret against TS: " + "; ".join(parts) + f". The two faster schedules "
        f"cost {low - 1:.0%} and {high - 1:.0%} over TS; on {len(seeds)} functions the "
        "two-sided test resolves a gap of that size, so 'comparable' (read off one function's "
        "curves in the paper) holds or fails by which side of 0.05 its p-value falls"
    )


def pulled_by_one(a: Mapping[int, float], b: Mapping[int, float]) -> str:
    """How much of ``mean(a) - mean(b)`` one function makes ('' with fewer than 3 paired)."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 3:
        return ""
    differences = {s: a[s] - b[s] for s in seeds}
    worst = max(differences, key=differences.__getitem__)
    rest = [s for s in seeds if s != worst]
    return (
        f"lower on {sum(d < 0 for d in differences.values())} of {len(seeds)} functions, its "
        f"mean pulled by one (function {worst}: {a[worst]:.3g} vs {b[worst]:.3g}); without it "
        f"{np.mean([a[s] for s in rest]):.4g} vs {np.mean([b[s] for s in rest]):.4g}"
    )


def paper_baseline(
    fts_de: Mapping[int, float],
    rff_ts: Mapping[int, float],
    gp_ts: Mapping[int, float],
    cpu_seconds: float | None = None,
    independent: tuple[Mapping[int, float], Mapping[int, float], Mapping[int, float]]
    | None = None,
) -> str:
    """Fig. 7a against the paper's own TS baseline (GP-TS on raw values with fitted
    hyperparameters) beside ours (RFF-TS on standardized values at the true lengthscale):
    which of the two baselines FTS-DE loses to ('' with fewer than :data:`MIN_PAIRED`).

    ``independent``: (FTS-DE with 1 - p_t = 1/sqrt(t), GP-TS, RFF-TS) at alpha = 1, where
    the paper has TS ahead (Fig. 7b): a GP-TS that loses there too is weaker than the paper's
    TS was, so beating it does not reproduce Fig. 7a.
    """
    seeds = _paired(fts_de, rff_ts, gp_ts)
    if not seeds:
        return ""
    de = _compare(fts_de, gp_ts, seeds)
    baselines = _compare(gp_ts, rff_ts, seeds)
    cost = "" if cpu_seconds is None else f"; {cpu_seconds:.0f} CPU s a run"
    text = (
        "the TS departure, measured: the paper's TS (a GP on raw values, isotropic SE kernel, "
        "lengthscale and signal and noise variance fitted by marginal likelihood from 10 "
        "starts every 5 observations, one posterior sample over the grid a round"
        f"{cost}) on the same {len(seeds)} functions: FTS-DE against it {de.mean_a:.4g} vs "
        f"{de.mean_b:.4g}, {de.wins}/{de.n} wins, two-sided p = {de.p_two_sided:.2g}; GP-TS "
        f"against our RFF-TS {baselines.mean_a:.4g} vs {baselines.mean_b:.4g} "
        f"({baselines.ratio:.2f}x, {baselines.wins}/{baselines.n} lower, two-sided p = "
        f"{baselines.p_two_sided:.2g}). "
    )
    if de.mean_a > de.mean_b and de.p_two_sided < st.ALPHA:
        return text + (
            "FTS-DE loses to the paper's baseline too, so the reversal is not that departure: "
            "the claim does not hold in our implementation"
        )
    if de.p_two_sided >= st.ALPHA:
        return text + (
            "Against the paper's baseline it is a tie: the departure explains the significant "
            "reversal against our TS, not the paper's clear win"
        )
    stronger = (
        "our TS is the stronger baseline: it is given the functions' true lengthscale, 0.03, "
        "which the GP fits from its 10-50 points"
    )
    pairs = _paired(*independent) if independent is not None else []
    if not pairs:
        return text + (
            "So the reversal is that departure: against the paper's baseline FTS-DE wins as "
            f"the paper says; {stronger}"
        )
    de_1, gp_1, rff_1 = independent
    gp_check, rff_check = _compare(de_1, gp_1, pairs), _compare(de_1, rff_1, pairs)
    text += (
        "Check at alpha = 1 (independent agents), where the paper's TS is ahead of FTS-DE "
        f"(Fig. 7b, 1 - p_t = 1/sqrt(t)): FTS-DE {gp_check.mean_a:.4g} vs GP-TS "
        f"{gp_check.mean_b:.4g} ({gp_check.wins}/{gp_check.n} wins, two-sided p = "
        f"{gp_check.p_two_sided:.2g}) and vs our TS {rff_check.mean_b:.4g} ({rff_check.wins}/"
        f"{rff_check.n} wins, two-sided p = {rff_check.p_two_sided:.2g}). "
    )
    if not (gp_check.mean_a < gp_check.mean_b and gp_check.p_two_sided < st.ALPHA):
        return text + (
            "This GP-TS is not beaten there, as the paper's TS is not: so the reversal is "
            f"that departure; {stronger}"
        )
    text += (
        "This GP-TS loses there too, so it is weaker than the paper's TS was and beating it "
        "does not reproduce Fig. 7a"
    )
    if rff_check.mean_a > rff_check.mean_b and rff_check.p_two_sided < st.ALPHA:
        return text + (
            "; our TS is ahead there as the paper's is, and FTS-DE loses to it at alpha = "
            "0.7: the baseline departure does not explain the reversal, and as checked the "
            f"claim does not hold in our implementation ({stronger})"
        )
    return text + "; neither baseline here is ahead at alpha = 1 as the paper's TS is"


def fig4_ablation(
    dp_fts_de: Mapping[int, float],
    dp_fts: Mapping[int, float],
    same_clip: Mapping[int, float],
    equal_weights: Mapping[int, float],
    both: Mapping[int, float],
    clips: tuple[float, float],
    clipped: Mapping[str, float] | None = None,
    noise_off: tuple[Mapping[int, float], Mapping[int, float]] | None = None,
) -> str:
    """Fig. 4 by ablation: DP-FTS-DE with DP-FTS's S (``same_clip``), with equal weights
    (phi_max = 1/N from round 1), and with both (DP-FTS's noise std exactly), each against
    DP-FTS-DE, and what share of DP-FTS-DE's gap to DP-FTS each closes. ``clips``: S of
    DP-FTS-DE and of DP-FTS; ``clipped``: percent of uploads clipped, by variant name
    ("same S"); ``noise_off``: (DP-FTS-DE, DP-FTS) with the noise all but off (z = 0.01),
    which tells the noise's part from subsampling's and clipping's."""
    seeds = _paired(dp_fts_de, dp_fts, same_clip, equal_weights, both)
    if not seeds:
        return ""
    clipped = clipped or {}
    full = float(np.mean([dp_fts_de[s] for s in seeds]))
    gap = full - float(np.mean([dp_fts[s] for s in seeds]))

    def part(name: str, values: Mapping[int, float]) -> str:
        against = _compare(values, dp_fts_de, seeds)
        share = f", {(full - against.mean_a) / gap:.0%} of the gap" if gap > 0 else ""
        return (
            f"{name} {against.mean_a:.4g}{share} (two-sided p = {against.p_two_sided:.2g} "
            "against DP-FTS-DE)"
        )

    s_de, s_fts = clips
    note = f"; {clipped['same S']:.2g}% clipped" if "same S" in clipped else ""
    rest = _compare(both, dp_fts, seeds)
    removed = _compare(both, dp_fts_de, seeds)
    text = (
        f"the two extra noise sources, measured by ablation on {len(seeds)} functions (DP-FTS-"
        f"DE {full:.4g}, DP-FTS {full - gap:.4g}): "
        + part(f"DE with DP-FTS's S ({s_fts:.2f} for {s_de:.2f}{note})", same_clip)
        + "; "
        + part("DE with equal weights (phi_max = 1/N from round 1)", equal_weights)
        + "; "
        + part("both (DP-FTS's noise std exactly)", both)
        + f", against DP-FTS {rest.wins}/{rest.n} wins, two-sided p = {rest.p_two_sided:.2g}. "
    )
    if rest.mean_a > rest.mean_b and rest.p_two_sided < st.ALPHA:
        text += (
            f"With DP-FTS's noise DE is still worse ({rest.ratio:.2f}x DP-FTS): the larger "
            "noise alone does not account for the reversal (each sub-region's share of an "
            "upload is clipped to S/sqrt(P) while the noise scales with S, so at P = 2 DE has "
            "either DP-FTS's clipped fraction with sqrt(2) times its noise or its noise with "
            "far more clipping: the paper's Sec. 4 trade-off in P). "
        )
    elif removed.mean_a < removed.mean_b and removed.p_two_sided < st.ALPHA:
        verdict = "beats" if rest.mean_a < rest.mean_b else "ties with"
        text += (
            f"With DP-FTS's noise DE {verdict} DP-FTS: the larger noise (S and phi_max) "
            "accounts for the reversal. "
        )
    else:
        text += (
            "No ablation moves DP-FTS-DE significantly: its larger noise explains at most "
            "part of the reversal. "
        )
    pairs = _paired(*noise_off) if noise_off is not None else []
    if not pairs:
        return text.rstrip()
    quiet = _compare(*noise_off, pairs)
    de_cost, fts_cost = full - quiet.mean_a, full - gap - quiet.mean_b
    text += (
        "With the noise all but off (z = 0.01: Poisson subsampling at q = 0.25 and clipping "
        f"only) DP-FTS-DE {quiet.mean_a:.4g} vs DP-FTS {quiet.mean_b:.4g}, {quiet.wins}/"
        f"{quiet.n} wins, two-sided p = {quiet.p_two_sided:.2g}: "
    )
    if quiet.mean_a > quiet.mean_b and quiet.p_two_sided < st.ALPHA:
        return text + (
            "DE trails DP-FTS without the noise too, so the reversal comes from subsampling "
            "and clipping (the mechanism without its noise), not from DE's larger noise"
        )
    outcome = (
        "without the noise DE wins, as without DP (Fig. 2a)"
        if quiet.mean_a < quiet.mean_b and quiet.p_two_sided < st.ALPHA
        else "without the noise the two tie"
    )
    return text + (
        f"{outcome}, so the reversal is the noise's doing (z = 1 adds {de_cost:.2g} to DE's "
        f"regret, {fts_cost:.2g} to DP-FTS's), though neither of DE's two extra noise "
        "sources alone is: at P = 2 each sub-region's share of an upload is clipped to "
        "S/sqrt(P) while the noise scales with S, so DE has either DP-FTS's clipped fraction "
        "with sqrt(2) times its noise (equal weights) or its noise with far more uploads "
        "clipped (both), and stays behind DP-FTS on the mean either way"
    )
