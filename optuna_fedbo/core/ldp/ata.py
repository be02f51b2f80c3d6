"""(LDP-)ATA-GP-UCB: Nystrom features with feature-adaptive truncation (Algorithm 1, Theorem 2)."""

from __future__ import annotations

import math

import numpy as np

from optuna_fedbo.core.ldp.acquisition import GPUCBIndex
from optuna_fedbo.core.ldp.kernels import Kernel
from optuna_fedbo.core.ldp.nystrom import check_dictionary_size
from optuna_fedbo.core.ldp.nystrom import DEFAULT_MAX_DICTIONARY_SIZE
from optuna_fedbo.core.ldp.nystrom import FeaturePosterior
from optuna_fedbo.core.ldp.nystrom import nystrom_embed
from optuna_fedbo.core.ldp.nystrom import NystromEmbedding
from optuna_fedbo.core.ldp.parameters import ata_beta
from optuna_fedbo.core.ldp.parameters import ata_truncation
from optuna_fedbo.core.ldp.parameters import check_accuracy
from optuna_fedbo.core.ldp.parameters import check_delta
from optuna_fedbo.core.ldp.parameters import check_horizon
from optuna_fedbo.core.ldp.parameters import nystrom_q
from optuna_fedbo.core.ldp.parameters import resolve_regularization
from optuna_fedbo.core.ldp.parameters import RewardModel
from optuna_fedbo.core.ldp.tgp import _check_scale


