"""Shared pieces of the LDP-BO benchmarks (``benchmarks/ldp_*.py``): problems and runners.

The LDP algorithms run on the core state machines of :mod:`optuna_fedbo.core.ldp` (the code the
sampler drives, minus Optuna's bookkeeping, so that many seeds fit in minutes); TPE runs through
Optuna on the same privatized values; random search needs no values. ``benchmarks/ldp_cost.py``
times the Optuna sampler itself.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from collections.abc import Callable  # noqa: E402
import math  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from optuna_fedbo.core.ldp import ATAGPUCB  # noqa: E402
from optuna_fedbo.core.ldp import Kernel  # noqa: E402
from optuna_fedbo.core.ldp import MoMAGPUCB  # noqa: E402
from optuna_fedbo.core.ldp import parameters  # noqa: E402
from optuna_fedbo.core.ldp import RewardModel  # noqa: E402
from optuna_fedbo.core.ldp import run_finite_domain  # noqa: E402
from optuna_fedbo.core.ldp import TGPUCB  # noqa: E402
from optuna_fedbo.core.ldp.nystrom import DEFAULT_MAX_DICTIONARY_SIZE  # noqa: E402
from optuna_fedbo.samplers._ldp_ucb import DEFAULT_BETA_SCALES  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
RESULTS = Path(__file__).resolve().parent / "results"
DELTA = 0.05


def synthetic_problem(seed: int, kernel: Kernel) -> tuple[np.ndarray, np.ndarray]:
    """The paper's synthetic problem ("Datasets and Settings").

    ``[0, 1]`` discretized into 100 points; ``f = sum_{i <= 100} a_i k(., x_i)`` with
    ``a_i ~ U[-1, 1]`` and support points ``x_i`` drawn uniformly from the domain.

    Returns:
        ``(domain, f)`` of shapes ``(100, 1)`` and ``(100,)``.
    """
    rng = np.random.default_rng(seed)
    domain = np.linspace(0.0, 1.0, 100)[:, None]
    support = domain[rng.integers(0, 100, size=100)]
    return domain, kernel(domain, support) @ rng.uniform(-1.0, 1.0, size=100)


def practical_epoch_length(horizon: int) -> int:
    """MoMA's default ``k`` (:func:`~optuna_fedbo.core.ldp.parameters.practical_epoch_length`)."""
    return parameters.practical_epoch_length(horizon, DELTA)


#: Parameter presets of the core algorithms, selected by a ``":preset"`` suffix of the method
#: name (``"tgp:paper"``). ``practical``: the sampler's defaults (``lambda = 4 c / B^2``, the
#: tuned ``beta_scale`` of :data:`DEFAULT_BETA_SCALES`, a 64-column Nystrom dictionary).
#: ``paper``: the theorems as stated (``lambda = 1``, ``beta_scale = 1``, an unbounded
#: dictionary), the paper's "order-wise similar" parameters. ``paper+lambda`` and
#: ``paper+beta`` are the paper's with one practical constant each (the diagnosis of
#: ``benchmarks/ldp_paper_settings.py``). MoMA's epoch length is the method's: ``moma`` the
#: theorem's ``k``, ``moma-k`` the practical one.
PRESETS: dict[str, dict[str, object]] = {
    "practical": {
        "regularization": "practical",
        "beta_scale": "practical",
        "dictionary": DEFAULT_MAX_DICTIONARY_SIZE,
    },
    "paper": {"regularization": 1.0, "beta_scale": 1.0, "dictionary": None},
    "paper+lambda": {"regularization": "practical", "beta_scale": 1.0, "dictionary": None},
    "paper+beta": {"regularization": 1.0, "beta_scale": "practical", "dictionary": None},
}


def split_method(name: str) -> tuple[str, str]:
    """``"moma-k:paper"`` -> ``("moma-k", "paper")``; no suffix is the ``practical`` preset.

    Raises:
        ValueError: For a preset not in :data:`PRESETS`.
    """
    method, _, preset = name.partition(":")
    preset = preset or "practical"
    if preset not in PRESETS:
        raise ValueError(f"Unknown LDP preset {preset!r} in {name!r}; use one of {list(PRESETS)}.")
    return method, preset


