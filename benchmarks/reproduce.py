"""Reproduce every quantitative claim of the four papers; write ``benchmarks/REPRODUCTION.md``.

One command runs everything and writes the report with its plots (``benchmarks/reproduction/``)::

    python benchmarks/reproduce.py --scale quick      # 10 seed functions, N = 50 agents
    python benchmarks/reproduce.py --scale full       # 20 seed functions, N = 200 (the papers')

Every claim is run on at least 10 seed functions (random problems); error bars are standard
errors over functions, comparisons are paired (wins out of functions, one-sided Wilcoxon
signed-rank test), and the plots show curves over t. Results are cached one file per
(problem, method, function) under ``benchmarks/reproduction/cache/<scale>/`` (``--cache``),
each with its wall and CPU time, so an interrupted run resumes where it stopped. The FTS
family's results (about 1 KB a run, the pilots 160 KB) are committed, so that a later sitting
on another machine continues them; Fed-PNE's and LDP-BO's (a curve of T points: about 100 KB
a run, 50 MB in all) are not (``cache/.gitignore``): they are rerun where the report is
written. ``--budget-minutes`` stops starting new runs after a while, ``--method`` runs only
the FTS-family methods named (the rows that matter first; function by function, so that a run
cut short leaves paired results), ``--report-only`` rewrites the report from the cache
(saying, per group, how many runs are missing, and per claim at which scale, on how many
functions and with how much run time it ran; a claim with fewer than 10 functions at this
scale shows the archived quick report's row, labelled, and quotes the new partial result),
``--workers`` runs functions in parallel, ``--groups`` picks sections.

Several processes or machines share a full run with ``--shard K/N`` (a fixed split of all the
runs, so shards started at any time are disjoint; each writes to the same cache and no report)::

    python benchmarks/reproduce.py --scale full --shard 1/8    # ... up to --shard 8/8
    python benchmarks/reproduce.py --scale full --report-only  # once every shard is done

The cache's ``PROVENANCE.json`` records the scale and the digest of the code that computes
the results (``optuna_fedbo/`` and the drivers of ``reproduce_infra.DRIVERS``; not the
``reproduce*.py`` files, which only wire the drivers, and whose FTS cache keys hold each
method's configuration), plus the git commits that wrote to it. A cache from other code or
another scale is refused (exit status 2); ``--rebuild-cache`` moves it aside and starts afresh;
``--accept-cache-from-other-code`` continues it at the same scale, and the report names every
code digest it mixes (for a long run that a fix elsewhere in the library would otherwise void).

Cost of ``--scale full`` (2026-11-27, this 2-core x86_64 machine at load 8-11, nice 15, CPU
seconds of one process): the federated FTS-family runs go through ``fts_lockstep.py`` (bit for
bit ``simulate()``'s results, without its studies and storage): a DP-FTS-DE run at N = 200,
T = 40 took 14-17 CPU s there, 181-182 s through ``simulate()`` (the same two runs, identical
results); local TS (Optuna studies) 20-21 CPU s at N = 200; an N = 50 run about a quarter; the
paper's TS baseline (GP-TS on raw values, Fig. 7a; 2026-11-28) 36-38 CPU s at N = 50; the
product defaults (a local GP per site) still go through ``simulate()``. The FTS family's 800
runs: about 2-3 CPU hours. Fed-PNE, 600 runs: 0.1-4 s per Fed-PNE run, 20-40 s per HCT run at
T = 5000 (PyXAB: ``pip install PyXAB==0.3.0``), about an hour. LDP-BO, 320 runs: 6 s per
practical run, 3 s per paper run of a CTL(epsilon) setting, but 65 s per paper run with
heavy-tailed noise (ATA's unbounded dictionary): about 1.1 hours. In all 4-5 CPU hours:
``--shard K/8`` on four machines (two shards each, ``--workers 1``) is about an hour per
machine.

The drivers of the individual benchmarks are reused: ``federation_synthetic.py`` (the FTS/DE
synthetic problems, local TS, the federation runner), ``privacy_accounting.py`` (the papers'
epsilons), ``fedpne_synthetic.py`` (Fed-PNE, HCT, communication), ``ldp_synthetic.py`` and
``ldp_heavy_tailed.py`` (the three LDP algorithms); ``seedstats.py`` holds the statistics.
DP noise is seeded through ``simulate(..., insecure_noise_seed=...)`` (research runs only), so
every number here can be regenerated exactly.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from dataclasses import field  # noqa: E402
from dataclasses import replace  # noqa: E402
import logging  # noqa: E402
import multiprocessing  # noqa: E402
from pathlib import Path  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402
import zlib  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import federation_synthetic as fs  # noqa: E402
import fts_lockstep as lockstep  # noqa: E402
import numpy as np  # noqa: E402
import optuna  # noqa: E402
import reproduce_fedpne as rf  # noqa: E402
import reproduce_infra as infra  # noqa: E402
import reproduce_ldp as rl  # noqa: E402
import reproduce_measured as rm  # noqa: E402
import reproduce_report as rr  # noqa: E402
from reproduce_report import claim_key  # noqa: E402
from reproduce_report import Report  # noqa: E402
import seedstats as st  # noqa: E402

from optuna_fedbo.federation import FTSConfig  # noqa: E402
from optuna_fedbo.federation import presets  # noqa: E402
from optuna_fedbo.federation.dp_config import DPConfig  # noqa: E402

HERE = Path(__file__).resolve().parent
REPORT = HERE / "REPRODUCTION.md"
PLOTS = HERE / "reproduction"
CACHE = HERE / "reproduction" / "cache"
#: Fraction of uploaded vectors the clip norm clips (DP-FTS-DE Sec. 5.1: 0.8% at S = 11).
CLIPPED_FRACTION = 0.008


@dataclass(frozen=True)
class Scale:
    """How much to run. Every claim gets ``functions`` seed functions (at least 10)."""

    name: str
    functions: int  # seed functions of the FTS-family problems
    agents: int  # N of DP-FTS-DE's similar agents (the paper: 200)
    hetero_agents: int  # N of DP-FTS-DE's heterogeneous agents (the paper: 50)
    fts_agents: int  # N of FTS's synthetic experiment (the paper: 50)
    rounds: int  # BO rounds T (the paper: 40)
    pilot_functions: int  # functions of the pilot run that chooses S (not evaluated)
    fedpne_seeds: int
    fedpne_horizon: int
    comm_horizons: tuple[int, ...]
    clients: tuple[int, ...]
    ldp_seeds: int
    ldp_horizon: int


SCALES = {
    "quick": Scale("quick", 10, 50, 50, 50, 40, 1, 10, 2000, (250, 500, 1000, 2000, 4000, 8000),
                   (5, 10, 20, 50), 10, 1000),
    "full": Scale("full", 20, 200, 50, 50, 40, 2, 20, 5000,
                  (250, 500, 1000, 2000, 4000, 8000, 16000, 32000), (5, 10, 20, 50), 20, 1000),
    # Checks the pipeline in a minute; too small for any claim (the report says so).
    "smoke": Scale("smoke", 2, 6, 6, 6, 4, 1, 2, 200, (100, 200, 400), (2, 4), 2, 300),
}  # fmt: skip


# ------------------------------------------------------------------------- FTS-family runs
@dataclass(frozen=True)
class Problem:
    """A family of seed functions: ``similar`` (f + d, d = +-offset) or ``mixed`` (alpha)."""

    kind: str
    parameter: float
    agents: int

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.parameter:g}-N{self.agents}"

    def functions(self, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        if self.kind == "similar":
            return fs.homogeneous(self.agents, rng, self.parameter)
        return fs.mixed(self.agents, self.parameter, rng)


@dataclass(frozen=True)
class Privacy:
    """DP-FTS-DE's mechanism with the clip norm as a multiple of the pilot's choice."""

    q: float
    z: float
    clip: str = "de"  # "de": S chosen at P = 2; "fts": at P = 1
    clip_factor: float = 1.0


@dataclass(frozen=True)
class Method:
    label: str
    protocol: FTSConfig | None  # None: a local baseline (``local``)
    privacy: Privacy | None = None
    n_init: int = fs.N_INIT
    # "rff": RFF-TS on standardized values; "gp": GP-TS on raw values (fs.run_gp_ts). Out of
    # repr, hence of the cache key, so that the existing keys stay; the label tells them apart.
    local: str = field(default="rff", repr=False)


@dataclass(frozen=True)
class Task:
    tier: int
    problem: Problem
    method: Method
    seed: int


#: The product defaults with P = 2, and the paper's 10 initial points for an equal budget.
PRODUCT_DEFAULTS = FTSConfig(n_subregions=2, n_init=fs.N_INIT)


def _synthetic() -> FTSConfig:
    return presets.fts_de_synthetic()


#: The paper's TS baseline: a GP on raw values, hyperparameters fitted every 5 observations.
GP_TS = Method("GP-TS (raw values)", None, local="gp")


def fig4_ablations(de: FTSConfig, base: Privacy) -> list[Method]:
    """DP-FTS-DE with one of its two extra noise sources against DP-FTS removed: DP-FTS's S
    (clip="fts"), equal weights (phi_max = 1/N in every round), and both; then DP-FTS-DE and
    DP-FTS with the noise all but off (z = 0.01: subsampling and clipping only)."""
    equal = replace(de, weight_hold_rounds=0, weight_decay_rounds=0)
    fts_clip = replace(base, clip="fts")
    quiet = replace(base, z=0.01)
    return [
        Method("DP-FTS-DE q=0.25 z=1, DP-FTS's S", de, fts_clip),
        Method("DP-FTS-DE q=0.25 z=1, equal weights", equal, base),
        Method("DP-FTS-DE q=0.25 z=1, DP-FTS's S, equal weights", equal, fts_clip),
        Method("DP-FTS-DE q=0.25 z=0.01", de, quiet),
        Method(
            "DP-FTS q=0.25 z=0.01", presets.modified_fts_synthetic(), replace(quiet, clip="fts")
        ),
    ]


def fts_family_tasks(scale: Scale) -> list[Task]:
    """Every (problem, method) of the DP-FTS-DE and FTS sections, by tier (0 first)."""
    de = _synthetic()
    similar = Problem("similar", 0.02, scale.agents)
    base = Privacy(0.25, 1.0)
    plan: list[tuple[int, Problem, Method]] = [
        # DP-FTS-DE Fig. 2a and Fig. 5, paper preset against product defaults.
        (0, similar, Method("TS", None)),
        (0, similar, Method("FTS (P=1)", presets.modified_fts_synthetic())),
        (0, similar, Method("FTS-DE P=2", de)),
        (0, similar, Method("FTS-DE P=4", replace(de, n_subregions=4))),
        (
            0,
            similar,
            Method(
                "FTS-DE P=2, equal weights",
                replace(de, weight_hold_rounds=0, weight_decay_rounds=0),
            ),
        ),
        (
            0,
            similar,
            Method("FTS-DE P=2, init whole domain", replace(de, init_in_subregion=False)),
        ),
        (
            0,
            similar,
            Method(
                "FTS-DE P=2, per-participant standardization",
                replace(de, normalization="participant"),
            ),
        ),
        (0, similar, Method("FTS-DE P=2, product defaults", PRODUCT_DEFAULTS)),
        # Fig. 2c/d, Fig. 4.
        (1, similar, Method("DP-FTS-DE q=0.25 z=1", de, base)),
        (1, similar, Method("DP-FTS-DE q=0.15 z=1", de, Privacy(0.15, 1.0))),
        (1, similar, Method("DP-FTS-DE q=0.5 z=1", de, Privacy(0.5, 1.0))),
        (1, similar, Method("DP-FTS-DE q=0.25 z=1.2", de, Privacy(0.25, 1.2))),
        (1, similar, Method("DP-FTS-DE q=0.25 z=1.5", de, Privacy(0.25, 1.5))),
        (
            1,
            similar,
            Method(
                "DP-FTS q=0.25 z=1",
                presets.modified_fts_synthetic(),
                Privacy(0.25, 1.0, clip="fts"),
            ),
        ),
        # Fig. 7 (heterogeneous agents), FTS Fig. 1.
        (2, Problem("mixed", 0.7, scale.hetero_agents), Method("TS", None)),
        (2, Problem("mixed", 0.7, scale.hetero_agents), Method("FTS-DE P=2", de)),
        (2, Problem("mixed", 0.7, scale.hetero_agents), GP_TS),
        (2, Problem("mixed", 1.0, scale.hetero_agents), Method("TS", None)),
        (2, Problem("mixed", 1.0, scale.hetero_agents), GP_TS),
        (2, Problem("mixed", 1.0, scale.hetero_agents), Method("FTS-DE P=2, 1-p_t=1/sqrt(t)", de)),
        (
            2,
            Problem("mixed", 1.0, scale.hetero_agents),
            Method("FTS-DE P=2, 1-p_t=1/t", replace(de, schedule="1-1/t")),
        ),
        (
            2,
            Problem("mixed", 1.0, scale.hetero_agents),
            Method("FTS-DE P=2, 1-p_t=1/t^2", replace(de, schedule="1-1/t^2")),
        ),
        (2, Problem("similar", 0.02, scale.fts_agents), Method("TS", None, n_init=1)),
        (
            2,
            Problem("similar", 0.02, scale.fts_agents),
            Method("FTS", presets.fts_synthetic(), n_init=1),
        ),
        (2, Problem("similar", 1.2, scale.fts_agents), Method("TS", None, n_init=1)),
        (
            2,
            Problem("similar", 1.2, scale.fts_agents),
            Method("FTS, 1-p_t=1/sqrt(t)", presets.fts_synthetic(), n_init=1),
        ),
        (
            2,
            Problem("similar", 1.2, scale.fts_agents),
            Method("FTS, 1-p_t=1/t^2", presets.fts_synthetic(schedule="1-1/t^2"), n_init=1),
        ),
        # Fig. 2b (S), Fig. 6 (P at fixed S), Fig. 12a (non-adaptive weights), Fig. 2a P=3.
        *[
            (
                3,
                similar,
                Method(f"DP-FTS-DE q=0.25 z=1, S x{f:g}", de, replace(base, clip_factor=f)),
            )
            for f in (0.25, 0.5, 2.0, 4.0)
        ],
        (3, similar, Method("DP-FTS-DE P=3 q=0.25 z=1", replace(de, n_subregions=3), base)),
        (3, similar, Method("DP-FTS-DE P=4 q=0.25 z=1", replace(de, n_subregions=4), base)),
        (
            3,
            similar,
            Method(
                "DP-FTS-DE q=0.25 z=1, non-adaptive weights",
                replace(de, weight_hold_rounds=10**6, weight_decay_rounds=0),
                base,
            ),
        ),
        (3, similar, Method("FTS-DE P=3", replace(de, n_subregions=3))),
        # Fig. 4's reversal by ablation: DE with DP-FTS's S, with equal weights, with both.
        *[(3, similar, method) for method in fig4_ablations(de, base)],
    ]
    return [
        Task(tier, problem, method, seed)
        for tier, problem, method in plan
        for seed in range(scale.functions)
    ]


def _pilot_norms(
    scale: Scale, n_subregions: int, cache: st.ResultCache, compute: bool
) -> list[float] | None:
    """Upload norms of a non-private pilot run on functions that are not evaluated.

    Every shard runs missing pilots itself (they are deterministic: concurrent shards write
    the same values); with ``compute=False`` a missing pilot gives ``None``.
    """
    norms: list[float] = []
    protocol = presets.modified_fts_synthetic() if n_subregions == 1 else _synthetic()
    for index in range(scale.pilot_functions):
        seed = 10_000 + index
        found = cache.get("pilot", f"P{n_subregions}-N{scale.agents}", seed)
        if found is None and not compute:
            return None
        if found is None:
            functions = Problem("similar", 0.02, scale.agents).functions(seed)
            result = lockstep.run(functions, scale.rounds, seed, protocol)
            found = {"norms": [n for r in result.reports for n in r.upload_norms]}
            cache.put(found, "pilot", f"P{n_subregions}-N{scale.agents}", seed)
        norms += found["norms"]
    return norms


def clip_norms(
    scale: Scale,
    cache: st.ResultCache,
    compute: bool = True,
    needed: frozenset[str] = frozenset({"de", "fts"}),
) -> dict[str, float]:
    """S for DP-FTS-DE (``"de"``, P = 2) and DP-FTS (``"fts"``, P = 1), clipping
    CLIPPED_FRACTION of the pilot's uploads. The pilots of ``needed`` are run if missing (with
    ``compute``); an S whose pilot is missing is left out (its DP runs cannot be keyed yet)."""
    clips = {}
    for name, n_subregions in (("de", 2), ("fts", 1)):
        norms = _pilot_norms(scale, n_subregions, cache, compute and name in needed)
        if norms is not None:
            clips[name] = presets.clip_norm_for_fraction(
                norms, n_subregions=n_subregions, clipped_fraction=CLIPPED_FRACTION
            )
    return clips


def _task_key(task: Task, clips: dict[str, float]) -> tuple[str, str, int] | None:
    """The cache key of a run (``None``: a DP run whose pilot, hence S, is missing)."""
    # The configuration's digest is part of the key: a changed default reruns, never reuses.
    label = f"{task.method.label} #{zlib.crc32(repr(task.method).encode()):08x}"
    if task.method.privacy is not None:
        privacy = task.method.privacy
        if privacy.clip not in clips:
            return None
        label += f" [S={clips[privacy.clip] * privacy.clip_factor:.3f}]"
    return task.problem.key, label, task.seed


def run_task(task: Task, scale: Scale, clips: dict[str, float]) -> dict[str, Any]:
    """One method on one seed function: its mean regret curve over agents, and DP counters."""
    functions = task.problem.functions(task.seed)
    start, cpu_start = time.perf_counter(), time.process_time()
    method = task.method
    record: dict[str, Any] = {}
    if method.protocol is None and method.local == "gp":
        f_values = fs.run_gp_ts(functions, scale.rounds, task.seed, n_init=method.n_init)
    elif method.protocol is None:
        studies = fs.run_local_ts(functions, scale.rounds, task.seed, n_init=method.n_init)
        f_values = fs.f_values_of(studies)
    else:
        privacy = None
        if method.privacy is not None:
            spec = method.privacy
            clip = clips[spec.clip] * spec.clip_factor
            privacy = DPConfig(
                noise_multiplier=spec.z, sample_rate=spec.q, clip_norm=clip, accountant="moments"
            )
            record["clip_norm"] = clip
        noise_seed = zlib.crc32(f"{method.label}/{task.seed}".encode())
        result = lockstep.run(
            functions, scale.rounds, task.seed, method.protocol, privacy, noise_seed
        )
        f_values = result.f_values
        if privacy is not None:
            record.update(result.dp_counters())
    curves = fs.regret_of(f_values, functions, scale.rounds, n_init=method.n_init)
    record["curve"] = curves.mean(axis=0).tolist()
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu_start
    return record


def _worker(job: tuple[Task, Scale, dict[str, float], str]) -> str:
    task, scale, clips, root = job
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.getLogger("optuna_fedbo").setLevel(logging.ERROR)
    cache = st.ResultCache(Path(root))
    key = _task_key(task, clips)
    if cache.get(*key) is None:
        cache.put(run_task(task, scale, clips), *key)
    return f"{key[0]} / {key[1]} / function {key[2]}"


def ordered_fts_tasks(scale: Scale) -> list[Task]:
    """Every FTS-family task in the fixed order the shards split (tier, then function)."""
    return sorted(fts_family_tasks(scale), key=lambda t: (t.tier, t.seed))


def run_fts_family(
    scale: Scale,
    cache: st.ResultCache,
    workers: int,
    deadline: float,
    tiers: tuple[int, int] = (0, 3),
    shard: tuple[int, int] = (1, 1),
    methods: frozenset[str] | None = None,
) -> dict[str, float]:
    """Run this shard's missing tasks (of the tiers asked) until the deadline; return S.

    ``methods``: only the methods of these labels (all when ``None``).
    """
    min_tier, max_tier = tiers
    mine = infra.shard_of(ordered_fts_tasks(scale), shard)
    tasks = [
        t
        for t in mine
        if min_tier <= t.tier <= max_tier and (methods is None or t.method.label in methods)
    ]
    needed = frozenset(t.method.privacy.clip for t in tasks if t.method.privacy is not None)
    clips = clip_norms(scale, cache, needed=needed)
    # Function by function (the shard's split stays the fixed list's): runs cut short by the
    # budget leave every method on the same functions, which the paired claims need.
    todo = [
        (t, scale, clips, str(cache.root))
        for t in sorted(tasks, key=lambda t: (t.seed, t.tier))
        if cache.get(*_task_key(t, clips)) is None
    ]
    print(
        f"FTS family, shard {shard[0]}/{shard[1]}: {len(tasks) - len(todo)} of {len(tasks)} "
        f"runs cached; S = {clips}",
        flush=True,
    )
    if not todo:
        return clips
    context = multiprocessing.get_context("fork")
    with context.Pool(workers) as pool:
        for done, name in enumerate(pool.imap(_worker, todo, chunksize=1), start=1):
            print(f"  [{done}/{len(todo)}] {name}", flush=True)
            if time.time() > deadline:
                print("Time budget spent: no new runs (the report marks what is missing).")
                pool.terminate()
                break
    return clips


# ------------------------------------------------------------------------------------ report
class Results:
    """Cached results, by (problem, method label), one entry per seed function.

    ``n_init`` tells apart methods of the same label run with different initial designs on the
    same problem (DP-FTS-DE's 10 initial points, FTS's 1).
    """

    def __init__(
        self, scale: Scale, cache: st.ResultCache, clips: dict[str, float], n_init: int
    ) -> None:
        self.scale, self.cache, self.clips, self.n_init = scale, cache, clips, n_init
        self.tasks = [t for t in fts_family_tasks(scale) if t.method.n_init == n_init]

    def records(self, problem: Problem, label: str) -> dict[int, dict[str, Any]]:
        out = {}
        for task in self.tasks:
            if task.problem == problem and task.method.label == label:
                key = _task_key(task, self.clips)
                found = None if key is None else self.cache.get(*key)
                if found is not None:
                    out[task.seed] = found
        return out

    def curves(self, problem: Problem, label: str) -> infra.Timed:
        """``{function: regret curve}``, with the run time of those runs."""
        return infra.Timed.of(self.records(problem, label), lambda r: np.asarray(r["curve"]))


def _metric(curves: infra.Timed, final: bool) -> infra.Timed:
    """Per function: regret at t = T (``final``) or the mean simple regret over t = 1..T."""
    values = {s: float(c[-1] if final else c[1:].mean()) for s, c in curves.items()}
    return infra.Timed(values, getattr(curves, "seconds", None))


def _figure(panels: int, width: float = 5.2, height: float = 3.9) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(width * panels, height), squeeze=False)
    return fig, axes[0]


def _save(fig: Any, name: str) -> str:
    import matplotlib.pyplot as plt

    PLOTS.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(PLOTS / name, dpi=100)
    plt.close(fig)
    return f"![{name}](reproduction/{name})"


def _curve_arrays(results: Results, problem: Problem, labels: list[str]) -> dict[str, np.ndarray]:
    out = {}
    for label in labels:
        curves = results.curves(problem, label)
        if curves:
            out[label] = np.stack([curves[s] for s in sorted(curves)])
    return out


def _clipped_percent(records: dict[int, dict[str, Any]]) -> float | None:
    """Percent of the uploads the runs' clip norm clipped (``None``: no DP runs)."""
    contributed = sum(r.get("contributed", 0) for r in records.values())
    clipped = sum(r.get("clipped", 0) for r in records.values())
    return 100 * clipped / contributed if contributed else None


