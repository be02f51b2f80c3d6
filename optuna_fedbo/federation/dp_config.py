"""Differential privacy of an FTS federation: the DP-FTS-DE server's mechanism and its accounting.

A :class:`DPConfig` passed as ``Federation.create(..., privacy=DPConfig(...))`` makes every round
of the server Algorithm 1 of DP-FTS-DE (Dai, Low and Jaillet, NeurIPS 2021): each registered
agent is selected independently with probability ``q``; each selected vector is clipped to norm
``S / sqrt(P)``; the sub-region vectors are ``sum_{n selected} phi_n^(i) clip(omega_n) / q``; and
Gaussian noise of standard deviation ``z phi_max S / q`` is added to every coordinate of every
sub-region vector (``P = 1`` is DP-FTS). The configuration is part of the federation's hashed
configuration, with ``delta`` resolved (default ``min(1e-5, 0.01 / N)``; the papers'
``1 / N^1.1`` with ``delta=PAPER_DELTA``), so every participant sees the same guarantee.

What is protected (the neighbouring relation):

- ``sampling="poisson"`` (Algorithm 1, the default): *add/remove-one*. Two federations are
  neighbours if one has an extra agent; the guarantee bounds what anyone who sees the broadcasts
  (and the ledger) can learn about whether an agent took part at all, over all rounds, whatever
  its data. Sums are divided by ``q`` (the expected fraction), never by the number actually
  selected, which would make the sensitivity depend on the others.
- ``sampling="fixed_size"`` (the paper's footnote 14, for Renyi DP accounting): exactly
  ``round(N q)`` of the ``N`` registered agents are drawn without replacement each round. The
  only bound ``dp_accounting`` has for it (Wang, Balle and Kasiviswanathan 2019) is under
  *replace-one*: ``N`` is public and neighbours differ in the data of one agent. Replacing one
  agent moves the sum twice as far as removing it, so it is accounted with ``z / 2``, only by
  the Renyi accountants, and costs roughly ten times the epsilon of Poisson sampling at the
  papers' settings (``benchmarks/privacy_accounting.py``, table d). It is kept for comparison
  with the paper's Renyi DP figure; it is not a preset and not recommended.

Accountants (all valid upper bounds on epsilon for the same mechanism):

- ``"pld"`` (default): privacy loss distributions, the tightest of the three: about 30% less
  epsilon than the papers' moments accountant at their settings (e.g. ``N = 200``, ``q = 0.25``,
  ``z = 1``, 40 rounds: 7.05 against 9.91), so the same budget buys more rounds or less noise.
  Poisson sampling only.
- ``"moments"``: the papers' moments accountant (integer Renyi orders, classic conversion); it
  reproduces the DP-FTS-DE paper's reported privacy losses exactly (the paper preset uses it).
- ``"rdp"``: Renyi DP with ``dp_accounting``'s own (tighter) conversion.

Every published round is counted; see :mod:`optuna_fedbo.federation.ledger`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math
from typing import Any
from typing import ClassVar
from typing import Final

from optuna_fedbo.privacy._accounting import ACCOUNTANTS
from optuna_fedbo.privacy._accounting import default_delta
from optuna_fedbo.privacy._accounting import SAMPLINGS
from optuna_fedbo.privacy._accounting import SubsampledGaussianEvent
from optuna_fedbo.privacy._curve import EpsilonCurve
from optuna_fedbo.privacy._curve import shared_curve
from optuna_fedbo.privacy._gaussian import SubsampledGaussianMechanism


@dataclass(frozen=True)
class DPConfig:
    """Central differential privacy of an FTS federation (DP-FTS / DP-FTS-DE).

    Args:
        noise_multiplier: ``z > 0``: the noise standard deviation over the sensitivity
            ``phi_max S / q`` of the weighted sums.
        sample_rate: ``q`` in ``(0, 1]``: each registered agent's probability of being
            selected in a round (or the fraction drawn, for ``"fixed_size"``).
        clip_norm: ``S > 0``: every selected vector is clipped to norm ``S / sqrt(P)``. It does
            not change epsilon; choose it so that few vectors are clipped (the server reports
            how many are, per round).
        delta: Target delta in ``(0, 1/N)``; ``None`` is ``min(1e-5, 0.01 / N)``, well below
            ``1/N``; :data:`PAPER_DELTA` (``"1/N^1.1"``) is the papers' choice (a weak guarantee
            for small ``N``: creating such a federation warns). Resolved with the federation's
            ``N`` when it is created; ``delta >= 1/N`` is refused.
        accountant: ``"pld"`` (default, tightest), ``"moments"`` (the papers') or ``"rdp"``.
        sampling: ``"poisson"`` (default; add/remove-one) or ``"fixed_size"`` (replace-one,
            Renyi accountants only; see the module documentation).
        epsilon_budget: If set, the server never publishes a round that would take the spent
            epsilon above it; it stops, and the participants continue with local Thompson
            sampling. ``None``: no budget (epsilon still accounted and reported).

    Raises:
        ValueError: For a value out of range or a combination ``dp_accounting`` cannot count.
    """

    kind: ClassVar[str] = "subsampled_gaussian"

    noise_multiplier: float
    sample_rate: float
    clip_norm: float
    delta: float | str | None = None
    accountant: str = "pld"
    sampling: str = "poisson"
    epsilon_budget: float | None = None

    def __post_init__(self) -> None:
        # Python floats: dp_accounting silently under-counts with int or numpy noise multipliers.
        object.__setattr__(
            self, "noise_multiplier", _positive("noise_multiplier", self.noise_multiplier)
        )
        rate = _number("sample_rate", self.sample_rate)
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"sample_rate must lie in (0, 1], got {self.sample_rate!r}.")
        object.__setattr__(self, "sample_rate", rate)
        object.__setattr__(self, "clip_norm", _positive("clip_norm", self.clip_norm))
        if self.delta is not None and self.delta != PAPER_DELTA:
            delta = _number("delta", self.delta)
            if not 0.0 < delta < 1.0:
                raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}.")
            object.__setattr__(self, "delta", delta)
        if self.accountant not in ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {self.accountant!r}.")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {self.sampling!r}.")
        if self.sampling == "fixed_size" and self.accountant == "pld":
            raise ValueError(
                "sampling='fixed_size' can only be accounted under replace-one with Renyi DP: "
                "use accountant='moments' or 'rdp' (or sampling='poisson')."
            )
        if self.epsilon_budget is not None:
            object.__setattr__(
                self, "epsilon_budget", _positive("epsilon_budget", self.epsilon_budget)
            )

    # ------------------------------------------------------------------- derived values
    @property
    def neighbouring_relation(self) -> str:
        """``"add/remove-one"`` (Poisson sampling) or ``"replace-one"`` (fixed-size)."""
        return "replace-one" if self.sampling == "fixed_size" else "add/remove-one"

    def resolve(self, n_clients: int) -> DPConfig:
        """This configuration for a federation of ``n_clients`` agents, with ``delta`` filled in.

        Raises:
            ValueError: If ``delta`` is ``None`` and ``n_clients < 2`` (``1 / 1^1.1`` is no
                guarantee), or fixed-size sampling would select nobody.
        """
        if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < 1:
            raise ValueError(f"n_clients must be a positive integer, got {n_clients!r}.")
        delta = self.delta
        if delta is None:
            delta = safe_default_delta(n_clients)
        elif delta == PAPER_DELTA:
            if n_clients < 2:
                raise ValueError(
                    "The papers' delta 1 / N^1.1 needs N >= 2 participants; pass delta "
                    "explicitly for a federation of one."
                )
            delta = default_delta(n_clients)
        assert isinstance(delta, float)
        if n_clients > 1 and delta >= 1.0 / n_clients:
            raise ValueError(
                f"delta = {delta:.3g} is at least 1/N = {1.0 / n_clients:.3g}: no guarantee (a "
                "mechanism that publishes one participant's data in the clear with probability "
                "delta satisfies it). Use a delta well below 1/N, e.g. the default "
                f"{safe_default_delta(n_clients):.3g} (delta=None)."
            )
        self.event(n_clients)  # validates fixed-size: round(N q) >= 1
        return dataclasses.replace(self, delta=delta)

    def weakness(self, n_clients: int) -> str | None:
        """Why the resolved ``delta`` is a weak guarantee (above ``0.1 / N``), or ``None``."""
        delta = self.resolve(n_clients).delta
        assert delta is not None
        if delta <= 0.1 / n_clients:
            return None
        return (
            f"delta = {delta:.3g} is a weak guarantee for N = {n_clients} participants (close to "
            f"1/N = {1.0 / n_clients:.3g}: with probability about N delta one participant's data "
            "may be exposed)"
            + (
                "; it is the papers' 1/N^1.1, kept to reproduce their privacy losses"
                if self.delta == PAPER_DELTA
                else ""
            )
            + f". For a meaningful guarantee use delta <= {safe_default_delta(n_clients):.3g}."
        )

    def mechanism(self) -> SubsampledGaussianMechanism:
        """The server's private aggregation (Algorithm 1, lines 5-11)."""
        return SubsampledGaussianMechanism(
            noise_multiplier=self.noise_multiplier,
            sample_rate=self.sample_rate,
            clip_norm=self.clip_norm,
            sampling=self.sampling,  # type: ignore[arg-type]
        )

    def event(self, n_clients: int) -> SubsampledGaussianEvent:
        """The accounting event of one round over ``n_clients`` registered agents."""
        return SubsampledGaussianEvent(
            self.noise_multiplier,
            self.sample_rate,
            self.sampling,  # type: ignore[arg-type]
            n_clients if self.sampling == "fixed_size" else None,
        )

    def curve(self, n_clients: int) -> EpsilonCurve:
        """Epsilon after ``T`` rounds, as a cached function of ``T`` (one per process for each
        event, delta and accountant: :func:`~optuna_fedbo.privacy._curve.shared_curve`)."""
        resolved = self.resolve(n_clients)
        assert resolved.delta is not None
        return shared_curve(
            resolved.event(n_clients),
            float(resolved.delta),
            self.accountant,  # type: ignore[arg-type]
        )

    def epsilon(self, rounds: int, n_clients: int) -> float:
        """Epsilon after ``rounds`` published rounds in a federation of ``n_clients`` agents."""
        return self.curve(n_clients).epsilon(rounds)

    def max_rounds(self, n_clients: int) -> int | None:
        """Rounds the budget allows (``None`` without a budget)."""
        if self.epsilon_budget is None:
            return None
        return self.curve(n_clients).max_rounds(self.epsilon_budget)

    # ---------------------------------------------------------------------- storage
    def to_dict(self) -> dict[str, Any]:
        """The configuration as a JSON object tagged with ``kind``."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {"kind": self.kind, **fields}

    @classmethod
    def from_dict(cls, record: Any) -> DPConfig:
        """Rebuild a configuration from :meth:`to_dict`'s output.

        Raises:
            ValueError: If the record is not a stored ``DPConfig``.
        """
        if not isinstance(record, dict) or record.get("kind") != cls.kind:
            raise ValueError(f"Not a stored DPConfig (kind {cls.kind!r}): {record!r}.")
        fields = dict(record)
        fields.pop("kind")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(fields) - names
        if unknown:
            raise ValueError(f"Unknown DPConfig fields {sorted(unknown)}.")
        return cls(**fields)


#: ``DPConfig(delta=PAPER_DELTA)``: the papers' ``delta = 1 / N^1.1`` (a weak guarantee for
#: small ``N``; the paper preset uses it to reproduce the papers' epsilons).
PAPER_DELTA: Final[str] = "1/N^1.1"

#: The default ``delta`` is ``min(1e-5, 0.01 / N)``: well below ``1 / N`` for any ``N``.
DEFAULT_DELTA: Final[float] = 1e-5


def safe_default_delta(n_clients: int) -> float:
    """The default ``delta`` for ``N`` participants: ``min(1e-5, 0.01 / N)``."""
    return min(DEFAULT_DELTA, 0.01 / n_clients)


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}.") from None
    if math.isnan(number):
        raise ValueError(f"{name} must be a number, got {value!r}.")
    return number


def _positive(name: str, value: Any) -> float:
    number = _number(name, value)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}.")
    return number


__all__ = ["DPConfig"]
