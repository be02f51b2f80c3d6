"""The exact GP (core/gp.py), its acquisitions and LocalGPSampler."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import optuna
from optuna.testing.pytest_samplers import BasicSamplerTestCase
from optuna.testing.pytest_samplers import RelativeSamplerTestCase
from optuna.testing.pytest_samplers import SingleOnlySamplerTestCase
import pytest
import scipy.special
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel
from sklearn.gaussian_process.kernels import Matern
from sklearn.gaussian_process.kernels import WhiteKernel

from optuna_fedbo import LocalGPSampler
from optuna_fedbo.core.acquisition import LARGE_STUDY
from optuna_fedbo.core.acquisition import LinearAcquisition
from optuna_fedbo.core.acquisition import search_budget
from optuna_fedbo.core.believer import believe
from optuna_fedbo.core.gp import GaussianProcess
from optuna_fedbo.core.gp import KernelParams
from optuna_fedbo.core.gp import squared_differences
from optuna_fedbo.core.gp_acquisition import GPUpperConfidenceBound
from optuna_fedbo.core.gp_acquisition import log_h
from optuna_fedbo.core.gp_acquisition import LogExpectedImprovement
from optuna_fedbo.core.gp_acquisition import thompson_candidate
from optuna_fedbo.core.gp_fit import fit_gp
from optuna_fedbo.core.gp_fit import GPFitState
from optuna_fedbo.core.gp_fit import log_posterior_and_grad
from optuna_fedbo.core.gp_fit import REFIT_FROM
from optuna_fedbo.core.gp_fit import subset_indices
from optuna_fedbo.core.gp_fit import update_gp
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.space import Dimension
from optuna_fedbo.core.space import UnitCubeEncoding

optuna.logging.set_verbosity(optuna.logging.WARNING)

PARAMS = KernelParams(np.array([0.3, 0.7]), 1.7, 1e-3)


def _data(n: int = 25, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    y = 3.0 * np.sin(5.0 * X[:, 0]) + X[:, 1] ** 2 + 0.05 * rng.standard_normal(n) + 10.0
    return X, y


def _dense_matern(a: np.ndarray, b: np.ndarray, params: KernelParams) -> np.ndarray:
    """The kernel written out element by element."""
    out = np.empty((len(a), len(b)))
    for i, u in enumerate(a):
        for j, v in enumerate(b):
            r = math.sqrt(float(np.sum(((u - v) / params.lengthscales) ** 2)))
            s5 = math.sqrt(5.0) * r
            out[i, j] = params.signal_variance * (1 + s5 + 5.0 * r * r / 3.0) * math.exp(-s5)
    return out


def test_posterior_matches_dense_formulas() -> None:
    X, y = _data()
    gp = GaussianProcess(X, y, PARAMS)
    t = (y - y.mean()) / y.std()
    K = _dense_matern(X, X, PARAMS) + PARAMS.noise_variance * np.eye(len(X))
    Q = np.random.default_rng(1).uniform(size=(7, 2))
    k = _dense_matern(Q, X, PARAMS)
    mean = y.mean() + y.std() * k @ np.linalg.solve(K, t)
    var = PARAMS.signal_variance - np.einsum("ij,ji->i", k, np.linalg.solve(K, k.T))
    got_mean, got_std = gp.predict(Q)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-9)
    np.testing.assert_allclose(got_std, y.std() * np.sqrt(var), rtol=1e-7)
    # The mean alone (no variance solve) is the same, to the last bit.
    mean_only, no_std = gp.predict(Q, return_std=False)
    assert no_std is None and np.array_equal(mean_only, got_mean)
    _, logdet = np.linalg.slogdet(K)
    lml = -0.5 * t @ np.linalg.solve(K, t) - 0.5 * logdet - 0.5 * len(y) * math.log(2 * math.pi)
    assert gp.log_marginal_likelihood() == pytest.approx(lml - len(y) * math.log(y.std()))


def test_posterior_matches_sklearn_with_same_hyperparameters() -> None:
    X, y = _data()
    gp = GaussianProcess(X, y, PARAMS)
    kernel = ConstantKernel(PARAMS.signal_variance, "fixed") * Matern(
        PARAMS.lengthscales, "fixed", nu=2.5
    ) + WhiteKernel(PARAMS.noise_variance, "fixed")
    reference = GaussianProcessRegressor(kernel, optimizer=None, normalize_y=True).fit(X, y)
    Q = np.random.default_rng(2).uniform(size=(9, 2))
    mean, std = reference.predict(Q, return_std=True)
    got_mean, got_std = gp.predict(Q)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-8)
    # sklearn adds 1e-10 to the diagonal; its std includes the noise, ours is the latent f's.
    noise = PARAMS.noise_variance * y.std() ** 2
    np.testing.assert_allclose(got_std, np.sqrt(std**2 - noise), rtol=1e-6)
    assert gp.log_marginal_likelihood() == pytest.approx(
        reference.log_marginal_likelihood_value_ - len(y) * math.log(y.std()), rel=1e-6
    )


def test_log_posterior_gradient_matches_finite_differences() -> None:
    X, y = _data(20)
    targets = (y - y.mean()) / y.std()
    sq = squared_differences(X, X)
    raw = np.array([-1.2, 0.4, 0.3, math.log(2e-3)])
    _, grad = log_posterior_and_grad(raw, sq, targets)
    eps = 1e-6
    numeric = [
        (
            log_posterior_and_grad(raw + e, sq, targets, with_grad=False)[0]
            - log_posterior_and_grad(raw - e, sq, targets, with_grad=False)[0]
        )
        / (2 * eps)
        for e in np.eye(len(raw)) * eps
    ]
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_predictive_gradients_match_finite_differences() -> None:
    X, y = _data(15)
    gp = GaussianProcess(X, y, PARAMS)
    x = np.random.default_rng(3).uniform(size=(4, 2))
    _, _, mean_grad, var_grad = gp.standardized_posterior(x, with_grads=True)
    eps = 1e-6
    for d in range(2):
        step = np.zeros(2)
        step[d] = eps
        up, down = gp.standardized_posterior(x + step), gp.standardized_posterior(x - step)
        np.testing.assert_allclose(mean_grad[:, d], (up[0] - down[0]) / (2 * eps), atol=1e-5)
        np.testing.assert_allclose(var_grad[:, d], (up[1] - down[1]) / (2 * eps), atol=1e-5)


@pytest.mark.parametrize("with_prior", [False, True])
def test_acquisition_gradients_match_finite_differences(with_prior: bool) -> None:
    X, y = _data(15)
    prior = None
    prior_at_x = None
    if with_prior:
        features = RandomFourierFeatures(2, 20, 0.3, seed=0)
        prior = LinearAcquisition(features, np.random.default_rng(0).standard_normal(20))
        prior_at_x = prior.values(X)
    gp = GaussianProcess(X, y, PARAMS, prior_mean=prior_at_x)
    x = np.random.default_rng(4).uniform(size=(5, 2))
    for acquisition in (
        LogExpectedImprovement(gp, float(y.max()), prior_mean=prior),
        GPUpperConfidenceBound(gp, 2.0, prior_mean=prior),
    ):
        values, grads = acquisition.values_and_grads(x)
        # A prior's features are fast (to about 2e-7) when scoring candidates, exact in
        # gradients.
        np.testing.assert_allclose(values, acquisition.values(x), rtol=1e-6)
        eps = 1e-6
        for d in range(2):
            step = np.zeros(2)
            step[d] = eps
            up, down = (acquisition.values_and_grads(x + s)[0] for s in (step, -step))
            numeric = (up - down) / (2 * eps)
            np.testing.assert_allclose(grads[:, d], numeric, rtol=1e-4, atol=1e-6)


def test_log_h_is_log_expected_improvement_and_stable() -> None:
    z = np.array([-3.0, -0.5, 0.0, 0.7, 4.0])
    direct = np.log(np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) + z * scipy.special.ndtr(z))
    np.testing.assert_allclose(log_h(z), direct, rtol=1e-10)
    far = log_h(np.array([-40.0, -200.0]))
    assert np.all(np.isfinite(far))
    # h(z) ~ phi(z) / z^2 for z -> -inf.
    z_far = np.array([-40.0, -200.0])
    asymptote = -0.5 * z_far**2 - 0.5 * math.log(2 * math.pi) - 2 * np.log(-z_far)
    np.testing.assert_allclose(far, asymptote, rtol=1e-5)


def test_prior_mean_equal_to_truth_gives_exact_posterior_mean() -> None:
    def truth(x: np.ndarray) -> np.ndarray:
        return np.sin(7.0 * x[:, 0]) * np.cos(3.0 * x[:, 1])

    rng = np.random.default_rng(5)
    X = rng.uniform(size=(12, 2))
    gp = fit_gp(X, truth(X), prior_mean=truth(X), rng=rng)
    Q = rng.uniform(size=(50, 2))
    mean, _ = gp.predict(Q, prior_mean=truth(Q))
    np.testing.assert_allclose(mean, truth(Q), atol=1e-12)
    with pytest.raises(ValueError, match="prior_mean"):
        gp.predict(Q)


def test_prior_mean_shifts_predictions_away_from_data() -> None:
    X, y = _data(10)
    prior_at_x = np.full(len(y), 5.0)
    gp = GaussianProcess(X, y, PARAMS, prior_mean=prior_at_x)
    far = np.array([[50.0, 50.0]])  # correlation with the data vanishes
    mean, std = gp.predict(far, prior_mean=np.array([-3.0]))
    # Far from data: prior mean plus the residuals' mean, with the prior's standard deviation.
    assert mean[0] == pytest.approx(-3.0 + np.mean(y - 5.0))
    assert std[0] == pytest.approx(np.std(y - 5.0) * math.sqrt(PARAMS.signal_variance))


def test_fit_recovers_short_and_long_lengthscales() -> None:
    rng = np.random.default_rng(6)
    X = rng.uniform(size=(60, 1))
    rough = fit_gp(X, np.sin(40.0 * X[:, 0]), rng=rng)
    smooth = fit_gp(X, np.sin(2.0 * X[:, 0]), rng=rng)
    assert rough.params.lengthscales[0] < 0.2
    assert smooth.params.lengthscales[0] > 0.5
    # Warm start from the previous fit gives the same optimum.
    again = fit_gp(X, np.sin(40.0 * X[:, 0]), rng=rng, warm_start=rough, n_restarts=0)
    assert again.log_marginal_likelihood() == pytest.approx(
        rough.log_marginal_likelihood(), rel=1e-3
    )


def test_fit_on_tiny_data_does_not_interpolate_wildly() -> None:
    X = np.array([[0.1, 0.2], [0.5, 0.5], [0.9, 0.7]])
    gp = fit_gp(X, np.array([1.0, 2.0, 1.5]), rng=np.random.default_rng(0))
    mean, std = gp.predict(np.random.default_rng(1).uniform(size=(100, 2)))
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
    assert np.all((mean > 0.0) & (mean < 3.0))


def test_fit_to_few_points_keeps_every_turning_dimension() -> None:
    # Six points of a 4-D bowl that turns along every axis within the cube: the lengthscale
    # prior's long tail keeps each lengthscale within twice the prior median (1 at D = 4), where
    # the log-normal factor alone let the fit call some axis irrelevant (up to 3.2 here).
    for seed in range(10):
        rng = np.random.default_rng(seed)
        X = rng.uniform(size=(6, 4))
        gp = fit_gp(X, -np.sum((X - 0.5) ** 2, axis=1), rng=np.random.default_rng(0))
        assert gp.params.lengthscales.max() < 2.0


def test_worst_constant_mean_expects_the_worst_value_far_from_the_data() -> None:
    # Points in one corner; far from them the posterior mean returns to the constant mean: the
    # values' average by default, their minimum with constant_mean="worst" (after a prior
    # mean, the residuals' minimum), and a GP derived from it (another prior mean, believed
    # running points) keeps it.
    rng = np.random.default_rng(0)
    X = 0.2 * rng.uniform(size=(12, 2))
    y = np.sin(20.0 * X[:, 0]) + X[:, 1]
    params = KernelParams(np.array([0.05, 0.05]), 1.0, 1e-4)
    far = np.array([[0.95, 0.95]])
    mean_gp = GaussianProcess(X, y, params)
    worst_gp = GaussianProcess(X, y, params, constant_mean="worst")
    assert mean_gp.predict(far)[0][0] == pytest.approx(y.mean(), abs=1e-6)
    assert worst_gp.predict(far)[0][0] == pytest.approx(y.min(), abs=1e-6)
    # The fit and update_gp pass it on.
    fitted = fit_gp(X, y, rng=np.random.default_rng(0), constant_mean="worst")
    assert fitted.constant_mean == "worst" and fitted.offset == pytest.approx(y.min())
    updated, _ = update_gp(X, y, None, np.random.default_rng(0), constant_mean="worst")
    assert updated.constant_mean == "worst"
    prior = 0.5 * X[:, 1]
    shifted = worst_gp.with_prior_mean(prior)
    assert shifted.offset == pytest.approx(np.min(y - prior))
    believed = believe(worst_gp, np.array([[0.5, 0.5]]))
    assert believed.constant_mean == "worst"
    assert believed.predict(far)[0][0] == pytest.approx(min(y.min(), believed.y[-1]), abs=1e-6)
    with pytest.raises(ValueError, match="constant_mean"):
        GaussianProcess(X, y, params, constant_mean="best")


def test_constant_values_fit() -> None:
    X = np.random.default_rng(0).uniform(size=(8, 3))
    gp = fit_gp(X, np.full(8, 4.0), rng=np.random.default_rng(0))
    mean, _ = gp.predict(X)
    np.testing.assert_allclose(mean, 4.0)


def test_invalid_inputs_are_rejected() -> None:
    X, y = _data(5)
    with pytest.raises(ValueError):
        fit_gp(X, y[:-1])
    with pytest.raises(ValueError):
        fit_gp(X, np.where(np.arange(5) == 2, np.nan, y))
    with pytest.raises(ValueError):
        fit_gp(X, y, prior_mean=np.ones(3))
    gp = GaussianProcess(X, y, PARAMS)
    with pytest.raises(ValueError, match="prior_mean"):
        gp.predict(X, prior_mean=np.ones(5))
    with pytest.raises(ValueError):
        gp.predict(np.ones((2, 3)))


def test_sample_paths_have_the_posterior_moments() -> None:
    X, y = _data(10)
    gp = GaussianProcess(X, y, PARAMS)
    Q = np.random.default_rng(7).uniform(size=(6, 2))
    draws = gp.sample_paths(Q, 20000, np.random.default_rng(8))
    mean, std = gp.predict(Q)
    np.testing.assert_allclose(draws.mean(axis=0), mean, atol=4 * std.max() / math.sqrt(20000))
    np.testing.assert_allclose(draws.std(axis=0), std, rtol=0.05)


def test_thompson_candidate_is_admissible() -> None:
    encoding = UnitCubeEncoding(
        [Dimension("float"), Dimension("int", 0, 4, step=1), Dimension("categorical", n_choices=3)]
    )
    rng = np.random.default_rng(9)
    X = encoding.snap(encoding.sample(12, rng))
    gp = fit_gp(X, X[:, 0] + X[:, 3], rng=rng)
    point = thompson_candidate(gp, encoding, rng, n_candidates=64, incumbents=X[:2])
    np.testing.assert_array_equal(point, encoding.snap(point[None, :])[0])


def test_subset_keeps_the_best_half() -> None:
    y = np.arange(100.0)
    kept = subset_indices(y, 20, np.random.default_rng(0))
    assert len(kept) == 20 and len(set(kept)) == 20
    assert set(range(90, 100)) <= set(kept)
    np.testing.assert_array_equal(subset_indices(y[:10], 20, np.random.default_rng(0)), range(10))


def test_update_gp_refits_early_then_only_after_growth_and_caps_the_points() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(400, 2))
    y = np.sin(6.0 * X[:, 0]) + X[:, 1]
    gp, fit = update_gp(X[: REFIT_FROM - 2], y[: REFIT_FROM - 2], None, rng)
    assert fit.n_observations == REFIT_FROM - 2 and gp.n_observations == REFIT_FROM - 2
    _, again = update_gp(X[: REFIT_FROM - 1], y[: REFIT_FROM - 1], fit, rng)
    assert again.n_observations == REFIT_FROM - 1  # below REFIT_FROM: refitted every time
    first = update_gp(X[:100], y[:100], None, rng)[1]
    gp, kept = update_gp(X[:109], y[:109], first, rng, refit_growth=1.1)
    assert kept is first and gp.params is first.params  # grown by less than 10%: conditioned
    _, refitted = update_gp(X[:112], y[:112], first, rng, refit_growth=1.1)
    assert refitted.n_observations == 112
    at_start = update_gp(X[:REFIT_FROM], y[:REFIT_FROM], None, rng)[1]
    _, kept = update_gp(X[: REFIT_FROM + 1], y[: REFIT_FROM + 1], at_start, rng)
    assert kept is at_start  # from REFIT_FROM on: only after 10% more
    gp, _ = update_gp(X, y, refitted, rng, max_points=64)
    assert gp.n_observations == 64
    other = GPFitState(KernelParams(np.array([0.3, 0.3, 0.3]), 1.0, 1e-3), 300)
    _, fresh = update_gp(X[:300], y[:300], other, rng)  # another dimension: no warm start
    assert fresh.n_observations == 300 and fresh.params.lengthscales.shape == (2,)


def test_update_gp_keeps_the_fit_from_refit_from_on() -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(20, 2))
    y = np.sin(6.0 * X[:, 0]) + X[:, 1]
    fit = update_gp(X[:10], y[:10], None, rng, refit_from=10)[1]
    gp, kept = update_gp(X[:10], y[:10], fit, rng, refit_from=10)
    assert kept is fit and gp.params is fit.params  # from refit_from on: kept below 10% more
    _, kept = update_gp(X[:10], y[:10], fit, rng)
    assert kept is not fit  # the default (REFIT_FROM, 20): refitted every time below it
    _, refitted = update_gp(X[:11], y[:11], fit, rng, refit_from=10)
    assert refitted.n_observations == 11


def test_the_search_budget_shrinks_only_in_large_studies() -> None:
    assert search_budget(LARGE_STUDY, 1024, 8) == (1024, 8, 0)
    # Beyond: an eighth of the candidates (at least 64), a zoom instead of L-BFGS-B.
    assert search_budget(LARGE_STUDY + 1, 1024, 8) == (128, 0, 64)
    assert search_budget(1000, 100, 1) == (64, 0, 64)
    assert search_budget(1000, 16, 0) == (16, 0, 0)


@pytest.mark.parametrize(
    "local_search, n_observations, zoomed",
    [("zoom", 25, True), ("lbfgsb", 25, False), ("zoom", LARGE_STUDY + 1, False)],
)
def test_zoom_scales_set_the_zoom_steps_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, local_search: str, n_observations: int, zoomed: bool
) -> None:
    """``zoom_scales`` replace the lengthscales in the zoom rounds of ``local_search="zoom"``;
    L-BFGS-B's scaling and a large study's zoom keep the lengthscales."""
    import optuna_fedbo.core.gp_acquisition as gp_acquisition

    X, y = _data(25)
    gp = GaussianProcess(X, y, PARAMS)
    acquisition = LogExpectedImprovement(gp, float(y.max()))
    encoding = UnitCubeEncoding([Dimension("float"), Dimension("float")])
    scales = []
    maximize = gp_acquisition.maximize

    def recorded(*args, **options):  # noqa: ANN002, ANN003, ANN202
        scales.append(options["scales"])
        return maximize(*args, **options)

    monkeypatch.setattr(gp_acquisition, "maximize", recorded)
    short = np.array([0.05, 0.1])
    points = [
        gp_acquisition.maximize_on_gp(
            acquisition,
            gp,
            encoding,
            np.random.default_rng(3),
            X[np.argsort(-y)[:5]],
            n_observations=n_observations,
            n_candidates=128,
            n_refinements=4,
            local_search=local_search,
            zoom_scales=zoom_scales,  # type: ignore[arg-type]
        )  # fmt: skip
        for zoom_scales in (None, short)
    ]
    np.testing.assert_array_equal(scales[0], PARAMS.lengthscales)
    np.testing.assert_array_equal(scales[1], short if zoomed else PARAMS.lengthscales)
    # The zoom's draws are scaled by them: another point (the same without a zoom).
    assert np.array_equal(points[0], points[1]) != zoomed


_BLAS_THREADS_CHECK = """
import scipy.linalg  # both BLAS libraries (numpy's and scipy's) loaded before the first look
from threadpoolctl import threadpool_info
from optuna_fedbo.core.threads import one_blas_thread

