"""DP-FTS-DE's synthetic experiment without privacy: TS, FTS, FTS-DE and the DE ablations.

Setting (DP-FTS-DE, App. B.1.1): a function ``f`` drawn from a GP with an SE kernel of
lengthscale 0.03 on a grid of 1,000 points of ``[0, 1]``, normalized to ``[0, 1]``; agent ``n``
maximizes ``f^n(x) = f(x) + d`` with ``d = +0.02`` or ``-0.02`` drawn independently for every
input, observed with Gaussian noise of variance 0.01. ``N = 200`` agents, 10 initial points,
``M = 50`` shared features, ``1 - p_t = 1/sqrt(t)``, weights held 5 rounds then decayed to uniform
over 5 (the paper's synthetic schedule), 40 BO rounds. The heterogeneous variant (App. B.1.2,
Fig. 7b) gives each of 50 agents an independent function and compares ``1 - p_t = 1/sqrt(t)``,
``1/t`` and ``1/t^2``.

The metric is the simple regret of every agent, ``max f^n - max_{s <= t} f^n(x_s)`` on the
noiseless values, averaged over agents, after the initial design (round 0) and after each BO round;
error bars are standard errors over seed functions. All methods use the same random features
(lengthscale 0.03: the kernel the functions are drawn from) and the same Bayesian linear model;
local TS draws its 10 initial points from the whole domain. Participants standardize their values
(the library default) except in the "raw values" row, which shares the common ``[0, 1]`` scale of
the functions: with per-agent standardization, agents that have only seen their own sub-region
rescale it to their own mean and spread, which biases the comparison between sub-regions (more so
with more sub-regions). :func:`run_gp_ts` is the papers' own TS baseline instead: a GP on raw
values whose hyperparameters are fitted every 5 observations (``reproduce.py`` tests Fig. 7a's
reversal against it).

Expected (papers): on similar agents FTS-DE < FTS < TS in regret, and more sub-regions help; both
DE components matter (equal weights, or initial points from the whole domain, are worse); on
independent agents FTS-DE stays close to TS, closer with a faster-decaying ``1 - p_t``.

Run: ``python benchmarks/federation_synthetic.py`` (``--agents``, ``--rounds``, ``--seeds``; about
6 minutes on two cores with the defaults). Prints tables; saves
``benchmarks/results/federation_synthetic.png``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import functools
import os
import time

import numpy as np
import optuna
import seedstats as st

from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import presets
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.samplers._rff_thompson import RFFThompsonSampler
from optuna_fedbo.simulation import simulate
from optuna_fedbo.simulation import SimulationResult

GRID = 1000
LENGTHSCALE = 0.03
NOISE_VARIANCE = 0.01
N_INIT = 10
N_FEATURES = 50
#: Noise variance of the model on standardized values: the observation noise (0.01) over the
#: variance of a normalized GP sample (about 0.04-0.05).
MODEL_NOISE = 0.2
SPACE = {"x": optuna.distributions.IntDistribution(0, GRID - 1)}
SAMPLER_KWARGS = {"n_candidates": 500, "n_refinements": 0}


def gp_functions(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` independent GP samples on the grid, each normalized to ``[0, 1]``."""
    x = np.linspace(0.0, 1.0, GRID)
    kernel = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / LENGTHSCALE**2)
    factor = np.linalg.cholesky(kernel + 1e-6 * np.eye(GRID))
    samples = (factor @ rng.standard_normal((GRID, n))).T
    low, high = samples.min(axis=1, keepdims=True), samples.max(axis=1, keepdims=True)
    return (samples - low) / (high - low)


def homogeneous(n_agents: int, rng: np.random.Generator, offset: float = 0.02) -> np.ndarray:
    """``f + d`` with ``d = +-offset`` drawn per agent and input (DP-FTS-DE App. B.1.1: 0.02;
    FTS App. D.1: ``d_n`` = 0.02 or 1.2)."""
    base = gp_functions(1, rng)[0]
    return base + rng.choice([-offset, offset], size=(n_agents, GRID))


