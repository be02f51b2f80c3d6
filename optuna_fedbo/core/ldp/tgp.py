"""(LDP-)TGP-UCB: GP-UCB on rewards truncated once, at arrival (Algorithm 2, Theorem 3)."""

from __future__ import annotations

import math

import numpy as np

from optuna_fedbo.core.ldp.acquisition import GPUCBIndex
from optuna_fedbo.core.ldp.gp import ExactGPPosterior
from optuna_fedbo.core.ldp.kernels import Kernel
from optuna_fedbo.core.ldp.parameters import check_delta
from optuna_fedbo.core.ldp.parameters import resolve_regularization
from optuna_fedbo.core.ldp.parameters import RewardModel
from optuna_fedbo.core.ldp.parameters import tgp_beta
from optuna_fedbo.core.ldp.parameters import tgp_truncation


def _check_scale(beta_scale: float) -> float:
    if not (isinstance(beta_scale, (int, float)) and math.isfinite(beta_scale) and beta_scale > 0):
        raise ValueError(f"beta_scale must be a positive finite number, got {beta_scale!r}.")
    return float(beta_scale)


class TGPUCB:
    """The TGP-UCB state machine: ``observe`` rewards, read the ``acquisition`` index.

    Round ``t`` (Algorithm 2): the reward ``ybar_t`` is kept if ``|ybar_t| <= b_t`` and replaced
    by 0 otherwise (line 8), once and for all; the exact GP posterior (eq. 2-3, lines 9-10) of
    the truncated rewards gives ``mu_t`` and ``sigma_t``, and the next point maximizes
    ``mu_t(x) + beta_{t+1} sigma_t(x)`` (line 6). ``b_t`` and ``beta_t`` come from
    :func:`~.parameters.tgp_truncation` and :func:`~.parameters.tgp_beta` (LDP rewards: Theorem 3;
    heavy-tailed rewards: the TGP-UCB levels of Chowdhury and Gopalan 2019).

    The theoretical ``beta`` is conservative by orders of magnitude (the paper's experiments use
    parameters "order-wise similar to those recommended by the theorems"). ``beta_scale``
    multiplies its noise terms, the ones that grow with ``ln t``, ``gamma_t`` and ``1/epsilon``,
    and keeps the ``B`` term, so that exploration never drops below the scale of ``f``;
    ``beta_scale = 1`` is the theorem.

    Args:
        kernel: The kernel.
        rewards: :class:`~.parameters.LaplaceRewards` (LDP-TGP-UCB) or
            :class:`~.parameters.HeavyTailedRewards` (TGP-UCB).
        delta: Confidence ``delta in (0, 1]``.
        regularization: ``lambda > 0``, or ``"practical"`` (default) for
            :func:`~.parameters.practical_regularization`, ``4 c / B^2``; the theorems' analyses
            use 1.
        beta_scale: Multiplier of the noise terms of the theoretical ``beta``.
    """

    def __init__(
        self,
        kernel: Kernel,
        rewards: RewardModel,
        *,
        delta: float = 0.05,
        regularization: float | str = "practical",
        beta_scale: float = 1.0,
    ) -> None:
        self.kernel = kernel
        self.rewards = rewards
        self.delta = check_delta(delta)
        self.regularization = resolve_regularization(regularization, rewards)
        self.beta_scale = _check_scale(beta_scale)
        self._index: dict[bytes, int] = {}
        self._unique: list[np.ndarray] = []
        self._counts: list[float] = []
        self._sums: list[float] = []
        self._t = 0
        self.n_truncated = 0
        self._posterior: ExactGPPosterior | None = None

    @property
    def t(self) -> int:
        """Number of rewards observed."""
        return self._t

    def observe(self, x: np.ndarray, y: float) -> None:
        """Record the reward ``y`` (privatized for LDP) of the point ``x`` (shape ``(D,)``)."""
        y = float(y)
        if not math.isfinite(y):
            raise ValueError(f"Rewards must be finite, got {y}.")
        x = np.asarray(x, dtype=float).reshape(-1)
        level = tgp_truncation(self.t + 1, self.rewards)
        kept = abs(y) <= level
        self.n_truncated += int(not kept)
        key = x.tobytes()
        if key not in self._index:
            self._index[key] = len(self._unique)
            self._unique.append(x)
            self._counts.append(0.0)
            self._sums.append(0.0)
        i = self._index[key]
        self._counts[i] += 1.0
        self._sums[i] += y if kept else 0.0
        self._t += 1
        self._posterior = None

    @property
    def posterior(self) -> ExactGPPosterior:
        """The exact GP posterior of the truncated rewards (``mu_t``, ``sigma_t``)."""
        if self._posterior is None:
            dims = self._unique[0].shape[0] if self._unique else 1
            self._posterior = ExactGPPosterior(
                self.kernel,
                np.array(self._unique).reshape(-1, dims),
                np.array(self._counts),
                np.array(self._sums),
                self.regularization,
            )
        return self._posterior

    def beta(self) -> float:
        """``beta_{t+1}`` (noise terms times ``beta_scale``): the width of the next choice."""
        return tgp_beta(
            self.t + 1,
            self.rewards,
            information_gain=self.posterior.information_gain,
            regularization=self.regularization,
            delta=self.delta,
            width_scale=self.beta_scale,
        )

    def acquisition(self) -> GPUCBIndex:
        """The index ``mu_t(x) + beta_{t+1} sigma_t(x)`` to maximize."""
        return GPUCBIndex(self.posterior, self.beta())
