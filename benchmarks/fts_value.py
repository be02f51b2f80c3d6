"""Does joining a federation pay off? The default federated sampler against stock Optuna.

Every problem is a federation of ``N`` sites; each site maximizes its own objective with a
budget of ``--trials`` trials. Side by side, on the same sites and seeds:

* the stock Optuna samplers, each site alone: ``random``, ``tpe``, ``qmc``, ``cmaes`` and
  ``gp`` (:class:`optuna.samplers.GPSampler`, when torch imports);
* local sampling, each site alone: ``local-gp`` (:class:`~optuna_fedbo.LocalGPSampler`, the
  default's local model without the federation) and ``local-ts`` (RFF Thompson sampling);
* ``fts``: :class:`~optuna_fedbo.FedTransferSampler` with the default :class:`FTSConfig`
  (multi-scale shared features, space-filling initial design, shared normalization, the
  server's posterior given everyone's pooled statistics without DP and the average of the
  sites' posterior means with it, the broadcast as a weighted prior mean of the local GP,
  dropped for the GP alone while it orders the latest trials worse than the GP alone does),
  run with
  :func:`~optuna_fedbo.simulation.simulate` in lock-step rounds;
* ``fts-secagg``: ``fts`` under secure aggregation (:class:`~optuna_fedbo.SecureAggregation`:
  the server learns only the sum of the sites' statistics, so it standardizes everyone's values
  together from exact sums but can neither offset nor weigh one site); on DP problems, DP-FTS under
  secure aggregation with distributed Skellam noise (:data:`SECAGG_DP`: no subsampling, which
  could not amplify privacy against the server, so ``z = 3`` for about the epsilon the server's
  ``z = 1, q = 0.25`` spends over 15 to 40 rounds; both epsilons are printed);
* ``fts-v1``: the first release's default (shared lengthscale 0.2, per-participant
  standardization, 10 uniform initial points, local TS / broadcast by the ``1 - 1/t``
  schedule), for reference.
* ``pooled-gp``: what sharing the raw data would give, without privacy: in lock-step rounds,
  every site's local GP (:class:`~optuna_fedbo.LocalGPSampler`) is fitted to all sites'
  trials so far (its own and, added to its study after each round, everyone else's, values as
  observed on their own objectives). Not a method a federation can run; the ceiling of what
  sharing can do for a site with this local model, for reference (not with DP).

Problems:

* GP draws on ``[0, 1]^D`` (SE kernel, lengthscale ``l``, approximated with 2,000 random
  features), normalized to ``[0, 1]``, observed with noise of standard deviation 0.01. Sites
  are ``identical`` (site ``n``: ``f + 0.05 h_n``, ``h_n`` an independent draw),
  ``heterogeneous`` (``f + 0.75 h_n``, and every site's values multiplied by its own scale
  ``s_n`` log-uniform in ``[0.2, 5]`` plus an offset in ``[-1, 1]``: one function shape, many
  value scales) or ``independent`` (every site its own draw). Regret is measured on the
  noiseless normalized function: ``max f_n - max_{s <= t} f_n(x_s)``.
* DP: identical sites, ``N = 200``, with the server's subsampled Gaussian mechanism (PLD
  accounting, ``z``, ``q`` and ``S`` given below); the epsilon spent is printed.
* scikit-learn tasks: ``svc-digits`` (RBF SVC ``C``, ``gamma`` on label-skewed shards of 300
  digits per site, 3-fold CV accuracy) and ``krr-friedman`` (RBF kernel ridge ``alpha``,
  ``gamma`` on ``make_friedman1`` sites with site-specific noise and feature scales, validation
  R^2). Regret is the gap to a fixed reference per site: the best value on a 25 x 25 grid over
  the (log-scaled) space, refined by Nelder-Mead from its three best points, computed once and
  cached. So a method's regret does not depend on which other methods ran; a method that beats
  the reference has a (slightly) negative regret.

The ratio table divides each method's mean regret (over sites and seed functions) at trial ``t``
by that of the best stock sampler at ``t`` on the same problem; ``wins`` counts the seed
functions on which the method's mean regret over sites is below the best stock sampler's, and
``pair se`` is the standard error of the per-seed-function difference to it at the last
checkpoint: a ratio whose difference is within about two of these may be the seed functions'
luck.
Targets (issue 10): identical sites ``fts`` <= 0.7x at 10 and <= 0.5x at 20 trials;
independent sites <= 1.0x ``local-gp``/``local-ts`` and <= 1.2x ``gp`` at 20; DP <= 0.8x at 20.

Run: ``python benchmarks/fts_value.py --quick`` (a few minutes) or without ``--quick`` (the full
grid; long on two cores). Saves ``benchmarks/results/fts_value.png`` (and ``_quick``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
import os
import time
import warnings

import numpy as np
import optuna
from optuna.exceptions import ExperimentalWarning
import sklearn

from optuna_fedbo import LocalGPSampler
from optuna_fedbo import RFFThompsonSampler
from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import SecureAggregation
from optuna_fedbo.search_space import SearchSpaceEncoder
from optuna_fedbo.simulation import simulate

NOISE_STD = 0.01
#: Stock samplers' curves, kept between runs (delete the folder to recompute them).
CACHE_DIR = "benchmarks/results/cache"
TRUE_ATTR = "true_value"


@dataclass
class Problem:
    """A federation of sites: objectives, the search space and each site's optimum."""

    name: str
    space: dict[str, optuna.distributions.BaseDistribution]
    objectives: list[Callable[[optuna.Trial], float]]
    #: Per site: ``(optimum, scale)``; regret = (optimum - best true value) / scale. ``None``
    #: optimum: ``reference(site)``.
    optima: list[tuple[float | None, float]]
    privacy: DPConfig | None = None
    #: The optimum of a site whose true optimum is unknown (computed when first asked).
    reference: Callable[[int], float] | None = None