def _method_table(results: Results, problem: Problem, labels: list[str]) -> str:
    rows = []
    for label in labels:
        records = results.records(problem, label)
        if not records:
            rows.append([label, "not run", "", "", ""])
            continue
        curves = infra.Timed.of(records, lambda r: np.asarray(r["curve"]))
        clipped = _clipped_percent(records)
        rows.append(
            [
                label,
                len(curves),
                st.cell(list(_metric(curves, final=False).values())),
                st.cell(list(_metric(curves, final=True).values())),
                "-" if clipped is None else f"{clipped:.2f}%",
            ]
        )
    return st.markdown_table(
        ["method", "functions", "mean simple regret t=1..T", "simple regret at t=T", "clipped"],
        rows,
    )


def _clip_text(clips: dict[str, float], name: str) -> str:
    return f"{clips[name]:.2f}" if name in clips else "(pilot not run yet)"


def dp_fts_de_section(report: Report, results: Results) -> None:
    from privacy_accounting import epsilon_table

    scale = report.scale
    paper = "DP-FTS-DE"
    similar = Problem("similar", 0.02, scale.agents)
    text = [
        "## DP-FTS-DE (Dai et al., NeurIPS 2021)\n",
        f"Synthetic setting of App. B.1.1 with the paper preset `presets.fts_de_synthetic()` "
        f"(raw values, M = 50, lengthscale 0.03, noise variance 0.01, P = 2, weights held 5 "
        f"rounds and decayed over 5, 1 - p_t = 1/sqrt(t), 10 initial points in the agent's "
        f"sub-region): N = {scale.agents} similar agents (the paper: 200), "
        f"{scale.rounds} BO rounds, {scale.functions} seed functions. Metric: simple regret "
        "averaged over agents, then over t = 1..T (or at t = T), per function; ± is the "
        "standard error over functions. Local TS standardizes its values (RFFThompsonSampler, "
        "the functions' lengthscale 0.03), the paper's TS is a GP on raw values with fitted "
        "hyperparameters (`GP-TS (raw values)`, run on Fig. 7's problems).\n",
        f"Clip norms chosen the paper's way (so that {100 * CLIPPED_FRACTION:.1f}% of a "
        f"non-private pilot run's uploads are clipped, pilot on {scale.pilot_functions} "
        "function(s) not evaluated): "
        f"S = {_clip_text(results.clips, 'de')} for P = 2 (the paper: 11) and "
        f"S = {_clip_text(results.clips, 'fts')} for P = 1 (the paper: 8).\n",
    ]
    # Epsilons: privacy_accounting.py's table of the paper's 14 settings.
    rows, matched = [], 0
    for row in epsilon_table()[1]:
        ok = abs(row["moments"] - row["paper"]) <= 0.006
        matched += ok
        rows.append(
            [row["setting"], row["N"], row["q"], row["z"], row["T"], f"{row['paper']:.2f}"]
            + [f"{row['moments']:.2f}", "yes" if ok else "no"]
            + [f"{row['rdp']:.2f}", f"{row['pld']:.2f}"]
        )
    text.append("### Privacy losses (Fig. 2c/d captions; Fig. 3a landmine points)\n")
    text.append(
        "Recipe (FACTS): Poisson-subsampled Gaussian, T = broadcasts used (40 synthetic, 60 "
        "landmine), delta = N^-1.1, integer RDP orders, classic conversion. RDP (improved "
        "conversion) and PLD are the tighter accountants of the same mechanism.\n"
    )
    text.append(
        st.markdown_table(
            [
                "setting",
                "N",
                "q",
                "z",
                "T",
                "paper",
                "ours (moments)",
                "within 0.006",
                "RDP",
                "PLD",
            ],
            rows,
        )
    )
    report.claim(
        paper,
        "Fig. 2c/d, Fig. 3a",
        "14 published privacy losses",
        "5.93 ... 20.12",
        f"{matched}/14 within 0.006",
        "**reproduced**" if matched == 14 else "**not reproduced**",
    )

    metric = {
        label: _metric(results.curves(similar, label), final=False)
        for label in {t.method.label for t in results.tasks if t.problem == similar}
    }
    final = {
        label: _metric(results.curves(similar, label), final=True)
        for label in {t.method.label for t in results.tasks if t.problem == similar}
    }
    where = f"Fig. 2a (N={scale.agents})"
    report.ordering(
        paper, where, "FTS beats TS", "FTS below TS", metric["FTS (P=1)"], metric["TS"]
    )
    report.ordering(
        paper,
        where,
        "FTS-DE (P=2) beats FTS",
        "FTS-DE below FTS",
        metric["FTS-DE P=2"],
        metric["FTS (P=1)"],
    )
    report.ordering(
        paper,
        where,
        "more sub-regions help: P=4 beats P=2",
        "P=4 below P=2",
        metric["FTS-DE P=4"],
        metric["FTS-DE P=2"],
    )
    report.ordering(
        paper, where, "P=3 beats P=2", "P=3 below P=2", metric["FTS-DE P=3"], metric["FTS-DE P=2"]
    )
    where = f"Fig. 5 (N={scale.agents})"
    report.ordering(
        paper,
        where,
        "equal weights are worse than FTS-DE",
        "orange above red",
        metric["FTS-DE P=2"],
        metric["FTS-DE P=2, equal weights"],
    )
    report.ordering(
        paper,
        where,
        "initial points over the whole domain are worse",
        "purple above red",
        metric["FTS-DE P=2"],
        metric["FTS-DE P=2, init whole domain"],
    )
    labels = [
        "TS",
        "FTS (P=1)",
        "FTS-DE P=2",
        "FTS-DE P=3",
        "FTS-DE P=4",
        "FTS-DE P=2, equal weights",
        "FTS-DE P=2, init whole domain",
    ]
    text.append("### Without privacy: Fig. 2a and Fig. 5\n")
    text.append(_method_table(results, similar, labels))
    fig, axes = _figure(2)
    st.plot_curves(
        axes[0], _curve_arrays(results, similar, labels[:5]), title="Fig. 2a: benefit of DE"
    )
    st.plot_curves(
        axes[1],
        _curve_arrays(results, similar, ["TS", "FTS-DE P=2", *labels[5:]]),
        title="Fig. 5: both DE components",
    )
    text.append(_save(fig, "dp_fts_de_fig2a_fig5.png") + "\n")

    # Privacy.
    dp = "DP-FTS-DE q=0.25 z=1"
    where = f"Fig. 2c (N={scale.agents})"
    report.ordering(
        paper,
        where,
        "larger q, better utility: q=0.5 beats q=0.25",
        "eps 20.12 below eps 9.91",
        metric["DP-FTS-DE q=0.5 z=1"],
        metric[dp],
    )
    report.ordering(
        paper,
        where,
        "q=0.25 beats q=0.15",
        "eps 9.91 below eps 5.93",
        metric[dp],
        metric["DP-FTS-DE q=0.15 z=1"],
    )
    where = f"Fig. 2d (N={scale.agents})"
    report.ordering(
        paper,
        where,
        "smaller z, better utility: z=1 beats z=1.2",
        "eps 9.91 below eps 7.39",
        metric[dp],
        metric["DP-FTS-DE q=0.25 z=1.2"],
    )
    report.ordering(
        paper,
        where,
        "z=1.2 beats z=1.5",
        "eps 7.39 below eps 5.22",
        metric["DP-FTS-DE q=0.25 z=1.2"],
        metric["DP-FTS-DE q=0.25 z=1.5"],
    )
    report.ordering(
        paper,
        "Fig. 2c / Sec. 5.2",
        "DP-FTS-DE at single-digit epsilon beats TS",
        "below TS",
        metric["DP-FTS-DE q=0.15 z=1"],
        metric["TS"],
    )
    report.ordering(
        paper,
        "Fig. 2c / Sec. 5.2 (t = T)",
        "DP-FTS-DE at single-digit epsilon beats TS at the last round",
        "below TS",
        final["DP-FTS-DE q=0.15 z=1"],
        final["TS"],
    )
    ablations = [m.label for m in fig4_ablations(_synthetic(), Privacy(0.25, 1.0))]
    same_clip = _clipped_percent(results.records(similar, ablations[0]))
    fig4_why = rm.fig4_ablation(
        metric[dp],
        metric["DP-FTS q=0.25 z=1"],
        *(metric[label] for label in ablations[:3]),
        clips=(results.clips.get("de", np.nan), results.clips.get("fts", np.nan)),
        clipped=None if same_clip is None else {"same S": same_clip},
        noise_off=(metric[ablations[3]], metric[ablations[4]]),
    )
    claim = "DP-FTS-DE beats DP-FTS at a similar clipped fraction"
    if fig4_why:
        report.measured[("Fig. 4", claim)] = fig4_why
    report.ordering(
        paper,
        f"Fig. 4 (N={scale.agents})",
        claim,
        "DE below (S=11 vs S=8; 0.80% vs 0.31% clipped)",
        metric[dp],
        metric["DP-FTS q=0.25 z=1"],
    )
    s_labels = (
        [f"DP-FTS-DE q=0.25 z=1, S x{f:g}" for f in (0.25, 0.5)]
        + [dp]
        + [f"DP-FTS-DE q=0.25 z=1, S x{f:g}" for f in (2.0, 4.0)]
    )
    report.ordering(
        paper,
        "Fig. 2b",
        "an overly small S hurts (S x0.25 vs S)",
        "S=11 best",
        metric[dp],
        metric[s_labels[0]],
    )
    report.ordering(
        paper,
        "Fig. 2b",
        "an overly large S hurts (S x4 vs S)",
        "S=11 best",
        metric[dp],
        metric[s_labels[-1]],
    )
    report.ordering(
        paper,
        "Fig. 12a",
        "adaptive weights beat non-adaptive ones late (t = T)",
        "red below green as t grows",
        final[dp],
        final["DP-FTS-DE q=0.25 z=1, non-adaptive weights"],
    )
    p_labels = [dp, "DP-FTS-DE P=3 q=0.25 z=1", "DP-FTS-DE P=4 q=0.25 z=1"]
    where = f"Fig. 6 (same S, N={scale.agents})"
    report.ordering(
        paper,
        where,
        "P=3 beats P=2 (smaller sub-regions are easier to model)",
        "orange (smaller P) above",
        metric[p_labels[1]],
        metric[p_labels[0]],
    )
    report.ordering(
        paper,
        where,
        "P=3 beats P=4 (a larger P clips more vectors)",
        "yellow (larger P) above",
        metric[p_labels[1]],
        metric[p_labels[2]],
    )
    text.append("### With privacy: Fig. 2b-d, Fig. 4, Fig. 6, Fig. 12a\n")
    text.append(
        "All runs with the moments accountant's epsilon of the paper; DP noise from "
        "`simulate(..., insecure_noise_seed=...)`, so each run is repeatable. Epsilon after "
        f"T = {scale.rounds} used broadcasts (delta = N^-1.1) depends only on q, z and T.\n"
    )
    dp_labels = [
        "TS",
        "FTS-DE P=2",
        dp,
        "DP-FTS-DE q=0.15 z=1",
        "DP-FTS-DE q=0.5 z=1",
        "DP-FTS-DE q=0.25 z=1.2",
        "DP-FTS-DE q=0.25 z=1.5",
        "DP-FTS q=0.25 z=1",
        *s_labels[:2],
        *s_labels[3:],
        *p_labels[1:],
        "DP-FTS-DE q=0.25 z=1, non-adaptive weights",
        *ablations,
    ]
    text.append(_method_table(results, similar, dp_labels))
    fig, axes = _figure(3)
    st.plot_curves(axes[0], _curve_arrays(results, similar, ["TS", *s_labels]), title="Fig. 2b: S")
    st.plot_curves(
        axes[1],
        _curve_arrays(
            results,
            similar,
            ["TS", "FTS-DE P=2", "DP-FTS-DE q=0.15 z=1", dp, "DP-FTS-DE q=0.5 z=1"],
        ),
        title="Fig. 2c: q (z = 1)",
    )
    st.plot_curves(
        axes[2],
        _curve_arrays(
            results,
            similar,
            ["TS", "FTS-DE P=2", dp, "DP-FTS-DE q=0.25 z=1.2", "DP-FTS-DE q=0.25 z=1.5"],
        ),
        title="Fig. 2d: z (q = 0.25)",
    )
    text.append(_save(fig, "dp_fts_de_fig2bcd.png") + "\n")
    fig, axes = _figure(3)
    st.plot_curves(
        axes[0],
        _curve_arrays(results, similar, ["TS", "DP-FTS q=0.25 z=1", dp, *ablations]),
        title="Fig. 4: DP-FTS vs DP-FTS-DE (and ablations)",
    )
    st.plot_curves(
        axes[1], _curve_arrays(results, similar, ["TS", *p_labels]), title="Fig. 6: P at fixed S"
    )
    st.plot_curves(
        axes[2],
        _curve_arrays(results, similar, ["TS", dp, "DP-FTS-DE q=0.25 z=1, non-adaptive weights"]),
        title="Fig. 12a: weights",
    )

    text.append(_save(fig, "dp_fts_de_fig4_fig6_fig12.png") + "\n")

    # Heterogeneous agents.
    text.append("### Heterogeneous agents: Fig. 7\n")
    seven = Problem("mixed", 0.7, scale.hetero_agents)
    one = Problem("mixed", 1.0, scale.hetero_agents)
    seven_labels = ["TS", GP_TS.label, "FTS-DE P=2"]
    m7 = {label: _metric(results.curves(seven, label), False) for label in seven_labels}
    one_labels = [
        "TS",
        "FTS-DE P=2, 1-p_t=1/sqrt(t)",
        "FTS-DE P=2, 1-p_t=1/t",
        "FTS-DE P=2, 1-p_t=1/t^2",
    ]
    m1 = {label: _metric(results.curves(one, label), False) for label in one_labels}
    where = f"Fig. 7a (alpha=0.7, N={scale.hetero_agents})"
    gp_records = results.records(seven, GP_TS.label)
    baseline_why = rm.paper_baseline(
        m7["FTS-DE P=2"],
        m7["TS"],
        m7[GP_TS.label],
        np.mean([r["cpu_seconds"] for r in gp_records.values()]) if gp_records else None,
        (m1[one_labels[1]], _metric(results.curves(one, GP_TS.label), False), m1["TS"]),
    )
    if baseline_why:
        claim = "FTS-DE still beats TS"
        report.measured[(claim_key(paper, where, claim)[1], claim)] = (
            rr.FIG7A_CHECKED + "; " + baseline_why
        )
    report.ordering(paper, where, "FTS-DE still beats TS", "below TS", m7["FTS-DE P=2"], m7["TS"])
    where = f"Fig. 7b (alpha=1, N={scale.hetero_agents})"
    report.ordering(
        paper,
        where,
        "independent agents: FTS-DE with 1-p_t=1/sqrt(t) is worse than TS",
        "green above blue",
        m1["TS"],
        m1[one_labels[1]],
    )
    schedules_why = rm.schedule_costs(m1, one_labels, scale.rounds)
    for claim in ("a faster-decaying 1-p_t (1/t^2) is comparable with TS",
                  "(1-p_t = 1/t) is comparable with TS"):  # fmt: skip
        if schedules_why:
            report.measured[(claim_key(paper, where, claim)[1], claim)] = schedules_why
    report.comparable(
        paper,
        where,
        "a faster-decaying 1-p_t (1/t^2) is comparable with TS",
        "orange close to blue",
        m1[one_labels[3]],
        m1["TS"],
    )
    report.comparable(
        paper,
        where,
        "(1-p_t = 1/t) is comparable with TS",
        "orange close to blue",
        m1[one_labels[2]],
        m1["TS"],
    )
    text.append(f"alpha = 0.7 (N = {scale.hetero_agents}):\n")
    text.append(_method_table(results, seven, seven_labels))
    text.append(f"alpha = 1, independent agents (N = {scale.hetero_agents}):\n")
    text.append(_method_table(results, one, [*one_labels, GP_TS.label]))
    fig, axes = _figure(2)
    st.plot_curves(axes[0], _curve_arrays(results, seven, seven_labels), title="alpha = 0.7")
    st.plot_curves(
        axes[1],
        _curve_arrays(results, one, [*one_labels, GP_TS.label]),
        title="alpha = 1 (independent)",
    )
    text.append(_save(fig, "dp_fts_de_fig7.png") + "\n")

    # Paper preset against product defaults.
    text.append("### Paper preset against product defaults (same functions)\n")
    defaults = PRODUCT_DEFAULTS
    text.append(
        "Rows: the paper preset (raw values); the same with per-participant standardization "
        f"(the library's former default); `FTSConfig(n_subregions=2, n_init=10)`, the product "
        "defaults with the paper's 10 initial points for an equal budget "
        f"(`{defaults}`).\n"
    )
    compare_labels = [
        "TS",
        "FTS-DE P=2",
        "FTS-DE P=2, per-participant standardization",
        "FTS-DE P=2, product defaults",
    ]
    text.append(_method_table(results, similar, compare_labels))
    why = rm.pulled_by_one(metric[compare_labels[2]], metric["FTS-DE P=2"])
    if why:
        claim = f"'{compare_labels[2]}' beats the paper preset (FTS-DE P=2)"
        report.measured[("preset vs defaults", claim)] = (
            why + "; on this problem (agents 2% apart) every participant's values already share "
            "one scale, which is what per-participant standardization corrects"
        )
    for other in compare_labels[2:]:
        report.ordering(
            "(ours)",
            "preset vs defaults",
            f"'{other}' beats the paper preset (FTS-DE P=2)",
            "-",
            metric[other],
            metric["FTS-DE P=2"],
        )
    fig, axes = _figure(1, width=6.5)
    st.plot_curves(
        axes[0],
        _curve_arrays(results, similar, compare_labels),
        title="paper preset vs product defaults",
    )
    text.append(_save(fig, "dp_fts_de_preset_vs_defaults.png") + "\n")
    for missing in (
        (
            "Fig. 3a-f, 8-11",
            "real-world privacy-utility (landmine, HAR, EMNIST)",
            "DP-FTS-DE beats TS at single-digit epsilon; trade-off curves",
        ),
    ):
        report.missing(
            paper,
            missing[0],
            missing[1],
            missing[2],
            "not run: the landmine data has no licence and HAR/EMNIST pipelines are "
            "not public (FACTS); the synthetic rows above test the same orderings",
        )
    report.sections.append("\n".join(text))


