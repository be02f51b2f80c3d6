"""Translate Optuna search spaces to the unit-cube encoding of :mod:`optuna_fedbo.core.space`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.distributions import CategoricalDistribution
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution

from optuna_fedbo.core.space import Dimension
from optuna_fedbo.core.space import UnitCubeEncoding


def dimension_of(name: str, distribution: BaseDistribution) -> Dimension:
    """Describe one Optuna distribution as a :class:`~optuna_fedbo.core.space.Dimension`.

    Raises:
        TypeError: For a distribution type this package cannot encode.
    """
    if isinstance(distribution, FloatDistribution):
        return Dimension(
            "float", distribution.low, distribution.high, distribution.log, distribution.step
        )
    if isinstance(distribution, IntDistribution):
        return Dimension(
            "int", distribution.low, distribution.high, distribution.log, distribution.step
        )
    if isinstance(distribution, CategoricalDistribution):
        return Dimension("categorical", n_choices=len(distribution.choices))
    raise TypeError(
        f"Parameter {name!r} has a distribution of type {type(distribution).__name__}, which "
        "optuna-fedbo cannot encode; use FloatDistribution, IntDistribution or "
        "CategoricalDistribution."
    )


class SearchSpaceEncoder:
    """Encode Optuna parameter dictionaries to ``[0, 1]^D`` and back.

    Args:
        search_space: Parameter names to Optuna distributions; the order of the dictionary fixes
            the order of the columns.
    """

    def __init__(self, search_space: Mapping[str, BaseDistribution]) -> None:
        if len(search_space) == 0:
            raise ValueError("The search space is empty.")
        self.search_space: dict[str, BaseDistribution] = dict(search_space)
        self.encoding = UnitCubeEncoding(
            [dimension_of(name, d) for name, d in self.search_space.items()]
        )

    @property
    def n_varying(self) -> int:
        """Number of parameters that vary: the function's dimension (a fixed one adds none)."""
        return sum(not d.single() for d in self.search_space.values())

    @property
    def n_columns(self) -> int:
        """Number of columns ``D`` of the unit-cube encoding."""
        return self.encoding.n_columns

    def contains(self, params: Mapping[str, Any]) -> bool:
        """Whether ``params`` holds an admissible value for every parameter of the space."""
        for name, dist in self.search_space.items():
            if name not in params:
                return False
            try:
                internal = dist.to_internal_repr(params[name])
            except (ValueError, TypeError):
                return False
            if not dist._contains(internal):
                return False
        return True

    def encode(self, params_list: list[Mapping[str, Any]]) -> np.ndarray:
        """Encode parameter dictionaries (each must be :meth:`contains`-ed by the space).

        Returns:
            Array of shape ``(len(params_list), D)``.
        """
        internal = np.array(
            [
                [dist.to_internal_repr(params[name]) for name, dist in self.search_space.items()]
                for params in params_list
            ],
            dtype=float,
        ).reshape(len(params_list), len(self.search_space))
        return self.encoding.encode(internal)

    def decode(self, point: np.ndarray) -> dict[str, Any]:
        """Decode one unit-cube point to an Optuna parameter dictionary."""
        internal = self.encoding.decode(np.asarray(point, dtype=float).reshape(1, -1))[0]
        params: dict[str, Any] = {}
        for value, (name, dist) in zip(internal, self.search_space.items()):
            if isinstance(dist, IntDistribution):
                params[name] = int(value)
            elif isinstance(dist, CategoricalDistribution):
                params[name] = dist.to_external_repr(int(value))
            else:
                params[name] = float(value)
        return params
