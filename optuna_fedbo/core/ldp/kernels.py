"""Stationary kernels of the LDP-BO paper: squared exponential and Matern (nu = 2.5).

The paper ("Problem Statement and Preliminaries") writes, with ``s = ||x - x'||_2``::

    k_SE(x, x')     = exp(-s^2 / (2 l^2))
    k_Matern(x, x') = 2^(1 - nu) / Gamma(nu) (s sqrt(2 nu) / l)^nu B_nu(s sqrt(2 nu) / l)

For ``nu = 2.5`` the Bessel form reduces to the closed form used here,
``(1 + sqrt(5) s / l + 5 s^2 / (3 l^2)) exp(-sqrt(5) s / l)`` (the tests check it against the
Bessel form). Both kernels have ``k(x, x) = 1``, the paper's bounded-variance assumption.
Gradients with respect to the first argument are provided so that an acquisition built on these
kernels can be refined with L-BFGS-B.
"""

from __future__ import annotations

from abc import ABC
from abc import abstractmethod
import math

import numpy as np

_SQRT5 = math.sqrt(5.0)


def _as_points(x: np.ndarray) -> np.ndarray:
    return np.atleast_2d(np.asarray(x, dtype=float))


def _squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d2 = np.sum(a * a, axis=1)[:, None] + np.sum(b * b, axis=1)[None, :] - 2.0 * (a @ b.T)
    return np.maximum(d2, 0.0)


class Kernel(ABC):
    """A stationary kernel with ``k(x, x) = 1`` and a lengthscale ``l``.

    Args:
        lengthscale: The lengthscale ``l > 0`` (in the coordinates of the points).
    """

    #: Short name used by :func:`make_kernel`.
    name: str = ""

    def __init__(self, lengthscale: float) -> None:
        if not (isinstance(lengthscale, (int, float)) and math.isfinite(lengthscale)):
            raise ValueError(f"The lengthscale must be a finite number, got {lengthscale!r}.")
        if lengthscale <= 0:
            raise ValueError(f"The lengthscale must be positive, got {lengthscale}.")
        self.lengthscale = float(lengthscale)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(lengthscale={self.lengthscale})"

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The kernel matrix ``[k(a_i, b_j)]`` of shape ``(len(a), len(b))``."""
        a, b = _as_points(a), _as_points(b)
        return self._from_squared_distances(_squared_distances(a, b))

    def diag(self, a: np.ndarray) -> np.ndarray:
        """``k(a_i, a_i)`` for each point: ones for these stationary kernels."""
        return np.ones(_as_points(a).shape[0])

    def gradient(self, x: np.ndarray, z: np.ndarray) -> np.ndarray:
        """``d k(x_n, z_i) / d x_n`` of shape ``(len(x), len(z), D)``."""
        x, z = _as_points(x), _as_points(z)
        diff = x[:, None, :] - z[None, :, :]
        d2 = np.sum(diff * diff, axis=2)
        return self._radial_factor(d2)[:, :, None] * diff

    @abstractmethod
    def _from_squared_distances(self, d2: np.ndarray) -> np.ndarray:
        """The kernel as a function of the squared distance."""

    @abstractmethod
    def _radial_factor(self, d2: np.ndarray) -> np.ndarray:
        """``g`` such that ``d k / d x = g(||x - z||^2) (x - z)``."""


class SquaredExponential(Kernel):
    """``k(x, x') = exp(-||x - x'||^2 / (2 l^2))``."""

    name = "se"

    def _from_squared_distances(self, d2: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * d2 / self.lengthscale**2)

    def _radial_factor(self, d2: np.ndarray) -> np.ndarray:
        return -self._from_squared_distances(d2) / self.lengthscale**2


class Matern52(Kernel):
    """Matern kernel with ``nu = 2.5``: ``(1 + sqrt5 s/l + 5 s^2/(3 l^2)) exp(-sqrt5 s/l)``."""

    name = "matern"

    def _from_squared_distances(self, d2: np.ndarray) -> np.ndarray:
        r = _SQRT5 * np.sqrt(d2) / self.lengthscale
        return (1.0 + r + r * r / 3.0) * np.exp(-r)

    def _radial_factor(self, d2: np.ndarray) -> np.ndarray:
        # d k / d s = -(5 s / (3 l^2)) (1 + r) exp(-r) with r = sqrt5 s / l; times (x - z) / s.
        r = _SQRT5 * np.sqrt(d2) / self.lengthscale
        return -(5.0 / (3.0 * self.lengthscale**2)) * (1.0 + r) * np.exp(-r)


_KERNELS: dict[str, type[Kernel]] = {"se": SquaredExponential, "matern": Matern52}


def make_kernel(kernel: str | Kernel, lengthscale: float = 0.2) -> Kernel:
    """Build a kernel from its name, or return a :class:`Kernel` instance unchanged.

    Args:
        kernel: ``"se"`` (squared exponential), ``"matern"`` (Matern, ``nu = 2.5``) or a
            :class:`Kernel`.
        lengthscale: Lengthscale used when ``kernel`` is a name. The default ``0.2`` is the
            paper's synthetic setting ("Datasets and Settings").

    Returns:
        The kernel.
    """
    if isinstance(kernel, Kernel):
        return kernel
    if isinstance(kernel, str) and kernel.lower() in _KERNELS:
        return _KERNELS[kernel.lower()](lengthscale)
    raise ValueError(f"Unknown kernel {kernel!r}; use 'se', 'matern' or a Kernel instance.")
