"""Privacy accounting of the subsampled Gaussian mechanism with ``dp_accounting``.

"What happened" is a :class:`SubsampledGaussianEvent` (one release: noise multiplier, sampling
rate and scheme); "how to count it" is one of three accountants:

- ``"moments"``: the papers' moments accountant (Abadi et al. 2016, as used by DP-FTS-DE).
  Per-round Renyi DP from ``dp_accounting`` at the integer orders :data:`MOMENTS_ORDERS`, summed
  over rounds, and the classic conversion ``eps = min_a [T rdp(a) + log(1/delta) / (a - 1)]``.
  This reproduces all 14 privacy losses published in the DP-FTS-DE paper to 0.01.
- ``"rdp"``: the same Renyi DP at the finer grid :data:`RDP_ORDERS` (fractional orders included)
  and ``dp_accounting``'s own, tighter conversion (``RdpAccountant.get_epsilon``).
- ``"pld"``: privacy loss distributions (``PLDAccountant``, value discretisation
  :data:`PLD_VALUE_DISCRETIZATION_INTERVAL`), the tightest of the three; the default.

Sampling schemes and their neighbouring relations:

- ``"poisson"`` (Algorithm 1): every registered agent is selected independently with probability
  ``q``. Accounted under *add/remove-one*: the protected unit is an agent's participation at all,
  across all rounds. ``noise_multiplier`` is ``z`` of Algorithm 1, the noise standard deviation
  over the add/remove sensitivity ``phi_max S / q``.
- ``"fixed_size"`` (DP-FTS-DE footnote 14): exactly ``round(N q)`` of the ``N`` registered agents
  are drawn without replacement. ``dp_accounting`` bounds this only under *replace-one*
  (``N`` is public; neighbouring federations differ in the data of one agent, which is replaced,
  not removed), through Wang, Balle and Kasiviswanathan (2019, Theorem 27), and only with Renyi
  DP: ``"moments"`` and ``"rdp"`` support it, ``"pld"`` raises a ``ValueError``. Replacing one
  agent moves the weighted sum by up to twice the clip bound, so the Gaussian event handed to
  the library carries ``z / 2``; passing ``z`` itself would under-count. The resulting epsilons
  refer to a different neighbouring relation and are not comparable one-to-one with Poisson ones.

Fractional orders: ``dp_accounting`` evaluates the Poisson-subsampled Gaussian at a fractional
order with a series of absolute terms (an upper bound) capped at 1,000 terms. Below order 2 and
for ``q >= 0.1`` or so (e.g. orders 1.1-1.8 at ``q = 0.35``, ``z = 1``) it does not converge: the
library logs one warning per order and returns ``+inf``, which only drops that order from the
minimum (safe, possibly looser). The integer orders of the moments accountant never take that
path. For ``"rdp"`` we keep the fractional orders of :data:`RDP_ORDERS` because where they do
converge (small ``q``, many rounds) they tighten epsilon, and we silence exactly that one
warning (a filter on the ``absl`` logger while we compose), logging the dropped orders once at
DEBUG level instead.

Cost: one round's Renyi DP is computed once and multiplied by the number of rounds (accounting
depends only on ``(q, z, T)``), so :meth:`PrivacyAccountant.epsilon` costs the same at round 1
and round 1,000 for ``"moments"`` and ``"rdp"``. For ``"pld"`` the one-round distribution is
built once and ``self_compose(T)`` (repeated squaring) gives round ``T``; results are cached.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
import contextlib
from dataclasses import dataclass
import importlib.metadata
import logging
import math
import threading
from typing import Final
from typing import Literal
from typing import TYPE_CHECKING

import numpy as np

from optuna_fedbo.privacy._checks import check_budget
from optuna_fedbo.privacy._checks import check_delta
from optuna_fedbo.privacy._checks import check_noise_multiplier
from optuna_fedbo.privacy._checks import check_positive_int
from optuna_fedbo.privacy._checks import check_rounds
from optuna_fedbo.privacy._checks import check_sample_rate
from optuna_fedbo.privacy._renyi import classic_rdp_to_epsilon
from optuna_fedbo.privacy._renyi import RDP_ORDERS

if TYPE_CHECKING:
    # ``dp_accounting`` (with scipy.stats and scipy.signal) takes most of a second to import:
    # it is imported by the functions that account, not when optuna_fedbo is imported.
    import dp_accounting
    from dp_accounting.pld import privacy_loss_distribution as dp_pld_lib


_logger = logging.getLogger(__name__)

AccountantKind = Literal["moments", "rdp", "pld"]
SamplingKind = Literal["poisson", "fixed_size"]

ACCOUNTANTS: Final[tuple[str, ...]] = ("moments", "rdp", "pld")
SAMPLINGS: Final[tuple[str, ...]] = ("poisson", "fixed_size")

PLD_VALUE_DISCRETIZATION_INTERVAL: Final[float] = 1e-3
"""PLD grid: matches 1e-4 to four decimals on the paper's settings, about ten times faster."""

