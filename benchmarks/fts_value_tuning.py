"""Is a participant's own model GPSampler-grade? ``fed_solo`` against stock Optuna (issue 28).

``fed_solo`` is the default :class:`~optuna_fedbo.FedTransferSampler` in a one-site federation
(:func:`~optuna_fedbo.simulation.simulate` with one objective): no peer can help, so whatever
it reaches is its own model's doing. Beside it, on the same sites and seeds: the stock samplers
(``random``, ``tpe``, ``qmc``, ``cmaes``, ``gp`` = :class:`optuna.samplers.GPSampler`) and
``local-gp`` (:class:`~optuna_fedbo.LocalGPSampler` with 5 startup trials).

Families (``--family``):

* ``krr-diabetes``: smooth 3-parameter regression tuning with log-scale parameters and
  covariate shift. Each site holds 150 patients of scikit-learn's diabetes data drawn with
  probability ``exp(s_n z)`` (``z``: the standardized body-mass index, ``s_n`` uniform in
  ``[-1.5, 1.5]``: the sites see different patients) and tunes kernel ridge regression with
  a Gaussian kernel of one width per feature group (``alpha`` in ``[1e-4, 10]``, ``gamma_a``
  for the five demographic and ``gamma_b`` for the five serum features, in ``[1e-4, 1]``, all
  log) for its 3-fold cross-validated R^2 (deterministic, a few ms). Regret is the gap to a
  per-site reference: the best of a 10^3 grid over the log-scaled cube, refined by
  Nelder-Mead from its three best points (cached under ``benchmarks/results/cache``).
* ``mlp-digits``: label-skewed classification tuning with mixed parameters. Each site holds
  its own shard of scikit-learn's digits (:func:`~optuna_fedbo.datasets.label_skewed_shards`,
  Dirichlet concentration 0.5: a few dominant digits per site), 240 images of it (fewer where
  the shard is smaller), and tunes a one-hidden-layer network (NumPy, full-batch Adam, 60
  steps with cosine decay, fixed initial weights) for its 3-fold cross-validated mean
  log-likelihood (the folds trained side by side: 20-60 ms an evaluation): ``hidden`` units
  (int in ``[4, 64]``, log), ``lr`` (``[1e-3, 0.1]``, log), ``weight_decay`` (L2, ``[1e-6,
  0.1]``, log) and ``activation`` (categorical, relu or tanh). (Above ``lr = 0.1`` the 60
  steps turn chaotic: isolated spikes that no search finds twice.) Regret is the gap to a
  per-site reference: for each activation, the best of 128 scrambled Sobol points over the
  other three parameters' unit-cube encoding, refined by Nelder-Mead (80 evaluations) from
  the three best points (cached under ``benchmarks/results/cache``); 512 points and five
  150-evaluation starts move it by 0.0001-0.009 on the sites checked. A search that beats the
  reference has a slightly negative regret.
* ``gp2d-independent``: independent 2-D GP draws (lengthscale 0.2, noise 0.01), one per site
  (:func:`benchmarks.fts_value.gp_problem`).
* ``rotated``: moved optima. Every site maximizes its own instance of one multimodal family,
  the negated 4-D Styblinski-Tang function ``-0.5 sum(z^4 - 16 z^2 + 5 z)`` (16 local
  optima) at ``z = 6 R_n (x - c_n) + z*`` on ``[0, 1]^4``: ``R_n`` a random rotation and the
  optimum ``c_n`` uniform in ``[0.2, 0.8]^4``, both the site's own. The sites share the
  landscape's shape (value scale, curvature, spacing of the local optima), not where it is.
* ``shifted``: one such instance, each site's optimum moved by ``N(0, 0.05^2)`` per axis.
* ``gp2d-rough``: rough, mildly heterogeneous 2-D sites: one GP draw of lengthscale 0.05 shared
  by every site plus 5% of a draw of the site's own (noise 0.01; run with ``--sites 12``).
Regret on these two is the gap to the (known) optimum over the gap between the optimum and the
function's median over the cube (a site's median point has regret 1; a local optimum one axis
off the global one about 0.04).

Methods (``--methods``) also ``fed``: the default :class:`~optuna_fedbo.FedTransferSampler` in
a federation of all the sites (:func:`~optuna_fedbo.simulation.simulate`, lock-step rounds);
``fed-alone``, the same federation (same seeds, designs and rounds) whose server publishes
zeros, "nothing to transfer", in every round, so that each site runs its own model: the best
that any rule withholding the broadcast can reach; ``--solo-seed-offset K`` reseeds
``fed_solo`` (its site-runs' seeds are ``1000 seed + site + K``), to show how much its mean
regret moves with the seeds alone; and ``pooled-gp``, the ceiling of sharing without privacy:
every site's local GP fitted to all sites' trials so far
(:func:`benchmarks.fts_value.pooled_gp_curves`).

Reported per family: mean regret (over seeds x sites) at 5, 10, 20 and 30 trials; the ratio to
GPSampler and to the best stock sampler; paired wins against GPSampler over the site-runs; the
standard error of the paired per-site-run difference to GPSampler.

Run: ``nice -n 10 python benchmarks/fts_value_tuning.py --family krr-diabetes --seeds 6``;
``--cost 200`` times the participant, the server's round, TPE and GPSampler per trial at 20, 30,
50, 60, 100 and 200 trials (``--cost-sites 1,4``: in a federation of one and of four sites).
``--save FILE.npz`` keeps every method's regret per site-run and trial; ``--against FILE.npz``
then pairs a later run with it (same family and seeds: the same site functions) and prints the
paired difference, new minus saved, at 10, 20 and 30 trials, with its standard error and wins.
"""