def threads():
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]

before = threads()
for _ in range(3):
    with one_blas_thread():
        with one_blas_thread():
            assert all(n == 1 for n in threads()), threads()
    assert threads() == before, (before, threads())
"""


def test_one_blas_thread_limits_and_restores() -> None:
    # BLAS limits are process-wide and the suite's conftest sets them to one thread:
    # check in a fresh process, with BLAS allowed two threads to begin with.
    env = {**os.environ, "OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}
    result = subprocess.run(
        [sys.executable, "-c", _BLAS_THREADS_CHECK], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]


class TestLocalGPSamplerConformance(
    BasicSamplerTestCase, RelativeSamplerTestCase, SingleOnlySamplerTestCase
):
    @pytest.fixture
    def sampler(self):
        return lambda: LocalGPSampler(n_startup_trials=0, n_candidates=64, seed=0)


def _branin(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", -5.0, 10.0)
    y = trial.suggest_float("y", 0.0, 15.0)
    return (
        (y - 5.1 / (4 * math.pi**2) * x**2 + 5 / math.pi * x - 6) ** 2
        + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x)
        + 10
    )


@pytest.mark.parametrize("acquisition", ["logei", "ucb", "thompson"])
def test_beats_random_search_on_branin(acquisition: str) -> None:
    gaps = {}
    for name, make in (
        ("gp", lambda s: LocalGPSampler(acquisition=acquisition, n_candidates=256, seed=s)),
        ("random", lambda s: optuna.samplers.RandomSampler(seed=s)),
    ):
        regrets = []
        for seed in range(3):
            study = optuna.create_study(sampler=make(seed))
            study.optimize(_branin, n_trials=25)
            regrets.append(study.best_value - 0.397887)
        gaps[name] = float(np.median(regrets))
    assert gaps["gp"] < 0.2 * gaps["random"]


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_direction_and_mixed_space(direction: str) -> None:
    sign = 1.0 if direction == "minimize" else -1.0

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 1e-3, 1.0, log=True)
        k = trial.suggest_int("k", 0, 6)
        c = trial.suggest_categorical("c", ["a", "b", "c"])
        return sign * ((math.log10(x) + 2) ** 2 + (k - 4) ** 2 + (c != "b"))

    study = optuna.create_study(
        direction=direction, sampler=LocalGPSampler(n_startup_trials=5, n_candidates=256, seed=0)
    )
    study.optimize(objective, n_trials=30)
    assert study.best_params["c"] == "b" and study.best_params["k"] == 4
    assert abs(study.best_value) < 0.2


def test_failed_trials_and_enqueued_points_are_handled() -> None:
    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        if trial.number % 4 == 3:
            raise ValueError("boom")
        return (x - 0.3) ** 2

    study = optuna.create_study(sampler=LocalGPSampler(n_startup_trials=3, seed=0))
    study.enqueue_trial({"x": 0.3})
    study.optimize(objective, n_trials=16, catch=(ValueError,))
    assert study.trials[0].params["x"] == 0.3
    assert study.best_value == 0.0


def test_seed_makes_runs_reproducible() -> None:
    runs = []
    for _ in range(2):
        study = optuna.create_study(sampler=LocalGPSampler(n_startup_trials=4, seed=3))
        study.optimize(_branin, n_trials=10)
        runs.append([t.params for t in study.trials])
    assert runs[0] == runs[1]


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        LocalGPSampler(acquisition="ei")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LocalGPSampler(max_points=1)
    with pytest.raises(ValueError):
        LocalGPSampler(beta=-1.0)