# ----------------------------------------------------------------------------- GP draws
class RandomFunction:
    """A GP draw with SE kernel (random-feature approximation), to be normalized."""

    def __init__(self, dims: int, lengthscale: float, rng: np.random.Generator) -> None:
        k = 2000
        self.w = rng.standard_normal((dims, k)) / lengthscale
        self.b = rng.uniform(0, 2 * np.pi, k)
        self.a = rng.standard_normal(k) * np.sqrt(2.0 / k)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.cos(np.atleast_2d(x) @ self.w + self.b) @ self.a


def _dense(dims: int, rng: np.random.Generator) -> np.ndarray:
    if dims == 1:
        return np.linspace(0, 1, 4001)[:, None]
    if dims == 2:
        g = np.linspace(0, 1, 101)
        return np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    return rng.uniform(size=(20000, dims))


def _range(f: Callable[[np.ndarray], np.ndarray], dense: np.ndarray) -> tuple[float, float]:
    import scipy.optimize

    values = f(dense)
    best = float(values.max())
    if dense.shape[1] == 1:
        return float(values.min()), best  # a grid of 4,001 points is fine enough in 1-D
    for x0 in dense[np.argsort(-values)[:3]]:
        res = scipy.optimize.minimize(
            lambda x: -float(f(x[None])[0]), x0, method="L-BFGS-B", bounds=[(0, 1)] * len(x0)
        )
        best = max(best, -float(res.fun))
    return float(values.min()), best


def gp_problem(
    dims: int, lengthscale: float, relation: str, n_sites: int, seed: int, privacy=None
) -> Problem:
    rng = np.random.default_rng(seed)
    base = RandomFunction(dims, lengthscale, rng)
    dense = _dense(dims, rng)
    weight = {"identical": 0.05, "heterogeneous": 0.75, "independent": None}[relation]
    space = {f"x{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(dims)}
    objectives, optima = [], []
    for n in range(n_sites):
        own = RandomFunction(dims, lengthscale, rng)

        def raw(x, own=own):
            return own(x) if weight is None else base(x) + weight * own(x)

        low, high = _range(raw, dense)
        scale, offset = 1.0, 0.0
        if relation == "heterogeneous":
            scale, offset = (
                float(np.exp(rng.uniform(np.log(0.2), np.log(5.0)))),
                rng.uniform(-1, 1),
            )

        def objective(trial, raw=raw, low=low, high=high, scale=scale, offset=offset, n=n):
            x = np.array([[trial.suggest_float(name, 0.0, 1.0) for name in space]])
            true = (float(raw(x)[0]) - low) / (high - low)
            trial.set_user_attr(TRUE_ATTR, true)
            # The same noise for every method: a function of (seed, site, trial number).
            noise = np.random.default_rng([seed, n, trial.number]).standard_normal()
            return offset + scale * (true + NOISE_STD * noise)

        objectives.append(objective)
        optima.append((1.0, 1.0))
    name = gp_name(dims, lengthscale, relation, n_sites, privacy)
    return Problem(name, space, objectives, optima, privacy)


def gp_name(dims: int, lengthscale: float, relation: str, n_sites: int, privacy=None) -> str:
    return f"gp D={dims} l={lengthscale} {relation} N={n_sites}" + (" DP" if privacy else "")


# ------------------------------------------------------------------------ sklearn tasks
def svc_problem(n_sites: int, seed: int) -> Problem:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import cross_val_score
    from sklearn.svm import SVC

    from optuna_fedbo.datasets import label_skewed_shards

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    rng = np.random.default_rng(seed)
    shards = label_skewed_shards(y, n_sites, concentration=1.0, seed=seed)
    space = {
        "C": optuna.distributions.FloatDistribution(1e-2, 1e3, log=True),
        "gamma": optuna.distributions.FloatDistribution(1e-4, 1e1, log=True),
    }
    objectives = []
    for shard in shards:
        idx = rng.choice(shard, size=min(300, len(shard)), replace=False)
        xs, ys = x[idx], y[idx]

        def objective(trial, xs=xs, ys=ys):
            c = trial.suggest_float("C", 1e-2, 1e3, log=True)
            gamma = trial.suggest_float("gamma", 1e-4, 1e1, log=True)
            value = float(cross_val_score(SVC(C=c, gamma=gamma), xs, ys, cv=3).mean())
            trial.set_user_attr(TRUE_ATTR, value)
            return value

        objectives.append(objective)
    return _sklearn_problem(f"svc-digits N={n_sites}", seed, space, objectives)


def krr_problem(n_sites: int, seed: int) -> Problem:
    from sklearn.datasets import make_friedman1
    from sklearn.kernel_ridge import KernelRidge

    rng = np.random.default_rng(seed)
    space = {
        "alpha": optuna.distributions.FloatDistribution(1e-5, 10.0, log=True),
        "gamma": optuna.distributions.FloatDistribution(1e-3, 10.0, log=True),
    }
    objectives = []
    for _ in range(n_sites):
        noise = rng.uniform(0.3, 2.0)
        x, t = make_friedman1(n_samples=300, noise=noise, random_state=int(rng.integers(2**31)))
        x = x * rng.uniform(0.7, 1.3, size=x.shape[1])  # site-specific feature scales
        xt, tt, xv, tv = x[:200], t[:200], x[200:], t[200:]

        def objective(trial, xt=xt, tt=tt, xv=xv, tv=tv):
            alpha = trial.suggest_float("alpha", 1e-5, 10.0, log=True)
            gamma = trial.suggest_float("gamma", 1e-3, 10.0, log=True)
            model = KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma).fit(xt, tt)
            resid = tv - model.predict(xv)
            value = float(1.0 - np.mean(resid**2) / np.var(tv))
            trial.set_user_attr(TRUE_ATTR, value)
            return value

        objectives.append(objective)
    return _sklearn_problem(f"krr-friedman N={n_sites}", seed, space, objectives)


