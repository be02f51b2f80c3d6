"""The parameters of the LDP-BO paper's algorithms, one function per formula.

Every function cites the statement it implements. Symbols: ``B`` bounds ``|f|`` and the RKHS norm
(``value_bound``), ``R`` bounds the observation noise (``noise_bound``), ``epsilon`` is the
privacy level, ``L = 2 (B + R) / epsilon`` the Laplace scale, ``lambda`` the regularization
(``regularization``), ``delta`` the confidence, ``T`` the horizon, ``varepsilon`` the accuracy of
the Nystrom approximation (``accuracy``), ``alpha`` the moment order of heavy-tailed rewards
(``E|y|^(1+alpha) <= v``, ``E|eta|^(1+alpha) <= c``), ``m`` the embedding dimension.

Two readings of the paper, fixed here once:

* ``ln 0``: Algorithm 2 sets ``b_{t-1} = B + R + L ln(t - 1)`` already at ``t = 1``. The first
  choice is made under the prior (``mu_0 = 0``, ``sigma_0 = 1``), where ``beta_1`` does not
  matter, so logarithms of the round index are taken of ``max(t, 1)``.
* The MoMA confidence width: Theorem 4 writes
  ``3 (9 m_n c)^(1/(1+alpha)) n^((1-alpha)/(2(1+alpha)))``, while its proof sketch
  (eq. 8-9) has ``lambda^(-1/2) 3 gamma`` with
  ``gamma = (9 m_n c)^(1/(1+alpha)) n^(1/(2(1+alpha)))`` and Corollary 1 copies the proof's
  exponent. We follow Theorem 4 for the exponent (for ``alpha = 1`` the median-of-means
  estimate concentrates at a rate free of ``n``, as in MENU of Shao et al. 2018, whose Chebyshev
  argument gives ``E||.||^2 <= m c``) and the proof for the factor ``lambda^(-1/2)``; both
  readings agree at ``lambda = 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
import math

from optuna_fedbo.privacy._laplace import laplace_scale


def _check_positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}.")
    return float(value)


def _check_non_negative(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a non-negative finite number, got {value!r}.")
    return float(value)


def check_delta(delta: float) -> float:
    """Validate a confidence level ``delta in (0, 1]`` (Theorems 2-4)."""
    if not (isinstance(delta, (int, float)) and 0 < delta <= 1):
        raise ValueError(f"delta must lie in (0, 1], got {delta!r}.")
    return float(delta)


def check_horizon(horizon: int) -> int:
    """Validate a horizon ``T >= 1``."""
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise ValueError(f"The horizon must be a positive integer, got {horizon!r}.")
    return horizon


@dataclass(frozen=True)
class LaplaceRewards:
    """Rewards released through CTL(epsilon): ``y + Laplace(L)`` with ``|y| <= B + R``.

    The privatized reward has every moment finite; the paper uses the second (``alpha = 1``).

    Attributes:
        epsilon: The privacy level ``epsilon > 0``.
        value_bound: ``B``: a bound on ``|f|`` and on the RKHS norm of ``f``.
        noise_bound: ``R``: a bound on the noise ``|eta|`` (0 for a noiseless objective).
    """

    epsilon: float
    value_bound: float
    noise_bound: float

    def __post_init__(self) -> None:
        laplace_scale(self.epsilon, self.value_bound, self.noise_bound)  # validates

    @property
    def private(self) -> bool:
        """Whether the rewards are privatized (``True``)."""
        return True

    @property
    def moment_order(self) -> float:
        """``alpha = 1``: the second moment is the one the paper's theorems use."""
        return 1.0

    @property
    def scale(self) -> float:
        """``L = 2 (B + R) / epsilon``."""
        return laplace_scale(self.epsilon, self.value_bound, self.noise_bound)

    @property
    def reward_moment(self) -> float:
        """``v = B^2 + R^2 + 8 (B + R)^2 / epsilon^2 = B^2 + R^2 + 2 L^2`` (Theorem 2).

        It is also ``K`` of Algorithm 2 (line 2): a bound on ``E[ybar^2]``.
        """
        return self.value_bound**2 + self.noise_bound**2 + 2.0 * self.scale**2

    @property
    def noise_moment(self) -> float:
        """``c = R^2 + 8 (B + R)^2 / epsilon^2 = R^2 + 2 L^2`` (Corollary 1)."""
        return self.noise_bound**2 + 2.0 * self.scale**2


