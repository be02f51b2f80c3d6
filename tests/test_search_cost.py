"""The acquisition search's and the GP fit's cost: their cheaper computations give the same
numbers as the general ones, and a line search that cannot succeed stops early."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import scipy.linalg

from optuna_fedbo.core import lbfgsb
from optuna_fedbo.core.acquisition import _refine
from optuna_fedbo.core.acquisition import REFINE_MAX_LINE_SEARCH
from optuna_fedbo.core.gp import GaussianProcess
from optuna_fedbo.core.gp import KernelParams
from optuna_fedbo.core.gp import LENGTHSCALE_PRIOR_STD
from optuna_fedbo.core.gp import LENGTHSCALE_TAIL_WEIGHT
from optuna_fedbo.core.gp import matern52
from optuna_fedbo.core.gp import matern52_with_derivative
from optuna_fedbo.core.gp import NOISE_PRIOR_RATE
from optuna_fedbo.core.gp import NOISE_PRIOR_SHAPE
from optuna_fedbo.core.gp import squared_differences
from optuna_fedbo.core.gp_acquisition import log_h
from optuna_fedbo.core.gp_acquisition import LogExpectedImprovement
from optuna_fedbo.core.gp_fit import fit_gp
from optuna_fedbo.core.gp_fit import log_posterior_and_grad
from optuna_fedbo.core.space import Box
from optuna_fedbo.core.warping import TailWarp
from optuna_fedbo.core.warping import WarpedFunction


def matern52_derivative(squared_distance: np.ndarray) -> np.ndarray:
    """The derivative's direct formula, ``-5/6 (1 + r) exp(-r)``."""
    r = np.sqrt(5.0 * squared_distance)
    return (-5.0 / 6.0) * (1.0 + r) * np.exp(-r)


def test_matern52_with_derivative_is_bit_for_bit_the_two_functions() -> None:
    rng = np.random.default_rng(0)
    sq = np.concatenate([[0.0, 1e-300, 1e-12], rng.exponential(2.0, size=200), [700.0]])
    sq = sq.reshape(-1, 12)
    value, derivative = matern52_with_derivative(sq)
    assert np.array_equal(value, matern52(sq))
    assert np.array_equal(derivative, matern52_derivative(sq))
    assert derivative[0, 0] == -5.0 / 6.0


def test_matern52_over_its_input_gives_the_same_numbers() -> None:
    rng = np.random.default_rng(2)
    sq = np.concatenate([[0.0, 1e-300, 1e-12], rng.exponential(2.0, size=200), [700.0]])
    sq = sq.reshape(-1, 12)
    expected = matern52(sq)
    overwritten = sq.copy()
    assert np.array_equal(matern52(overwritten, overwrite_input=True), expected)
    assert not np.array_equal(overwritten, sq)  # it was the scratch space


def test_the_posterior_at_many_points_is_the_plain_formula_in_three_arrays() -> None:
    import tracemalloc

    rng = np.random.default_rng(3)
    X, y = rng.uniform(size=(94, 4)), rng.standard_normal(94)
    gp = GaussianProcess(X, y, KernelParams(np.array([0.2, 0.3, 0.5, 0.8]), 1.3, 1e-3))
    points = rng.uniform(size=(577, 4))
    mean, variance, _, _ = gp.standardized_posterior(points)
    # The plain formula: k = sigma_f^2 Matern52, mean k alpha, variance sigma_f^2 - |L^-1 k|^2.
    signal = gp.params.signal_variance
    k = matern52(gp._cross_distances(points)) * signal
    half = k @ gp._inverse_factors()[0].T
    assert np.array_equal(mean, k @ gp._alpha)
    assert np.array_equal(variance, np.maximum(signal - np.einsum("mn,mn->m", half, half), 0.0))
    # At most three (577, 94) arrays at a time (five were allocated, four alive at once):
    # each fresh one costs page faults where the allocator has given its memory back.
    tracemalloc.start()
    gp.standardized_posterior(points)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 3.5 * k.nbytes


def test_log_h_is_the_same_number_on_every_path() -> None:
    rng = np.random.default_rng(1)
    z = np.concatenate([rng.uniform(-30.0, -1.0, 20), [-1.0, -0.999], rng.uniform(-1.0, 8.0, 20)])
    rng.shuffle(z)
    mixed = log_h(z)
    one_by_one = np.array([log_h(z[i : i + 1])[0] for i in range(len(z))])
    assert np.array_equal(mixed, one_by_one)
    direct, tail = z > -1.0, z <= -1.0
    assert np.array_equal(log_h(z[direct]), mixed[direct])  # all above -1
    assert np.array_equal(log_h(z[tail]), mixed[tail])  # all at or below -1