def fts_section(report: Report, results: Results) -> None:
    scale = report.scale
    paper = "FTS"
    close = Problem("similar", 0.02, scale.fts_agents)
    far = Problem("similar", 1.2, scale.fts_agents)
    text = [
        "## FTS (Dai et al., NeurIPS 2020)\n",
        f"Synthetic setting of Sec. 5.1 / App. D.1 with `presets.fts_synthetic()` (raw values, "
        f"M = 100, lengthscale 0.03, noise variance 0.01, P_N uniform, 1 initial point), "
        f"N = {scale.fts_agents} agents whose functions are f +- d_n per input, {scale.rounds} "
        'rounds, in the paper\'s "most general setting" (App. D.2.1: every agent runs FTS and '
        "uploads every round; the paper's main experiments send t_n fixed observations once). "
        "TS: local TS with 1 initial point.\n",
    ]
    mc = {label: _metric(results.curves(close, label), False) for label in ("TS", "FTS")}
    far_labels = ["TS", "FTS, 1-p_t=1/sqrt(t)", "FTS, 1-p_t=1/t^2"]
    mf = {label: _metric(results.curves(far, label), False) for label in far_labels}
    report.ordering(
        paper,
        "Fig. 1a/b (d=0.02)",
        "FTS beats TS on similar agents",
        "FTS below TS",
        mc["FTS"],
        mc["TS"],
    )
    report.comparable(
        paper,
        "Fig. 1c (d=1.2)",
        "FTS stays comparable with TS on heterogeneous agents",
        "slightly slower than TS",
        mf[far_labels[1]],
        mf["TS"],
    )
    report.comparable(
        paper,
        "Fig. 1c (d=1.2)",
        "a faster-growing p_t (1 - 1/t^2) matches TS",
        "red matches TS",
        mf[far_labels[2]],
        mf["TS"],
    )
    report.missing(
        paper,
        "Fig. 1a/b",
        "effect of M: negligible at small t_n, larger M better at large t_n",
        "M orderings",
        "not run: needs the paper's simple setting (fixed t_n observations of the "
        "other agents, sent once), which simulate() does not model",
    )
    report.missing(
        paper,
        "Fig. 2-3, 5-7",
        "real-world: FTS beats RGPE and TAF (performance, communication, runtime)",
        "FTS best",
        "not run: RGPE/TAF are not "
        "implemented and the landmine / Google-glasses / HAR data are not shippable",
    )
    text.append(_method_table(results, close, ["TS", "FTS"]))
    text.append(_method_table(results, far, far_labels))
    fig, axes = _figure(2)
    st.plot_curves(axes[0], _curve_arrays(results, close, ["TS", "FTS"]), title="d = 0.02")
    st.plot_curves(axes[1], _curve_arrays(results, far, far_labels), title="d = 1.2")
    text.append(_save(fig, "fts_fig1.png") + "\n")
    report.sections.append("\n".join(text))