@dataclass(frozen=True)
class HeavyTailedRewards:
    """Non-private rewards with a bounded ``(1 + alpha)``-th moment (Theorem 4's setting).

    Attributes:
        value_bound: ``B``: a bound on ``|f|`` and on the RKHS norm of ``f``.
        noise_moment: ``c`` with ``E[|eta|^(1+alpha) | F] <= c``.
        moment_order: ``alpha in (0, 1]``.
        reward_moment_bound: ``v`` with ``E[|y|^(1+alpha) | F] <= v``; ``None`` derives it:
            ``B^2 + c`` for ``alpha = 1`` (zero-mean noise; the paper's "v = B^2 + 3" for
            Student-t noise with 3 degrees of freedom) and ``2^alpha (B^(1+alpha) + c)``
            otherwise (convexity of ``|.|^(1+alpha)``).
    """

    value_bound: float
    noise_moment: float
    moment_order: float = 1.0
    reward_moment_bound: float | None = None

    def __post_init__(self) -> None:
        _check_positive("value_bound", self.value_bound)
        _check_positive("noise_moment", self.noise_moment)
        if not (isinstance(self.moment_order, (int, float)) and 0 < self.moment_order <= 1):
            raise ValueError(
                f"moment_order (alpha) must lie in (0, 1], got {self.moment_order!r}."
            )
        if self.reward_moment_bound is not None:
            _check_positive("reward_moment_bound", self.reward_moment_bound)

    @property
    def private(self) -> bool:
        """Whether the rewards are privatized (``False``)."""
        return False

    @property
    def reward_moment(self) -> float:
        """``v``: the bound on ``E[|y|^(1+alpha)]``."""
        if self.reward_moment_bound is not None:
            return float(self.reward_moment_bound)
        alpha = float(self.moment_order)
        if alpha == 1.0:
            return self.value_bound**2 + self.noise_moment
        return 2.0**alpha * (self.value_bound ** (1.0 + alpha) + self.noise_moment)


RewardModel = LaplaceRewards | HeavyTailedRewards


def _log_round(t: float) -> float:
    return math.log(max(float(t), 1.0))


def tgp_truncation(t: int, rewards: RewardModel) -> float:
    """The truncation level ``b_t`` of (LDP-)TGP-UCB.

    * LDP (Algorithm 2, line 4; Theorem 3): ``b_t = B + R + L ln t``: the Laplace tail makes a
      logarithmic level enough.
    * Heavy-tailed: ``b_t = v^(1/(1+alpha)) t^(1/(2(1+alpha)))``, the TGP-UCB level of Chowdhury
      and Gopalan (2019) that the paper recalls ("theta(t^(1/4))" for a finite variance).

    Args:
        t: Round index ``t >= 0`` (``ln`` of ``max(t, 1)``; the heavy-tailed level is 0 at 0).
        rewards: The reward model.
    """
    if isinstance(rewards, LaplaceRewards):
        return rewards.value_bound + rewards.noise_bound + rewards.scale * _log_round(t)
    alpha = float(rewards.moment_order)
    return rewards.reward_moment ** (1.0 / (1.0 + alpha)) * max(t, 0) ** (
        1.0 / (2.0 * (1.0 + alpha))
    )


