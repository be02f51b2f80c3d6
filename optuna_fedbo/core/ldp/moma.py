"""(LDP-)MoMA-GP-UCB: epochs of repeated plays and median-of-means estimates (Algorithm 3)."""

from __future__ import annotations

import numpy as np

from optuna_fedbo.core.ldp.acquisition import GPUCBIndex
from optuna_fedbo.core.ldp.kernels import Kernel
from optuna_fedbo.core.ldp.nystrom import FeaturePosterior
from optuna_fedbo.core.ldp.nystrom import nystrom_embed
from optuna_fedbo.core.ldp.parameters import check_accuracy
from optuna_fedbo.core.ldp.parameters import check_delta
from optuna_fedbo.core.ldp.parameters import check_horizon
from optuna_fedbo.core.ldp.parameters import moma_beta
from optuna_fedbo.core.ldp.parameters import moma_epoch_length
from optuna_fedbo.core.ldp.parameters import nystrom_q
from optuna_fedbo.core.ldp.parameters import RewardModel
from optuna_fedbo.core.ldp.tgp import _check_scale


def median_of_means_index(estimates: np.ndarray, gram: np.ndarray) -> tuple[int, np.ndarray]:
    """Lines 11-12 of Algorithm 3: the estimate closest, in median, to the others.

    ``r_j = median{||theta_j - theta_s||_V : s != j}`` and ``k* = argmin_j r_j``. The median of
    the ``k - 1`` distances is NumPy's (the mean of the two middle values when ``k - 1`` is even);
    ties in ``r`` go to the smallest index.

    Args:
        estimates: The ``k`` least-squares estimates, shape ``(k, m)``.
        gram: ``V``, shape ``(m, m)``.

    Returns:
        ``(k_star, r)`` with ``r`` of shape ``(k,)``.
    """
    estimates = np.atleast_2d(np.asarray(estimates, dtype=float))
    k = estimates.shape[0]
    if k == 1:
        return 0, np.zeros(1)
    inner = estimates @ gram @ estimates.T
    diag = np.diag(inner)
    distances = np.sqrt(np.maximum(diag[:, None] + diag[None, :] - 2.0 * inner, 0.0))
    off_diagonal = distances[~np.eye(k, dtype=bool)].reshape(k, k - 1)
    radii = np.median(off_diagonal, axis=1)
    return int(np.argmin(radii)), radii