def provenance_lines(cache: st.ResultCache) -> list[str]:
    """Which code produced the cached results (the cache's ``PROVENANCE.json``)."""
    found = infra.Provenance.read(cache.root)
    if found is None:
        return ["**Provenance**: the cache has no PROVENANCE.json (no results yet).\n"]
    line = (
        f"**Provenance**: results computed by code digest `{found.code[:12]}` (optuna_fedbo/ "
        f"and the benchmark drivers), commits {', '.join(found.commits) or 'unknown'}."
    )
    if found.accepted_codes:
        line += (
            " **Mixed**: --accept-cache-from-other-code added runs of code "
            + ", ".join(f"`{c[:12]}`" for c in found.accepted_codes)
            + "."
        )
    current = infra.code_digest()
    if current != found.code and current not in found.accepted_codes:
        line += f" The code now is `{current[:12]}`: this report is from older results."
    return [line + "\n"]


def coverage_lines(
    scale: Scale, cache: st.ResultCache, clips: dict[str, float] | None, groups: set[str]
) -> list[str]:
    """Per group: runs in the cache out of the scale's runs, and their summed run time."""
    keys: dict[str, list[tuple[Any, ...]]] = {}
    if "fts" in groups:
        # A DP run whose pilot is missing has no key yet: it counts as missing.
        keys["FTS family"] = [_task_key(t, clips or {}) for t in ordered_fts_tasks(scale)]
    if "fedpne" in groups:
        keys["Fed-PNE"] = [key for key, _ in rf.fedpne_jobs(scale)]
    if "ldp" in groups:
        keys["LDP-BO"] = [key for key, _ in rl.ldp_jobs(scale)]
    parts = []
    for name, group in keys.items():
        found = [r for key in group if key and (r := cache.get(*key)) is not None]
        seconds = sum(float(r.get("seconds", 0.0)) for r in found)
        parts.append(
            f"{name}: {infra.coverage(len(found), len(group))} "
            f"({infra.format_duration(seconds)} of run time)"
        )
    return ["**Coverage**: " + "; ".join(parts) + ".\n"]


