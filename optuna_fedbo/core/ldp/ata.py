"""(LDP-)ATA-GP-UCB: Nystrom features with feature-adaptive truncation (Algorithm 1, Theorem 2)."""

from __future__ import annotations

import math

import numpy as np

from optuna_fedbo.core.ldp.acquisition import GPUCBIndex
from optuna_fedbo.core.ldp.kernels import Kernel
from optuna_fedbo.core.ldp.nystrom import FeaturePosterior
from optuna_fedbo.core.ldp.nystrom import nystrom_embed
from optuna_fedbo.core.ldp.nystrom import NystromEmbedding
from optuna_fedbo.core.ldp.parameters import ata_beta
from optuna_fedbo.core.ldp.parameters import ata_truncation
from optuna_fedbo.core.ldp.parameters import check_accuracy
from optuna_fedbo.core.ldp.parameters import check_delta
from optuna_fedbo.core.ldp.parameters import check_horizon
from optuna_fedbo.core.ldp.parameters import nystrom_q
from optuna_fedbo.core.ldp.parameters import RewardModel
from optuna_fedbo.core.ldp.tgp import _check_scale


def truncated_estimate(
    features: np.ndarray,
    rewards: np.ndarray,
    levels: np.ndarray,
    regularization: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Lines 7-10 of Algorithm 1: the feature-adaptively truncated estimate ``theta``.

    With ``V = Phi^T Phi + lambda I`` and ``u_i^T`` the rows of ``V^(-1/2) Phi^T`` (symmetric
    square root)::

        r_i = sum_tau u_{i,tau} y_tau 1{|u_{i,tau} y_tau| <= b_tau},   theta = V^(-1/2) r

    Args:
        features: ``Phi``, shape ``(t, m)`` (one row per reward, repeats included).
        rewards: ``y_1..y_t``.
        levels: ``b_1..b_t``.
        regularization: ``lambda``.

    Returns:
        ``(theta, V)``.
    """
    import scipy.linalg

    m = features.shape[1]
    gram = features.T @ features + regularization * np.eye(m)
    eigenvalues, eigenvectors = scipy.linalg.eigh(gram)
    inverse_root = (eigenvectors / np.sqrt(eigenvalues)) @ eigenvectors.T
    u = inverse_root @ features.T  # (m, t)
    products = u * rewards[None, :]
    kept = np.abs(products) <= levels[None, :]
    r = np.sum(np.where(kept, products, 0.0), axis=1)
    return inverse_root @ r, gram


class ATAGPUCB:
    """The ATA-GP-UCB state machine: ``observe`` rewards, read the ``acquisition`` index.

    Round ``t`` (Algorithm 1): the embedding is re-sampled from all points played so far with
    ``NystromEmbed({(x_i, sigma_{t-1}(x_i))}_{i<=t}, q)`` (the embedding step Algorithm 3 writes
    as line 7, implicit in Algorithm 1's line 6), ``q = 6 rho ln(4T/delta) / varepsilon^2``;
    every past reward is re-truncated in the new feature coordinates (lines 7-10), and the next
    point maximizes ``mu_t(x) + beta_{t+1} sigma_t(x)`` (line 4) with ``b_tau`` and ``beta``
    from :func:`~.parameters.ata_truncation` and :func:`~.parameters.ata_beta` (Theorem 2 for
    LDP rewards). Within round ``t`` all levels ``b_tau`` use the current ``m_t`` (the union bound
    of Theorem 2 is over the ``m_t`` coordinates of round ``t``).

    Args:
        kernel: The kernel.
        rewards: The reward model (LDP or heavy-tailed).
        horizon: ``T``.
        delta: Confidence ``delta in (0, 1]``.
        regularization: ``lambda > 0``.
        accuracy: Nystrom accuracy ``varepsilon in (0, 1)``.
        beta_scale: Multiplier of the noise term of the theoretical ``beta`` (the ``B`` term is
            kept; 1 is the theorem).
        rng: Source of the dictionary sampling (algorithmic randomness, not privacy noise).
    """

    def __init__(
        self,
        kernel: Kernel,
        rewards: RewardModel,
        *,
        horizon: int,
        delta: float = 0.05,
        regularization: float = 1.0,
        accuracy: float = 0.5,
        beta_scale: float = 1.0,
        rng: np.random.Generator | None = None,
    ) -> None:
        if not (isinstance(regularization, (int, float)) and regularization > 0):
            raise ValueError(f"regularization must be positive, got {regularization!r}.")
        self.kernel = kernel
        self.rewards = rewards
        self.horizon = check_horizon(horizon)
        self.delta = check_delta(delta)
        self.regularization = float(regularization)
        self.accuracy = check_accuracy(accuracy)
        self.beta_scale = _check_scale(beta_scale)
        self.q = nystrom_q(self.accuracy, self.horizon, self.delta)
        self._rng = rng if rng is not None else np.random.default_rng()
        self._index: dict[bytes, int] = {}
        self._unique: list[np.ndarray] = []
        self._inverse: list[int] = []
        self._rewards: list[float] = []
        self.posterior = FeaturePosterior.prior(kernel, self.regularization)

    @property
    def t(self) -> int:
        """Number of rewards observed."""
        return len(self._rewards)

    @property
    def dimension(self) -> int:
        """``m_t``: the dimension of the current embedding."""
        return self.posterior.embedding.dimension

    def observe(self, x: np.ndarray, y: float) -> None:
        """Record the reward ``y`` of the point ``x`` (shape ``(D,)``) and update the model."""
        y = float(y)
        if not math.isfinite(y):
            raise ValueError(f"Rewards must be finite, got {y}.")
        x = np.asarray(x, dtype=float).reshape(-1)
        key = x.tobytes()
        if key not in self._index:
            self._index[key] = len(self._unique)
            self._unique.append(x)
        self._inverse.append(self._index[key])
        self._rewards.append(y)
        self._update()

    def _update(self) -> None:
        unique = np.array(self._unique)
        inverse = np.array(self._inverse)
        counts = np.bincount(inverse, minlength=len(unique))
        _, variances = self.posterior.predict(unique)  # sigma_{t-1}^2 at the played points
        embedding = nystrom_embed(self.kernel, unique, variances, self.q, self._rng, counts=counts)
        self._fit(embedding, unique, inverse)

    def _fit(self, embedding: NystromEmbedding, unique: np.ndarray, inverse: np.ndarray) -> None:
        m = embedding.dimension
        if m == 0:
            self.posterior = FeaturePosterior.prior(self.kernel, self.regularization)
            return
        features = embedding(unique)[inverse]
        # b_tau = b_1 tau^((1 - alpha) / (2 (1 + alpha))): one formula call, then the powers.
        alpha = float(self.rewards.moment_order)
        first = ata_truncation(1, m, self.rewards, horizon=self.horizon, delta=self.delta)
        levels = first * np.arange(1, self.t + 1) ** ((1.0 - alpha) / (2.0 * (1.0 + alpha)))
        theta, gram = truncated_estimate(
            features, np.array(self._rewards), levels, self.regularization
        )
        self.posterior = FeaturePosterior(embedding, theta, gram, self.regularization)

    def beta(self) -> float:
        """``beta_{t+1}`` (noise term times ``beta_scale``): the width of the next choice."""
        return ata_beta(
            self.t,
            self.dimension,
            self.rewards,
            horizon=self.horizon,
            delta=self.delta,
            regularization=self.regularization,
            accuracy=self.accuracy,
            width_scale=self.beta_scale,
        )

    def acquisition(self) -> GPUCBIndex:
        """The index ``mu_t(x) + beta_{t+1} sigma_t(x)`` to maximize."""
        return GPUCBIndex(self.posterior, self.beta())