from __future__ import annotations

import os

# One BLAS thread: the objectives' small solves are many times slower with contended threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402
from collections.abc import Iterator  # noqa: E402
import contextlib  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import optuna  # noqa: E402
from optuna.exceptions import ExperimentalWarning  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.fts_value import _cache_file  # noqa: E402
from benchmarks.fts_value import cached_value  # noqa: E402
from benchmarks.fts_value import gp_problem  # noqa: E402
from benchmarks.fts_value import pooled_gp_curves  # noqa: E402
from benchmarks.fts_value import Problem  # noqa: E402
from benchmarks.fts_value import regrets  # noqa: E402
from benchmarks.fts_value import STOCK  # noqa: E402
from benchmarks.fts_value import stock_samplers  # noqa: E402
from benchmarks.fts_value import TRUE_ATTR  # noqa: E402
from benchmarks.fts_value import true_values  # noqa: E402
from optuna_fedbo import LocalGPSampler  # noqa: E402
from optuna_fedbo.federation import FTSConfig  # noqa: E402
from optuna_fedbo.search_space import SearchSpaceEncoder  # noqa: E402
from optuna_fedbo.simulation import simulate  # noqa: E402

CHECKPOINTS = (5, 10, 20, 30)
KRR_SPACE = {
    "alpha": optuna.distributions.FloatDistribution(1e-4, 10.0, log=True),
    "gamma_a": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True),
    "gamma_b": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True),
}