def write_report(
    scale: Scale,
    cache: st.ResultCache,
    clips: dict[str, float] | None,
    groups: set[str],
    seconds: float,
) -> None:
    norms = _pilot_norms(scale, 2, cache, compute=False) if clips is not None else None
    evidence = rr.Evidence(
        scale.agents,
        None if not norms else float(np.median(norms)),
        fs.N_FEATURES,
        (clips or {}).get("de", 11.0),
    )
    report = Report(scale, rr.read_archive(), evidence)
    if "fts" in groups and clips is not None:
        dp_fts_de_section(report, Results(scale, cache, clips, n_init=fs.N_INIT))
        fts_section(report, Results(scale, cache, clips, n_init=1))
    if "fedpne" in groups:
        rf.fedpne_section(report, cache, _figure, _save)
    if "ldp" in groups:
        rl.ldp_section(report, cache, _figure, _save)
    counts = dict.fromkeys(("reproduced", "not significant", "not reproduced", "not run"), 0)
    for row in report.claims:
        counts[st.category(row[5])] += 1
    header = [
        "# Reproduction of the papers' claims\n",
        f"Generated by `python benchmarks/reproduce.py {' '.join(sys.argv[1:])}` "
        f"(scale {scale.name}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{seconds / 60:.0f} min of this run on {platform.machine()}; cached results reused). "
        "Do not edit by hand.\n",
        f"**Scale `{scale.name}`**: {scale}.\n",
        *provenance_lines(cache),
        *coverage_lines(scale, cache, clips, groups),
        "How to read it: every claim is tested on the same seed functions for both sides "
        "(paired); 'ours' gives both means, the wins of the first out of the functions and a "
        f"one-sided Wilcoxon signed-rank p-value. **reproduced**: the paper's ordering holds "
        f"on the mean and p < {st.ALPHA}; **not significant**: it holds on the mean only; "
        "**reversed**/**not reproduced**: it does not hold. 'Comparable' claims need a mean "
        "ratio within [0.75, 1.33] and a two-sided p >= 0.05. Error bars and ± are standard "
        "errors over functions.\n",
        "Summary: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + ".\n",
        f"**Scales mixed row by row, as labelled**: {report.archived_rows} rows whose runs are "
        f"missing at `{scale.name}` come from the archived quick report "
        f"(`{rr.ARCHIVE.relative_to(HERE).as_posix()}`; ran at 'quick, archived'); every other "
        f"row ran at `{scale.name}`. 'why' gives, for every row that does not reproduce, the "
        "measured reason (and, where the two scales disagree, what the other one gave).\n",
        "## Claims\n",
        st.markdown_table(
            ["paper", "where", "claim", "paper's", "ours", "verdict", "why"]
            + ["ran at (runs' time)"],
            report.claims,
        ),
    ]
    REPORT.write_text("\n".join(header + report.sections), encoding="utf-8")
    print(f"wrote {REPORT} ({len(report.claims)} claims: {counts})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="quick")
    parser.add_argument(
        "--groups",
        default="fts,fedpne,ldp",
        help="comma-separated sections to run: fts, fedpne, ldp",
    )
    parser.add_argument("--workers", type=int, default=1, help="parallel processes (FTS runs)")
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=None,
        help="start no new run after this many minutes",
    )
    parser.add_argument(
        "--max-tier",
        type=int,
        default=3,
        help="FTS-family runs up to this tier (0: Fig. 2a/5 and defaults; 1: "
        "DP Fig. 2c/d, 4; 2: Fig. 7, FTS Fig. 1; 3: Fig. 2b, 6, 12a)",
    )
    parser.add_argument(
        "--min-tier", type=int, default=0, help="FTS-family runs from this tier on"
    )
    parser.add_argument(
        "--method",
        action="append",
        default=None,
        help="FTS-family runs of this method label only (repeatable; e.g. 'TS', "
        "'DP-FTS-DE q=0.15 z=1'): the rows that matter first",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=CACHE,
        help=f"the results cache (one sub-directory per scale; default {CACHE})",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the report from the cache (after every shard is done); says what is missing",
    )
    parser.add_argument(
        "--shard",
        default=None,
        help="K/N: run only the K-th of N deterministic parts of the runs (several processes or "
        "machines sharing one cache); writes no report",
    )
    parser.add_argument(
        "--rebuild-cache",
        action="store_true",
        help="move a cache written by other code or at another scale aside and start afresh",
    )
    parser.add_argument(
        "--accept-cache-from-other-code",
        action="store_true",
        help="continue a cache written by other code at the same scale; the report lists "
        "every code digest it mixes",
    )
    args = parser.parse_args()
    try:
        shard = infra.parse_shard(args.shard)
        groups = set(args.groups.split(","))
        if not groups <= {"fts", "fedpne", "ldp"}:
            raise ValueError(f"--groups takes fts, fedpne, ldp, got {args.groups!r}.")
        scale = SCALES[args.scale]
        methods = None if args.method is None else frozenset(args.method)
        known = {t.method.label for t in fts_family_tasks(scale)}
        if methods is not None and not methods <= known:
            raise ValueError(
                f"--method: unknown label(s) {sorted(methods - known)}; known: {sorted(known)}."
            )
        cache = st.ResultCache(args.cache / scale.name)
        if args.report_only:
            infra.check_scale(cache.root, scale)
        else:
            infra.open_cache(
                cache.root,
                scale,
                infra.code_digest(),
                infra.git_commit(),
                rebuild=args.rebuild_cache,
                accept_other_code=args.accept_cache_from_other_code,
            )
    except (ValueError, infra.CacheMismatch) as error:
        print(f"reproduce.py: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.getLogger("optuna_fedbo").setLevel(logging.ERROR)
    start = time.time()
    deadline = np.inf if args.budget_minutes is None else start + 60 * args.budget_minutes
    clips = None
    if args.report_only:
        clips = clip_norms(scale, cache, compute=False) if "fts" in groups else None
    else:
        if "fts" in groups:
            tiers = (args.min_tier, args.max_tier)
            clips = run_fts_family(scale, cache, args.workers, deadline, tiers, shard, methods)
        if "fedpne" in groups:
            infra.run_jobs("Fed-PNE", rf.fedpne_jobs(scale), cache, deadline, shard)
        if "ldp" in groups:
            infra.run_jobs("LDP", rl.ldp_jobs(scale), cache, deadline, shard)
    if shard[1] > 1:
        print(
            f"shard {shard[0]}/{shard[1]} done; when every shard is: "
            f"python benchmarks/reproduce.py --scale {scale.name} --report-only"
        )
        return
    write_report(scale, cache, clips, groups, time.time() - start)


if __name__ == "__main__":
    main()