def tgp_beta(
    t: int,
    rewards: RewardModel,
    *,
    information_gain: float,
    regularization: float,
    delta: float,
    width_scale: float = 1.0,
) -> float:
    """``beta_t`` of (LDP-)TGP-UCB, used to choose ``x_t`` from the posterior after ``t - 1``.

    * LDP (Algorithm 2, line 5; Theorem 3)::

        beta_t = B + 2 sqrt2 / sqrt(lambda) b_{t-1} sqrt(gamma_{t-1} + ln(1/delta))
                   + 1 / sqrt(lambda) sqrt(K (ln(t - 1) + 1)),   K = B^2 + R^2 + 2 L^2.

    * Heavy-tailed: the same decomposition (eq. 4: ``T_1`` + ``T_2``) with the moment bound in
      place of the Laplace tail: ``|E[eta_hat_tau]| <= v / b_tau^alpha`` and
      ``sum_{tau <= t} tau^(-alpha/(1+alpha)) <= (1 + alpha) t^(1/(1+alpha))`` give::

        beta_t = B + 2 sqrt2 / sqrt(lambda) b_{t-1} sqrt(gamma_{t-1} + ln(1/delta))
                   + 1 / sqrt(lambda) v^(1/(1+alpha)) sqrt((1 + alpha) (t - 1)^(1/(1+alpha))).

    ``gamma_{t-1}`` is passed as ``information_gain``: the proofs bound the self-normalized term
    by ``1/2 ln det(I + K_{t-1} / lambda)``, of which ``gamma_{t-1}`` is the worst case over
    point sets, so the information gain of the points actually played gives a valid (tighter,
    data-dependent) width.

    Args:
        t: The round ``t >= 1`` being chosen.
        rewards: The reward model.
        information_gain: ``1/2 ln det(I + K_{t-1} / lambda)`` of the first ``t - 1`` points.
        regularization: ``lambda > 0``.
        delta: Confidence ``delta in (0, 1]``.
        width_scale: Multiplier of the noise terms (all but ``B``); 1 is the theorem.
    """
    regularization = _check_positive("regularization", regularization)
    delta = check_delta(delta)
    previous = max(t - 1, 0)
    b_prev = tgp_truncation(previous, rewards)
    sqrt_lambda = math.sqrt(regularization)
    width = (
        2.0
        * math.sqrt(2.0)
        / sqrt_lambda
        * b_prev
        * math.sqrt(max(information_gain, 0.0) + math.log(1.0 / delta))
    )
    if isinstance(rewards, LaplaceRewards):
        truncation_bias = (
            math.sqrt(rewards.reward_moment * (_log_round(previous) + 1.0)) / sqrt_lambda
        )
    else:
        alpha = float(rewards.moment_order)
        truncation_bias = (
            rewards.reward_moment ** (1.0 / (1.0 + alpha))
            * math.sqrt((1.0 + alpha) * previous ** (1.0 / (1.0 + alpha)))
            / sqrt_lambda
        )
    return rewards.value_bound + _check_positive("width_scale", width_scale) * (
        width + truncation_bias
    )


def nystrom_rho(accuracy: float) -> float:
    """``rho = (1 + varepsilon) / (1 - varepsilon)`` (Theorems 2 and 4)."""
    accuracy = check_accuracy(accuracy)
    return (1.0 + accuracy) / (1.0 - accuracy)


def check_accuracy(accuracy: float) -> float:
    """Validate the Nystrom accuracy ``varepsilon in (0, 1)``."""
    if not (isinstance(accuracy, (int, float)) and 0 < accuracy < 1):
        raise ValueError(f"The Nystrom accuracy must lie in (0, 1), got {accuracy!r}.")
    return float(accuracy)


def nystrom_q(accuracy: float, horizon: int, delta: float) -> float:
    """The Nystrom oversampling ``q = 6 rho ln(4 T / delta) / varepsilon^2`` (Theorems 2, 4)."""
    accuracy = check_accuracy(accuracy)
    horizon = check_horizon(horizon)
    delta = check_delta(delta)
    return 6.0 * nystrom_rho(accuracy) * math.log(4.0 * horizon / delta) / accuracy**2


def _approximation_term(value_bound: float, accuracy: float) -> float:
    """``B / sqrt(1 - varepsilon)``: the part of ``B (1 + 1 / sqrt(1 - varepsilon))`` (Theorems 2
    and 4) that the Nystrom approximation adds to the exact-GP term ``B``."""
    return value_bound / math.sqrt(1.0 - check_accuracy(accuracy))


def ata_truncation(
    t: int, dimension: int, rewards: RewardModel, *, horizon: int, delta: float
) -> float:
    """The feature-space truncation level ``b_t`` of (LDP-)ATA-GP-UCB (Algorithm 1, line 9).

    Theorem 2 (``alpha = 1``): ``b_t = sqrt(v / ln(4 m_t T / delta))``. For a general ``alpha``
    (the heavy-tailed ATA-GP-UCB of Chowdhury and Gopalan 2019, whose ``alpha = 1`` case this
    is): ``b_t = (v / ln(4 m_t T / delta))^(1/(1+alpha)) t^((1-alpha)/(2(1+alpha)))``.

    Args:
        t: Index ``tau >= 1`` of the reward being truncated.
        dimension: ``m_t``, the current embedding dimension (at least 1 is used).
        rewards: The reward model.
        horizon: ``T``.
        delta: Confidence ``delta``.
    """
    horizon, delta = check_horizon(horizon), check_delta(delta)
    alpha = float(rewards.moment_order)
    log_term = math.log(4.0 * max(dimension, 1) * horizon / delta)
    return (rewards.reward_moment / log_term) ** (1.0 / (1.0 + alpha)) * max(t, 1) ** (
        (1.0 - alpha) / (2.0 * (1.0 + alpha))
    )