_MIN_CALIBRATION_NOISE: Final[float] = 0.1
_MAX_CALIBRATION_NOISE: Final[float] = 1e4
_FRACTIONAL_ORDER_WARNING: Final[str] = "_compute_log_a_frac failed to converge"
_PLD_CACHE_SIZE: Final[int] = 4096
_DP_ACCOUNTING_VERSION: Final[str] = importlib.metadata.version("dp-accounting")


def default_delta(n_agents: int) -> float:
    """The papers' ``delta = 1 / N^1.1`` (McMahan et al. 2018) for ``N`` registered agents."""
    n_agents = check_positive_int(n_agents, "n_agents")
    if n_agents < 2:
        raise ValueError("default_delta needs at least 2 agents (1 / 1^1.1 = 1 is no guarantee).")
    return float(n_agents) ** -1.1


@dataclass(frozen=True)
class SubsampledGaussianEvent:
    """One release of the subsampled Gaussian mechanism, as the accountants see it.

    Immutable and data-independent: the same event describes every round of a federation with
    fixed ``(z, q)``, whether or not anybody happened to be selected. The noise multiplier is
    converted to a Python ``float`` (``dp_accounting`` silently under-counts composed Gaussians
    with an ``int`` or ``numpy.float32`` one).

    Args:
        noise_multiplier: ``z > 0``: noise standard deviation over the add/remove sensitivity.
        sample_rate: ``q`` in ``(0, 1]``.
        sampling: ``"poisson"`` or ``"fixed_size"`` (see the module docstring).
        n_agents: Registered agents ``N``; required for ``"fixed_size"``, which draws
            ``round(N q)`` of them.
    """

    noise_multiplier: float
    sample_rate: float
    sampling: SamplingKind = "poisson"
    n_agents: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", check_noise_multiplier(self.noise_multiplier))
        object.__setattr__(self, "sample_rate", check_sample_rate(self.sample_rate))
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {self.sampling!r}.")
        if self.n_agents is not None:
            object.__setattr__(self, "n_agents", check_positive_int(self.n_agents, "n_agents"))
        if self.sampling == "fixed_size":
            if self.n_agents is None:
                raise ValueError("sampling='fixed_size' needs n_agents (the number N of agents).")
            size = round(self.n_agents * self.sample_rate)
            if size < 1:
                raise ValueError(
                    f"sampling='fixed_size' selects round(N q) = round({self.n_agents} * "
                    f"{self.sample_rate}) = 0 agents; raise sample_rate or n_agents."
                )

    @property
    def sample_size(self) -> int | None:
        """Agents drawn per round for ``"fixed_size"`` (``round(N q)``); ``None`` for Poisson."""
        if self.sampling != "fixed_size":
            return None
        assert self.n_agents is not None
        return round(self.n_agents * self.sample_rate)

    @property
    def neighboring_relation(self) -> dp_accounting.NeighboringRelation:
        """Add/remove-one for Poisson sampling, replace-one for fixed-size sampling."""
        import dp_accounting

        if self.sampling == "fixed_size":
            return dp_accounting.NeighboringRelation.REPLACE_ONE
        return dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE

    def to_dp_event(self) -> dp_accounting.DpEvent:
        """The ``dp_accounting`` event of one round (valid under :attr:`neighboring_relation`)."""
        import dp_accounting

        if self.sampling == "fixed_size":
            assert self.n_agents is not None and self.sample_size is not None
            # Replace-one moves the clipped, weighted sum by up to twice the add/remove
            # sensitivity, so the library's noise multiplier (std / sensitivity) is z / 2.
            return dp_accounting.SampledWithoutReplacementDpEvent(
                source_dataset_size=self.n_agents,
                sample_size=self.sample_size,
                event=dp_accounting.GaussianDpEvent(self.noise_multiplier / 2.0),
            )
        return dp_accounting.PoissonSampledDpEvent(
            sampling_probability=self.sample_rate,
            event=dp_accounting.GaussianDpEvent(self.noise_multiplier),
        )

    def with_noise_multiplier(self, noise_multiplier: float) -> SubsampledGaussianEvent:
        """The same sampling with another noise multiplier."""
        return SubsampledGaussianEvent(
            noise_multiplier, self.sample_rate, self.sampling, self.n_agents
        )