def krr_problem(n_sites: int, seed: int) -> Problem:
    """Diabetes shards with covariate shift, kernel ridge tuned per site (see the docstring)."""
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    y = (y - y.mean()) / y.std()
    rng = np.random.default_rng([seed, 28])
    objectives = []
    for _ in range(n_sites):
        weights = np.exp(rng.uniform(-1.5, 1.5) * x[:, 2])
        idx = rng.choice(len(y), size=150, replace=False, p=weights / weights.sum())
        xs, ys = x[idx], y[idx]
        # Squared distances within each feature group (demographics and blood serum).
        groups = [
            np.sum((xs[:, None, g] - xs[None, :, g]) ** 2, axis=-1)
            for g in (slice(0, 5), slice(5, 10))
        ]
        folds = np.array_split(rng.permutation(len(ys)), 3)

        def objective(trial, ys=ys, groups=groups, folds=folds):
            alpha = trial.suggest_float("alpha", 1e-4, 10.0, log=True)
            gamma_a = trial.suggest_float("gamma_a", 1e-4, 1.0, log=True)
            gamma_b = trial.suggest_float("gamma_b", 1e-4, 1.0, log=True)
            kernel = np.exp(-gamma_a * groups[0] - gamma_b * groups[1])
            error = 0.0
            for val in folds:
                train = np.setdiff1d(np.arange(len(ys)), val)
                gram = kernel[np.ix_(train, train)] + alpha * np.eye(len(train))
                coef = np.linalg.solve(gram, ys[train])
                error += float(np.sum((ys[val] - kernel[np.ix_(val, train)] @ coef) ** 2))
            value = 1.0 - error / float(np.sum((ys - ys.mean()) ** 2))
            trial.set_user_attr(TRUE_ATTR, value)
            return value

        objectives.append(objective)
    name = f"krr-diabetes N={n_sites}"

    def reference(site: int) -> float:
        return cached_value(
            f"{name} seed={seed} site={site} reference10",
            lambda: _grid_reference(KRR_SPACE, objectives[site]),
        )

    return Problem(name, KRR_SPACE, objectives, [(None, 1.0)] * n_sites, reference=reference)


def _grid_reference(
    space: dict[str, optuna.distributions.BaseDistribution],
    objective: Callable[[optuna.Trial], float],
    n_grid: int = 10,
) -> float:
    """Best of an ``n_grid``-per-axis grid on the unit-cube encoding, refined by Nelder-Mead."""
    import scipy.optimize

    names = list(space)
    encoding = SearchSpaceEncoder(space)

    def value(u: np.ndarray) -> float:
        params = encoding.decode(np.clip(u, 0.0, 1.0))
        return objective(optuna.trial.FixedTrial({n: params[n] for n in names}))

    axis = np.linspace(0.0, 1.0, n_grid)
    grid = np.stack(np.meshgrid(*[axis] * len(names)), -1).reshape(-1, len(names))
    values = np.array([value(u) for u in grid])
    best = float(values.max())
    for start in grid[np.argsort(-values)[:3]]:
        result = scipy.optimize.minimize(
            lambda u: -value(u),
            start,
            method="Nelder-Mead",
            bounds=[(0.0, 1.0)] * len(names),
            options={
                "maxfev": 80,
                "initial_simplex": start
                + np.vstack([np.zeros(len(names)), 0.5 / (n_grid - 1) * np.eye(len(names))])
                * np.where(start > 0.5, -1.0, 1.0),
            },
        )
        best = max(best, -float(result.fun))
    return best


MLP_SPACE = {
    "hidden": optuna.distributions.IntDistribution(4, 64, log=True),
    "lr": optuna.distributions.FloatDistribution(1e-3, 0.1, log=True),
    "weight_decay": optuna.distributions.FloatDistribution(1e-6, 1e-1, log=True),
    "activation": optuna.distributions.CategoricalDistribution(["relu", "tanh"]),
}
MLP_STEPS = 60