def make_algorithm(
    name: str,
    kernel: Kernel,
    rewards: RewardModel,
    horizon: int,
    rng: np.random.Generator,
) -> TGPUCB | ATAGPUCB | MoMAGPUCB:
    """One of ``tgp``, ``ata``, ``moma`` (theorem's ``k``) or ``moma-k`` (practical ``k``),
    with an optional ``":preset"`` suffix (:data:`PRESETS`; none: the sampler's defaults)."""
    method, preset = split_method(name)
    settings = PRESETS[preset]
    family = "moma" if method.startswith("moma") else method
    beta_scale = settings["beta_scale"]
    common = {
        "delta": DELTA,
        "regularization": settings["regularization"],
        "beta_scale": DEFAULT_BETA_SCALES[family] if beta_scale == "practical" else beta_scale,
    }
    if method == "tgp":
        return TGPUCB(kernel, rewards, **common)
    dictionary = {"max_dictionary_size": settings["dictionary"]}
    if method == "ata":
        return ATAGPUCB(kernel, rewards, horizon=horizon, rng=rng, **common, **dictionary)
    epoch_length = "practical" if method == "moma-k" else "theorem"
    return MoMAGPUCB(
        kernel,
        rewards,
        horizon=horizon,
        epoch_length=epoch_length,
        rng=rng,
        **common,
        **dictionary,
    )


def run_core(
    name: str,
    kernel: Kernel,
    rewards: RewardModel,
    domain: np.ndarray,
    reward: Callable[[int], float],
    horizon: int,
    seed: int,
) -> np.ndarray:
    """Indices played by a core algorithm in ``horizon`` rounds."""
    rng = np.random.default_rng(seed)
    algorithm = make_algorithm(name, kernel, rewards, horizon, rng)
    return run_finite_domain(algorithm, domain, reward, horizon, rng)


def run_random(n_points: int, horizon: int, seed: int) -> np.ndarray:
    """Indices played by uniform random search."""
    return np.random.default_rng(seed).integers(0, n_points, size=horizon)


def run_tpe(
    suggest: Callable[[optuna.Trial], int],
    reward: Callable[[int], float],
    horizon: int,
    seed: int,
) -> np.ndarray:
    """Indices played by Optuna's TPE maximizing the (privatized) rewards it is given."""
    played: list[int] = []

    def objective(trial: optuna.Trial) -> float:
        index = suggest(trial)
        played.append(index)
        return reward(index)

    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed)
    )
    study.optimize(objective, n_trials=horizon)
    return np.array(played)


def play(
    method: str,
    kernel: Kernel,
    rewards: RewardModel,
    domain: np.ndarray,
    reward: Callable[[int], float],
    horizon: int,
    seed: int,
) -> np.ndarray:
    """Indices played by ``random``, ``tpe`` or a core algorithm on a finite domain."""
    if method.partition(":")[0] == "random":
        return run_random(len(domain), horizon, seed)
    if method.partition(":")[0] == "tpe":
        top = len(domain) - 1
        return run_tpe(lambda t: t.suggest_int("i", 0, top), reward, horizon, seed)
    return run_core(method, kernel, rewards, domain, reward, horizon, seed)


def cumulative_regret(f: np.ndarray, played: np.ndarray) -> np.ndarray:
    """``R_t = sum_{s <= t} f* - f(x_s)`` for every ``t``."""
    return np.cumsum(np.max(f) - f[played])


def summarize(curves: dict[str, list[np.ndarray]]) -> dict[str, tuple[float, float]]:
    """Final regret: mean and standard error over seeds, per method."""
    out = {}
    for name, runs in curves.items():
        finals = np.array([run[-1] for run in runs])
        out[name] = (float(finals.mean()), float(finals.std(ddof=1) / math.sqrt(len(finals))))
    return out


def plot_panels(
    panels: dict[str, dict[str, list[np.ndarray]]], path: Path, title: str, columns: int = 3
) -> None:
    """Mean cumulative regret curves, one panel per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(m for curves in panels.values() for m in curves))
    colors = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.3 * rows), squeeze=False)
    for ax, (name, curves) in zip(axes.ravel(), panels.items()):
        for method, runs in curves.items():
            mean = np.mean(runs, axis=0)
            ax.plot(np.arange(1, len(mean) + 1), mean, label=method, color=colors[method])
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("t")
        ax.set_ylabel("cumulative regret")
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(panels) :]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