def make_dp_accountant(
    accountant: AccountantKind,
    neighboring_relation: dp_accounting.NeighboringRelation | None = None,
) -> dp_accounting.PrivacyAccountant:
    """A fresh ``dp_accounting`` accountant of the given kind, configured as documented above.

    ``neighboring_relation`` defaults to ``NeighboringRelation.ADD_OR_REMOVE_ONE``.
    """
    import dp_accounting
    from dp_accounting import pld as dp_pld
    from dp_accounting import rdp as dp_rdp

    from optuna_fedbo.privacy._moments import MomentsAccountant

    if neighboring_relation is None:
        neighboring_relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if accountant == "moments":
        return MomentsAccountant(neighboring_relation)
    if accountant == "rdp":
        return dp_rdp.RdpAccountant(orders=RDP_ORDERS, neighboring_relation=neighboring_relation)
    if accountant == "pld":
        return dp_pld.PLDAccountant(
            neighboring_relation=neighboring_relation,
            value_discretization_interval=PLD_VALUE_DISCRETIZATION_INTERVAL,
        )
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}.")


def compute_epsilon(
    *,
    noise_multiplier: float,
    sample_rate: float,
    rounds: int,
    delta: float,
    accountant: AccountantKind = "pld",
    sampling: SamplingKind = "poisson",
    n_agents: int | None = None,
) -> float:
    """Epsilon spent by ``rounds`` releases of the subsampled Gaussian mechanism.

    Composes the ``rounds``-fold event in a fresh ``dp_accounting`` accountant. For the
    DP-FTS-DE paper's numbers use ``accountant="moments"``, ``delta = N ** -1.1`` and ``rounds``
    = the number of broadcasts used (40 synthetic, 60 landmine).

    Args:
        noise_multiplier: ``z > 0`` (any real number type; converted to ``float``).
        sample_rate: ``q`` in ``(0, 1]``.
        rounds: Number of released rounds ``T >= 0``; 0 rounds cost epsilon 0.
        delta: Target delta in ``(0, 1)``.
        accountant: ``"moments"``, ``"rdp"`` or ``"pld"``.
        sampling: ``"poisson"`` or ``"fixed_size"`` (Renyi accountants only).
        n_agents: Registered agents ``N``; required for ``"fixed_size"``.

    Returns:
        Epsilon as a Python float.
    """
    event = SubsampledGaussianEvent(noise_multiplier, sample_rate, sampling, n_agents)
    rounds = check_rounds(rounds)
    delta = check_delta(delta)
    dp_accountant = _supported_accountant(accountant, event)
    if rounds == 0:
        return 0.0
    import dp_accounting

    with _quiet_fractional_order_warnings():
        dp_accountant.compose(dp_accounting.SelfComposedDpEvent(event.to_dp_event(), rounds))
    return float(dp_accountant.get_epsilon(delta))