def mlp_problem(n_sites: int, seed: int) -> Problem:
    """Label-skewed digits shards, a small neural network tuned per site (see the docstring)."""
    from sklearn.datasets import load_digits

    from optuna_fedbo.datasets import label_skewed_shards

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    shards = label_skewed_shards(y, n_sites, concentration=0.5, seed=seed)
    rng = np.random.default_rng([seed, 28, 10])
    objectives = []
    for shard in shards:
        n = 3 * (min(240, len(shard)) // 3)
        idx = rng.choice(shard, size=n, replace=False)
        folds = rng.permutation(n).reshape(3, -1)  # (fold, validation samples)
        train = np.stack([np.setdiff1d(np.arange(n), f) for f in folds])
        data = (x[idx][train], np.eye(10)[y[idx][train]], x[idx][folds], y[idx][folds])
        # Initial weights, nested in the width: a network of h units starts as the first h
        # units of the widest one.
        init = (
            rng.standard_normal((64, 64)) * np.sqrt(2.0 / 64),
            rng.standard_normal((64, 10)),
        )

        def objective(trial, data=data, init=init):
            hidden = trial.suggest_int("hidden", 4, 64, log=True)
            lr = trial.suggest_float("lr", 1e-3, 0.1, log=True)
            decay = trial.suggest_float("weight_decay", 1e-6, 1e-1, log=True)
            activation = trial.suggest_categorical("activation", ["relu", "tanh"])
            value = _mlp_cv_log_likelihood(data, init, hidden, lr, decay, activation)
            trial.set_user_attr(TRUE_ATTR, value)
            return value

        objectives.append(objective)
    name = f"mlp-digits N={n_sites}"

    def reference(site: int) -> float:
        return cached_value(
            f"{name} seed={seed} site={site} reference-scan steps={MLP_STEPS}",
            lambda: _scan_reference(MLP_SPACE, objectives[site]),
        )

    return Problem(name, MLP_SPACE, objectives, [(None, 1.0)] * n_sites, reference=reference)


def _mlp_cv_log_likelihood(
    data: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    init: tuple[np.ndarray, np.ndarray],
    hidden: int,
    lr: float,
    decay: float,
    activation: str,
) -> float:
    """Mean validation log-likelihood of a one-hidden-layer network over three folds, trained
    on each fold's complement by ``MLP_STEPS`` full-batch Adam steps, the rate decaying as a
    cosine (the folds side by side: one batched product per layer)."""
    x_train, onehot, x_val, y_val = data
    h = hidden
    theta = np.zeros((3, 75 * h + 10))  # per fold: w1 (64 x h), b1, w2 (h x 10), b2
    grad = np.zeros_like(theta)

    def views(flat: np.ndarray) -> tuple[np.ndarray, ...]:
        return (
            flat[:, : 64 * h].reshape(3, 64, h),
            flat[:, 64 * h : 65 * h],
            flat[:, 65 * h : 75 * h].reshape(3, h, 10),
            flat[:, 75 * h :],
        )

    w1, b1, w2, b2 = views(theta)
    g1, gb1, g2, gb2 = views(grad)
    w1[:] = init[0][:, :h]
    w2[:] = init[1][:h] / np.sqrt(h)
    first, second = np.zeros_like(theta), np.zeros_like(theta)
    x_train_t = x_train.transpose(0, 2, 1)
    relu = activation == "relu"

    def forward(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pre = inputs @ w1 + b1[:, None, :]
        act = np.maximum(pre, 0.0) if relu else np.tanh(pre)
        logits = act @ w2 + b2[:, None, :]
        logits -= logits.max(axis=2, keepdims=True)
        return pre, act, logits - np.log(np.exp(logits).sum(axis=2, keepdims=True))

    for step in range(1, MLP_STEPS + 1):
        pre, act, log_p = forward(x_train)
        d_logits = (np.exp(log_p) - onehot) / onehot.shape[1]
        np.matmul(act.transpose(0, 2, 1), d_logits, out=g2)
        g2 += decay * w2
        gb2[:] = d_logits.sum(axis=1)
        d_act = d_logits @ w2.transpose(0, 2, 1)
        d_pre = d_act * (pre > 0) if relu else d_act * (1.0 - act * act)
        np.matmul(x_train_t, d_pre, out=g1)
        g1 += decay * w1
        gb1[:] = d_pre.sum(axis=1)
        first *= 0.9
        first += 0.1 * grad
        second *= 0.999
        second += 0.001 * grad * grad
        rate = lr * 0.5 * (1.0 + np.cos(np.pi * (step - 1) / MLP_STEPS))  # cosine decay
        scale = rate * np.sqrt(1 - 0.999**step) / (1 - 0.9**step)
        theta -= scale * first / (np.sqrt(second) + 1e-8)
    log_p = forward(x_val)[2]
    return float(np.take_along_axis(log_p, y_val[..., None], axis=2).mean())


def _scan_reference(
    space: dict[str, optuna.distributions.BaseDistribution],
    objective: Callable[[optuna.Trial], float],
    n_scan: int = 128,
    n_starts: int = 3,
    maxfev: int = 80,
) -> float:
    """Best of a scrambled Sobol scan of the numeric parameters (``n_scan`` points on their
    unit-cube encoding, for every combination of the categorical ones), refined by Nelder-Mead
    from the ``n_starts`` best points. A search may beat it (a slightly negative regret)."""
    import itertools

    import scipy.optimize
    import scipy.stats

    numeric = {
        n: d
        for n, d in space.items()
        if not isinstance(d, optuna.distributions.CategoricalDistribution)
    }
    categorical = {n: d.choices for n, d in space.items() if n not in numeric}
    encoding = SearchSpaceEncoder(numeric)

    def value(u: np.ndarray, choice: dict[str, object]) -> float:
        params = {**encoding.decode(np.clip(u, 0.0, 1.0)), **choice}
        return objective(optuna.trial.FixedTrial({n: params[n] for n in space}))

    scan = scipy.stats.qmc.Sobol(len(numeric), seed=0).random(n_scan)
    points = []
    for combination in itertools.product(*categorical.values()):
        choice = dict(zip(categorical, combination))
        points += [(value(u, choice), i, u, choice) for i, u in enumerate(scan)]
    points.sort(key=lambda p: (-p[0], p[1]))
    best = points[0][0]
    for _, _, start, choice in points[:n_starts]:
        step = 0.1 * np.where(start > 0.5, -1.0, 1.0)
        result = scipy.optimize.minimize(
            lambda u, choice=choice: -value(u, choice),
            start,
            method="Nelder-Mead",
            bounds=[(0.0, 1.0)] * len(numeric),
            options={
                "maxfev": maxfev,
                "initial_simplex": start + np.vstack([np.zeros(len(numeric)), np.diag(step)]),
            },
        )
        best = max(best, -float(result.fun))
    return best


def styblinski_problem(n_sites: int, seed: int, relation: str) -> Problem:
    """Rotated 4-D Styblinski-Tang instances: ``rotated`` or ``shifted`` (see the docstring)."""
    import scipy.stats

    dims = 4
    rng = np.random.default_rng([seed, 28, 4])
    space = {f"x{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(dims)}
    z_star = np.full(dims, -2.903534)
    rotation = scipy.stats.special_ortho_group.rvs(dims, random_state=rng)
    centre = rng.uniform(0.2, 0.8, dims)
    dense = rng.uniform(size=(20000, dims))
    objectives, optima = [], []
    for _ in range(n_sites):
        if relation == "rotated":
            rotation = scipy.stats.special_ortho_group.rvs(dims, random_state=rng)
            own = rng.uniform(0.2, 0.8, dims)
        else:
            own = np.clip(centre + 0.05 * rng.standard_normal(dims), 0.05, 0.95)

        def raw(x, rotation=rotation, own=own):
            z = 6.0 * (np.atleast_2d(x) - own) @ rotation.T + z_star
            return -0.5 * np.sum(z**4 - 16.0 * z**2 + 5.0 * z, axis=-1)

        high = float(raw(own)[0])
        low = float(np.median(raw(dense)))

        def objective(trial, raw=raw, low=low, high=high):
            x = np.array([[trial.suggest_float(name, 0.0, 1.0) for name in space]])
            value = float(raw(x)[0])
            trial.set_user_attr(TRUE_ATTR, (value - low) / (high - low))
            return value

        objectives.append(objective)
        optima.append((1.0, 1.0))
    return Problem(f"styblinski4-6 {relation} N={n_sites}", space, objectives, optima)


FAMILIES: dict[str, Callable[[int, int], Problem]] = {
    "krr-diabetes": krr_problem,
    "mlp-digits": mlp_problem,
    "gp2d-independent": lambda n, s: gp_problem(2, 0.2, "independent", n, s),
    "gp2d-rough": lambda n, s: gp_problem(2, 0.05, "identical", n, s),
    "rotated": lambda n, s: styblinski_problem(n, s, "rotated"),
    "shifted": lambda n, s: styblinski_problem(n, s, "shifted"),
}


@contextlib.contextmanager
def _nothing_to_transfer() -> Iterator[None]:
    """Every pooled round's broadcast replaced by zeros, which participants read as nothing to
    transfer (``fed-alone``): their own model alone, inside the federation."""
    from optuna_fedbo.federation.fts.server import FTSServer

    pool = FTSServer._pool

    def zeros(self: FTSServer, *args: object) -> tuple[int, np.ndarray]:
        block, mean = pool(self, *args)  # type: ignore[arg-type]
        return block, np.zeros_like(mean)

    FTSServer._pool = zeros  # type: ignore[method-assign]
    try:
        yield
    finally:
        FTSServer._pool = pool  # type: ignore[method-assign]


def run_method(
    problem: Problem, name: str, seed: int, n_trials: int, *, solo_seed_offset: int = 0
) -> np.ndarray:
    """Best true value so far, shape ``(sites, n_trials)`` (``fed_solo``'s site-runs seeded
    ``1000 seed + site + solo_seed_offset``)."""
    n_sites = len(problem.objectives)
    cache = None
    if name in STOCK:
        cache = _cache_file(
            f"{problem.name} seed={seed} {name} T={n_trials} sites={n_sites} tuning "
            f"optuna={optuna.__version__}"
        )
        if os.path.exists(cache):
            return np.load(cache)
    if name in ("fed", "fed-alone"):
        with _nothing_to_transfer() if name == "fed-alone" else contextlib.nullcontext():
            result = simulate(
                problem.objectives,
                search_space=problem.space,
                n_rounds=n_trials - FTSConfig().n_init,
                protocol=FTSConfig(),
                seed=seed,
                progress=False,
            )
        return np.array([true_values(s, n_trials) for s in result.studies])
    if name == "pooled-gp":
        return pooled_gp_curves(problem, n_trials, seed)
    rows = []
    for n, objective in enumerate(problem.objectives):
        if name == "fed_solo":
            config = FTSConfig(min_contributors=1)  # a lone site may publish
            result = simulate(
                [objective],
                search_space=problem.space,
                n_rounds=n_trials - config.n_init,
                protocol=config,
                seed=1000 * seed + n + solo_seed_offset,
                progress=False,
            )
            rows.append(true_values(result.studies[0], n_trials))
            continue
        if name == "local-gp":
            sampler = LocalGPSampler(seed=1000 * seed + n, n_startup_trials=5)
        else:
            sampler = stock_samplers(1000 * seed + n)[name]()
        study = optuna.create_study(direction="maximize", sampler=sampler)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study.optimize(objective, n_trials=n_trials)
        rows.append(true_values(study, n_trials))
    curves = np.array(rows)
    if cache is not None:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        np.save(cache, curves)
    return curves


def report(family: str, per_seed: list[dict[str, np.ndarray]], seconds: dict[str, float]) -> None:
    """Regrets, ratios to GPSampler and to the best stock sampler, paired wins, paired se."""
    methods = list(per_seed[0])
    # (site-runs, trials) per method: seeds x sites stacked.
    runs = {m: np.concatenate([r[m] for r in per_seed]) for m in methods}
    n_runs = len(runs[methods[0]])
    stock = [m for m in methods if m in STOCK]
    print(f"\n## {family}  ({len(per_seed)} seeds, {n_runs} site-runs)")
    print(
        f"{'method':10s}"
        + "".join(f"{'r@' + str(t):>9s}" for t in CHECKPOINTS)
        + "".join(f"{'/gp@' + str(t):>7s}" for t in CHECKPOINTS)
        + "".join(f"{'/best@' + str(t):>8s}" for t in CHECKPOINTS)
        + f"{'wins@20':>9s}{'wins@30':>9s}{'se@20':>9s}{'se@30':>9s}{'s/run':>7s}"
    )
    for m in methods:
        mean = {t: runs[m][:, t - 1].mean() for t in CHECKPOINTS}
        line = f"{m:10s}" + "".join(f"{mean[t]:9.4f}" for t in CHECKPOINTS)
        for t in CHECKPOINTS:
            gp = runs["gp"][:, t - 1].mean() if "gp" in runs else float("nan")
            line += f"{mean[t] / max(gp, 1e-12):7.2f}"
        for t in CHECKPOINTS:
            best = min((runs[s][:, t - 1].mean() for s in stock), default=float("nan"))
            line += f"{mean[t] / max(best, 1e-12):8.2f}"
        for t in (20, 30):
            if "gp" in runs:
                diff = runs[m][:, t - 1] - runs["gp"][:, t - 1]
                line += f"{int(np.sum(diff < 0)):4d}/{int(np.sum(diff > 0)):<4d}"
            else:
                line += f"{'':9s}"
        for t in (20, 30):
            if "gp" in runs:
                diff = runs[m][:, t - 1] - runs["gp"][:, t - 1]
                line += f"{diff.std(ddof=1) / np.sqrt(n_runs):9.4f}"
        line += f"{seconds.get(m, float('nan')):7.1f}"
        print(line)
    print("wins@t: site-runs with lower / higher regret than gp; se: of the paired difference")
    if not stock:  # e.g. --methods fed_solo,fed against --against's saved run
        return
    best_at = {t: min(stock, key=lambda s: runs[s][:, t - 1].mean()) for t in CHECKPOINTS}
    print(
        "against the best stock sampler at t: "
        + ", ".join(f"{best_at[t]}@{t}" for t in (10, 20, 30))
    )
    print(
        f"{'method':10s}"
        + "".join(f"{'wins@' + str(t):>10s}{'diff+-se':>18s}" for t in (10, 20, 30))
    )
    for m in methods:
        if m in STOCK:
            continue
        line = f"{m:10s}"
        for t in (10, 20, 30):
            diff = runs[m][:, t - 1] - runs[best_at[t]][:, t - 1]
            se = diff.std(ddof=1) / np.sqrt(n_runs)
            line += f"{int(np.sum(diff < 0)):5d}/{int(np.sum(diff > 0)):<4d}"
            line += f"{diff.mean():+9.4f}+-{se:.4f}"
        print(line)


def paired_report(runs: dict[str, np.ndarray], saved: dict[str, np.ndarray]) -> None:
    """Paired differences of each method run again against its saved regrets (new - saved;
    ``fed-alone`` against the saved ``fed``: what withholding every broadcast changes)."""
    print(
        f"\n{'method':10s}"
        + "".join(f"{'new-saved@' + str(t):>22s}{'wins':>8s}" for t in (10, 20, 30))
    )
    for m, new in runs.items():
        old = saved.get("fed" if m == "fed-alone" and m not in saved else m)
        if old is None or old.shape != new.shape:
            continue
        line = f"{m:10s}"
        for t in (10, 20, 30):
            diff = new[:, t - 1] - old[:, t - 1]
            se = diff.std(ddof=1) / np.sqrt(len(diff))
            wins, losses = int(np.sum(diff < 0)), int(np.sum(diff > 0))
            line += f"{diff.mean():+13.4f}+-{se:.4f}{wins:4d}/{losses:<3d}"
        print(line)
    print("wins: site-runs with lower / higher regret than saved")


def cost(n_trials: int, dims: int, n_sites: int = 2) -> None:
    """CPU ms per trial over the ten trials up to 20, 30, 50, 60, 100 and 200: a participant of a
    federation of ``n_sites`` (in memory, the server closing a round after each trial of every
    site; its step timed apart and divided by the participants; a lone site's rounds are
    published, ``min_contributors=1``), TPE and GPSampler, in one run."""
    from optuna_fedbo import Federation
    from optuna_fedbo import FederationServer
    from optuna_fedbo import FedTransferSampler

    space = {f"x{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(dims)}

    def objective(trial: optuna.Trial) -> float:
        x = np.array([trial.suggest_float(name, 0.0, 1.0) for name in space])
        return float(-np.sum((x - 0.3) ** 2) + 0.1 * np.sin(20 * x).sum())

    def timed(study: optuna.Study) -> float:
        start = time.process_time()
        study.optimize(objective, n_trials=1)
        return time.process_time() - start

    tpe = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))
    tpe_ms = [timed(tpe) for _ in range(n_trials)]
    gp_ms = [float("nan")] * n_trials
    if "gp" in stock_samplers(0):  # GPSampler needs torch (the ``gp`` extra)
        gp = optuna.create_study(direction="maximize", sampler=stock_samplers(0)["gp"]())
        gp_ms = [timed(gp) for _ in range(n_trials)]
    protocol = FTSConfig(min_contributors=1) if n_sites == 1 else FTSConfig()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a round of one contributor, published
        fed = Federation.create(
            f"cost-{time.time_ns()}", search_space=space, n_clients=n_sites, protocol=protocol
        )
    server = FederationServer(fed)
    site, *others = (
        optuna.create_study(direction="maximize", sampler=FedTransferSampler(fed, f"s{s}", seed=s))
        for s in range(n_sites)
    )
    site_ms, server_ms = [], []
    for _ in range(n_trials):
        site_ms.append(timed(site))
        for other in others:
            other.optimize(objective, n_trials=1)
        start = time.process_time()
        server.step(force=True)
        server_ms.append(time.process_time() - start)
    for end in (20, 30, 50, 60, 100, 200):
        if end > n_trials:
            break
        window = slice(end - 10, end)  # the ten trials up to ``end``
        participant, tpe_trial = np.mean(site_ms[window]), np.mean(tpe_ms[window])
        print(
            f"{dims}-D, {n_sites} sites, trials {end - 9}-{end}, CPU ms per trial: participant "
            f"{1000 * participant:.1f} ({participant / tpe_trial:.1f}x TPE), server per "
            f"participant {1000 * np.mean(server_ms[window]) / n_sites:.1f}, TPE "
            f"{1000 * tpe_trial:.1f}, GPSampler {1000 * np.mean(gp_ms[window]):.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="krr-diabetes", choices=sorted(FAMILIES))
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--sites", type=int, default=6)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--methods", default="random,tpe,qmc,cmaes,gp,local-gp,fed_solo")
    parser.add_argument("--cost", type=int, default=0, help="only time N trials (3-D, 4-D)")
    parser.add_argument("--cost-dims", default="3,4", help="dimensions timed by --cost")
    parser.add_argument("--cost-sites", default="2", help="federation sizes timed by --cost")
    parser.add_argument("--save", default="", help="keep the regrets per site-run (.npz)")
    parser.add_argument("--against", default="", help="pair with regrets kept by --save")
    parser.add_argument("--solo-seed-offset", type=int, default=0, help="reseed fed_solo")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=ExperimentalWarning)
    if args.cost:
        for dims in args.cost_dims.split(","):
            for n_sites in args.cost_sites.split(","):
                cost(args.cost, int(dims), int(n_sites))
        return
    methods = args.methods.split(",")
    per_seed = []
    seconds: dict[str, float] = {}
    for seed in range(args.seeds):
        problem = FAMILIES[args.family](args.sites, seed)
        curves = {}
        for name in methods:
            start = time.perf_counter()
            curves[name] = run_method(
                problem, name, seed, args.trials, solo_seed_offset=args.solo_seed_offset
            )
            seconds[name] = seconds.get(name, 0.0) + (time.perf_counter() - start) / (
                args.seeds * args.sites
            )
        per_seed.append(regrets(problem, curves))
        print(f"seed {seed} done", flush=True)
    report(args.family, per_seed, seconds)
    runs = {m: np.concatenate([r[m] for r in per_seed]) for m in methods}
    if args.save:
        np.savez(args.save, **runs)
    if args.against:
        with np.load(args.against) as saved:
            paired_report(runs, dict(saved))


if __name__ == "__main__":
    main()