def ata_beta(
    t: int,
    dimension: int,
    rewards: RewardModel,
    *,
    horizon: int,
    delta: float,
    regularization: float,
    accuracy: float,
    width_scale: float = 1.0,
) -> float:
    """``beta_{t+1}`` of (LDP-)ATA-GP-UCB, used to choose ``x_{t+1}`` after ``t`` rewards.

    Theorem 2 (``alpha = 1``)::

        beta_{t+1} = B (1 + 1 / sqrt(1 - varepsilon)) + 4 sqrt(ln(4 m_t T / delta) v m_t / lambda)

    (the theorem prints the privacy ``epsilon`` inside ``sqrt(1 - .)``; it is the Nystrom
    accuracy, as in Theorem 4). For a general ``alpha`` the second term is
    ``4 sqrt(m_t / lambda) v^(1/(1+alpha)) ln(4 m_t T / delta)^(alpha/(1+alpha))
    t^((1-alpha)/(2(1+alpha)))``. With ``m_t = 0`` (no embedding yet) the second term is 0.
    ``width_scale`` multiplies every term but ``B``: the approximation term
    ``B / sqrt(1 - varepsilon)`` and the noise term, as it multiplies every term but ``B`` in
    :func:`tgp_beta`; 1 is the theorem.
    """
    horizon, delta = check_horizon(horizon), check_delta(delta)
    regularization = _check_positive("regularization", regularization)
    width_scale = _check_positive("width_scale", width_scale)
    approximation = _approximation_term(rewards.value_bound, accuracy)
    if dimension <= 0:
        return rewards.value_bound + width_scale * approximation
    alpha = float(rewards.moment_order)
    log_term = math.log(4.0 * dimension * horizon / delta)
    width = (
        4.0
        * math.sqrt(dimension / regularization)
        * rewards.reward_moment ** (1.0 / (1.0 + alpha))
        * log_term ** (alpha / (1.0 + alpha))
        * max(t, 1) ** ((1.0 - alpha) / (2.0 * (1.0 + alpha)))
    )
    return rewards.value_bound + width_scale * (approximation + width)


def moma_epoch_length(horizon: int, delta: float) -> int:
    """``k = ceil(24 ln(4 e T / delta))`` plays per epoch (Algorithm 3, line 3; Theorem 4)."""
    horizon, delta = check_horizon(horizon), check_delta(delta)
    return math.ceil(24.0 * math.log(4.0 * math.e * horizon / delta))


#: The fewest epochs :func:`practical_epoch_length` leaves in a horizon.
MIN_PRACTICAL_EPOCHS = 10