def calibrate_noise_multiplier(
    *,
    target_epsilon: float,
    sample_rate: float,
    rounds: int,
    delta: float,
    accountant: AccountantKind = "pld",
    sampling: SamplingKind = "poisson",
    n_agents: int | None = None,
    tol: float = 1e-3,
) -> float:
    """Smallest noise multiplier whose ``rounds`` releases stay within ``target_epsilon``.

    Brackets the root by doubling or halving from ``z = 1`` (within ``[0.1, 1e4]``), then calls
    ``dp_accounting.calibrate_dp_mechanism`` (Brent's method), which guarantees that the returned
    ``z`` is within ``tol`` of the optimum and never exceeds the target.

    Args:
        target_epsilon: Epsilon budget (> 0).
        sample_rate: ``q`` in ``(0, 1]``.
        rounds: Number of rounds ``T >= 1``.
        delta: Target delta in ``(0, 1)``.
        accountant: ``"moments"``, ``"rdp"`` or ``"pld"``.
        sampling: ``"poisson"`` or ``"fixed_size"`` (Renyi accountants only).
        n_agents: Registered agents ``N``; required for ``"fixed_size"``.
        tol: Absolute tolerance on the noise multiplier (> 0).

    Returns:
        The noise multiplier ``z`` as a Python float, with ``compute_epsilon(z) <= target``.

    Raises:
        ValueError: For invalid arguments, or a target that needs ``z`` outside ``[0.1, 1e4]``.
    """
    if isinstance(target_epsilon, bool) or not (
        math.isfinite(float(target_epsilon)) and float(target_epsilon) > 0
    ):
        raise ValueError(f"target_epsilon must be positive and finite, got {target_epsilon!r}.")
    import dp_accounting

    target_epsilon = float(target_epsilon)
    if not (math.isfinite(float(tol)) and float(tol) > 0):
        raise ValueError(f"tol must be positive, got {tol!r}.")
    rounds = check_rounds(rounds)
    if rounds == 0:
        raise ValueError("rounds must be >= 1 to calibrate (0 rounds cost nothing at any z).")
    delta = check_delta(delta)
    template = SubsampledGaussianEvent(1.0, sample_rate, sampling, n_agents)
    relation = template.neighboring_relation
    _supported_accountant(accountant, template)

    def make_event(z: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(
            template.with_noise_multiplier(float(z)).to_dp_event(), rounds
        )

    def epsilon_at(z: float) -> float:
        dp_accountant = make_dp_accountant(accountant, relation)
        return float(dp_accountant.compose(make_event(z)).get_epsilon(delta))

    with _quiet_fractional_order_warnings():
        low, high = _bracket(epsilon_at, target_epsilon)
        z = dp_accounting.calibrate_dp_mechanism(
            make_fresh_accountant=lambda: make_dp_accountant(accountant, relation),
            make_event_from_param=make_event,
            target_epsilon=target_epsilon,
            target_delta=delta,
            bracket_interval=dp_accounting.ExplicitBracketInterval(low, high),
            tol=float(tol),
        )
    return float(z)


class PrivacyAccountant:
    """Privacy ledger arithmetic for a federation with fixed ``(z, q, delta)``.

    Every round of such a federation is the same :class:`SubsampledGaussianEvent`, so the spend
    after ``T`` rounds depends on ``T`` only. The per-round Renyi DP (or privacy loss
    distribution) is computed once here; :meth:`epsilon` then costs the same at any ``T`` for the
    Renyi accountants, and one cached ``self_compose(T)`` for PLD. Thread-safe.

    Args:
        noise_multiplier: ``z > 0``.
        sample_rate: ``q`` in ``(0, 1]``.
        delta: Target delta in ``(0, 1)``.
        accountant: ``"moments"``, ``"rdp"`` or ``"pld"``.
        sampling: ``"poisson"`` or ``"fixed_size"`` (Renyi accountants only).
        n_agents: Registered agents ``N``; required for ``"fixed_size"``.
    """

    def __init__(
        self,
        noise_multiplier: float,
        sample_rate: float,
        delta: float,
        *,
        accountant: AccountantKind = "pld",
        sampling: SamplingKind = "poisson",
        n_agents: int | None = None,
    ) -> None:
        from dp_accounting import rdp as dp_rdp
        from dp_accounting.pld import privacy_loss_distribution as dp_pld_lib

        self._event = SubsampledGaussianEvent(noise_multiplier, sample_rate, sampling, n_agents)
        self._delta = check_delta(delta)
        self._kind: AccountantKind = accountant
        one_round = _supported_accountant(accountant, self._event)
        self._lock = threading.Lock()
        self._pld_cache: dict[int, float] = {}
        self._orders: np.ndarray | None = None
        self._rdp_per_round: np.ndarray | None = None
        self._pld_per_round: dp_pld_lib.PrivacyLossDistribution | None = None
        if accountant == "pld":
            self._pld_per_round = dp_pld_lib.from_gaussian_mechanism(
                standard_deviation=self._event.noise_multiplier,
                sampling_prob=self._event.sample_rate,
                value_discretization_interval=PLD_VALUE_DISCRETIZATION_INTERVAL,
                neighboring_relation=self._event.neighboring_relation,
            )
        else:
            assert isinstance(one_round, dp_rdp.RdpAccountant)
            with _quiet_fractional_order_warnings():
                one_round.compose(self._event.to_dp_event())
            self._orders = one_round.orders
            self._rdp_per_round = one_round.rdp

    @classmethod
    def from_event(
        cls,
        event: SubsampledGaussianEvent,
        delta: float,
        *,
        accountant: AccountantKind = "pld",
    ) -> PrivacyAccountant:
        """An accountant for repeated releases of ``event``."""
        return cls(
            event.noise_multiplier,
            event.sample_rate,
            delta,
            accountant=accountant,
            sampling=event.sampling,
            n_agents=event.n_agents,
        )

    @property
    def event(self) -> SubsampledGaussianEvent:
        """The per-round event being counted."""
        return self._event

    @property
    def delta(self) -> float:
        """The target delta."""
        return self._delta

    @property
    def accountant(self) -> AccountantKind:
        """The accountant kind."""
        return self._kind

    @property
    def per_round_pld(self) -> dp_pld_lib.PrivacyLossDistribution | None:
        """The privacy loss distribution of one round (``"pld"`` only; ``None`` otherwise)."""
        return self._pld_per_round

    def epsilon(self, rounds: int) -> float:
        """Epsilon after ``rounds`` released rounds (0 rounds: 0.0)."""
        rounds = check_rounds(rounds)
        if rounds == 0:
            return 0.0
        if self._kind == "pld":
            return self._pld_epsilon(rounds)
        assert self._orders is not None and self._rdp_per_round is not None
        total = rounds * self._rdp_per_round
        if self._kind == "moments":
            return classic_rdp_to_epsilon(self._orders, total, self._delta)[0]
        from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp_lib

        return float(dp_rdp_lib.compute_epsilon(self._orders, total, self._delta)[0])

    def would_exceed(self, rounds: int, budget: float) -> bool:
        """Whether ``rounds`` released rounds would spend more than ``budget`` epsilon."""
        budget = check_budget(budget)
        return self.epsilon(rounds) > budget

    def max_rounds(self, budget: float, *, limit: int = 10_000) -> int:
        """The largest number of rounds ``T <= limit`` whose epsilon stays within ``budget``.

        Epsilon is non-decreasing in ``T``, so a binary search takes ``O(log limit)`` calls.
        """
        budget = check_budget(budget)
        limit = check_rounds(limit)
        if self.epsilon(limit) <= budget:
            return limit
        low, high = 0, limit  # epsilon(low) <= budget < epsilon(high)
        while high - low > 1:
            middle = (low + high) // 2
            if self.epsilon(middle) <= budget:
                low = middle
            else:
                high = middle
        return low

    def _pld_epsilon(self, rounds: int) -> float:
        with self._lock:
            cached = self._pld_cache.get(rounds)
        if cached is not None:
            return cached
        assert self._pld_per_round is not None
        value = float(self._pld_per_round.self_compose(rounds).get_epsilon_for_delta(self._delta))
        with self._lock:
            if len(self._pld_cache) >= _PLD_CACHE_SIZE:
                self._pld_cache.pop(next(iter(self._pld_cache)))
            self._pld_cache[rounds] = value
        return value

    def __repr__(self) -> str:
        event = self._event
        return (
            f"PrivacyAccountant(noise_multiplier={event.noise_multiplier}, "
            f"sample_rate={event.sample_rate}, delta={self._delta}, "
            f"accountant={self._kind!r}, sampling={event.sampling!r}, n_agents={event.n_agents})"
        )


def _supported_accountant(
    accountant: str, event: SubsampledGaussianEvent
) -> dp_accounting.PrivacyAccountant:
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}.")
    dp_accountant = make_dp_accountant(accountant, event.neighboring_relation)  # type: ignore[arg-type]
    if not dp_accountant.supports(event.to_dp_event()):
        raise ValueError(
            f"accountant={accountant!r} cannot count sampling={event.sampling!r}: "
            f"dp_accounting {_DP_ACCOUNTING_VERSION} has no {type(dp_accountant).__name__} "
            f"support for {type(event.to_dp_event()).__name__} under "
            f"{event.neighboring_relation.name}. Use accountant='moments' or 'rdp' for "
            "fixed-size sampling, or sampling='poisson'."
        )
    return dp_accountant


