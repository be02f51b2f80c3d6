"""Distributed DP under secure aggregation: every participant adds its share of Skellam noise.

A participant clips its vector to L2 norm ``clip_norm``, rounds it to the fixed-point step (the
integer vector has L2 norm at most ``D2 = clip_norm / step + sqrt(d) / 2``, since rounding moves
each coordinate by at most ``1/2``, and L1 norm at most ``D1 = sqrt(d) D2``), adds
``Sk(V / t)`` noise drawn from OS entropy on every coordinate, and hands the result to its
:class:`~optuna_fedbo.core.secagg.client.SecAggClient`. The server only ever sees the masked
vectors and the sum of at least ``t`` of them, whose noise is ``Sk(s V / t)`` for ``s >= t``
survivors: at least the central mechanism's ``Sk(V)``, ``V = (z D2)^2`` for noise multiplier
``z``. Accounting: :func:`~optuna_fedbo.privacy._skellam.skellam_epsilon` with ``V``, ``D1``,
``D2`` (add/remove one participant), composed over rounds.

Threat model and price:

* Against the server (and anyone reading the storage): it sees the sum, which carries ``Sk(V)``
  or more. There is **no amplification by subsampling**: the server chooses or sees who takes part
  in a round, so the accounting uses ``q = 1``.
* Dropped participants' noise shares are missing from the sum; scaling every share to ``V / t``
  makes ``t`` survivors enough. The price: with all ``N`` surviving the sum carries ``N / t`` times
  the needed variance (at most 2x since ``t > N / 2``, i.e. a noise standard deviation up to
  ``sqrt(2)`` times the central mechanism's).
* Participants colluding with the server can subtract their own noise shares: the guarantee holds
  when at least ``t`` honest participants' inputs are in the sum. A malicious participant can send
  any in-range value (nothing checks a masked input's norm without zero-knowledge proofs).
* The ring is sized for the summed noise of all ``N`` participants with failure probability
  ``wrap_probability`` (Chernoff tail, union over coordinates); :func:`plan_ring` refuses
  configurations that would need more than 64 bits.
"""

from __future__ import annotations

from dataclasses import dataclass
import math

import numpy as np

from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.ring import RingSpec
from optuna_fedbo.core.secagg.ring import to_ring
from optuna_fedbo.privacy._gaussian import clip_to_norm
from optuna_fedbo.privacy._rng import secure_rng
from optuna_fedbo.privacy._skellam import skellam_epsilon
from optuna_fedbo.privacy._skellam import skellam_noise
from optuna_fedbo.privacy._skellam import skellam_tail_bound


@dataclass(frozen=True)
class DistributedSkellam:
    """The distributed Skellam mechanism of one federation.

    Attributes:
        n_participants: ``N``, the most participants in a sum.
        threshold: ``t``: the fewest survivors whose sum is released.
        clip_norm: L2 bound of one participant's vector.
        step: Fixed-point step.
        dimension: Vector length.
        noise_multiplier: ``z``: central noise standard deviation over ``D2``.
        wrap_probability: Allowed probability that the summed noise wraps the ring.
    """

    n_participants: int
    threshold: int
    clip_norm: float
    step: float
    dimension: int
    noise_multiplier: float
    wrap_probability: float = 2.0**-40

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= self.n_participants:
            raise ValueError(
                f"threshold must be in [1, N = {self.n_participants}], got {self.threshold}."
            )
        for name in ("clip_norm", "step", "noise_multiplier"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}.")

    @property
    def sample_rate(self) -> float:
        """``1``: no subsampling (the server would know whom it sampled: no amplification)."""
        return 1.0

    @property
    def l2_sensitivity(self) -> float:
        """``D2 = clip_norm / step + sqrt(d) / 2`` (integer units)."""
        return self.clip_norm / self.step + math.sqrt(self.dimension) / 2.0

    @property
    def l1_sensitivity(self) -> float:
        """``D1 = sqrt(d) D2``."""
        return math.sqrt(self.dimension) * self.l2_sensitivity

    @property
    def central_variance(self) -> float:
        """``V = (z D2)^2``: the per-coordinate noise variance of the released sum (at least)."""
        return float((self.noise_multiplier * self.l2_sensitivity) ** 2)

    @property
    def share_variance(self) -> float:
        """``V / t``: the variance each participant adds."""
        return self.central_variance / self.threshold

    def ring(self) -> RingSpec:
        """The ring for ``N`` clipped inputs plus all ``N`` noise shares (see the module)."""
        noise = skellam_tail_bound(
            self.n_participants * self.share_variance, self.dimension, self.wrap_probability
        )
        return plan_ring(
            n_inputs=self.n_participants,
            bound=self.clip_norm,
            step=self.step,
            dimension=self.dimension,
            noise_bound=noise,
        )

    def participant_input(
        self, values: np.ndarray, ring: RingSpec, rng: np.random.Generator | None = None
    ) -> np.ndarray:
        """Clip, round, add this participant's noise share, reduce into ``ring``.

        Args:
            values: The participant's vector, shape ``(dimension,)``.
            ring: The round's ring (from :meth:`ring`).
            rng: Only tests and research simulations pass one; by default OS entropy.
        """
        if ring.step != self.step or ring.dimension != self.dimension:
            raise ValueError("the ring's step or dimension differs from the mechanism's.")
        clipped = clip_to_norm(np.asarray(values, dtype=float), self.clip_norm * (1 - 1e-12))
        levels = np.rint(clipped / self.step).astype(np.int64)
        noise = skellam_noise(self.share_variance, self.dimension, rng or secure_rng())
        return to_ring(levels + noise, ring)

    def epsilon(self, *, rounds: int, delta: float) -> float:
        """Epsilon after ``rounds`` released sums (no subsampling; add/remove one participant)."""
        return skellam_epsilon(
            variance=self.central_variance,
            l1=self.l1_sensitivity,
            l2=self.l2_sensitivity,
            rounds=rounds,
            delta=delta,
        )