def practical_epoch_length(horizon: int, delta: float) -> int:
    """MoMA's ``k`` at tuning budgets: ``min(ceil(ln(4 e T / delta)), max(1, floor(T / 10)))``.

    The theorem's ``k = ceil(24 ln(4eT/delta))`` (:func:`moma_epoch_length`) is 202 plays at
    ``T = 20`` and 295 at ``T = 1000``: one epoch at most, or three, i.e. GP-UCB with three
    distinct points. The constant 24 comes from a Chernoff bound that makes the median of ``k``
    estimates fail with probability ``delta / T`` *uniformly over all epochs*; the ``ln(T /
    delta)`` growth is what makes the median robust, and it is kept. Dropping the constant (the
    paper's experiments use parameters "order-wise similar" to the theorems') gives 9 plays at
    ``T = 20``, 11 at 150, 13 at 1000 and 15 at 10,000; the cap ``T / 10`` then guarantees at
    least ten epochs (``k = 2`` at ``T = 20``). The price: the confidence of the
    median-of-means step is no longer the theorem's ``1 - delta``; with ``k`` below 3 the
    median of the ``k - 1`` distances cannot reject an outlier and the choice among the ``k``
    estimates is arbitrary (each is still an unbiased least-squares estimate).
    """
    horizon, delta = check_horizon(horizon), check_delta(delta)
    order = math.ceil(math.log(4.0 * math.e * horizon / delta))
    return max(1, min(order, horizon // MIN_PRACTICAL_EPOCHS))


#: Floor of :func:`practical_regularization`.
MIN_PRACTICAL_REGULARIZATION = 0.01


def practical_regularization(rewards: RewardModel) -> float:
    """``lambda = 4 c / B^2``: the noise variance of the rewards relative to the spread of ``f``.

    The theorems fix ``lambda`` (1 in the GP-UCB analyses they build on) and pay for the
    mismatch with a wide ``beta``. At tuning budgets the posterior mean itself matters: with
    ``lambda = 1`` and Laplace noise of variance ``2 L^2 = 8 (B + R)^2 / epsilon^2`` (8 times
    ``B^2`` at ``epsilon = 1``, ``R = 0``) it chases the noise. The GP posterior of a function
    of prior standard deviation ``s`` (kernel ``s^2 k``) under noise of variance ``c`` equals
    that of kernel ``k`` with ``lambda = c / s^2``, the Bayes-optimal ridge. ``c`` is the bound
    on the second moment of the noise the theorems already use: ``R^2 + 2 L^2`` for LDP rewards
    (Corollary 1), ``c`` (``alpha = 1``) or ``c^(2 / (1 + alpha))`` for heavy-tailed ones. ``s =
    B / 2``: ``B`` bounds ``|f|``, and a function that spans ``[-B, B]`` has a standard
    deviation of about ``B / 2`` over the domain (the maximum of a GP draw over a cube is 2-3
    prior standard deviations). On GP draws (``benchmarks/ldp_gp_draws.py``, development seeds)
    ``4 c / B^2`` beat ``c / B^2``, ``16 c / B^2`` and ``lambda = 1``.
    The floor :data:`MIN_PRACTICAL_REGULARIZATION` applies to nearly noiseless rewards (large
    ``epsilon``): it keeps the Gram matrices well conditioned, and keeps the Nystrom sampling
    (probability ``q sigma^2``, and ``sigma^2`` of a played point is about ``lambda``) from
    dropping the played points out of the dictionary.
    """
    alpha = float(rewards.moment_order)
    noise = rewards.noise_moment ** (2.0 / (1.0 + alpha))
    return max(4.0 * noise / rewards.value_bound**2, MIN_PRACTICAL_REGULARIZATION)


def resolve_regularization(regularization: float | str, rewards: RewardModel) -> float:
    """``lambda`` from ``"practical"`` (:func:`practical_regularization`) or a positive number.

    Raises:
        ValueError: For any other value.
    """
    if regularization == "practical":
        return practical_regularization(rewards)
    if isinstance(regularization, str):
        raise ValueError(
            f"regularization must be 'practical' or a positive number, got {regularization!r}."
        )
    return _check_positive("regularization", regularization)


def moma_beta(
    n: int,
    dimension: int,
    rewards: RewardModel,
    *,
    regularization: float,
    accuracy: float,
    width_scale: float = 1.0,
) -> float:
    """``beta_{n+1}`` of (LDP-)MoMA-GP-UCB, used to choose ``x_{n+1}`` after ``n`` epochs.

    Theorem 4 / Corollary 1 (``c`` of Corollary 1 for LDP rewards: ``R^2 + 8 (B + R)^2 /
    epsilon^2``; see the module docstring for the ``n`` exponent and ``lambda``)::

        beta_{n+1} = B (1 + 1 / sqrt(1 - varepsilon))
                     + 3 lambda^(-1/2) (9 m_n c)^(1/(1+alpha)) n^((1-alpha)/(2(1+alpha)))

    ``width_scale`` multiplies every term but ``B`` (as in :func:`ata_beta`); 1 is the theorem.
    """
    regularization = _check_positive("regularization", regularization)
    width_scale = _check_positive("width_scale", width_scale)
    approximation = _approximation_term(rewards.value_bound, accuracy)
    alpha = float(rewards.moment_order)
    width = (
        3.0
        / math.sqrt(regularization)
        * (9.0 * max(dimension, 0) * rewards.noise_moment) ** (1.0 / (1.0 + alpha))
        * max(n, 1) ** ((1.0 - alpha) / (2.0 * (1.0 + alpha)))
    )
    return rewards.value_bound + width_scale * (approximation + width)