def mixed(n_agents: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """``alpha f^n + (1 - alpha) f_base`` with independent GP samples ``f^n`` (DP-FTS-DE App.
    B.1.2, Fig. 7: ``alpha = 0.7``, and ``alpha = 1``: independent agents)."""
    base = gp_functions(1, rng)[0]
    return alpha * gp_functions(n_agents, rng) + (1.0 - alpha) * base


def make_objective(values: np.ndarray, seed: int) -> Callable[[optuna.Trial], float]:
    noise = np.random.default_rng(seed)

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_int("x", 0, GRID - 1)
        trial.set_user_attr("f", float(values[x]))
        return float(values[x] + noise.normal(0.0, np.sqrt(NOISE_VARIANCE)))

    return objective


def regret_curves(
    studies: list[optuna.Study], functions: np.ndarray, n_rounds: int, n_init: int = N_INIT
) -> np.ndarray:
    """Simple regret per agent after round 0 (initial design) and each BO round."""
    return regret_of(f_values_of(studies), functions, n_rounds, n_init)


def f_values_of(studies: list[optuna.Study]) -> list[list[float]]:
    """Each agent's noiseless values ``f`` of its trials, in order."""
    return [[t.user_attrs["f"] for t in study.trials] for study in studies]


def regret_of(
    f_values: list[list[float]], functions: np.ndarray, n_rounds: int, n_init: int = N_INIT
) -> np.ndarray:
    """:func:`regret_curves` from each agent's noiseless values ``f`` of its trials in order."""
    curves = np.zeros((len(f_values), n_rounds + 1))
    for n, values in enumerate(f_values):
        found = np.maximum.accumulate(values)
        curves[n] = functions[n].max() - found[n_init - 1 :][: n_rounds + 1]
    return curves


def run_local_ts(
    functions: np.ndarray, n_rounds: int, seed: int, n_init: int = N_INIT
) -> list[optuna.Study]:
    """Local TS on every agent: the same features and model, no federation."""
    studies = []
    for n, values in enumerate(functions):
        sampler = RFFThompsonSampler(
            n_features=N_FEATURES,
            lengthscale=LENGTHSCALE,
            noise_variance=MODEL_NOISE,
            n_startup_trials=n_init,
            feature_seed=seed,
            seed=seed * 100_003 + n,
            **SAMPLER_KWARGS,
        )
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.optimize(make_objective(values, seed * 7_919 + n), n_trials=n_init + n_rounds)
        studies.append(study)
    return studies


#: GP-TS on raw values as the papers' code runs it: hyperparameters (lengthscale, signal and
#: noise variance) fitted by marginal likelihood with 10 starts whenever the number of
#: observations is a multiple of this, and held in between.
GP_REFIT_EVERY = 5
GP_RESTARTS = 10
#: The papers' code floors the fitted noise variance here before sampling.
GP_MIN_NOISE = 1e-5
#: Bounds of the fitted (signal variance, lengthscale, noise variance).
GP_BOUNDS = ((1e-4, 1e2), (1e-3, 1e1), (GP_MIN_NOISE, 1e1))


def _negative_log_likelihood(
    log_theta: np.ndarray, squared: np.ndarray, y: np.ndarray
) -> tuple[float, np.ndarray]:
    """The SE GP's negative log marginal likelihood (zero mean) and its gradient in
    ``log (signal variance, lengthscale, noise variance)``; ``squared``: squared distances."""
    variance, lengthscale, noise = np.exp(log_theta)
    shape = np.exp(-0.5 * squared / lengthscale**2)
    try:
        factor = np.linalg.cholesky(variance * shape + noise * np.eye(len(y)))
    except np.linalg.LinAlgError:
        return 1e25, np.zeros(3)
    inverse = np.linalg.inv(factor)
    alpha = inverse.T @ (inverse @ y)
    value = 0.5 * y @ alpha + np.log(np.diag(factor)).sum() + 0.5 * len(y) * np.log(2 * np.pi)
    weight = np.outer(alpha, alpha) - inverse.T @ inverse
    derivatives = (variance * shape, variance * shape * squared / lengthscale**2)
    gradient = [-0.5 * np.sum(weight * d) for d in derivatives]
    gradient.append(-0.5 * noise * np.trace(weight))
    return float(value), np.asarray(gradient)


@functools.lru_cache(maxsize=4)
def _grid_factors(grid: tuple[float, ...], lengthscale: float) -> tuple[np.ndarray, np.ndarray]:
    """The unit-variance SE kernel on the grid and its Cholesky factor (jitter 1e-6): fits
    that end at the same lengthscale (often a bound) share one factorization."""
    x = np.asarray(grid)
    shape = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / lengthscale**2)
    return shape, np.linalg.cholesky(shape + 1e-6 * np.eye(len(x)))


