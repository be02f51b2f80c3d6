"""The Fed-PNE part of ``reproduce.py``: its runs (jobs) and its report section.

Fed-PNE against central HCT (PyXAB) and random search on Garland and DoubleSine, by number of
clients, and its communication rounds by horizon (``fedpne_synthetic.py`` runs them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import reproduce_infra as infra
from reproduce_report import MIN_FUNCTIONS
import seedstats as st


def fedpne_jobs(scale: Any) -> list[infra.Job]:
    """Every Fed-PNE run (against central HCT, by clients, communication), in a fixed order;
    HCT's runs have no ``make`` where PyXAB is not installed."""
    import fedpne_synthetic as fp

    def value(compute: Callable[[], Any]) -> Callable[[], dict[str, Any]]:
        return lambda: infra.timed(lambda: {"value": np.asarray(compute()).tolist()})

    horizon = scale.fedpne_horizon
    jobs: list[infra.Job] = []
    for name in fp.FUNCTIONS:
        group = f"fedpne-{name}-T{horizon}"
        for seed in range(scale.fedpne_seeds):
            for m in scale.clients:
                make = value(lambda n=name, m=m, s=seed: fp.fedpne_curve(n, m, horizon, s))
                jobs.append(((group, f"Fed-PNE M={m}", seed), make))
            make = value(lambda n=name, s=seed: fp.random_curve(n, 10, horizon, s))
            jobs.append(((group, "random search M=10", seed), make))
            # Listed without PyXAB too (make = None: not run here), so that every machine
            # splits the same list into shards.
            for rho in (0.75, 0.5):
                make = value(lambda n=name, s=seed, r=rho: fp.hct_curve(n, horizon, s, r))
                jobs.append(((group, f"HCT central rho={rho}", seed), make if fp.HCT else None))
            for horizon_t in scale.comm_horizons:
                make = value(lambda n=name, s=seed, t=horizon_t: fp.communication(n, 10, t, s))
                jobs.append(((f"fedpne-comm-{name}", f"T={horizon_t}", seed), make))
    return jobs


def _cached(cache: st.ResultCache, group: str, label: str, seeds: int) -> dict[int, Any]:
    """``{seed: record}`` of the cached runs of one label."""
    found = {s: cache.get(group, label, s) for s in range(seeds)}
    return {s: record for s, record in found.items() if record is not None}


def _value(record: dict[str, Any]) -> np.ndarray:
    return np.asarray(record["value"])


def _hct_rho_measurement(final: dict[str, Any]) -> str:
    """Why Fed-PNE against HCT at ``rho = 0.5`` is a different claim: the paper's HCT runs at
    ``rho = 0.75``; measured here, HCT's two settings paired on the same seeds ('' without
    both)."""
    paper, default = final.get("HCT central rho=0.75", {}), final.get("HCT central rho=0.5", {})
    seeds = sorted(set(paper) & set(default))
    if len(seeds) < 2:
        return ""
    ours = st.compare([default[s] for s in seeds], [paper[s] for s in seeds])
    tuned = ours.mean_a < ours.mean_b
    return (
        "not the paper's comparison: the paper runs HCT at rho = 0.75 only (App. E.1.1: 'the "
        "best parameter settings nu1 = 1 and rho = 0.75', after Li et al. 2021), the row above; "
        f"rho = 0.5, PyXAB's default, is added here, and it is {'' if tuned else 'not '}HCT's "
        f"better setting: {ours.mean_a:.4g} against {ours.mean_b:.4g} at rho = 0.75 "
        f"({ours.text()})"
        + (
            ", so this row compares Fed-PNE with an HCT tuned better than the paper's"
            if tuned
            else ""
        )
    )


