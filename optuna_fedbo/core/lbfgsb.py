"""L-BFGS-B in a box: SciPy's algorithm, driven without ``scipy.optimize.minimize``'s wrapping.

The acquisition refinement (:mod:`optuna_fedbo.core.acquisition`) and the hyperparameter fit
(:mod:`optuna_fedbo.core.gp_fit`) run L-BFGS-B a few times per trial, 10 to 20 evaluations
each. ``scipy.optimize.minimize`` spent about 1.2 ms per run around them (bounds converted
element by element, a ``ScalarFunction`` that copies and compares every point, a result per
iteration), more than the evaluations of a 32-variable acquisition search themselves.
:func:`minimize_in_box` calls the same L-BFGS-B routine (``scipy.optimize._lbfgsb.setulb``)
with the same arguments and evaluations as ``minimize(fun, x0, jac=True, method="L-BFGS-B")``
does, so it returns the same point, bit for bit. Its loop is SciPy's private interface, so it
is checked once per process against ``minimize`` on a small problem; where the two differ (or
the interface has changed) ``minimize`` itself is used. This module knows nothing of Optuna.
"""

from __future__ import annotations

from collections.abc import Callable
import threading

import numpy as np

#: ``minimize``'s defaults for L-BFGS-B: stored corrections and the relative-reduction tolerance.
_MAX_CORRECTIONS = 10
_FTOL = 2.2204460492503131e-09
_MAX_EVALUATIONS = 15000
# setulb's task codes (scipy/optimize/__lbfgsb.h): evaluate f and g, a new iterate, stop.
_TASK_FG = 3
_TASK_NEW_X = 1
_TASK_STOP = 5
_STOP_ITERATIONS = 504
_STOP_EVALUATIONS = 502

_check_lock = threading.Lock()
# None until the first call checks the direct driver against ``minimize``.
_direct_ok: bool | None = None

Objective = Callable[[np.ndarray], tuple[float, np.ndarray]]


def minimize_in_box(
    fun: Objective,
    x0: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    *,
    max_iterations: int,
    gtol: float,
    max_line_search: int = 20,
) -> tuple[np.ndarray, float]:
    """``minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=zip(low, high))``'s result.

    Args:
        fun: ``x -> (f(x), grad f(x))``, ``f`` a float and the gradient of shape ``(n,)``.
        x0: Start, shape ``(n,)`` (clipped into the box, as ``minimize`` does).
        low: Lower bounds, shape ``(n,)`` (``-inf``: none).
        high: Upper bounds, shape ``(n,)`` (``inf``: none).
        max_iterations: ``maxiter``.
        gtol: ``gtol``, on the projected gradient.
        max_line_search: ``maxls``.

    Returns:
        ``(x, f)``: ``minimize``'s ``x`` and ``fun``.
    """
    x0 = np.asarray(x0, dtype=float).ravel()
    low = np.asarray(low, dtype=float).ravel()
    high = np.asarray(high, dtype=float).ravel()
    if _direct_ok is None:
        _check_direct()
    # ``minimize`` handles a box with no free variable apart (it only evaluates the start).
    if not _direct_ok or bool(np.all(low == high)):
        return _with_minimize(fun, x0, low, high, max_iterations, gtol, max_line_search)
    return _direct(fun, x0, low, high, max_iterations, gtol, max_line_search)


def _with_minimize(
    fun: Objective,
    x0: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    max_iterations: int,
    gtol: float,
    max_line_search: int,
) -> tuple[np.ndarray, float]:
    import scipy.optimize

    bounds = [
        (None if np.isinf(a) else float(a), None if np.isinf(b) else float(b))
        for a, b in zip(low, high)
    ]
    result = scipy.optimize.minimize(
        fun,
        x0,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": max_iterations, "gtol": gtol, "maxls": max_line_search},
    )
    return result.x, float(result.fun)