def truncated_estimate(
    features: np.ndarray,
    rewards: np.ndarray,
    levels: np.ndarray,
    regularization: float,
    *,
    inverse: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lines 7-10 of Algorithm 1: the feature-adaptively truncated estimate ``theta``.

    With ``V = Phi^T Phi + lambda I`` and ``u_i^T`` the rows of ``V^(-1/2) Phi^T`` (symmetric
    square root)::

        r_i = sum_tau u_{i,tau} y_tau 1{|u_{i,tau} y_tau| <= b_tau},   theta = V^(-1/2) r

    ``u_{., tau}`` depends on ``x_tau`` only, so with ``inverse`` the features are given once per
    distinct point: the matrix products cost ``O(m^2 u)`` for ``u`` distinct points and only the
    truncation itself ``O(m t)``.

    Args:
        features: ``Phi``, shape ``(t, m)`` (one row per reward, repeats included), or one row
            per distinct point with ``inverse``.
        rewards: ``y_1..y_t``.
        levels: ``b_1..b_t``.
        regularization: ``lambda``.
        inverse: Row of ``features`` of each reward, shape ``(t,)``; ``None``: row ``tau``.

    Returns:
        ``(theta, V, W)`` with ``W = V^(-1/2) features^T`` (shape ``(m, len(features))``), from
        which the variances at the rows follow: ``phi^T V^{-1} phi = ||W[:, i]||^2``.
    """
    import scipy.linalg

    m = features.shape[1]
    if inverse is None:
        inverse = np.arange(features.shape[0])
    counts = np.bincount(inverse, minlength=features.shape[0]).astype(float)
    gram = (features * counts[:, None]).T @ features + regularization * np.eye(m)
    eigenvalues, eigenvectors = scipy.linalg.eigh(gram)
    inverse_root = (eigenvectors / np.sqrt(eigenvalues)) @ eigenvectors.T
    whitened = inverse_root @ features.T
    products = whitened[:, inverse] * rewards[None, :]  # u_{i, tau} y_tau, shape (m, t)
    kept = np.abs(products) <= levels[None, :]
    r = np.sum(np.where(kept, products, 0.0), axis=1)
    return inverse_root @ r, gram, whitened


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
        regularization: ``lambda > 0``, or ``"practical"`` (default) for
            :func:`~.parameters.practical_regularization`, ``4 c / B^2``; the theorems' analyses
            use 1.
        accuracy: Nystrom accuracy ``varepsilon in (0, 1)``.
        beta_scale: Multiplier of every term of the theoretical ``beta`` but ``B`` (the
            Nystrom term ``B / sqrt(1 - varepsilon)`` and the noise term); 1 is the theorem.
        max_dictionary_size: Bound on the Nystrom dictionary (see
            :func:`~.nystrom.nystrom_embed`), so that a round costs ``O(m^2 t)`` at most instead
            of ``O(t^3)``; ``None`` is the paper's unbounded dictionary.
        rng: Source of the dictionary sampling (algorithmic randomness, not privacy noise).
    """

    def __init__(
        self,
        kernel: Kernel,
        rewards: RewardModel,
        *,
        horizon: int,
        delta: float = 0.05,
        regularization: float | str = "practical",
        accuracy: float = 0.5,
        beta_scale: float = 1.0,
        max_dictionary_size: int | None = DEFAULT_MAX_DICTIONARY_SIZE,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.kernel = kernel
        self.rewards = rewards
        self.horizon = check_horizon(horizon)
        self.delta = check_delta(delta)
        self.regularization = resolve_regularization(regularization, rewards)
        self.accuracy = check_accuracy(accuracy)
        self.beta_scale = _check_scale(beta_scale)
        self.q = nystrom_q(self.accuracy, self.horizon, self.delta)
        self.max_dictionary_size = check_dictionary_size(max_dictionary_size)
        self._rng = rng if rng is not None else np.random.default_rng()
        self._index: dict[bytes, int] = {}
        self._unique = np.zeros((0, 0))
        self._inverse = np.zeros(0, dtype=int)
        self._rewards = np.zeros(0)
        self.posterior = FeaturePosterior.prior(kernel, self.regularization)
        # sigma_t^2 at the distinct played points, kept from the last fit (the next round's
        # dictionary sampling needs them, and the fit yields them at no extra cost).
        self._variances = np.zeros(0)

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
            self._unique = np.vstack([self._unique.reshape(-1, len(x)), x])
            _, variance = self.posterior.predict(x)
            self._variances = np.append(self._variances, variance)
        self._inverse = np.append(self._inverse, self._index[key])
        self._rewards = np.append(self._rewards, y)
        self._update()

    def _update(self) -> None:
        unique = self._unique
        inverse = self._inverse
        counts = np.bincount(inverse, minlength=len(unique))
        variances = self._variances  # sigma_{t-1}^2 at the played points
        embedding = nystrom_embed(
            self.kernel,
            unique,
            variances,
            self.q,
            self._rng,
            counts=counts,
            max_size=self.max_dictionary_size,
        )
        self._fit(embedding, unique, inverse)

    def _fit(self, embedding: NystromEmbedding, unique: np.ndarray, inverse: np.ndarray) -> None:
        m = embedding.dimension
        if m == 0:
            self.posterior = FeaturePosterior.prior(self.kernel, self.regularization)
            self._variances = self.kernel.diag(unique)
            return
        features = embedding(unique)
        # b_tau = b_1 tau^((1 - alpha) / (2 (1 + alpha))): one formula call, then the powers.
        alpha = float(self.rewards.moment_order)
        first = ata_truncation(1, m, self.rewards, horizon=self.horizon, delta=self.delta)
        levels = first * np.arange(1, self.t + 1) ** ((1.0 - alpha) / (2.0 * (1.0 + alpha)))
        theta, gram, whitened = truncated_estimate(
            features, self._rewards, levels, self.regularization, inverse=inverse
        )
        self.posterior = FeaturePosterior(embedding, theta, gram, self.regularization)
        self._variances = np.maximum(
            self.kernel.diag(unique)
            - np.sum(features * features, axis=1)
            + self.regularization * np.sum(whitened * whitened, axis=0),
            0.0,
        )

    def beta(self) -> float:
        """``beta_{t+1}`` (all but ``B`` times ``beta_scale``): the width of the next choice."""
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
