"""(LDP-)MoMA-GP-UCB: epochs of repeated plays and median-of-means estimates (Algorithm 3)."""

from __future__ import annotations

import numpy as np

from optuna_fedbo.core.ldp.acquisition import GPUCBIndex
from optuna_fedbo.core.ldp.kernels import Kernel
from optuna_fedbo.core.ldp.nystrom import check_dictionary_size
from optuna_fedbo.core.ldp.nystrom import DEFAULT_MAX_DICTIONARY_SIZE
from optuna_fedbo.core.ldp.nystrom import FeaturePosterior
from optuna_fedbo.core.ldp.nystrom import nystrom_embed
from optuna_fedbo.core.ldp.parameters import check_accuracy
from optuna_fedbo.core.ldp.parameters import check_delta
from optuna_fedbo.core.ldp.parameters import check_horizon
from optuna_fedbo.core.ldp.parameters import moma_beta
from optuna_fedbo.core.ldp.parameters import moma_epoch_length
from optuna_fedbo.core.ldp.parameters import nystrom_q
from optuna_fedbo.core.ldp.parameters import practical_epoch_length
from optuna_fedbo.core.ldp.parameters import resolve_regularization
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


def resolve_epoch_length(epoch_length: int | str, horizon: int, delta: float) -> int:
    """MoMA's ``k`` from ``"practical"``, ``"theorem"`` or an integer, checked against ``T``.

    Raises:
        ValueError: For an unknown name, a non-positive ``k``, or ``k > T``.
    """
    if epoch_length == "practical":
        k = practical_epoch_length(horizon, delta)
    elif epoch_length == "theorem":
        k = moma_epoch_length(horizon, delta)
    elif isinstance(epoch_length, bool) or not isinstance(epoch_length, int) or epoch_length < 1:
        raise ValueError(
            "epoch_length must be 'practical', 'theorem' or a positive integer, got "
            f"{epoch_length!r}."
        )
    else:
        k = epoch_length
    if k > horizon:
        raise ValueError(
            f"The horizon T = {horizon} is smaller than one MoMA epoch of k = {k} plays "
            f"(epoch_length={epoch_length!r}); increase the horizon or use "
            "epoch_length='practical' (at least ten epochs at any horizon)."
        )
    return int(k)


class MoMAGPUCB:
    """The MoMA-GP-UCB state machine: ``add_epoch`` results, read the ``acquisition`` index.

    Epoch ``n`` (Algorithm 3): the point ``x_n`` maximizing ``mu_{n-1}(x) + beta_n sigma_{n-1}(x)``
    is played ``k`` times (the caller plays it and passes the ``k`` rewards to
    :meth:`add_epoch`); the embedding is re-sampled from the ``n`` epoch points with their
    ``sigma_{n-1}`` (line 7); ``k`` least-squares estimates are fitted, the ``j``-th on the
    ``j``-th reward of every epoch (line 10), and the one with the smallest median distance to
    the others in the ``V``-norm gives the new mean (lines 11-13). The theorem's
    ``k = ceil(24 ln(4eT/delta))`` (:func:`~.parameters.moma_epoch_length`) leaves no epoch
    below ``T = 202`` and three at ``T = 1000``, so the default is the "order-wise similar"
    :func:`~.parameters.practical_epoch_length` (trade-off documented there); ``beta`` is
    :func:`~.parameters.moma_beta` (Theorem 4, Corollary 1 for LDP rewards), all its terms
    but ``B`` multiplied by ``beta_scale``. The ``j``-th reward of an epoch is the ``j``-th entry
    passed; any fixed assignment of plays to rows is the algorithm's (an epoch's plays are
    exchangeable).

    Args:
        kernel: The kernel.
        rewards: The reward model (LDP or heavy-tailed).
        horizon: ``T``; it must hold at least one epoch.
        delta: Confidence ``delta in (0, 1]``.
        epoch_length: ``k``: ``"practical"`` (default) for
            :func:`~.parameters.practical_epoch_length` (``ceil(ln(4eT/delta))``, at most
            ``T / 10``: at least ten epochs at any horizon), ``"theorem"`` for
            ``ceil(24 ln(4eT/delta))`` (Algorithm 3; three epochs at ``T = 1000``, none below
            ``T = 202``), or a positive integer.
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

    Raises:
        ValueError: If the horizon is shorter than one epoch (only possible with the theorem's
            or an explicit ``k``).
    """

    def __init__(
        self,
        kernel: Kernel,
        rewards: RewardModel,
        *,
        horizon: int,
        delta: float = 0.05,
        epoch_length: int | str = "practical",
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
        self.epoch_length = resolve_epoch_length(epoch_length, self.horizon, self.delta)
        self.regularization = resolve_regularization(regularization, rewards)
        self.accuracy = check_accuracy(accuracy)
        self.beta_scale = _check_scale(beta_scale)
        self.q = nystrom_q(self.accuracy, self.horizon, self.delta)
        self.max_dictionary_size = check_dictionary_size(max_dictionary_size)
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
        embedding = nystrom_embed(
            self.kernel, points, variances, self.q, self._rng, max_size=self.max_dictionary_size
        )
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
        """``beta_{n+1}`` (all but ``B`` times ``beta_scale``): the width of the next epoch."""
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
