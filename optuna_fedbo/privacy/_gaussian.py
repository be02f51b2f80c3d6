"""The server's aggregation of DP-FTS-DE (Algorithm 1, lines 5-11), private or not.

For ``P`` sub-regions with weights ``phi_n^(i)`` (rows summing to 1 over the ``N`` registered
agents), the private round is one subsampled Gaussian mechanism on the joint vector
(Section 3.3, Appendix A.1):

1. select each registered agent independently with probability ``q`` (Poisson; or exactly
   ``round(N q)`` without replacement, footnote 14);
2. clip each selected ``omega_n`` to norm ``S / sqrt(P)`` (one clipped vector reused for all
   ``P`` sub-regions, so the joint contribution ``(phi_n^(i) omega_n)_i`` has norm
   ``<= phi_max S``);
3. ``omega^(i) = sum_{n selected} phi_n^(i) clip(omega_n) / q`` -- divided by ``q`` (the expected
   fraction), never by the number actually selected, which would break the sensitivity bound
   ``phi_max S / q``;
4. add ``N(0, (z phi_max S / q)^2)`` to every coordinate of every ``omega^(i)``, with ``phi_max``
   the largest weight over all sub-regions and all registered agents.

If nobody is selected, the sums are zero and the output is the Gaussian noise alone: a
data-independent vector, still a release of the same mechanism, so the round is accounted like
any other. (The authors' code broadcasts a uniform random vector in that case; both are
data-independent.) A selected agent that did not upload contributes nothing, like a zero vector,
which is within the clip bound, so the guarantee is unchanged.

The result is "what happened" (:class:`AggregationResult`, immutable); its ``event`` is what the
accountant (:mod:`optuna_fedbo.privacy._accounting`) counts. The selection and the number of
clipped vectors are data about the agents and are NOT privatised: they are for the server
operator (the amplification by subsampling relies on the selection staying secret) and must not
be published with the broadcast.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
import math

import numpy as np

from optuna_fedbo.privacy._accounting import SamplingKind
from optuna_fedbo.privacy._accounting import SubsampledGaussianEvent
from optuna_fedbo.privacy._rng import secure_rng

_WEIGHT_SUM_TOLERANCE = 1e-6


def clip_to_norm(vectors: np.ndarray, bound: float) -> np.ndarray:
    """Scale each vector down to L2 norm ``bound`` if it is longer: ``v / max(1, |v| / bound)``.

    Args:
        vectors: One vector of shape ``(M,)`` or rows of shape ``(K, M)``; finite values.
        bound: Norm bound (> 0).

    Returns:
        A new float array of the same shape; vectors within the bound are returned unchanged.
    """
    bound = _check_positive(bound, "bound")
    array = np.array(vectors, dtype=float)
    if array.ndim not in (1, 2):
        raise ValueError(f"vectors must be 1-D or 2-D, got shape {array.shape}.")
    if not np.all(np.isfinite(array)):
        raise ValueError("vectors must be finite (found NaN or infinity).")
    # Norms scaled by the largest entry: |v| of 1e155-1e308 entries would overflow to inf (and
    # v / inf = 0: a huge vector zeroed instead of clipped).
    scale = np.max(np.abs(array), axis=-1, keepdims=True)
    unit = array / np.where(scale > 0, scale, 1.0)
    unit_norms = np.linalg.norm(unit, axis=-1, keepdims=True)
    with np.errstate(over="ignore"):
        norms = unit_norms * scale
    clipped = unit * (bound / np.where(unit_norms > 0, unit_norms, 1.0))
    return np.where(norms > bound, clipped, array)


@dataclass(frozen=True)
class SubsampledGaussianMechanism:
    """Parameters of the private aggregation ("how to privatise").

    Args:
        noise_multiplier: ``z > 0``.
        sample_rate: ``q`` in ``(0, 1]``.
        clip_norm: ``S > 0``; each vector is clipped to ``S / sqrt(P)``.
        sampling: ``"poisson"`` (Algorithm 1) or ``"fixed_size"`` (``round(N q)`` agents drawn
            without replacement; Renyi accounting under replace-one only). Sums are divided by
            ``q`` in both cases; the divisor scales signal and noise alike, so it does not
            affect privacy (with ``round(N q) != N q`` the fixed-size sum is slightly biased).
    """

    noise_multiplier: float
    sample_rate: float
    clip_norm: float
    sampling: SamplingKind = "poisson"

    def __post_init__(self) -> None:
        # Validates z, q and sampling with the accountant's rules.
        event = SubsampledGaussianEvent(self.noise_multiplier, self.sample_rate, "poisson")
        object.__setattr__(self, "noise_multiplier", event.noise_multiplier)
        object.__setattr__(self, "sample_rate", event.sample_rate)
        object.__setattr__(self, "clip_norm", _check_positive(self.clip_norm, "clip_norm"))
        if self.sampling not in ("poisson", "fixed_size"):
            raise ValueError(f"sampling must be 'poisson' or 'fixed_size', got {self.sampling!r}.")

    def event(self, n_agents: int) -> SubsampledGaussianEvent:
        """The accounting event of one round over ``n_agents`` registered agents."""
        return SubsampledGaussianEvent(
            self.noise_multiplier, self.sample_rate, self.sampling, n_agents
        )

    def noise_std(self, weights: np.ndarray) -> float:
        """``z phi_max S / q`` for the weights of shape ``(P, N)``."""
        phi_max = float(_check_weights(weights).max())
        return self.noise_multiplier * phi_max * self.clip_norm / self.sample_rate


@dataclass(frozen=True, eq=False)
class AggregationResult:
    """What one aggregation did. Arrays are read-only.

    Attributes:
        vectors: The ``P`` aggregated vectors, shape ``(P, M)``: the broadcast.
        selected: Sorted indices (into the ``N`` registered agents) chosen by subsampling; for
            the non-private aggregation, every agent that uploaded. Server-internal.
        contributors: Sorted indices of the selected agents whose vectors entered the sums
            (selected and uploaded). Server-internal.
        n_clipped: How many contributing vectors were longer than ``S / sqrt(P)``.
            Server-internal (not privatised).
        noise_std: Standard deviation of the Gaussian noise per coordinate (0 if non-private).
        event: The accounting event of this release; ``None`` for the non-private aggregation.
    """

    vectors: np.ndarray
    selected: np.ndarray
    contributors: np.ndarray
    n_clipped: int
    noise_std: float
    event: SubsampledGaussianEvent | None

    @property
    def private(self) -> bool:
        """Whether the release is differentially private (and must be accounted)."""
        return self.event is not None

    @property
    def nobody_selected(self) -> bool:
        """True when the broadcast is noise only (no agent selected)."""
        return self.selected.size == 0


def aggregate(
    omegas: np.ndarray | Sequence[Sequence[float]],
    agent_indices: np.ndarray | Sequence[int],
    weights: np.ndarray,
    *,
    mechanism: SubsampledGaussianMechanism | None,
    rng: np.random.Generator | None = None,
) -> AggregationResult:
    """Aggregate the uploaded vectors per sub-region, privately or not.

    Args:
        omegas: Uploaded vectors, shape ``(n_received, M)``, finite.
        agent_indices: For each row of ``omegas``, the index of its agent in ``[0, N)``; distinct.
        weights: ``phi_n^(i)``, shape ``(P, N)``, non-negative, rows summing to 1 over the ``N``
            registered agents (see :func:`optuna_fedbo.core.weights.subregion_weights`).
        mechanism: ``None`` for the non-private FTS-DE aggregation (no subsampling, no
            clipping, no noise): ``omega^(i) = sum_n phi_n^(i) omega_n`` over the agents that
            uploaded, with their weights renormalised per sub-region when some registered agents
            did not upload (exactly the weighted sum when all did). Otherwise
            :func:`subsampled_gaussian_aggregate`'s mechanism.
        rng: Randomness for subsampling and noise. ``None`` (the default, and the only choice
            outside tests) draws a fresh generator from OS entropy via ``secure_rng()``.

    Returns:
        The :class:`AggregationResult`.
    """
    vectors, indices, weights = _check_inputs(omegas, agent_indices, weights)
    n_subregions, n_agents = weights.shape
    if mechanism is None:
        if indices.size == 0:
            raise ValueError("the non-private aggregation needs at least one uploaded vector.")
        received = weights[:, indices]
        totals = received.sum(axis=1, keepdims=True)
        if np.any(totals <= 0):
            empty = np.flatnonzero(totals[:, 0] <= 0).tolist()
            raise ValueError(
                f"no agent that uploaded has a positive weight for sub-region(s) {empty}."
            )
        result = (received / totals) @ vectors
        order = np.sort(indices)
        return AggregationResult(
            vectors=_frozen(result),
            selected=_frozen(order),
            contributors=_frozen(order),
            n_clipped=0,
            noise_std=0.0,
            event=None,
        )

    event = mechanism.event(n_agents)
    generator = secure_rng() if rng is None else rng
    if mechanism.sampling == "poisson":
        selected = np.flatnonzero(generator.random(n_agents) < mechanism.sample_rate)
    else:
        assert event.sample_size is not None
        selected = np.sort(generator.choice(n_agents, size=event.sample_size, replace=False))
    is_selected = np.zeros(n_agents, dtype=bool)
    is_selected[selected] = True
    rows = np.flatnonzero(is_selected[indices])
    bound = mechanism.clip_norm / math.sqrt(n_subregions)
    contributions = vectors[rows]
    n_clipped = int(np.count_nonzero(np.linalg.norm(contributions, axis=1) > bound))
    clipped = clip_to_norm(contributions, bound) if rows.size else contributions
    sums = (weights[:, indices[rows]] @ clipped) / mechanism.sample_rate
    noise_std = mechanism.noise_multiplier * float(weights.max()) * mechanism.clip_norm
    noise_std /= mechanism.sample_rate
    noisy = sums + generator.normal(0.0, noise_std, size=sums.shape)
    return AggregationResult(
        vectors=_frozen(noisy),
        selected=_frozen(selected.astype(np.int64)),
        contributors=_frozen(np.sort(indices[rows]).astype(np.int64)),
        n_clipped=n_clipped,
        noise_std=noise_std,
        event=event,
    )


def subsampled_gaussian_aggregate(
    omegas: np.ndarray | Sequence[Sequence[float]],
    agent_indices: np.ndarray | Sequence[int],
    weights: np.ndarray,
    *,
    sample_rate: float,
    clip_norm: float,
    noise_multiplier: float,
    sampling: SamplingKind = "poisson",
    rng: np.random.Generator | None = None,
) -> AggregationResult:
    """DP-FTS-DE's private aggregation (Algorithm 1, lines 5-11); see the module docstring.

    Args:
        omegas: Uploaded vectors, shape ``(n_received, M)``, finite.
        agent_indices: Agent index in ``[0, N)`` of each row of ``omegas``; distinct.
        weights: ``phi_n^(i)``, shape ``(P, N)``, rows summing to 1.
        sample_rate: ``q`` in ``(0, 1]``.
        clip_norm: ``S > 0``.
        noise_multiplier: ``z > 0``.
        sampling: ``"poisson"`` or ``"fixed_size"``.
        rng: Injected generator for reproducible tests only; ``None`` uses ``secure_rng()``.

    Returns:
        The :class:`AggregationResult` with its accounting ``event``.
    """
    mechanism = SubsampledGaussianMechanism(
        noise_multiplier=noise_multiplier,
        sample_rate=sample_rate,
        clip_norm=clip_norm,
        sampling=sampling,
    )
    return aggregate(omegas, agent_indices, weights, mechanism=mechanism, rng=rng)


def _check_inputs(
    omegas: np.ndarray | Sequence[Sequence[float]],
    agent_indices: np.ndarray | Sequence[int],
    weights: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    weights = _check_weights(weights)
    n_agents = weights.shape[1]
    try:
        vectors = np.array(omegas, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(
            "omegas must be a 2-D array of equal-length numeric vectors (got ragged or "
            "non-numeric input)."
        ) from None
    if vectors.ndim != 2 or vectors.shape[1] == 0:
        raise ValueError(
            f"omegas must have shape (n_received, M) with M >= 1, got {vectors.shape}."
        )
    if not np.all(np.isfinite(vectors)):
        bad = np.flatnonzero(~np.all(np.isfinite(vectors), axis=1)).tolist()
        raise ValueError(f"omegas must be finite; rows {bad} contain NaN or infinity.")
    indices = np.asarray(agent_indices)
    if indices.size == 0:
        indices = indices.astype(np.int64)
    if indices.ndim != 1 or not np.issubdtype(indices.dtype, np.integer):
        raise ValueError(
            f"agent_indices must be a 1-D integer array, got shape {indices.shape} and dtype "
            f"{indices.dtype}."
        )
    if indices.shape[0] != vectors.shape[0]:
        raise ValueError(
            f"agent_indices has {indices.shape[0]} entries but omegas has {vectors.shape[0]} rows."
        )
    if indices.size and (indices.min() < 0 or indices.max() >= n_agents):
        raise ValueError(
            f"agent_indices must lie in [0, {n_agents}) (the columns of weights), got range "
            f"[{indices.min()}, {indices.max()}]."
        )
    if np.unique(indices).size != indices.size:
        raise ValueError("agent_indices must be distinct: one vector per agent and round.")
    return vectors, indices.astype(np.int64), weights


def _check_weights(weights: np.ndarray) -> np.ndarray:
    try:
        array = np.asarray(weights, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("weights must be a numeric array of shape (P, N).") from None
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"weights must have shape (P, N) with P, N >= 1, got {array.shape}.")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ValueError("weights must be finite and non-negative.")
    sums = array.sum(axis=1)
    if not np.allclose(sums, 1.0, rtol=0.0, atol=_WEIGHT_SUM_TOLERANCE):
        raise ValueError(
            f"each row of weights must sum to 1 over the N registered agents, got row sums "
            f"{np.round(sums, 6).tolist()}."
        )
    return array


def _check_positive(value: float, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a positive number, got {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}.") from None
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}.")
    return number


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.flags.writeable = False
    return array
