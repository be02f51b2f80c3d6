"""Synthetic federated X-armed bandit problems of the Fed-PNE experiments (Section 4, App. E.2).

* Garland ``f(x) = x (1 - x) (4 - sqrt|sin 60 x|)`` on ``[0, 1]``; its maximum is
  ``f(pi/6) = 4 (pi/6) (1 - pi/6) = 0.9977724`` (``sin(10 pi) = 0`` and the peaks of Garland are
  the zeros of ``sin 60x``; the nearest one to 1/2 on the other side, ``3 pi/20``, gives 0.99669).
* DoubleSine with ``rho1 = 0.3``, ``rho2 = 0.8``: with ``u = |2x - 1|``,
  ``f(x) = s(log2(u) / 2) (u^e2 - u^e1) - u^e2``, ``e_j = -log2 rho_j``,
  ``s(z) = (sin(2 pi z) + 1) / 2``, ``f(1/2) = 0`` (the maximum), ``f(0) = f(1) = -1``. This is
  PyXAB's definition (the library the authors used); the formula printed in Appendix E.2 ends
  with ``- u^e1`` instead of ``- u^e2``, which would put positive values away from ``x = 1/2``
  and contradict the plotted function, so we read it as a typo.

* Bumps2D (ours, for a 2-D heterogeneous benchmark): on ``[0, 1]^2``,
  ``f(x) = exp(-|x - a|^2 / (2 * 0.06^2)) + 0.85 exp(-|x - b|^2 / (2 * 0.2^2))``: a narrow
  global peak at ``a`` and a broad, lower one at ``b`` (``|a - b| >= 0.45``), both drawn from
  the problem's seed; ``f*`` is found numerically (grid, then Nelder-Mead). With a large
  perturbation (``A = 0.3``) many clients' own maximisers sit on the broad peak, which is
  wrong for the federation.

Client objectives (a choice: the paper adds "a (consistent) unit-normal random perturbation",
a constant offset per client that never changes anyone's argmax): client ``m`` sees
``f(x) + p_m(x)`` with smooth ``p_m = (A/2) (s_m - mean_j s_j)``, ``s_m(x) = sin(2 pi w_m.x +
phi_m)``, ``|w_m| <= 3``. The ``p_m`` sum to zero, so the global objective (the clients' average)
is exactly ``f``, while clients' own maximisers differ. Rewards add ``U(-noise, noise)`` and are
mapped affinely to ``[0, 1]`` (``(y - lo) / (hi - lo)`` with ``lo = min f - A - noise``,
``hi = max f + A + noise``), so Hoeffding's ``[0, 1]`` assumption holds without clipping; regret is
measured on ``f`` in its own units.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import math

import numpy as np

GARLAND_ARGMAX = math.pi / 6.0
GARLAND_MAX = GARLAND_ARGMAX * (1.0 - GARLAND_ARGMAX) * 4.0
DOUBLE_SINE_ARGMAX = 0.5
DOUBLE_SINE_MAX = 0.0
PROBLEMS = ("garland", "doublesine", "bumps2d")
_BUMP_WIDTHS = (0.06, 0.2)
_BUMP_HEIGHTS = (1.0, 0.85)


def _first_coordinate(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.ndim == 2:
        return x[:, 0]
    return x


def garland(x: np.ndarray) -> np.ndarray:
    """Garland on ``[0, 1]`` (first coordinate of ``(n, D)`` input, or a 1-D array)."""
    x = _first_coordinate(x)
    return x * (1.0 - x) * (4.0 - np.sqrt(np.abs(np.sin(60.0 * x))))


def double_sine(x: np.ndarray, rho1: float = 0.3, rho2: float = 0.8) -> np.ndarray:
    """DoubleSine on ``[0, 1]`` (PyXAB's definition; maximum 0 at ``x = 1/2``)."""
    x = _first_coordinate(x)
    e1, e2 = -math.log2(rho1), -math.log2(rho2)
    u = 2.0 * np.abs(x - 0.5)
    out = np.zeros_like(u)
    pos = u > 0
    up = u[pos]
    envelope = up**e2 - up**e1
    out[pos] = (np.sin(2.0 * np.pi * np.log2(up) / 2.0) + 1.0) / 2.0 * envelope - up**e2
    return out


def bumps2d(x: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Two Gaussian bumps on ``[0, 1]^2`` (``centres`` of shape ``(2, 2)``); input ``(n, 2)``."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    out = np.zeros(x.shape[0])
    for centre, width, height in zip(centres, _BUMP_WIDTHS, _BUMP_HEIGHTS, strict=True):
        out += height * np.exp(-np.sum((x - centre) ** 2, axis=1) / (2.0 * width**2))
    return out


def _bumps2d_max(centres: np.ndarray) -> float:
    from scipy.optimize import minimize

    grid = np.stack(np.meshgrid(*[np.linspace(0.0, 1.0, 201)] * 2), axis=-1).reshape(-1, 2)
    start = grid[np.argmax(bumps2d(grid, centres))]
    found = minimize(
        lambda z: -bumps2d(np.clip(z, 0.0, 1.0)[None], centres)[0],
        start,
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-13},
    )
    return float(max(-found.fun, bumps2d(start[None], centres)[0]))


@dataclass(frozen=True)
class FederatedProblem:
    """A federated version of a synthetic function.

    Attributes:
        name: One of :data:`PROBLEMS`.
        dim: Input dimension.
        f_star: The global maximum.
        f_min: The global minimum (used for the reward map).
        perturbation: ``A``, the bound on ``|p_m|``.
        noise: Half-width of the uniform reward noise.
        frequencies: ``w_m``, shape ``(M, dim)``.
        phases: ``phi_m``, shape ``(M,)``.
        centres: Bumps2D's peak centres ``(a, b)``, shape ``(2, 2)`` (``None`` otherwise).
    """

    name: str
    dim: int
    f_star: float
    f_min: float
    perturbation: float
    noise: float
    frequencies: np.ndarray
    phases: np.ndarray
    centres: np.ndarray | None = None

    @property
    def n_clients(self) -> int:
        """``M``."""
        return int(self.phases.shape[0])

    @property
    def reward_bounds(self) -> tuple[float, float]:
        """``(lo, hi)`` of the affine map to ``[0, 1]``."""
        return (
            self.f_min - self.perturbation - self.noise,
            self.f_star + self.perturbation + self.noise,
        )

    def global_value(self, x: np.ndarray) -> np.ndarray:
        """The global objective ``f`` (noise-free, raw units)."""
        if self.name == "garland":
            return garland(x)
        if self.name == "bumps2d":
            return bumps2d(x, self.centres)
        return double_sine(x)

    def perturbations(self, x: np.ndarray) -> np.ndarray:
        """``p_m(x)`` for all clients, shape ``(M, n)``; columns sum to zero."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        s = np.sin(2.0 * np.pi * (self.frequencies @ x.T) + self.phases[:, None])
        return self.perturbation / 2.0 * (s - s.mean(axis=0, keepdims=True))

    def client_value(self, m: int, x: np.ndarray) -> np.ndarray:
        """Client ``m``'s noise-free objective ``f + p_m`` (raw units)."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        return self.global_value(x) + self.perturbations(x)[m]

    def to_reward(self, y: np.ndarray) -> np.ndarray:
        """Map raw values to rewards in ``[0, 1]``."""
        lo, hi = self.reward_bounds
        return (np.asarray(y, dtype=float) - lo) / (hi - lo)

    def objectives(self, rng: np.random.Generator) -> list[Callable[[np.ndarray], np.ndarray]]:
        """One noisy reward function per client, ``(n, dim) -> (n,)`` in ``[0, 1]``."""

        def make(m: int) -> Callable[[np.ndarray], np.ndarray]:
            def objective(x: np.ndarray) -> np.ndarray:
                y = self.client_value(m, x)
                y = y + rng.uniform(-self.noise, self.noise, size=y.shape)
                return np.clip(self.to_reward(y), 0.0, 1.0)

            return objective

        return [make(m) for m in range(self.n_clients)]

    def global_reward(self, rng: np.random.Generator) -> Callable[[np.ndarray], np.ndarray]:
        """A noisy reward of the global objective itself (for centralized baselines)."""

        def objective(x: np.ndarray) -> np.ndarray:
            y = self.global_value(np.atleast_2d(x))
            y = y + rng.uniform(-self.noise, self.noise, size=y.shape)
            return np.clip(self.to_reward(y), 0.0, 1.0)

        return objective


def make_federated_problem(
    name: str,
    n_clients: int,
    *,
    perturbation: float = 0.1,
    noise: float = 0.1,
    seed: int = 0,
) -> FederatedProblem:
    """Build a federated Garland, DoubleSine or Bumps2D problem (see the module docstring).

    Args:
        name: One of :data:`PROBLEMS`.
        n_clients: ``M >= 1``.
        perturbation: ``A >= 0``, the bound on each client's perturbation.
        noise: Half-width of the uniform reward noise (``>= 0``; the paper: 0.1 in PyXAB runs).
        seed: Seed of the clients' perturbation frequencies and phases (and of Bumps2D's
            peak centres).

    Returns:
        The problem.
    """
    if name not in PROBLEMS:
        raise ValueError(f"name must be one of {PROBLEMS}, got {name!r}.")
    if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < 1:
        raise ValueError(f"n_clients must be a positive int, got {n_clients!r}.")
    if not (math.isfinite(perturbation) and perturbation >= 0.0):
        raise ValueError(f"perturbation must be >= 0, got {perturbation!r}.")
    if not (math.isfinite(noise) and noise >= 0.0):
        raise ValueError(f"noise must be >= 0, got {noise!r}.")
    rng = np.random.default_rng(seed)
    dim = 2 if name == "bumps2d" else 1
    frequencies = rng.uniform(-3.0, 3.0, size=(n_clients, dim))
    phases = rng.uniform(0.0, 2.0 * np.pi, size=n_clients)
    centres = None
    if name == "garland":
        f_star, f_min = GARLAND_MAX, 0.0
    elif name == "doublesine":
        f_star, f_min = DOUBLE_SINE_MAX, -1.0
    else:
        while True:
            centres = rng.uniform(0.1, 0.9, size=(2, 2))
            if np.linalg.norm(centres[0] - centres[1]) >= 0.45:
                break
        f_star, f_min = _bumps2d_max(centres), 0.0
    return FederatedProblem(
        name=name,
        dim=dim,
        f_star=f_star,
        f_min=f_min,
        perturbation=float(perturbation),
        noise=float(noise),
        frequencies=frequencies,
        phases=phases,
        centres=centres,
    )