class MoMAGPUCB:
    """The MoMA-GP-UCB state machine: ``add_epoch`` results, read the ``acquisition`` index.

    Epoch ``n`` (Algorithm 3): the point ``x_n`` maximizing ``mu_{n-1}(x) + beta_n sigma_{n-1}(x)``
    is played ``k`` times (the caller plays it and passes the ``k`` rewards to
    :meth:`add_epoch`); the embedding is re-sampled from the ``n`` epoch points with their
    ``sigma_{n-1}`` (line 7); ``k`` least-squares estimates are fitted, the ``j``-th on the
    ``j``-th reward of every epoch (line 10), and the one with the smallest median distance to
    the others in the ``V``-norm gives the new mean (lines 11-13). ``k = ceil(24 ln(4eT/delta))``
    (:func:`~.parameters.moma_epoch_length`) unless ``epoch_length`` overrides it; ``beta`` is
    :func:`~.parameters.moma_beta` (Theorem 4, Corollary 1 for LDP rewards), its noise term
    multiplied by ``beta_scale``. The ``j``-th reward of an epoch is the ``j``-th entry passed;
    any fixed assignment of plays to rows is the algorithm's (an epoch's plays are exchangeable).

    Args:
        kernel: The kernel.
        rewards: The reward model (LDP or heavy-tailed).
        horizon: ``T``; it must hold at least one epoch.
        delta: Confidence ``delta in (0, 1]``.
        epoch_length: ``k``; ``None`` uses the theorem's value. Smaller values are the
            practical, "order-wise similar" choice when ``T`` is small.
        regularization: ``lambda > 0``.
        accuracy: Nystrom accuracy ``varepsilon in (0, 1)``.
        beta_scale: Multiplier of the noise term of the theoretical ``beta`` (the ``B`` term is
            kept; 1 is the theorem).
        rng: Source of the dictionary sampling (algorithmic randomness, not privacy noise).

    Raises:
        ValueError: If the horizon is shorter than one epoch.
    """

    def __init__(
        self,
        kernel: Kernel,
        rewards: RewardModel,
        *,
        horizon: int,
        delta: float = 0.05,
        epoch_length: int | None = None,
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
        if epoch_length is None:
            epoch_length = moma_epoch_length(self.horizon, self.delta)
        elif (
            isinstance(epoch_length, bool) or not isinstance(epoch_length, int) or epoch_length < 1
        ):
            raise ValueError(f"epoch_length must be a positive integer, got {epoch_length!r}.")
        if epoch_length > self.horizon:
            raise ValueError(
                f"The horizon T = {self.horizon} is smaller than one MoMA epoch of "
                f"k = {epoch_length} plays (k = ceil(24 ln(4eT/delta)) unless epoch_length is "
                "given); increase the horizon or set a smaller epoch_length."
            )
        self.epoch_length = int(epoch_length)
        self.regularization = float(regularization)
        self.accuracy = check_accuracy(accuracy)
        self.beta_scale = _check_scale(beta_scale)
        self.q = nystrom_q(self.accuracy, self.horizon, self.delta)
        self._rng = rng if rng is not None else np.random.default_rng()
        self._points: list[np.ndarray] = []
        self._rewards: list[np.ndarray] = []
        self.last_selection: int | None = None
        self.posterior = FeaturePosterior.prior(kernel, self.regularization)

    @property
    def n_epochs(self) -> int:
        """``n``: the number of completed epochs."""
        return len(self._points)

    @property
    def n_epochs_in_horizon(self) -> int:
        """``N = floor(T / k)`` (Algorithm 3, line 3)."""
        return self.horizon // self.epoch_length

    @property
    def dimension(self) -> int:
        """``m_n``: the dimension of the current embedding."""
        return self.posterior.embedding.dimension

    def add_epoch(self, x: np.ndarray, rewards: np.ndarray) -> None:
        """Record the ``k`` rewards of one epoch's point ``x`` (shape ``(D,)``); update the model.

        Raises:
            ValueError: If ``rewards`` does not hold exactly ``k`` finite values.
        """
        rewards = np.asarray(rewards, dtype=float).reshape(-1)
        if rewards.shape != (self.epoch_length,):
            raise ValueError(
                f"An epoch has k = {self.epoch_length} rewards, got {rewards.shape[0]}."
            )
        if not np.all(np.isfinite(rewards)):
            raise ValueError("Rewards must be finite.")
        self._points.append(np.asarray(x, dtype=float).reshape(-1))
        self._rewards.append(rewards)
        points = np.array(self._points)
        _, variances = self.posterior.predict(points)  # sigma_{n-1}^2 at the epoch points
        embedding = nystrom_embed(self.kernel, points, variances, self.q, self._rng)
        m = embedding.dimension
        if m == 0:
            self.posterior = FeaturePosterior.prior(self.kernel, self.regularization)
            return
        features = embedding(points)  # (n, m)
        gram = features.T @ features + self.regularization * np.eye(m)
        table = np.array(self._rewards)  # (n, k): row i = epoch i, column j = play j
        estimates = np.linalg.solve(gram, features.T @ table).T  # (k, m)
        best, _ = median_of_means_index(estimates, gram)
        self.last_selection = best
        self.posterior = FeaturePosterior(embedding, estimates[best], gram, self.regularization)

    def beta(self) -> float:
        """``beta_{n+1}`` (noise term times ``beta_scale``): the width of the next epoch."""
        return moma_beta(
            self.n_epochs,
            self.dimension,
            self.rewards,
            regularization=self.regularization,
            accuracy=self.accuracy,
            width_scale=self.beta_scale,
        )

    def acquisition(self) -> GPUCBIndex:
        """The index ``mu_n(x) + beta_{n+1} sigma_n(x)`` to maximize."""
        return GPUCBIndex(self.posterior, self.beta())
