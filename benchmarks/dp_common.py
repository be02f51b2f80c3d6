"""Shared pieces of the DP-FTS-DE synthetic benchmarks (``dp_synthetic.py``, ``dp_ablations.py``).

The setting is ``federation_synthetic.py``'s (DP-FTS-DE App. B.1.1: ``N = 200`` agents
maximizing ``f + d``, ``d = +-0.02`` per input, a GP sample of lengthscale 0.03 on 1,000 grid
points, noise variance 0.01, ``M = 50``, ``1 - p_t = 1/sqrt(t)``, weights held 5 rounds then
decayed over 5, 10 initial points, 40 BO rounds) whose functions, objectives, local-TS baseline
and regret curves are imported from there; this module adds the private server.

Two conventions to keep in mind when reading the epsilons:

- the paper's ``T`` is the number of broadcasts the agents *use*: 40 for 40 BO rounds. The
  simulation publishes exactly those (round 0, after the initial designs, and one after each
  BO round but the last), so the federation's ledger reports ``eps(40)``, the same number as
  the accountants' column of the same name.
- ``S`` is ours, not the paper's ``S = 11``: the clip bound is ``S / sqrt(P)`` and the norms of
  our participants' vectors (standardized values, our feature scaling) are about 7 (99th
  percentile 8.7), so ``S = 12.3`` at ``P = 2`` (and ``S = 8.7`` at ``P = 1``) clips about 1% of
  the vectors, the paper's rule for choosing ``S``.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
import time

import federation_synthetic as fs
import numpy as np
import seedstats as st

from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.privacy import compute_epsilon

N_AGENTS = 200
N_ROUNDS = 40
#: Clip norm with about 1% of the vectors clipped at P = 2 (bound S / sqrt(2) = 8.7).
S_DE = 12.3
#: The same per-vector bound at P = 1 (DP-FTS).
S_FTS = 8.7
ACCOUNTANTS = ("moments", "rdp", "pld")


@dataclass
class Run:
    """One method on one seed."""

    curves: np.ndarray  # simple regret, shape (N, n_rounds + 1)
    clipped: int  # contributing vectors clipped, over all rounds
    contributed: int  # contributing vectors, over all rounds
    published: int  # broadcasts published (what the ledger counts)
    ledger_epsilon: float  # the federation's privacy_spent() epsilon
    seconds: float


def de_protocol(n_subregions: int = 2) -> FTSConfig:
    """The synthetic FTS-DE protocol of ``federation_synthetic.py`` with ``P`` sub-regions."""
    return fs.fts_config(n_subregions=n_subregions)


def run_private(
    functions: np.ndarray,
    n_rounds: int,
    seed: int,
    protocol: FTSConfig,
    privacy: DPConfig | None,
) -> Run:
    """Simulate the federation (privately if ``privacy`` is given) on the agents' functions."""
    start = time.perf_counter()
    result = fs.run_federated(functions, n_rounds, seed, protocol, privacy)
    seconds = time.perf_counter() - start
    reports = [r for r in result.reports if r.published]
    clipped = sum(r.n_clipped or 0 for r in reports)
    contributed = sum(r.n_contributors for r in reports) if privacy is not None else 0
    return Run(
        curves=fs.regret_curves(result.studies, functions, n_rounds),
        clipped=clipped,
        contributed=contributed,
        published=len(reports),
        ledger_epsilon=result.federation.privacy_spent()[0],
        seconds=seconds,
    )


def run_local(functions: np.ndarray, n_rounds: int, seed: int) -> Run:
    """Local TS on every agent (the baseline)."""
    start = time.perf_counter()
    studies = fs.run_local_ts(functions, n_rounds, seed)
    return Run(
        curves=fs.regret_curves(studies, functions, n_rounds),
        clipped=0,
        contributed=0,
        published=0,
        ledger_epsilon=math.inf,
        seconds=time.perf_counter() - start,
    )


def epsilons(q: float, z: float, rounds: int, n_agents: int) -> dict[str, float]:
    """Epsilon after ``rounds`` broadcasts by each accountant, at ``delta = N^-1.1``."""
    return {
        kind: compute_epsilon(
            noise_multiplier=z,
            sample_rate=q,
            rounds=rounds,
            delta=n_agents**-1.1,
            accountant=kind,
        )
        for kind in ACCOUNTANTS
    }


def merge(runs: list[Run]) -> Run:
    """Pool the runs of several seed functions: one mean curve (over agents) per function."""
    return Run(
        curves=np.stack([r.curves.mean(axis=0) for r in runs]),
        clipped=sum(r.clipped for r in runs),
        contributed=sum(r.contributed for r in runs),
        published=runs[0].published,
        ledger_epsilon=runs[0].ledger_epsilon,
        seconds=sum(r.seconds for r in runs),
    )


def regret_cell(curves: np.ndarray, round_index: int) -> str:
    """``mean+-standard error`` of the simple regret at a round, over seed functions."""
    mean, error = st.mean_se(curves[:, round_index])
    return f"{mean:.4f}+-{error:.4f}"


def clipped_percent(run: Run) -> str:
    return "-" if run.contributed == 0 else f"{100.0 * run.clipped / run.contributed:.2f}%"
