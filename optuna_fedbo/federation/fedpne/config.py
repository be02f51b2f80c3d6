"""The Fed-PNE protocol configuration: :class:`FedPNEConfig`.

``Federation.create(..., protocol=FedPNEConfig(horizon=T, value_range=(lo, hi)))`` runs Fed-PNE
(Li et al., "Federated X-Armed Bandit", Algorithms 1-2) over the federation machinery, or
DP-Fed-PNE (Algorithms 3-4) when ``dp_epsilon`` and ``dp_delta`` are set. The configuration wraps
the math core :mod:`optuna_fedbo.core.fedpne`: :meth:`FedPNEConfig.params` builds its
:class:`~optuna_fedbo.core.fedpne.FedPNEParams` and :meth:`FedPNEConfig.partition` its
:class:`~optuna_fedbo.core.fedpne.Partition` (the federation's public seed seeds the random
split dimensions, so everyone builds the same tree).

Choices the paper leaves open, made here (the core documents its own):

* **Rewards.** Algorithm 1 needs rewards in ``[0, 1]`` (Hoeffding, Lemma B.2; the DP sensitivity
  of Remark D.1). A participant maps its objective value ``v`` to
  ``(v - lo) / (hi - lo)`` when its study maximizes and ``(hi - v) / (hi - lo)`` when it
  minimizes, with ``value_range = (lo, hi)``; values outside the range are clipped to ``[0, 1]``
  and counted (a warning each time, and a trial attribute).
* **Search space.** The partition lives on one coordinate per non-constant parameter of the
  federation's search space (constant parameters are left out: splitting them would create
  identical children). Numeric parameters use the unit-cube encoding of
  :mod:`optuna_fedbo.core.space` (log scale for log distributions; each value of a discrete
  parameter owns a cell of equal width). A categorical parameter with ``n`` choices is
  supported by splitting *category sets*: its coordinate ``u`` in ``[0, 1]`` means choice
  ``min(floor(u n), n - 1)``, so a node holds a contiguous run of choices in the order they are
  declared and is split into sub-runs; a node's representative point picks the choice its
  coordinate falls in. The smoothness assumption then refers to that order: declare related
  choices next to each other.
* **Constants.** ``constants="experiments"`` (default) uses ``nu1, rho, c, c1, delta`` as given
  (defaults: the paper's Appendix E.1.5 values ``nu1 = 1, rho = 0.5, c = 0.1, c1 = 1`` and
  ``delta = 1/M``); ``constants="theory"`` uses Lemma B.2's ``c = 2, c1 = (2M)^(1/8)`` and
  Theorem 3.1's ``delta = 1/M`` (Lemma D.3's ``c = sqrt(4 + 16 sigma^2)`` under DP).
* **Privacy.** DP-Fed-PNE adds ``N(0, sigma^2)`` with ``sigma^2 = 2 log(1.25/dp_delta) /
  dp_epsilon^2`` to every reward on the participant, before averaging (Algorithm 3, Theorem D.1),
  from OS entropy; the confidence constant is multiplied by ``sqrt(1 + 4 sigma^2)`` (Lemma D.3,
  Remark D.2) unless ``dp_adjust_confidence`` is false. ``dp_delta`` is the privacy delta; the
  confidence ``delta`` of ``tau_h`` is a separate field (the paper uses one symbol for both).
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any
from typing import ClassVar

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.distributions import CategoricalDistribution
from optuna.study import StudyDirection

from optuna_fedbo.core.fedpne import federated_dp_guarantee
from optuna_fedbo.core.fedpne import FederatedDPGuarantee
from optuna_fedbo.core.fedpne import FedPNEParams
from optuna_fedbo.core.fedpne import Partition
from optuna_fedbo.core.fedpne import RewardPrivacy
from optuna_fedbo.core.fedpne.partition import REPRESENTATIVES
from optuna_fedbo.core.fedpne.partition import SPLIT_RULES
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.search_space import SearchSpaceEncoder

CONSTANT_PRESETS = ("experiments", "theory")


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a real number, got {value!r}.")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    return float(value)


def _positive(name: str, value: Any) -> float:
    value = _finite(name, value)
    if value <= 0.0:
        raise ValueError(f"{name} must be > 0, got {value!r}.")
    return value


@dataclass(frozen=True)
class FedPNEConfig(ProtocolConfig):
    """Fed-PNE / DP-Fed-PNE: federated phased node elimination over a hierarchical partition.

    In phase ``p`` the server publishes the node set ``K^p`` and the pull count
    ``t = ceil(tau_h / M)``; every participant evaluates every node's representative point ``t``
    times (one Optuna trial per pull) and uploads one mean reward per node; once all ``M``
    participants have uploaded, the server averages, eliminates the nodes with
    ``mu + b + nu1 rho^h < mu* - b*`` and publishes the children of the survivors.

    Args:
        horizon: ``T``, the number of pulls (completed trials) per participant.
        value_range: ``(lo, hi)``: objective values are rescaled to rewards in ``[0, 1]`` from
            this range with each study's direction; values outside are clipped and counted.
        branching: ``k``, the number of children of a node (2: the paper's binary partition).
        nu1: Smoothness constant ``nu1``.
        rho: Smoothness constant ``rho`` in ``(0, 1)``.
        c: Confidence constant ``c`` (``constants="experiments"`` only).
        c1: Confidence constant ``c1`` (``constants="experiments"`` only).
        delta: Confidence ``delta`` in ``(0, 1]`` of ``tau_h`` and ``b``; ``None`` is ``1/M``
            (``constants="experiments"`` only).
        constants: ``"experiments"`` (the given ``c, c1, delta``; defaults are the paper's
            Appendix E.1.5) or ``"theory"`` (Lemma B.2 and Theorem 3.1: ``c = 2``,
            ``c1 = (2M)^(1/8)``, ``delta = 1/M``).
        split: Split dimension of a node: ``"random"`` (the paper's experiments; drawn from the
            federation's public seed) or ``"longest"`` (the longest side).
        representative: The point a pull evaluates: ``"centre"`` (the analysed strategy, and the
            default) or ``"uniform"`` (a fresh uniform point of the node per pull).
        dp_epsilon: DP-Fed-PNE's ``epsilon``; ``None`` (with ``dp_delta``) for plain Fed-PNE.
        dp_delta: DP-Fed-PNE's ``delta`` in ``(0, 1)``.
        dp_adjust_confidence: Multiply ``c`` by ``sqrt(1 + 4 sigma^2)`` under DP (Lemma D.3).
        max_phase_nodes: Safety bound on ``|K^p|`` (a phase larger than this is refused).
    """

    kind: ClassVar[str] = "fedpne"

    horizon: int
    value_range: tuple[float, float] = (0.0, 1.0)
    branching: int = 2
    nu1: float = 1.0
    rho: float = 0.5
    c: float = 0.1
    c1: float = 1.0
    delta: float | None = None
    constants: str = "experiments"
    split: str = "random"
    representative: str = "centre"
    dp_epsilon: float | None = None
    dp_delta: float | None = None
    dp_adjust_confidence: bool = True
    max_phase_nodes: int = 10_000

    def __post_init__(self) -> None:
        _positive_int("horizon", self.horizon)
        value_range = self.value_range
        if not isinstance(value_range, (tuple, list)) or len(value_range) != 2:
            raise ValueError(f"value_range must be a pair (lo, hi), got {value_range!r}.")
        lo = _finite("value_range[0]", value_range[0])
        hi = _finite("value_range[1]", value_range[1])
        if not lo < hi:
            raise ValueError(f"value_range must have lo < hi, got {value_range!r}.")
        object.__setattr__(self, "value_range", (lo, hi))
        if isinstance(self.branching, bool) or not isinstance(self.branching, int):
            raise ValueError(f"branching must be an integer >= 2, got {self.branching!r}.")
        if self.branching < 2:
            raise ValueError(f"branching must be an integer >= 2, got {self.branching!r}.")
        object.__setattr__(self, "nu1", _positive("nu1", self.nu1))
        rho = _positive("rho", self.rho)
        if rho >= 1.0:
            raise ValueError(f"rho must lie in (0, 1), got {rho!r}.")
        object.__setattr__(self, "rho", rho)
        object.__setattr__(self, "c", _positive("c", self.c))
        object.__setattr__(self, "c1", _positive("c1", self.c1))
        if self.delta is not None:
            delta = _positive("delta", self.delta)
            if delta > 1.0:
                raise ValueError(f"delta must lie in (0, 1], got {delta!r}.")
            object.__setattr__(self, "delta", delta)
        if self.constants not in CONSTANT_PRESETS:
            raise ValueError(
                f"constants must be one of {CONSTANT_PRESETS}, got {self.constants!r}."
            )
        if self.constants == "theory" and (
            self.c != 0.1 or self.c1 != 1.0 or self.delta is not None
        ):
            raise ValueError(
                "constants='theory' fixes c = 2, c1 = (2M)^(1/8) and delta = 1/M (Lemma B.2, "
                "Theorem 3.1); leave c, c1 and delta at their defaults."
            )
        if self.split not in SPLIT_RULES:
            raise ValueError(f"split must be one of {SPLIT_RULES}, got {self.split!r}.")
        if self.representative not in REPRESENTATIVES:
            raise ValueError(
                f"representative must be one of {REPRESENTATIVES}, got {self.representative!r}."
            )
        if (self.dp_epsilon is None) != (self.dp_delta is None):
            raise ValueError(
                "DP-Fed-PNE needs both dp_epsilon and dp_delta (or neither for plain Fed-PNE)."
            )
        if self.dp_epsilon is not None:
            object.__setattr__(self, "dp_epsilon", _positive("dp_epsilon", self.dp_epsilon))
            dp_delta = _positive("dp_delta", self.dp_delta)
            if dp_delta >= 1.0:
                raise ValueError(f"dp_delta must lie in (0, 1), got {dp_delta!r}.")
            object.__setattr__(self, "dp_delta", dp_delta)
        if not isinstance(self.dp_adjust_confidence, bool):
            raise ValueError(
                f"dp_adjust_confidence must be a bool, got {self.dp_adjust_confidence!r}."
            )
        _positive_int("max_phase_nodes", self.max_phase_nodes)
        # log(c1 T / delta) must be positive for the smallest possible M (1).
        self.params(1)

    # ----------------------------------------------------------------------------- derived
    @property
    def private(self) -> bool:
        """Whether this is DP-Fed-PNE."""
        return self.dp_epsilon is not None

    @property
    def reward_privacy(self) -> RewardPrivacy | None:
        """The per-reward Gaussian noise of DP-Fed-PNE, or ``None``."""
        if self.dp_epsilon is None or self.dp_delta is None:
            return None
        return RewardPrivacy(self.dp_epsilon, self.dp_delta, self.dp_adjust_confidence)

    def params(self, n_clients: int) -> FedPNEParams:
        """The core's constants for a federation of ``M = n_clients`` participants."""
        if self.constants == "theory":
            return FedPNEParams.theory(
                self.horizon,
                n_clients,
                nu1=self.nu1,
                rho=self.rho,
                privacy=self.reward_privacy,
                max_phase_nodes=self.max_phase_nodes,
            )
        return FedPNEParams(
            horizon=self.horizon,
            n_clients=n_clients,
            nu1=self.nu1,
            rho=self.rho,
            c=self.c,
            c1=self.c1,
            delta=self.delta,
            privacy=self.reward_privacy,
            max_phase_nodes=self.max_phase_nodes,
        )

    def partition(self, dim: int, seed: int) -> Partition:
        """The public partition of the ``dim``-dimensional node space (seeded by ``seed``)."""
        return Partition(
            dim,
            branching=self.branching,
            split=self.split,
            seed=seed,
            representative=self.representative,
        )

    def guarantee(self, n_clients: int) -> FederatedDPGuarantee | None:
        """The ``(epsilon, delta, M)``-federated DP guarantee (Theorem D.1), or ``None``.

        Raises:
            ValueError: Under DP with fewer than two participants (Definition 2 needs
                ``M >= 2``).
        """
        privacy = self.reward_privacy
        if privacy is None:
            return None
        return federated_dp_guarantee(privacy, n_clients)

    def check_federation(self, n_clients: int) -> None:
        """Raise ``ValueError`` if the protocol cannot run with ``n_clients`` participants."""
        if self.private and n_clients < 2:
            raise ValueError(
                "DP-Fed-PNE's (epsilon, delta, M)-federated privacy (Definition 2) needs at "
                f"least two participants, got n_clients={n_clients}."
            )
        self.params(n_clients)

    def reward(self, value: float, direction: StudyDirection) -> tuple[float, bool]:
        """Rescale an objective value to a reward in ``[0, 1]``.

        Args:
            value: The finite objective value.
            direction: The study's direction.

        Returns:
            ``(reward, clipped)``; ``clipped`` tells whether ``value`` lay outside
            ``value_range``.
        """
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"The objective value must be finite, got {value!r}.")
        lo, hi = self.value_range
        if direction == StudyDirection.MINIMIZE:
            raw = (hi - value) / (hi - lo)
        else:
            raw = (value - lo) / (hi - lo)
        reward = min(max(raw, 0.0), 1.0)
        return reward, not lo <= value <= hi

    def check_search_space(self, encoder: SearchSpaceEncoder) -> None:
        NodeSpace(encoder)


class NodeSpace:
    """The coordinates the Fed-PNE partition splits, and their decoding to Optuna parameters.

    One coordinate per non-constant parameter (see the module docstring): the unit-cube
    column of a numeric parameter, or the category-set coordinate of a categorical one.

    Args:
        encoder: The federation's search-space encoder.

    Raises:
        ValueError: If every parameter of the search space is constant.
    """

    def __init__(self, encoder: SearchSpaceEncoder) -> None:
        self.encoder = encoder
        names = list(encoder.search_space)
        self.names: tuple[str, ...] = tuple(
            name for name in names if not encoder.search_space[name].single()
        )
        if not self.names:
            raise ValueError(
                "Every parameter of the search space is constant: Fed-PNE has nothing to "
                "partition."
            )
        self._index = {name: names.index(name) for name in self.names}
        self._constant = {
            name: _single_value(encoder.search_space[name])
            for name in names
            if encoder.search_space[name].single()
        }

    @property
    def dim(self) -> int:
        """The dimension of the partitioned cube."""
        return len(self.names)

    def decode(self, point: np.ndarray) -> dict[str, Any]:
        """Decode a point of ``[0, 1]^dim`` to the federation's parameters (all of them).

        Args:
            point: Shape ``(dim,)``.

        Returns:
            Parameter name -> value (in the search space's order).
        """
        point = np.asarray(point, dtype=float).reshape(-1)
        if point.shape != (self.dim,):
            raise ValueError(f"A node-space point has {self.dim} coordinates, got {point.shape}.")
        encoding = self.encoder.encoding
        column = np.full(encoding.n_columns, 0.5)
        for name, u in zip(self.names, np.clip(point, 0.0, 1.0)):
            j = self._index[name]
            cols = encoding.column_slices[j]
            dimension = encoding.dimensions[j]
            if dimension.kind == "categorical":
                choice = min(int(math.floor(u * dimension.n_choices)), dimension.n_choices - 1)
                column[cols] = 0.0
                column[cols.start + choice] = 1.0
            else:
                column[cols.start] = u
        decoded = self.encoder.decode(column)
        decoded.update(self._constant)
        return decoded


def _single_value(distribution: BaseDistribution) -> Any:
    if isinstance(distribution, CategoricalDistribution):
        return distribution.choices[0]
    return distribution.to_external_repr(distribution.low)  # type: ignore[attr-defined]


__all__ = ["FedPNEConfig", "NodeSpace"]