def fedpne_section(
    report: Any,
    cache: st.ResultCache,
    figure: Callable[..., tuple[Any, Any]],
    save: Callable[[Any, str], str],
) -> None:
    import fedpne_synthetic as fp

    scale = report.scale
    paper = "Fed-PNE"
    horizon = scale.fedpne_horizon
    text = [
        "## Fed-PNE (Li et al., AAAI 2024)\n",
        f"Garland and DoubleSine (App. E.2) with per-client perturbations that average to the "
        f"global objective, noise U(-0.1, 0.1); Fed-PNE with the paper's constants "
        f"(`fed_pne()`: nu1 = 1, rho = 0.5, c = 0.1, c1 = 1, random binary partition), "
        f"T = {horizon} pulls per client, {scale.fedpne_seeds} seeds (each a new perturbation "
        "draw and noise). As in Remark 4.1, Fed-PNE's regret is the average cumulative regret "
        "per client, HCT's (PyXAB, run centrally on the global objective) per evaluation.\n",
    ]
    fig, axes = figure(len(fp.FUNCTIONS) + 1)
    for axis, name in zip(axes, fp.FUNCTIONS):
        group = f"fedpne-{name}-T{horizon}"
        labels = [
            "Fed-PNE M=10",
            "HCT central rho=0.75",
            "HCT central rho=0.5",
            "random search M=10",
        ]
        runs = {}
        for label in labels:
            values = infra.Timed.of(_cached(cache, group, label, scale.fedpne_seeds), _value)
            if values:
                runs[label] = values
        rows = [
            [label, len(v), st.cell([c[-1] for c in v.values()], 1)] for label, v in runs.items()
        ]
        text.append(f"### {name}\n")
        text.append(
            st.markdown_table(["method", "seeds", f"cumulative regret at T={horizon}"], rows)
        )
        final = {
            label: infra.Timed({s: float(c[-1]) for s, c in v.items()}, v.seconds)
            for label, v in runs.items()
        }
        best_setting = _hct_rho_measurement(final)
        if best_setting:
            report.measured[
                (f"Fig. 2a/b ({name})", "Fed-PNE (M=10) beats HCT central rho=0.5")
            ] = best_setting
        for hct in ("HCT central rho=0.75", "HCT central rho=0.5"):
            # Runs missing (PyXAB not installed, or the time budget): the row says so.
            report.ordering(
                paper,
                f"Fig. 2a/b ({name})",
                f"Fed-PNE (M=10) beats {hct}",
                "Fed-PNE lowest",
                final.get("Fed-PNE M=10", {}),
                final.get(hct, {}),
                digits=4,
            )
        st.plot_curves(
            axis,
            {k: np.stack(list(v.values())) for k, v in runs.items()},
            x=np.arange(1, horizon + 1),
            title=f"Fig. 2: {name}",
            xlabel="round t",
            ylabel="cumulative regret",
            log=False,
        )
        clients = {}
        for m in scale.clients:
            records = _cached(cache, group, f"Fed-PNE M={m}", scale.fedpne_seeds)
            clients[m] = infra.Timed.of(records, lambda r: float(r["value"][-1]))
        text.append(
            st.markdown_table(
                ["clients M", "seeds", f"average cumulative regret per client at T={horizon}"],
                [[m, len(v), st.cell(list(v.values()), 1)] for m, v in clients.items()],
            )
        )
        for small, large in zip(scale.clients, scale.clients[1:]):
            report.ordering(
                paper,
                f"Fig. 6 / App. E.3 ({name})",
                f"more clients help: M={large} beats M={small}",
                "lower with more M",
                clients[large],
                clients[small],
                digits=4,
            )
    axis = axes[-1]
    claims_log_t = "communication rounds are logarithmic in T"
    for name in fp.FUNCTIONS:
        rows, means, comm_seconds = [], [], 0.0
        for t in scale.comm_horizons:
            records = _cached(cache, f"fedpne-comm-{name}", f"T={t}", scale.fedpne_seeds)
            comm_seconds += infra.Timed.of(records, _value).seconds
            values = [r["value"] for r in records.values()]
            if not values:
                continue
            rounds = np.array([v[0] for v in values], dtype=float)
            nodes = np.array([v[1] for v in values], dtype=float)
            means.append((t, rounds.mean()))
            rows.append(
                [
                    t,
                    len(values),
                    f"{rounds.mean():.1f}",
                    f"{nodes.mean():.1f}",
                    f"{fp.rounds_bound(10, t):.1f}",
                ]
            )
        text.append(f"Communication, {name} (M = 10):\n")
        text.append(
            st.markdown_table(
                ["T", "seeds", "rounds", "nodes per client", "Eqn. (37) bound"], rows
            )
        )
        if len(means) < 3:
            report.runs_missing(paper, f"Fig. 7 / App. E.4 ({name})", claims_log_t, "log T", 0)
        else:
            ts, rs = np.array(means).T
            slope, intercept = np.polyfit(np.log(ts), rs, 1)
            predicted = slope * np.log(ts) + intercept
            r2 = 1 - np.sum((rs - predicted) ** 2) / max(np.sum((rs - rs.mean()) ** 2), 1e-12)
            linear = np.polyfit(ts, rs, 1)
            r2_linear = 1 - np.sum((rs - np.polyval(linear, ts)) ** 2) / max(
                np.sum((rs - rs.mean()) ** 2), 1e-12
            )
            under = all(r <= fp.rounds_bound(10, t) for t, r in means)
            ours = (
                f"rounds = {slope:.2f} ln T + {intercept:.1f}, R^2 = {r2:.3f} (linear in "
                f"T: R^2 = {r2_linear:.3f}); under the log-T bound of Eqn. (37) at every T: "
                f"{under}"
            )
            verdict = "**reproduced**" if r2 > r2_linear and under else "**not reproduced**"
            claim = (paper, f"Fig. 7 / App. E.4 ({name})", claims_log_t, "log T")
            seeds = min(row[1] for row in rows)  # the horizons' fewest seeds
            partial = report.partial_text(ours, verdict, seeds, comm_seconds)
            if seeds >= MIN_FUNCTIONS or not report.runs_missing(*claim, seeds, partial):
                report.claim(*claim, ours, verdict, comm_seconds, seeds)
            axis.plot(ts, rs, marker="o", label=name)
    axis.set_xscale("log")
    axis.set_xlabel("horizon T")
    axis.set_ylabel("communication rounds (M = 10)")
    axis.set_title("Fig. 7: rounds vs T")
    axis.legend(fontsize=7)
    text.append(save(fig, "fedpne_fig2_fig7.png") + "\n")
    report.missing(
        paper,
        "Fig. 2c/d, 8",
        "landmine, COVID-19 dosage, MNIST: Fed-PNE lowest regret",
        "Fed-PNE lowest",
        "not run: data/simulators not shipped",
    )
    report.missing(
        paper,
        "Fig. 2, 3, 4",
        "against KernelTS, Fed1-UCB, FN-UCB, BO, BBO",
        "Fed-PNE lowest",
        "not run: those baselines are not implemented here "
        "(benchmarks/fedpne_baselines.py compares Optuna's TPE and random search)",
    )
    report.sections.append("\n".join(text))