def _bracket(epsilon_at: Callable[[float], float], target: float) -> tuple[float, float]:
    """``(low, high)`` with ``epsilon_at(low) > target >= epsilon_at(high)``."""
    high = 1.0
    while epsilon_at(high) > target:
        high *= 2.0
        if high > _MAX_CALIBRATION_NOISE:
            raise ValueError(
                f"target_epsilon={target} needs a noise multiplier above "
                f"{_MAX_CALIBRATION_NOISE:g}; raise the budget or lower q or the rounds."
            )
    if high > 1.0:
        return high / 2.0, high
    low = high
    while epsilon_at(low) <= target:
        low /= 2.0
        if low < _MIN_CALIBRATION_NOISE:
            raise ValueError(
                f"target_epsilon={target} is met with a noise multiplier below "
                f"{_MIN_CALIBRATION_NOISE}; such weak noise is not supported (is the budget "
                "meant to be this large?)."
            )
    return low, 2.0 * low


class _DropFractionalOrderWarning(logging.Filter):
    """Swallows dp_accounting's 'failed to converge' warning and remembers the orders."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped: list[float] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith(_FRACTIONAL_ORDER_WARNING):
            if isinstance(record.args, tuple) and record.args:
                self.dropped.append(float(record.args[-1]))
            return False
        return True


@contextlib.contextmanager
def _quiet_fractional_order_warnings() -> Iterator[None]:
    """Silence dp_accounting's per-order convergence warning (see the module docstring)."""
    absl_logger = logging.getLogger("absl")
    drop = _DropFractionalOrderWarning()
    absl_logger.addFilter(drop)
    try:
        yield
    finally:
        absl_logger.removeFilter(drop)
        if drop.dropped:
            _logger.debug(
                "dp_accounting could not evaluate %d fractional Renyi order(s) and excluded them "
                "(safe: a looser bound): %s",
                len(drop.dropped),
                ", ".join(f"{order:g}" for order in sorted(set(drop.dropped))),
            )


def __getattr__(name: str) -> object:
    # MomentsAccountant subclasses a dp_accounting class: defined in _moments, imported on use.
    if name == "MomentsAccountant":
        from optuna_fedbo.privacy._moments import MomentsAccountant

        return MomentsAccountant
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