def test_tail_warp_without_a_tail_returns_a_copy_of_the_values_and_slope_one() -> None:
    values = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 5.0])
    warp = TailWarp(values)
    above = np.array([warp.threshold, warp.threshold + 1.0, 3.0])
    warped = warp(above)
    assert np.array_equal(warped, above) and warped is not above
    warped[0] = -1.0
    assert above[0] == warp.threshold  # the input is not changed through the result
    assert np.array_equal(warp.derivative(above), np.ones(3))
    # A value below the threshold takes the general path: compressed towards it.
    low = np.append(above, warp.threshold - 3.0 * warp.spread)
    assert warp(low)[-1] > low[-1] and np.array_equal(warp(low)[:-1], above)
    assert warp.derivative(low)[-1] < 1.0 and np.all(warp.derivative(low)[:-1] == 1.0)


class _WithFixedColumn:
    """An acquisition of ``D`` columns as one of ``D + 1`` whose last column it ignores."""

    def __init__(self, acquisition: LogExpectedImprovement) -> None:
        self._acquisition = acquisition

    def values(self, x: np.ndarray) -> np.ndarray:
        return self._acquisition.values(x[:, :-1])

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values, grads = self._acquisition.values_and_grads(x[:, :-1])
        return values, np.hstack([grads, np.zeros((len(x), 1))])