class GridGPThompson:
    """GP Thompson sampling on the grid of ``[0, 1]``, on raw values (zero-mean prior).

    An isotropic SE kernel whose hyperparameters are fitted by marginal likelihood (L-BFGS-B
    within :data:`GP_BOUNDS` from ``GP_RESTARTS`` starts: the last fit's and, as GPy's
    ``optimize_restarts`` draws them, softplus of standard normal draws) at the first
    suggestion and whenever the number of observations is a multiple of ``GP_REFIT_EVERY``,
    and held in between. Each round draws one posterior sample over the whole grid by
    Matheron's rule (a prior sample from the grid's Cholesky factor, cached per
    hyperparameter setting, corrected by the observations) and picks its argmax.

    Args:
        grid: The candidate inputs (1-D).
        rng: Source of the prior samples, the observation-noise draws and the fits' starts.
    """

    def __init__(self, grid: np.ndarray, rng: np.random.Generator) -> None:
        self.grid, self.rng = grid, rng
        # GPy's starting point in the papers' code: variance 0.1, lengthscale 1, noise 1e-4.
        self.theta = np.log([0.1, 1.0, 1e-4])
        self.fit_sizes: list[int] = []  # observations at each hyperparameter fit
        self._factors: tuple[np.ndarray, np.ndarray] | None = None  # (kernel, Cholesky)

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        """Fit the hyperparameters to the observations and cache the grid's factors."""
        from scipy.optimize import minimize

        squared = (x[:, None] - x[None, :]) ** 2
        bounds = np.log(GP_BOUNDS)
        # GPy's randomize() for positive parameters: softplus of a standard normal draw.
        starts = [self.theta] + [
            np.clip(np.log(np.logaddexp(0.0, self.rng.standard_normal(3))), *bounds.T)
            for _ in range(GP_RESTARTS - 1)
        ]
        fits = [
            minimize(
                _negative_log_likelihood,
                start,
                args=(squared, y),
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
            )
            for start in starts
        ]
        self.theta = min(fits, key=lambda r: r.fun).x
        self.fit_sizes.append(len(y))
        variance, lengthscale, _ = np.exp(self.theta)
        shape, factor = _grid_factors(tuple(self.grid), float(lengthscale))
        self._factors = (variance * shape, np.sqrt(variance) * factor)

    def suggest(self, indices: np.ndarray, y: np.ndarray) -> int:
        """The grid index of a posterior sample's argmax, given the observed indices (refits
        the hyperparameters first when :class:`GridGPThompson` says so)."""
        if not self.fit_sizes or (len(y) % GP_REFIT_EVERY == 0 and self.fit_sizes[-1] != len(y)):
            self.fit(self.grid[indices], y)
        return int(np.argmax(self.sample(indices, y)))

    def sample(self, indices: np.ndarray, y: np.ndarray) -> np.ndarray:
        """One posterior sample over the grid at the current hyperparameters (Matheron)."""
        from scipy.linalg import cho_factor
        from scipy.linalg import cho_solve

        if self._factors is None:
            raise RuntimeError("GridGPThompson.sample needs a fit first: call fit() or suggest().")
        gram, factor = self._factors
        noise_variance = max(GP_MIN_NOISE, float(np.exp(self.theta[2])))
        prior = factor @ self.rng.standard_normal(len(self.grid))
        noise = np.sqrt(noise_variance) * self.rng.standard_normal(len(y))
        system = cho_factor(gram[np.ix_(indices, indices)] + noise_variance * np.eye(len(y)))
        return prior + gram[:, indices] @ cho_solve(system, y - prior[indices] - noise)