def _direct(
    fun: Objective,
    x0: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    max_iterations: int,
    gtol: float,
    max_line_search: int,
) -> tuple[np.ndarray, float]:
    """SciPy's ``_minimize_lbfgsb`` loop (SciPy 1.15 on) with its ``ScalarFunction`` reduced to
    what L-BFGS-B uses: one evaluation at the clipped start, then one per new point asked for
    (a point asked for again reuses the last evaluation, as its memoization does)."""
    from scipy.optimize import _lbfgsb

    n = x0.size
    m = _MAX_CORRECTIONS
    # Bound types: 0 none, 1 lower only, 2 both, 3 upper only (setulb's nbd).
    has_low, has_high = ~np.isinf(low), ~np.isinf(high)
    nbd = np.where(has_low, np.where(has_high, 2, 1), np.where(has_high, 3, 0)).astype(np.int32)
    lower = np.where(has_low, low, 0.0)
    upper = np.where(has_high, high, 0.0)
    x = np.clip(x0, low, high)
    last_x = x.copy()
    last_f, last_g = fun(x.copy())
    n_evaluations = 1
    f: float | np.ndarray = np.array(0.0)
    g = np.zeros(n)
    wa = np.zeros(2 * m * n + 5 * n + 11 * m * m + 8 * m)
    iwa = np.zeros(3 * n, dtype=np.int32)
    task = np.zeros(2, dtype=np.int32)
    ln_task = np.zeros(2, dtype=np.int32)
    lsave = np.zeros(4, dtype=np.int32)
    isave = np.zeros(44, dtype=np.int32)
    dsave = np.zeros(29)
    factr = _FTOL / np.finfo(float).eps
    n_iterations = 0
    while True:
        g = np.array(g, dtype=np.float64)  # setulb works in it: never the caller's array
        _lbfgsb.setulb(
            m, x, lower, upper, nbd, f, g, factr, gtol, wa, iwa, task, lsave, isave, dsave,
            max_line_search, ln_task,
        )  # fmt: skip
        if task[0] == _TASK_FG:
            if not np.array_equal(x, last_x):
                last_x = x.copy()
                last_f, last_g = fun(x.copy())
                n_evaluations += 1
            f, g = float(last_f), last_g
        elif task[0] == _TASK_NEW_X:
            n_iterations += 1
            if n_iterations >= max_iterations:
                task[0], task[1] = _TASK_STOP, _STOP_ITERATIONS
            elif n_evaluations > _MAX_EVALUATIONS:
                task[0], task[1] = _TASK_STOP, _STOP_EVALUATIONS
        else:
            break
    return x, float(f)


def _check_direct() -> None:
    """Compare :func:`_direct` with ``minimize`` once (a bounded 6-variable problem whose
    iterations hit the bounds and the line search): a SciPy whose L-BFGS-B interface differs
    from the one :func:`_direct` drives gets ``minimize`` itself."""
    global _direct_ok
    with _check_lock:
        if _direct_ok is not None:
            return
        centre = np.array([0.3, -0.4, 1.7, 0.9, 0.1, 2.5])
        low = np.array([-1.0, 0.0, -np.inf, 0.0, -2.0, 0.0])
        high = np.array([1.0, 1.0, 1.5, np.inf, 2.0, 2.0])

        def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
            d = x - centre
            return float(d @ d + np.sum(np.sin(3.0 * x))), 2.0 * d + 3.0 * np.cos(3.0 * x)

        start = np.array([0.5, 0.5, 0.0, 3.0, 1.5, -1.0])
        try:
            ok = True
            for iterations, line_search in ((3, 20), (50, 2)):
                got = _direct(fun, start, low, high, iterations, 1e-6, line_search)
                want = _with_minimize(fun, start, low, high, iterations, 1e-6, line_search)
                ok = ok and np.array_equal(got[0], want[0]) and got[1] == want[1]
        except Exception:
            ok = False
        _direct_ok = ok


__all__ = ["minimize_in_box"]