def _sklearn_problem(
    name: str,
    seed: int,
    space: dict[str, optuna.distributions.BaseDistribution],
    objectives: list[Callable[[optuna.Trial], float]],
) -> Problem:
    """A scikit-learn task whose sites' optima are the cached grid references."""

    def reference(site: int) -> float:
        return cached_value(
            f"{name} seed={seed} site={site} reference sklearn={sklearn.__version__}",
            lambda: grid_optimum(space, objectives[site]),
        )

    return Problem(name, space, objectives, [(None, 1.0)] * len(objectives), reference=reference)


def grid_optimum(
    space: dict[str, optuna.distributions.BaseDistribution],
    objective: Callable[[optuna.Trial], float],
    n_grid: int = 25,
) -> float:
    """The best value of ``objective`` on an ``n_grid``-per-axis grid over the unit-cube
    encoding of ``space`` (float parameters; log ones on a log scale), refined by Nelder-Mead
    from the three best grid points."""
    import scipy.optimize

    names = list(space)
    encoding = SearchSpaceEncoder(space)

    def value(u: np.ndarray) -> float:
        params = encoding.decode(np.clip(u, 0.0, 1.0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # as in the studies (e.g. tiny classes in a CV fold)
            return objective(optuna.trial.FixedTrial({n: params[n] for n in names}))

    axis = np.linspace(0.0, 1.0, n_grid)
    grid = np.stack(np.meshgrid(*[axis] * len(names)), -1).reshape(-1, len(names))
    values = np.array([value(u) for u in grid])
    best = float(values.max())
    # A first simplex of half a grid step from each start, pointing into the cube.
    steps = np.vstack([np.zeros(len(names)), np.eye(len(names)) * 0.5 / (n_grid - 1)])
    for start in grid[np.argsort(-values)[:3]]:
        inward = np.where(start > 0.5, -1.0, 1.0)
        result = scipy.optimize.minimize(
            lambda u: -value(u),
            start,
            method="Nelder-Mead",
            bounds=[(0.0, 1.0)] * len(names),
            options={"maxfev": 40, "initial_simplex": start + steps * inward},
        )
        best = max(best, -float(result.fun))
    return best


# ------------------------------------------------------------------------------ methods
def stock_samplers(seed: int) -> dict[str, Callable[[], optuna.samplers.BaseSampler]]:
    samplers: dict[str, Callable[[], optuna.samplers.BaseSampler]] = {
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
        "qmc": lambda: optuna.samplers.QMCSampler(seed=seed, warn_independent_sampling=False),
        "cmaes": lambda: optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False),
    }
    try:
        import torch  # noqa: F401

        samplers["gp"] = lambda: optuna.samplers.GPSampler(seed=seed)
    except ImportError:
        pass
    return samplers


STOCK = ("random", "tpe", "qmc", "cmaes", "gp")


def local_samplers(seed: int) -> dict[str, Callable[[], optuna.samplers.BaseSampler]]:
    return {
        "local-gp": lambda: LocalGPSampler(seed=seed, n_startup_trials=5),
        "local-ts": lambda: RFFThompsonSampler(seed=seed, n_startup_trials=5),
    }


def federated_configs() -> dict[str, FTSConfig]:
    return {
        "fts": FTSConfig(),
        "fts-secagg": FTSConfig(),
        "fts-v1": FTSConfig(
            aggregation="weighted",
            n_features=100,
            lengthscale=0.2,
            normalization="participant",
            initial_design="uniform",
            transfer="schedule",
            n_init=10,
        ),
    }


#: ``fts-secagg``'s privacy on DP problems: distributed Skellam noise, Renyi accounting, no
#: subsampling. At delta 1e-5 over 15 rounds it spends epsilon 6.42 against 7.10 for the trusted
#: server's ``DPConfig(1.0, 0.25, 22.0)`` (PLD); over 40 rounds 11.47 against 11.28.
SECAGG_DP = DPConfig(noise_multiplier=3.0, sample_rate=1.0, clip_norm=22.0, accountant="rdp")


def true_values(study: optuna.Study, n_trials: int) -> np.ndarray:
    values = [t.user_attrs.get(TRUE_ATTR, -np.inf) for t in study.trials[:n_trials]]
    values += [values[-1] if values else -np.inf] * (n_trials - len(values))
    return np.maximum.accumulate(np.array(values, dtype=float))


def run_problem(
    problem: Problem,
    n_trials: int,
    seed: int,
    methods: list[str],
    stock_sites: int,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Best true value so far, shape ``(sites, n_trials)``, per method; and extra facts."""
    curves: dict[str, np.ndarray] = {}
    facts: dict[str, float] = {}
    sites = range(min(stock_sites, len(problem.objectives)))
    singles = {**stock_samplers(seed), **local_samplers(seed)}
    for name in methods:
        cached = _cache_path(problem, seed, name, n_trials, len(sites))
        if cached is not None and os.path.exists(cached):
            curves[name] = np.load(cached)
        elif name in singles:
            rows = []
            for n in sites:
                study = optuna.create_study(direction="maximize", sampler=singles[name]())
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    study.optimize(problem.objectives[n], n_trials=n_trials)
                rows.append(true_values(study, n_trials))
            curves[name] = np.array(rows)
            if cached is not None:
                os.makedirs(os.path.dirname(cached), exist_ok=True)
                np.save(cached, curves[name])
        elif name == "pooled-gp":
            curves[name] = pooled_gp_curves(problem, n_trials, seed)[: len(sites)]
        elif name in federated_configs():
            config = federated_configs()[name]
            start = time.perf_counter()
            result = simulate(
                problem.objectives,
                search_space=problem.space,
                n_rounds=n_trials - config.n_init,
                protocol=config,
                privacy=SECAGG_DP
                if name == "fts-secagg" and problem.privacy is not None
                else problem.privacy,
                seed=seed,
                progress=False,
                secure_aggregation=SecureAggregation() if name == "fts-secagg" else None,
            )
            elapsed = time.perf_counter() - start
            facts[f"{name} s/site"] = elapsed / len(problem.objectives)
            if problem.privacy is not None:
                facts[f"{name} epsilon"] = result.federation.privacy_spent()[0]
            curves[name] = np.array([true_values(s, n_trials) for s in result.studies])[
                : len(sites) if problem.privacy is None else None
            ]
    return curves, facts


def pooled_gp_curves(problem: Problem, n_trials: int, seed: int) -> np.ndarray:
    """Best true value so far, shape ``(sites, n_trials)``, of local GPs on everyone's data."""
    studies = [
        optuna.create_study(
            direction="maximize",
            sampler=LocalGPSampler(seed=1000 * seed + n, n_startup_trials=5),
        )
        for n in range(len(problem.objectives))
    ]
    true_values = np.empty((len(studies), n_trials))
    for t in range(n_trials):
        new = []
        for n, study in enumerate(studies):
            trial = study.ask()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = problem.objectives[n](trial)
                study.tell(trial, value)
            true_values[n, t] = trial.user_attrs.get(TRUE_ATTR, -np.inf)
            new.append(
                optuna.trial.create_trial(
                    params=trial.params, distributions=trial.distributions, value=value
                )
            )
        for n, study in enumerate(studies):
            study.add_trials(shared for m, shared in enumerate(new) if m != n)
    return np.maximum.accumulate(true_values, axis=1)


def _cache_path(
    problem: Problem, seed: int, method: str, n_trials: int, n_sites: int
) -> str | None:
    """Where a stock sampler's curves are kept between runs (they do not depend on our code)."""
    if method not in STOCK:
        return None
    key = f"{problem.name} seed={seed} {method} T={n_trials} sites={n_sites}"
    return _cache_file(key + f" optuna={optuna.__version__}")


def _cache_file(key: str) -> str:
    """The file under :data:`CACHE_DIR` that keeps the array described by ``key``."""
    return os.path.join(CACHE_DIR, key.replace(" ", "_").replace("/", "-") + ".npy")


def cached_value(key: str, compute: Callable[[], float]) -> float:
    """The number kept under ``key`` (:func:`_cache_file`), computed and kept the first time."""
    path = _cache_file(key)
    if os.path.exists(path):
        return float(np.load(path))
    value = compute()
    os.makedirs(CACHE_DIR, exist_ok=True)
    np.save(path, np.array(value))
    return value


def regrets(problem: Problem, curves: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Simple regret per method, shape ``(sites, trials)`` (sites common to all methods)."""
    n_sites = min(len(c) for c in curves.values())
    optima = []
    for n in range(n_sites):
        optimum, scale = problem.optima[n]
        if optimum is None:
            assert problem.reference is not None
            optimum = problem.reference(n)
        optima.append((optimum, scale))
    return {
        name: np.array([(optimum - curve[n]) / scale for n, (optimum, scale) in enumerate(optima)])
        for name, curve in curves.items()
    }


def feature_options(
    n_seeds: int, dims_list: tuple[int, ...] = (1, 2), n_sites: int = 10, n_design: int = 5
) -> None:
    """How good is the first broadcast with each choice of shared features?

    On GP draws (lengthscales 0.02-0.5, in the dimensions asked for), ``n_sites`` sites each fit
    the RFF posterior to their own Latin-hypercube design of ``n_design`` points (values
    normalized by the design) and the broadcast is the average of their posterior means (the
    aggregation ``"weighted"``, which differential privacy needs). Reported: the regret of the
    broadcast's maximizer (``max f - f(argmax g)``), mean over seed functions. Features: SE
    with one lengthscale (0.2: the first release; 0.05), and multi-scale (log-uniform 0.02-0.5,
    and the default's range for the dimension,
    :func:`~optuna_fedbo.core.rff.multiscale_range`) with equal prior scales or with each
    site's scale window (:func:`~optuna_fedbo.core.rff.scale_window`) and noise chosen by
    marginal likelihood, with ``M`` = 100 and 200.

    Two references that no federation can use, since they pool the sites' raw trials: the
    best design point of all sites and the maximizer of an exact GP fitted to all of them.
    Where even the exact GP's maximizer is no better than the best point, the sites' trials
    together do not locate the optimum, whatever the shared model. And the default without
    DP, ``aggregation="pooled"``: the posterior given the sites' summed statistics (of their
    values themselves, standardized together by the server) on the block of features of
    largest evidence (:mod:`optuna_fedbo.core.pooling`; 100 shared features here).
    """
    from optuna_fedbo.core.gp_fit import fit_gp
    from optuna_fedbo.core.local_model import normalization
    from optuna_fedbo.core.pooling import pooling_feature_maps
    from optuna_fedbo.core.pooling import select_posterior
    from optuna_fedbo.core.posterior import SufficientStatistics
    from optuna_fedbo.core.rff import MULTISCALE_RANGE
    from optuna_fedbo.core.rff import multiscale_range
    from optuna_fedbo.core.rff import RandomFourierFeatures
    from optuna_fedbo.core.rff import scale_window
    from optuna_fedbo.core.space import Dimension
    from optuna_fedbo.core.space import UnitCubeEncoding

    options = {
        "SE 0.2 (v1)": (0.2, 100, False),
        "SE 0.05": (0.05, 100, False),
        "multi 0.02-0.5": (MULTISCALE_RANGE, 100, False),
        "multi M=100 ML": (MULTISCALE_RANGE, 100, True),
        "multi M=200 ML": (MULTISCALE_RANGE, 200, True),
        "multi by D": (None, 100, False),
    }
    references = ("pooled: best point", "pooled: exact GP", "pooled statistics (default)")
    lengthscales = (0.02, 0.05, 0.1, 0.2, 0.5)
    print(
        f"\n## shared features: regret of the first broadcast's maximizer ({n_sites} sites x "
        f"{n_design} design points, {n_seeds} seed functions)"
    )
    for dims in dims_list:
        print(f"D={dims}  {'option':28s}" + "".join(f"{f'l={ls}':>9s}" for ls in lengthscales))
        encoding = UnitCubeEncoding([Dimension("float", 0.0, 1.0)] * dims)
        table = {name: [] for name in (*options, *references)}
        for ls in lengthscales:
            scores = {name: [] for name in (*options, *references)}
            for seed in range(n_seeds):
                rng = np.random.default_rng([seed, dims, int(ls * 1000)])
                base = RandomFunction(dims, ls, rng)
                dense = _dense(dims, rng)
                truth = base(dense)
                low, high = truth.min(), truth.max()
                designs = [encoding.space_filling(n_design, rng) for _ in range(n_sites)]
                # One noisy observation per design point, the same for every option.
                observed = [
                    (base(design) - low) / (high - low)
                    + NOISE_STD * rng.standard_normal(len(design))
                    for design in designs
                ]
                pooled = np.concatenate(designs)
                pooled_truth = base(pooled)
                pooled_values = np.concatenate(observed)
                pooled_mean = fit_gp(pooled, pooled_values, rng=rng).predict(
                    dense, return_std=False
                )[0]
                default_features = RandomFourierFeatures(
                    dims, 100, multiscale_range(dims), seed=seed
                )
                # The default's server: the sites' statistics on the feature blocks, pooled.
                blocks = pooling_feature_maps(default_features)
                site_statistics = []
                for design, values in zip(designs, observed):
                    site_statistics.append([SufficientStatistics(f.n_features) for f in blocks])
                    for statistics, features in zip(site_statistics[-1], blocks):
                        statistics.add(features(design), values)
                block, mean = select_posterior(site_statistics)
                pooled_rff = blocks[block](dense) @ mean
                for name, reached in zip(
                    references,
                    (
                        pooled_truth.max(),
                        truth[np.argmax(pooled_mean)],
                        truth[np.argmax(pooled_rff)],
                    ),
                ):
                    scores[name].append((high - reached) / (high - low))
                for name, (scale, m, select) in options.items():
                    scale = multiscale_range(dims) if scale is None else scale
                    features = RandomFourierFeatures(dims, m, scale, seed=seed)
                    windows = {
                        m: [
                            None if c is None else scale_window(features.lengthscales, c)
                            for c in (None, 0.02, 0.05, 0.1, 0.2, 0.5)
                        ]
                    }
                    mean = np.zeros(m)
                    for design, values in zip(designs, observed):
                        stats = SufficientStatistics(m)
                        stats.add(features(design), values)
                        location = normalization(values, "shared", n_design)
                        if select:
                            posterior = max(
                                (
                                    stats.posterior(lam, standardize=location, prior_scales=s)
                                    for s in windows[m]
                                    for lam in (1e-3, 1e-2, 1e-1)
                                ),
                                key=lambda p: p.log_marginal_likelihood(),
                            )
                        else:
                            posterior = stats.posterior(1e-2, standardize=location)
                        mean += posterior.mean / n_sites
                    best = dense[np.argmax(features(dense) @ mean)]
                    scores[name].append((high - base(best[None])[0]) / (high - low))
            for name in table:
                table[name].append(np.mean(scores[name]))
        for name in table:
            print(f"     {name:28s}" + "".join(f"{v:9.3f}" for v in table[name]))


def overhead(n_trials: int) -> None:
    """Time per trial of the default participant (and local GP, TPE) on a cheap objective.

    One participant of a two-site federation (in memory; the server closes a round after each
    of its trials), with the default's pooled statistics and with vector uploads
    (``fts-vectors``: ``aggregation="weighted"``, as under differential privacy), in 3-D and
    in 4-D (where the default shares 200 features instead of 100),
    up to ``n_trials`` trials; CPU milliseconds (``time.process_time``) per trial over windows
    of trials, and the wall time of the last window. The participant's trial and the server's
    step are timed apart (in a deployment the server is another process). Run twice: on an
    idle machine and beside one other busy process.
    """
    import subprocess
    import sys

    for busy in (False, True):
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            for dims in (3, 4):
                _overhead_table(n_trials, dims, "one other busy process" if busy else "idle")
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()


def _overhead_table(n_trials: int, dims: int, condition: str) -> None:
    from optuna_fedbo import Federation
    from optuna_fedbo import FederationServer
    from optuna_fedbo import FedTransferSampler

    space = {f"x{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(dims)}

    def objective(trial: optuna.Trial) -> float:
        x = np.array([trial.suggest_float(name, 0.0, 1.0) for name in space])
        return float(-np.sum((x - 0.3) ** 2) + 0.1 * np.sin(20 * x).sum())

    windows = [(0, 100), (n_trials // 2 - 50, n_trials // 2 + 50), (n_trials - 100, n_trials)]
    print(f"\n## overhead: ms per trial, {dims}-D, {n_trials} trials, {condition}")
    print(
        f"{'sampler':20s}"
        + "".join(f"{f'CPU {a + 1}-{b}':>14s}" for a, b in windows)
        + f"{f'wall {windows[-1][0] + 1}-{n_trials}':>15s}"
    )
    for name in ("fts", "fts-vectors", "local-gp", "tpe"):
        if name.startswith("fts"):
            # "fts-vectors": the posterior-mean vector uploads that differential privacy uses.
            protocol = FTSConfig(aggregation="weighted") if name == "fts-vectors" else None
            fed = Federation.create(
                f"overhead-{time.time_ns()}", search_space=space, n_clients=2, protocol=protocol
            )
            server = FederationServer(fed)
            sampler = FedTransferSampler(fed, "site", seed=0)
        elif name == "local-gp":
            sampler, server = LocalGPSampler(seed=0), None
        else:
            sampler, server = optuna.samplers.TPESampler(seed=0), None
        study = optuna.create_study(direction="maximize", sampler=sampler)
        times: dict[str, list[tuple[float, float]]] = {"site": [], "server": []}
        for _ in range(n_trials):
            times["site"].append(_timed(study.optimize, objective, n_trials=1))
            if server is not None:
                times["server"].append(_timed(server.step, force=True))
        rows = {name: np.array(times["site"]) * 1000}
        if server is not None:  # in a deployment the server is another process
            rows = {f"{name} site": rows[name], f"{name} server": np.array(times["server"]) * 1000}
        for label, row in rows.items():
            print(
                f"{label:20s}"
                + "".join(f"{row[a:b, 0].mean():14.1f}" for a, b in windows)
                + f"{row[windows[-1][0] :, 1].mean():15.1f}"
            )


def _timed(step: Callable[..., object], *args: object, **kwargs: object) -> tuple[float, float]:
    """CPU and wall seconds of one call ``step(*args, **kwargs)``."""
    cpu, wall = time.process_time(), time.perf_counter()
    step(*args, **kwargs)
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small grid, 3 seeds")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--sites", type=int, default=10)
    parser.add_argument("--stock-sites", type=int, default=4, help="sites run by single samplers")
    parser.add_argument("--only", default=None, help="run problems whose name contains this")
    parser.add_argument("--methods", default=None, help="comma-separated subset of methods")
    parser.add_argument("--overhead", type=int, default=0, help="only time N trials per sampler")
    parser.add_argument(
        "--features",
        default=None,
        help="only compare the shared-feature options, in these dimensions (e.g. 1,2)",
    )
    parser.add_argument(
        "--design",
        type=int,
        default=5,
        help="with --features: design points per site (5: the first broadcast)",
    )
    parser.add_argument(
        "--shard",
        default="1/1",
        help="run every n-th problem only, K/N (to split the grid over processes)",
    )
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--dp-sites", type=int, default=200, help="sites of the DP problems")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=ExperimentalWarning)
    if args.overhead:
        overhead(args.overhead)
        return
    if args.features:
        feature_options(
            args.seeds or 10,
            tuple(int(d) for d in args.features.split(",")),
            n_design=args.design,
        )
        return
    n_seeds = args.seeds or (3 if args.quick else 10)
    n = args.sites
    dp = DPConfig(noise_multiplier=1.0, sample_rate=0.25, clip_norm=22.0)

    problems: list[tuple[str, Callable[[int], Problem]]] = []

    def add_gp(dims: int, ls: float, relation: str, sites: int, privacy=None) -> None:
        problems.append(
            (
                gp_name(dims, ls, relation, sites, privacy),
                lambda s: gp_problem(dims, ls, relation, sites, s, privacy=privacy),
            )
        )

    if args.quick:
        for ls in (0.03, 0.2):
            add_gp(1, ls, "identical", n)
        add_gp(2, 0.1, "identical", n)
        add_gp(2, 0.2, "independent", n)
        add_gp(2, 0.2, "heterogeneous", n)
        add_gp(1, 0.1, "identical", args.dp_sites, dp)
    else:
        for dims in (1, 2, 4):
            for ls in (0.02, 0.05, 0.1, 0.2, 0.5):
                if dims == 4 and ls < 0.1:
                    continue  # a 4-D draw at lengthscale < 0.1 has thousands of local optima
                add_gp(dims, ls, "identical", n)
        for dims in (1, 3):
            for relation in ("heterogeneous", "independent"):
                add_gp(dims, 0.1, relation, n)
        add_gp(2, 0.2, "identical", 100)
        add_gp(1, 0.05, "identical", args.dp_sites, dp)
        add_gp(2, 0.2, "identical", args.dp_sites, dp)
    problems.append((f"svc-digits N={n}", lambda s: svc_problem(n, s)))
    if not args.quick:
        problems.append((f"krr-friedman N={n}", lambda s: krr_problem(n, s)))
    if args.only:
        problems = [(name, make) for name, make in problems if args.only in name]
    shard, n_shards = (int(k) for k in args.shard.split("/"))
    problems = problems[shard - 1 :: n_shards]
    methods = [*stock_samplers(0), "local-gp", "local-ts", "fts", "fts-secagg", "fts-v1"]
    methods.append("pooled-gp")
    if args.methods:
        methods = [m for m in methods if m in args.methods.split(",")]
    checkpoints = [t for t in (5, 10, 20, 40) if t <= args.trials]
    all_results = []
    for name, make in problems:
        per_seed: list[dict[str, np.ndarray]] = []
        facts_all: dict[str, list[float]] = {}
        for seed in range(n_seeds):
            problem = make(seed)
            used = methods
            if problem.privacy is not None:  # these do not apply
                skip = ("fts-v1", "local-ts", "pooled-gp")
                used = [m for m in methods if m not in skip]
            curves, facts = run_problem(problem, args.trials, seed, used, args.stock_sites)
            per_seed.append(regrets(problem, curves))
            for k, v in facts.items():
                facts_all.setdefault(k, []).append(v)
        all_results.append((name, per_seed))
        report(name, per_seed, checkpoints, facts_all)
    if not args.no_plot and all_results:
        plot(all_results, args.quick, "" if n_shards == 1 else f"_{shard}of{n_shards}")


def report(name, per_seed, checkpoints, facts) -> None:
    methods = list(per_seed[0])
    # mean over sites per seed: (seeds, trials)
    means = {m: np.array([r[m].mean(axis=0) for r in per_seed]) for m in methods}
    stock = [m for m in methods if m in STOCK] or methods
    print(f"\n## {name}  ({len(per_seed)} seed functions)")
    header = f"{'method':10s}" + "".join(f" {'regret@' + str(t):>11s}" for t in checkpoints)
    last = checkpoints[-1]
    header += "".join(f" {'x best@' + str(t):>9s}" for t in checkpoints) + "  wins@10  wins@20"
    header += f" {'pair se@' + str(last):>11s}"
    print(header)
    best_stock = {t: min(stock, key=lambda m: means[m][:, t - 1].mean()) for t in checkpoints}
    for m in methods:
        line = f"{m:10s}" + "".join(f" {means[m][:, t - 1].mean():11.4f}" for t in checkpoints)
        for t in checkpoints:
            ref = means[best_stock[t]][:, t - 1].mean()
            line += f" {means[m][:, t - 1].mean() / max(ref, 1e-12):9.2f}"
        for t in (10, 20):
            if t in checkpoints:
                ref = means[best_stock[t]][:, t - 1]
                line += f"  {int(np.sum(means[m][:, t - 1] < ref)):3d}/{len(per_seed):<3d}"
        # Standard error of the per-seed difference to the best stock sampler (paired: the
        # same seed functions), the yardstick for the ratio at the last checkpoint.
        difference = means[m][:, last - 1] - means[best_stock[last]][:, last - 1]
        spread = difference.std(ddof=1) if len(per_seed) > 1 else float("nan")
        line += f" {spread / np.sqrt(len(per_seed)):11.4f}"
        print(line)
    print("best stock: " + ", ".join(f"@{t}: {best_stock[t]}" for t in checkpoints))
    paired(means, checkpoints)
    for k, v in facts.items():
        print(f"{k}: {np.mean(v):.3g} (mean of {len(v)})")


def paired(means: dict[str, np.ndarray], checkpoints: list[int]) -> None:
    """Each federated method against the first one that ran, paired on the seed functions:
    the mean of the per-seed difference of mean regret (method minus reference) at each
    checkpoint, its standard error, and the seed functions on which the method is below."""
    federated = [m for m in means if m not in STOCK and m not in local_samplers(0)]
    if len(federated) < 2:
        return
    reference, n_seeds = federated[0], len(means[federated[0]])
    print(f"paired vs {reference}: difference of mean regret +- se (wins = method below)")
    width = max(len(m) for m in federated)
    for m in federated[1:]:
        line = f"  {m:{width}s}"
        for t in checkpoints:
            difference = means[m][:, t - 1] - means[reference][:, t - 1]
            se = difference.std(ddof=1) / np.sqrt(n_seeds) if n_seeds > 1 else float("nan")
            wins = int(np.sum(difference < 0))
            line += f"  @{t}: {difference.mean():+.4f} +- {se:.4f} ({wins}/{n_seeds})"
        print(line)


def plot(all_results, quick: bool, suffix: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(all_results)
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, (name, per_seed) in zip(axes.ravel(), all_results):
        for m in per_seed[0]:
            curve = np.mean([r[m].mean(axis=0) for r in per_seed], axis=0)
            style = "-" if m.startswith("fts") else "--"
            ax.plot(np.arange(1, len(curve) + 1), np.maximum(curve, 1e-5), style, label=m)
        ax.set_yscale("log")
        ax.set_title(name, fontsize=8)
        ax.set_xlabel("trial")
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    axes[0, 0].set_ylabel("simple regret")
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    os.makedirs("benchmarks/results", exist_ok=True)
    path = f"benchmarks/results/fts_value{'_quick' if quick else ''}{suffix}.png"
    fig.savefig(path, dpi=110)
    print(f"\nSaved {path}")


if __name__ == "__main__":
    main()