def test_refinement_without_categorical_columns_matches_the_general_path() -> None:
    rng = np.random.default_rng(2)
    X = rng.uniform(size=(30, 3))
    y = np.sin(6.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    gp = GaussianProcess(X, y, KernelParams(np.array([0.3, 0.5, 0.8]), 1.2, 1e-3))
    acquisition = LogExpectedImprovement(gp, float(y.max()))
    starts = rng.uniform(size=(4, 3))
    scales = gp.params.lengthscales
    free = np.ones(3, dtype=bool)
    fast = _refine(acquisition, starts, free, Box.unit(3), 20, scales)
    # The same search with a fixed (categorical) fourth column takes the general path.
    padded = np.hstack([starts, np.full((4, 1), 0.5)])
    general = _refine(
        _WithFixedColumn(acquisition), padded, np.append(free, False), Box.unit(4), 20, scales
    )
    assert np.array_equal(fast, general[:, :-1])
    assert np.all(general[:, -1] == 0.5)
    assert not np.array_equal(fast, starts)  # it did move


class _UphillGradient:
    """``-|x - 0.5|^2`` with its gradient's sign wrong: no line search along it succeeds."""

    def __init__(self) -> None:
        self.evaluations = 0

    def values(self, x: np.ndarray) -> np.ndarray:
        return -np.sum((x - 0.5) ** 2, axis=1)

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.evaluations += 1
        return self.values(x), 2.0 * (x - 0.5)


def test_a_failing_line_search_stops_after_the_capped_evaluations() -> None:
    acquisition = _UphillGradient()
    starts = np.random.default_rng(3).uniform(0.2, 0.8, size=(4, 3))
    refined = _refine(acquisition, starts, np.ones(3, dtype=bool), Box.unit(3), 20, np.ones(3))
    # SciPy's default (20 per line search) took 20 evaluations here.
    assert REFINE_MAX_LINE_SEARCH < 20
    assert acquisition.evaluations <= REFINE_MAX_LINE_SEARCH + 1
    np.testing.assert_allclose(refined, starts, atol=1e-12)  # no step was accepted


def test_with_prior_mean_is_the_gp_constructed_with_it_sharing_the_factorization() -> None:
    rng = np.random.default_rng(4)
    X = rng.uniform(size=(25, 2))
    y = np.cos(5.0 * X[:, 0]) + X[:, 1]
    params = KernelParams(np.array([0.4, 0.6]), 1.3, 1e-3)
    own = GaussianProcess(X, y, params)
    prior = 0.7 * np.sin(4.0 * X[:, 1])
    shared = own.with_prior_mean(prior)
    built = GaussianProcess(X, y, params, prior_mean=prior)
    points = rng.uniform(size=(9, 2))
    at_points = 0.7 * np.sin(4.0 * points[:, 1])
    assert shared.has_prior_mean and not own.has_prior_mean
    for a, b in zip(
        shared.standardized_posterior(points, with_grads=True),
        built.standardized_posterior(points, with_grads=True),
    ):
        assert np.array_equal(a, b)
    predictions = (gp.predict(points, at_points)[0] for gp in (shared, built))
    assert np.array_equal(*predictions)
    assert (shared.offset, shared.scale) == (built.offset, built.scale)
    # The own GP is unchanged, and both use one kernel inverse.
    assert np.array_equal(own.predict(points)[0], GaussianProcess(X, y, params).predict(points)[0])
    assert shared._inverse_factors()[1] is own._inverse_factors()[1]
    assert np.array_equal(shared.leave_one_out()[0], built.leave_one_out()[0])
    with pytest.raises(ValueError, match="prior_mean"):
        own.with_prior_mean(prior[:-1])


def _bounded_problem(seed: int) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """A smooth, multimodal function in a box (some sides open), and a start."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    centre, frequency = rng.uniform(-1.0, 2.0, n), rng.uniform(0.5, 8.0)
    low, high = rng.uniform(-1.0, 0.3, n), rng.uniform(0.7, 2.0, n)
    low[rng.uniform(size=n) < 0.1] = -np.inf
    high[rng.uniform(size=n) < 0.1] = np.inf

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        d = x - centre
        return float(d @ d + np.sum(np.sin(frequency * x))), 2.0 * d + frequency * np.cos(
            frequency * x
        )

    return fun, rng.uniform(-1.5, 2.5, n), low, high


def test_the_direct_lbfgsb_driver_returns_scipy_minimizes_numbers() -> None:
    lbfgsb._check_direct()
    if not lbfgsb._direct_ok:
        pytest.skip("this SciPy's L-BFGS-B interface is not the one the direct driver knows")
    for seed in range(40):
        fun, start, low, high = _bounded_problem(seed)
        for iterations, line_search, gtol in ((10, 8, 1e-2), (100, 20, 1e-6), (2, 1, 1e-2)):
            got = lbfgsb._direct(fun, start, low, high, iterations, gtol, line_search)
            want = lbfgsb._with_minimize(fun, start, low, high, iterations, gtol, line_search)
            assert np.array_equal(got[0], want[0]) and got[1] == want[1], seed


def test_refinement_and_fit_run_without_scipy_minimize_and_give_its_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import scipy.optimize

    rng = np.random.default_rng(5)
    X = rng.uniform(size=(20, 3))
    y = np.sin(6.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    gp = GaussianProcess(X, y, KernelParams(np.array([0.3, 0.5, 0.8]), 1.2, 1e-3))
    acquisition = LogExpectedImprovement(gp, float(y.max()))
    starts = rng.uniform(size=(8, 3))

    def search() -> tuple[np.ndarray, KernelParams]:
        free = np.ones(3, dtype=bool)
        refined = _refine(acquisition, starts, free, Box.unit(3), 10, gp.params.lengthscales)
        fitted = fit_gp(X, y, rng=np.random.default_rng(6), n_restarts=1)
        return refined, fitted.params

    with_minimize = scipy.optimize.minimize
    calls = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return with_minimize(*args, **kwargs)

    monkeypatch.setattr(scipy.optimize, "minimize", counted)
    lbfgsb._check_direct()
    calls.clear()
    direct = search()
    if lbfgsb._direct_ok:
        assert not calls  # L-BFGS-B ran without minimize's wrapping
    monkeypatch.setattr(lbfgsb, "_direct_ok", False)
    general = search()
    assert calls  # minimize itself, this time
    assert np.array_equal(direct[0], general[0])
    assert not np.array_equal(direct[0], starts)  # it did move
    for a, b in zip(dataclasses.astuple(direct[1]), dataclasses.astuple(general[1])):
        assert np.array_equal(a, b)


def _reference_log_posterior(
    raw: np.ndarray, sq_diff: np.ndarray, targets: np.ndarray, minimum_noise: float
) -> tuple[float, np.ndarray]:
    """The fit objective written plainly through :class:`KernelParams` (what
    :func:`log_posterior_and_grad` computes with fewer arrays)."""
    n, _, n_columns = sq_diff.shape
    params = KernelParams.from_raw(raw, minimum_noise)
    inv_l2 = params.lengthscales**-2
    correlation = matern52(sq_diff @ inv_l2)
    derivative = matern52_derivative(sq_diff @ inv_l2)
    gram = params.signal_variance * correlation
    gram[np.diag_indices(n)] += params.noise_variance
    cholesky = scipy.linalg.cholesky(gram, lower=True)
    alpha = scipy.linalg.cho_solve((cholesky, True), targets)
    lml = (
        -0.5 * float(targets @ alpha)
        - float(np.sum(np.log(np.diag(cholesky))))
        - 0.5 * n * math.log(2.0 * math.pi)
    )
    centre = math.log(0.5 * math.sqrt(n_columns))
    dev = (raw[:n_columns] - centre) / LENGTHSCALE_PRIOR_STD
    tail = LENGTHSCALE_TAIL_WEIGHT * np.exp(2.0 * (raw[:n_columns] - centre))
    prior = -0.5 * float(dev @ dev) - float(tail.sum()) - 0.5 * raw[-2] ** 2
    excess = math.exp(raw[-1])
    noise = minimum_noise + excess
    prior += (NOISE_PRIOR_SHAPE - 1.0) * math.log(noise) - NOISE_PRIOR_RATE * noise
    prior_grad = np.zeros_like(raw)
    prior_grad[:n_columns] = -dev / LENGTHSCALE_PRIOR_STD - 2.0 * tail
    prior_grad[-2] = -raw[-2]
    prior_grad[-1] = ((NOISE_PRIOR_SHAPE - 1.0) / noise - NOISE_PRIOR_RATE) * excess
    w = np.outer(alpha, alpha) - scipy.linalg.cho_solve((cholesky, True), np.eye(n))
    grad = np.empty_like(raw)
    a = w * (params.signal_variance * derivative)
    grad[:n_columns] = -(a.reshape(-1) @ sq_diff.reshape(n * n, n_columns)) * inv_l2
    grad[-2] = 0.5 * float(np.sum(w * gram)) - 0.5 * params.noise_variance * float(np.trace(w))
    grad[-1] = 0.5 * float(np.trace(w)) * (params.noise_variance - minimum_noise)
    return lml + prior, grad + prior_grad


def test_the_fit_objective_is_bit_for_bit_the_plain_formula() -> None:
    rng = np.random.default_rng(7)
    for n, n_columns in ((1, 1), (2, 3), (13, 4), (40, 2), (64, 6)):
        X = rng.uniform(size=(n, n_columns))
        targets = rng.standard_normal(n)
        sq = squared_differences(X, X)
        for _ in range(5):
            raw = np.concatenate(
                [rng.normal(-0.5, 1.0, n_columns), rng.normal(0.0, 1.0, 1), [rng.uniform(-12, 0)]]
            )
            value, grad = log_posterior_and_grad(raw, sq, targets, 1e-6)
            want_value, want_grad = _reference_log_posterior(raw, sq, targets, 1e-6)
            assert value == want_value and np.array_equal(grad, want_grad)
            assert log_posterior_and_grad(raw, sq, targets, 1e-6, with_grad=False)[0] == value


class _Affine:
    """``x -> x @ a + b`` with its gradient (an acquisition-like function)."""

    def __init__(self, a: np.ndarray, b: float) -> None:
        self._a, self._b = a, b

    def values(self, x: np.ndarray) -> np.ndarray:
        return x @ self._a + self._b

    def values_and_grads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.values(x), np.tile(self._a, (len(x), 1))


def test_a_warped_function_without_a_tail_has_the_general_paths_numbers() -> None:
    rng = np.random.default_rng(8)
    warp = TailWarp(rng.standard_normal(30))
    x = rng.uniform(size=(9, 3))
    for offset in (warp.threshold + 5.0, warp.threshold - 0.5, warp.threshold - 9.0):
        function = _Affine(rng.standard_normal(3), offset)
        values, grads = WarpedFunction(function, warp).values_and_grads(x)
        inner_values, inner_grads = function.values_and_grads(x)
        warped, slope = warp.with_derivative(inner_values)
        assert np.array_equal(values, warped)
        assert np.array_equal(grads, slope[:, None] * inner_grads)
    empty = WarpedFunction(_Affine(np.ones(3), 0.0), warp).values_and_grads(np.zeros((0, 3)))
    assert empty[0].shape == (0,) and empty[1].shape == (0, 3)


class _FixedPosterior:
    """A stand-in GP whose standardized posterior is given."""

    has_prior_mean = False
    offset, scale = 0.3, 2.0

    def __init__(self, variance: np.ndarray, variance_grad: np.ndarray) -> None:
        self._variance, self._variance_grad = variance, variance_grad

    def standardized_posterior(
        self, x: np.ndarray, *, with_grads: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return np.zeros(len(x)), self._variance, np.ones_like(x), self._variance_grad


def test_the_std_gradient_is_zero_exactly_where_the_variance_is_floored() -> None:
    rng = np.random.default_rng(9)
    variance_grad = rng.standard_normal((5, 2))
    for variance in (rng.uniform(0.1, 1.0, 5), np.array([0.5, 0.0, 1e-13, 0.2, 1e-12])):
        gp = _FixedPosterior(variance, variance_grad)
        _, std, _, std_grad = LogExpectedImprovement(gp, 0.0)._posterior(  # type: ignore[arg-type]
            np.zeros((5, 2)), with_grads=True
        )
        floored = (variance > 1e-12)[:, None]
        want = np.where(floored, variance_grad, 0.0) / (2.0 * std[:, None])
        assert np.array_equal(std_grad, want)
        assert np.all(std_grad[~floored[:, 0]] == 0.0)
