"""Differential privacy under secure aggregation: a federation's distributed Skellam mechanism.

``Federation.create(..., privacy=DPConfig(...), secure_aggregation=SecureAggregation(...))``
cannot run DP-FTS-DE's Algorithm 1 as the trusted server does: the server sees no single
vector, so it can neither clip one nor add noise to a sum it must not see unnoised. Each
participant therefore does its part (:mod:`optuna_fedbo.federation.fts.secure_dp`): it clips its
omega to ``S / sqrt(P)`` as the protocol does, weighs it for every sub-region with DP-FTS-DE's
public weights, rounds it to the fixed-point step and adds its share ``Sk(V / t)`` of Skellam
noise drawn from OS entropy, so that the sum of any ``t`` or more survivors carries ``Sk(V)`` or
more (:class:`~optuna_fedbo.core.secagg.distributed_dp.DistributedSkellam`). Creation turns the
``DPConfig`` into a :class:`DistributedDPConfig` that records those parameters (``N``, ``t``,
the input's dimension ``P M`` and the step), so that every party derives the same mechanism, and
the ledger the same epsilon.

**Threat model** (what the ledger's epsilon means here):

* Against the server and anyone reading the storage. The server learns the noisy sum of at least
  ``t`` participants (it sees it when it unmasks; it accounts it before it publishes it), and who
  took part: participation is **visible** (signed protocol messages in the storage), so the
  neighbouring relation is *zero-out*: one participant's vector replaced by zeros (sensitivity
  ``S`` before weighting, as add/remove-one has; replace-one costs at most twice epsilon).
* **No amplification by subsampling.** DP-FTS-DE's Poisson subsampling amplifies privacy only
  against whoever does not know who was sampled; the server would draw (or see) the sample, so
  the accounting uses ``q = 1`` and ``sample_rate`` must be 1. Participant-side self-sampling
  (each participant flips its own coin and, when not selected, still sends a masked zero with
  its noise share, so that the server cannot tell) would hide the sample from the server, but
  ``dp_accounting`` bounds subsampled Renyi DP for the Gaussian only, not for the Skellam
  mechanism, so it is not done: every participant's input is summed and accounted at ``q = 1``.
* Noise of dropouts is missing from the sum; each share is ``V / t``, so ``t`` survivors carry
  ``V`` and ``N`` carry ``N V / t`` (up to twice the noise variance the central mechanism needs).
* **Against a server that deviates from the protocol** (it unmasks an attempt's sum, then
  claims the attempt failed and starts the round over, or never publishes what it unmasked) the
  server's ledger bounds nothing, so participants count their own releases
  (:mod:`~optuna_fedbo.federation.secagg.spending`): before it sends a masked input, a
  participant records it in its own ledger in its key folder (outside the storage, only ever
  extended), on the same curve as the server's ledger (the Skellam Renyi DP bound converted by
  ``dp_accounting``), and once one more release would take its epsilon above ``epsilon_budget``
  it masks nothing more and takes no further part (a warning says so). An input masked again in
  a later attempt is noised afresh, so no noise share is ever in two sums and every sum is an
  independent release. What is guaranteed: whatever the server does, each participant's input
  is in at most as many noisy sums as its own count, so its epsilon (at the federation's delta,
  zero-out neighbours, while every sum carries ``t`` honest noise shares) is at most the budget;
  a rolled-back or recreated storage does not reset the count (a restarted process, or
  another worker of the site on the same host, reads the same file), and every masking is a new
  entry, only into an attempt after the newest it masked into (a rolled-back storage that
  publishes a counted attempt again is refused; the operator's ``restore-ledger`` is the one
  way back, and what is masked after it is counted again). The count starts at the
  masking, not at the unmask request, because a masked input can be unmasked without its
  sender: the self-mask shares of its holders and the survivor signatures of ``t`` others
  suffice.
* What remains: participants colluding with the server can subtract their own shares (the
  guarantee holds while ``t`` honest participants' noise is in the sum); a malicious participant
  can send any input within the ring. Without an ``epsilon_budget`` participants count but never
  stop. A participant's count can exceed the server's ledger: an attempt that fails after it
  masked counts for it (it cannot tell whether its input was unmasked), so with dropouts it may
  stop before the server does. A site whose workers run on several hosts keeps one count per
  host (per key folder), and no host sees the sum of them; the key folder itself is trusted (a
  participant that restores an old copy of it, or deletes the count, resets its own
  protection). Against an honest-but-curious server that runs this code, every sum it computes
  is also accounted in its ledger before it leaves the server process.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any
from typing import ClassVar

from optuna_fedbo.core.secagg.distributed_dp import DistributedSkellam
from optuna_fedbo.federation.dp_config import _number
from optuna_fedbo.federation.dp_config import _positive
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.privacy._skellam_curve import SKELLAM_ACCOUNTANT
from optuna_fedbo.privacy._skellam_curve import SkellamCurve

#: The ``sampling`` of the distributed mechanism: none (every participant's input is summed).
NO_SAMPLING = "none"


@dataclass(frozen=True)
class DistributedDPConfig(DPConfig):
    """A ``DPConfig`` as secure aggregation runs it: distributed Skellam noise, no subsampling.

    Made by :func:`distributed_privacy` at creation, never by hand. Besides ``DPConfig``'s
    ``noise_multiplier`` ``z``, ``clip_norm`` ``S``, ``delta`` and ``epsilon_budget`` it holds
    what the mechanism needs: ``n_participants`` ``N``, ``threshold`` ``t``, ``dimension`` (the
    length ``P M`` of a participant's weighted input) and ``step`` (the fixed-point step).
    ``sample_rate`` is 1, ``accountant`` is ``"skellam-rdp"`` and ``sampling`` is ``"none"``.
    """

    kind: ClassVar[str] = "distributed_skellam"

    accountant: str = SKELLAM_ACCOUNTANT
    sampling: str = NO_SAMPLING
    n_participants: int = 0
    threshold: int = 0
    dimension: int = 0
    step: float = 0.0

    def __post_init__(self) -> None:
        for name in ("noise_multiplier", "clip_norm", "step"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        if (
            _number("sample_rate", self.sample_rate) != 1.0
            or self.accountant != SKELLAM_ACCOUNTANT
            or self.sampling != NO_SAMPLING
        ):
            raise ValueError(
                "A distributed Skellam configuration has sample_rate 1.0, accountant "
                f"{SKELLAM_ACCOUNTANT!r} and sampling {NO_SAMPLING!r}."
            )
        object.__setattr__(self, "sample_rate", 1.0)
        delta = _number("delta", self.delta)
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}.")
        object.__setattr__(self, "delta", delta)
        if self.epsilon_budget is not None:
            object.__setattr__(
                self, "epsilon_budget", _positive("epsilon_budget", self.epsilon_budget)
            )
        for name in ("n_participants", "threshold", "dimension"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        self.mechanism()  # validates the threshold

    @property
    def neighbouring_relation(self) -> str:
        """``"zero-out"``: participation is visible to the server; its data is protected."""
        return "zero-out"

    def resolve(self, n_clients: int) -> DistributedDPConfig:
        """This configuration (already resolved), checked against ``n_clients``.

        Raises:
            ValueError: If ``n_clients`` is not the ``N`` it was made for.
        """
        if n_clients != self.n_participants:
            raise ValueError(
                f"This distributed DP configuration is for N = {self.n_participants} "
                f"participants, not {n_clients}."
            )
        return self

    def mechanism(self) -> DistributedSkellam:  # type: ignore[override]
        """The participants' mechanism."""
        return DistributedSkellam(
            n_participants=self.n_participants,
            threshold=self.threshold,
            clip_norm=self.clip_norm,
            step=self.step,
            dimension=self.dimension,
            noise_multiplier=self.noise_multiplier,
        )

    def event(self, n_clients: int) -> Any:
        """No ``dp_accounting`` event describes it: see :meth:`curve`."""
        raise ValueError("The distributed Skellam mechanism has no dp_accounting event.")

    def curve(self, n_clients: int) -> SkellamCurve:  # type: ignore[override]
        """Epsilon after ``T`` released sums: the Skellam RDP bound, no subsampling."""
        mechanism = self.resolve(n_clients).mechanism()
        assert isinstance(self.delta, float)
        return SkellamCurve(
            variance=mechanism.central_variance,
            l1=mechanism.l1_sensitivity,
            l2=mechanism.l2_sensitivity,
            delta=self.delta,
        )


def distributed_privacy(
    privacy: dict[str, Any], fts: Any, secure: dict[str, Any], n_clients: int
) -> dict[str, Any]:
    """The stored privacy of a federation with DP under secure aggregation.

    Args:
        privacy: The stored (resolved) ``DPConfig``.
        fts: The resolved ``FTSConfig`` (``aggregation="weighted"``).
        secure: The stored (resolved) ``SecureAggregation``.
        n_clients: ``N``.

    Raises:
        ValueError: For a combination that secure aggregation cannot honour (one line, naming
            the fix), or a ring that the noise would overflow.
    """
    config = DPConfig.from_dict(privacy)
    if config.sample_rate != 1.0:
        raise ValueError(
            f"DPConfig(sample_rate={config.sample_rate:g}) under secure aggregation: the server "
            "cannot subsample masked inputs so that it amplifies privacy against itself; use "
            "sample_rate=1.0 (the distributed noise is accounted without subsampling)."
        )
    if config.accountant != "rdp" or config.sampling != "poisson":
        raise ValueError(
            f"DPConfig(accountant={config.accountant!r}, sampling={config.sampling!r}) under "
            "secure aggregation: the distributed Skellam noise is accounted with Renyi DP and "
            "no subsampling only; use DPConfig(accountant='rdp', sample_rate=1.0)."
        )
    distributed = DistributedDPConfig(
        noise_multiplier=config.noise_multiplier,
        sample_rate=1.0,
        clip_norm=config.clip_norm,
        delta=config.delta,
        epsilon_budget=config.epsilon_budget,
        n_participants=n_clients,
        threshold=int(secure["threshold"]),
        dimension=int(fts.n_subregions * fts.n_features),
        step=float(secure["step"]),
    )
    mechanism = distributed.mechanism()
    if mechanism.l2_sensitivity > 2.0 * config.clip_norm / distributed.step:
        raise ValueError(
            f"SecureAggregation(step={distributed.step:g}) is too coarse for clip_norm "
            f"{config.clip_norm:g} in {distributed.dimension} coordinates (rounding would more "
            f"than double the sensitivity); use step <= "
            f"{config.clip_norm / math.sqrt(distributed.dimension):g}."
        )
    mechanism.ring()  # raises, naming the fix, if the summed noise could wrap the ring
    return distributed.to_dict()


def privacy_from_dict(record: Any) -> DPConfig:
    """A stored privacy configuration: a ``DPConfig`` or a :class:`DistributedDPConfig`.

    Raises:
        ValueError: If the record is neither.
    """
    if isinstance(record, dict) and record.get("kind") == DistributedDPConfig.kind:
        return DistributedDPConfig.from_dict(record)
    return DPConfig.from_dict(record)


__all__ = [
    "DistributedDPConfig",
    "NO_SAMPLING",
    "distributed_privacy",
    "privacy_from_dict",
]
