"""Statistics over seed functions: what every benchmark that compares methods needs.

A method's result on one seed function (one random problem) is one number (e.g. its simple
regret averaged over agents and rounds) or one curve over t. Error bars are over seed functions,
never over the agents of one function (they share the function and every broadcast, so they are
not independent), and two methods are compared *paired*: on the same functions, counting wins
and testing the per-function differences (Wilcoxon signed-rank). Results are cached one JSON
file per (setting, method, function), so a long run can be resumed and a report regenerated.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
import json
import math
import os
from pathlib import Path
import re
from typing import Any

import numpy as np

#: Significance level of the paired tests.
ALPHA = 0.05


def mean_se(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and standard error over seed functions."""
    array = np.asarray(values, dtype=float)
    if array.size < 2:
        return float(array.mean()), math.nan
    return float(array.mean()), float(array.std(ddof=1) / math.sqrt(array.size))


def cell(values: Sequence[float] | np.ndarray, digits: int = 4) -> str:
    """``mean ± s.e.`` over seed functions."""
    mean, se = mean_se(values)
    return f"{mean:.{digits}f} ± {se:.{digits}f}"


@dataclass(frozen=True)
class Comparison:
    """Paired comparison of ``a`` against ``b`` on the same seed functions (lower is better).

    Attributes:
        wins: Functions on which ``a`` is strictly lower than ``b``.
        n: Number of functions.
        p_less: One-sided Wilcoxon signed-rank p-value of ``a < b``.
        p_two_sided: Two-sided p-value of ``a != b``.
        mean_a: Mean of ``a`` over the functions.
        mean_b: Mean of ``b``.
    """

    wins: int
    n: int
    p_less: float
    p_two_sided: float
    mean_a: float
    mean_b: float

    @property
    def ratio(self) -> float:
        """``mean_a / mean_b``."""
        return self.mean_a / self.mean_b if self.mean_b else math.inf

    def text(self) -> str:
        return f"{self.wins}/{self.n} wins, p = {self.p_less:.3g}"


def compare(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> Comparison:
    """Compare ``a`` with ``b`` function by function (lower is better)."""
    from scipy import stats

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("compare needs two equally long 1-D arrays (one value per function).")
    difference = x - y
    if np.all(difference == 0):
        p_less = p_two = 1.0
    else:
        p_less = float(stats.wilcoxon(difference, alternative="less").pvalue)
        p_two = float(stats.wilcoxon(difference).pvalue)
    return Comparison(
        wins=int(np.sum(difference < 0)),
        n=int(difference.size),
        p_less=p_less,
        p_two_sided=p_two,
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
    )


def _few(comparison: Comparison) -> str:
    return f"too few functions ({comparison.n} < 10): " if comparison.n < 10 else ""


def ordering_verdict(comparison: Comparison) -> str:
    """The verdict on a claim "a is better (lower) than b"."""
    prefix = _few(comparison)
    if comparison.mean_a < comparison.mean_b and comparison.p_less < ALPHA:
        return prefix + "**reproduced**"
    if comparison.mean_a < comparison.mean_b:
        return prefix + "same direction, **not significant**"
    if comparison.p_two_sided < ALPHA:
        return prefix + "**reversed** (significant)"
    return prefix + f"**not reproduced** (reversed on the mean, p = {comparison.p_two_sided:.2g})"


def category(verdict: str) -> str:
    """``reproduced``, ``not significant``, ``not reproduced`` or ``not run``."""
    if verdict.startswith("not run"):
        return "not run"
    if "**reproduced**" in verdict or "**better**" in verdict:
        return "reproduced"
    if "**not significant**" in verdict:
        return "not significant"
    return "not reproduced"


def comparable_verdict(comparison: Comparison, band: float = 0.25) -> str:
    """The verdict on a claim "a performs comparably with b".

    Comparable: the means are within ``band`` of each other (ratio in ``[1 - band, 1 / (1 -
    band)]``) and the paired test does not separate them.
    """
    low, high = 1.0 - band, 1.0 / (1.0 - band)
    prefix = _few(comparison)
    if low <= comparison.ratio <= high and comparison.p_two_sided >= ALPHA:
        return prefix + "**reproduced** (comparable)"
    if comparison.mean_a < comparison.mean_b:
        return prefix + "**better** than claimed (clearly lower)"
    return prefix + "**not reproduced** (clearly worse)"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(str(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def plot_curves(
    axis: Any,
    curves: Mapping[str, np.ndarray],
    *,
    x: np.ndarray | None = None,
    title: str = "",
    xlabel: str = "BO round t (0: after the initial design)",
    ylabel: str = "simple regret",
    log: bool = True,
) -> None:
    """Mean curve over seed functions with a band of one standard error, per method.

    Args:
        axis: A matplotlib axis.
        curves: Method name to an array of shape ``(n_functions, n_points)``.
    """
    for name, runs in curves.items():
        runs = np.asarray(runs, dtype=float)
        mean = runs.mean(axis=0)
        error = runs.std(axis=0, ddof=1) / math.sqrt(len(runs)) if len(runs) > 1 else 0 * mean
        xs = np.arange(len(mean)) if x is None else x
        axis.plot(xs, mean, label=f"{name} ({len(runs)} fn)")
        axis.fill_between(xs, mean - error, mean + error, alpha=0.2)
    axis.set_title(title, fontsize=9)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    if log:
        axis.set_yscale("log")
    axis.legend(fontsize=7)


class ResultCache:
    """One JSON file per result key, under a directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, *key: object) -> Path:
        parts = [re.sub(r"[^A-Za-z0-9.=_-]+", "_", str(k)) for k in key]
        return self.root.joinpath(*parts[:-1], parts[-1] + ".json")

    def get(self, *key: object) -> dict[str, Any] | None:
        path = self.path(*key)
        if not path.exists():
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    def put(self, value: dict[str, Any], *key: object) -> None:
        path = self.path(*key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # A name per process: shards sharing the cache may write the same key (the pilots).
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(value), encoding="utf-8")
        temporary.replace(path)