def run_gp_ts(
    functions: np.ndarray, n_rounds: int, seed: int, n_init: int = N_INIT
) -> list[list[float]]:
    """GP-TS on raw values (:class:`GridGPThompson`) on every agent, no federation: ``n_init``
    initial points uniform over the grid (``functions``' columns: equally spaced points of
    ``[0, 1]``); returns each agent's noiseless values in order.

    The observation noise of agent ``n`` is :func:`make_objective`'s stream (the same draws in
    the same order as every other method's).
    """
    grid = np.linspace(0.0, 1.0, functions.shape[1])
    f_values = []
    for n, values in enumerate(functions):
        rng = np.random.default_rng(seed * 100_003 + n)
        noise = np.random.default_rng(seed * 7_919 + n)
        model = GridGPThompson(grid, rng)
        indices = [int(i) for i in rng.integers(0, len(grid), n_init)]
        # make_objective's draws, one per evaluation in order (the same stream as one call).
        noises = noise.normal(0.0, np.sqrt(NOISE_VARIANCE), n_init + n_rounds)
        for _ in range(n_rounds):
            observed = np.asarray(indices)
            y = values[observed] + noises[: len(observed)]
            indices.append(model.suggest(observed, y))
        f_values.append([float(values[i]) for i in indices])
    return f_values


def run_federated(
    functions: np.ndarray,
    n_rounds: int,
    seed: int,
    protocol: FTSConfig,
    privacy: DPConfig | None = None,
    insecure_noise_seed: int | None = None,
) -> SimulationResult:
    """Simulate the federation (privately if ``privacy`` is given) on the agents' functions.

    The objectives' noise depends only on ``seed`` and the agent, so methods run on the same
    seed see the same noise; ``insecure_noise_seed`` makes the DP noise repeatable (research
    runs only).
    """
    objectives = [make_objective(v, seed * 7_919 + n) for n, v in enumerate(functions)]
    return simulate(
        objectives,
        search_space=SPACE,
        n_rounds=n_rounds,
        protocol=protocol,
        privacy=privacy,
        seed=seed,
        sampler_kwargs=SAMPLER_KWARGS,
        progress=False,
        insecure_noise_seed=insecure_noise_seed,
    )


def fts_config(**overrides) -> FTSConfig:
    base = {
        "n_features": N_FEATURES,
        "lengthscale": LENGTHSCALE,
        "noise_variance": MODEL_NOISE,
        "n_init": N_INIT,
        "n_subregions": 1,
        "aggregation": "weighted",
        "weight_hold_rounds": 5,
        "weight_decay_rounds": 5,
        "schedule": "1-1/sqrt(t)",
        # The papers' algorithm on per-participant standardized values (see the module doc).
        **presets.PAPER_MODEL,
        "normalization": "participant",
    }
    return FTSConfig(**{**base, **overrides})


HOMOGENEOUS = {
    "TS (local)": None,
    "FTS (original, sample)": fts_config(aggregation="sample"),
    "FTS (weighted, P=1)": fts_config(),
    "FTS-DE P=2": fts_config(n_subregions=2),
    "FTS-DE P=3": fts_config(n_subregions=3),
    "FTS-DE P=4": fts_config(n_subregions=4),
    "FTS-DE P=4, raw values": fts_config(n_subregions=4, normalization="raw"),
    "FTS-DE P=2, equal weights": fts_config(
        n_subregions=2, weight_hold_rounds=0, weight_decay_rounds=0
    ),
    "FTS-DE P=2, init whole domain": fts_config(n_subregions=2, init_in_subregion=False),
}
HETEROGENEOUS = {
    "TS (local)": None,
    "FTS-DE P=2, 1-p_t=1/sqrt(t)": fts_config(n_subregions=2),
    "FTS-DE P=2, 1-p_t=1/t": fts_config(n_subregions=2, schedule="1-1/t"),
    "FTS-DE P=2, 1-p_t=1/t^2": fts_config(n_subregions=2, schedule="1-1/t^2"),
}


def run_suite(
    methods: dict[str, FTSConfig | None],
    make_functions: Callable[[np.random.Generator], np.ndarray],
    n_rounds: int,
    seeds: list[int],
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    curves: dict[str, list[np.ndarray]] = {name: [] for name in methods}
    seconds = dict.fromkeys(methods, 0.0)
    for seed in seeds:
        functions = make_functions(np.random.default_rng(seed))
        for name, protocol in methods.items():
            start = time.perf_counter()
            if protocol is None:
                studies = run_local_ts(functions, n_rounds, seed)
            else:
                # The original FTS's relay order is secret to the server: seeded for research.
                sample = protocol.aggregation == "sample"
                studies = run_federated(
                    functions,
                    n_rounds,
                    seed,
                    protocol,
                    insecure_noise_seed=seed if sample else None,
                ).studies
            seconds[name] += time.perf_counter() - start
            curves[name].append(regret_curves(studies, functions, n_rounds).mean(axis=0))
    return {k: np.stack(v) for k, v in curves.items()}, seconds


def print_table(title: str, curves: dict[str, np.ndarray], seconds: dict[str, float]) -> None:
    n_rounds = next(iter(curves.values())).shape[1] - 1
    checkpoints = [r for r in (0, 5, 10, 20, 30, 40, 60) if r <= n_rounds]
    print(f"\n{title}")
    print(
        f"{'method':32s}"
        + "".join(f"{'t=' + str(r):>15s}" for r in checkpoints)
        + f"{'mean':>9s}{'seconds':>9s}"
    )
    for name, curve in curves.items():
        cells = ""
        for r in checkpoints:
            mean, error = st.mean_se(curve[:, r])
            cells += f"{mean:9.4f}+-{error:.3f}"
        print(f"{name:32s}{cells}{curve[:, 1:].mean():9.4f}{seconds[name]:9.1f}")
    print(
        "(simple regret averaged over agents; mean +- standard error over seed functions; "
        "'mean' over t = 1..T)"
    )


def plot(results: list[tuple[str, dict[str, np.ndarray]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6.5 * len(results), 4.5))
    for axis, (title, curves) in zip(np.atleast_1d(axes), results):
        st.plot_curves(axis, curves, title=title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--heterogeneous-agents", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds = list(range(args.seeds))

    start = time.perf_counter()
    similar, similar_seconds = run_suite(
        HOMOGENEOUS, lambda rng: homogeneous(args.agents, rng), args.rounds, seeds
    )
    print_table(
        f"Similar agents: N = {args.agents}, f + d with d = +-0.02, {args.seeds} seed(s)",
        similar,
        similar_seconds,
    )
    different, different_seconds = run_suite(
        HETEROGENEOUS,
        lambda rng: gp_functions(args.heterogeneous_agents, rng),
        args.rounds,
        seeds,
    )
    print_table(
        f"Independent agents: N = {args.heterogeneous_agents}, {args.seeds} seed(s)",
        different,
        different_seconds,
    )
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    if not args.no_plot:
        path = os.path.join(os.path.dirname(__file__), "results", "federation_synthetic.png")
        plot([("similar agents", similar), ("independent agents", different)], path)
        print(f"saved {path}")


if __name__ == "__main__":
    main()
