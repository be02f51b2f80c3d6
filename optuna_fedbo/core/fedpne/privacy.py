"""DP-Fed-PNE: per-reward Gaussian noise and its (epsilon, delta, M)-federated DP guarantee.

Appendix D of the Fed-PNE paper: each client adds independent ``N(0, sigma^2)`` noise to every
reward before averaging (Algorithm 3, line 8) with ``sigma^2 = 2 log(1.25 / delta) / epsilon^2``
(Theorem D.1). Every reward enters exactly one released node mean, and a node mean is released
once (Remark D.1), so no composition over phases is needed; a reward lies in ``[0, 1]`` so the
sensitivity of a node's reward sum is 1, and the mean of ``t`` noisy rewards is the sum's
Gaussian mechanism with noise-to-sensitivity ratio ``sigma sqrt(t) >= sigma``: the worst case is
``t = 1``, a plain Gaussian mechanism with ratio ``sigma``.

Confidence constant (Remark D.2, Lemma D.3): noisy rewards are ``(1/4 + sigma^2)``-sub-Gaussian,
and Lemma D.3 replaces the theory's ``c = 2`` of Lemma B.2 by ``c = sqrt(4 + 16 sigma^2)``, i.e.
multiplies it by ``sqrt(1 + 4 sigma^2)``. The paper gives no DP constant for its experimental
``c = 0.1``; we apply the same factor to whatever ``c`` is configured
(:meth:`RewardPrivacy.confidence_factor`), which reproduces Lemma D.3 exactly for the theory
preset. The adjusted ``c`` enters both ``tau_h`` and the widths ``b_{h,i}`` (Remark D.2:
"we only have to change the value c ... and naturally the threshold value tau_h").

The paper's symbol ``delta`` is both the privacy delta and the confidence delta of ``tau_h``
(Theorem D.2 sets both to ``1/M``); here they are separate parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any

import numpy as np

from optuna_fedbo.privacy._rng import secure_rng


def _check_epsilon_delta(epsilon: float, delta: float) -> tuple[float, float]:
    try:
        epsilon, delta = float(epsilon), float(delta)
    except (TypeError, ValueError) as exc:
        raise ValueError("epsilon and delta must be real numbers.") from exc
    if not math.isfinite(epsilon) or epsilon <= 0.0:
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}.")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}.")
    return epsilon, delta


def gaussian_sigma(epsilon: float, delta: float) -> float:
    """The per-reward noise standard deviation of Theorem D.1.

    Args:
        epsilon: The privacy parameter ``epsilon > 0``.
        delta: The privacy parameter ``delta`` in ``(0, 1)``.

    Returns:
        ``sigma = sqrt(2 log(1.25 / delta)) / epsilon``.
    """
    epsilon, delta = _check_epsilon_delta(epsilon, delta)
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


@dataclass(frozen=True)
class RewardPrivacy:
    """The DP-Fed-PNE setting: Gaussian noise on each reward (Appendix D).

    Attributes:
        epsilon: Privacy parameter ``epsilon``.
        delta: Privacy parameter ``delta`` (independent of the confidence ``delta`` of
            ``tau_h``; the paper uses one symbol for both).
        adjust_confidence: Multiply the confidence constant ``c`` by ``sqrt(1 + 4 sigma^2)``
            (Lemma D.3). Turning it off keeps the non-private ``c`` (the confidence widths then
            ignore the added noise; documented for experiments only).
    """

    epsilon: float
    delta: float
    adjust_confidence: bool = True

    def __post_init__(self) -> None:
        epsilon, delta = _check_epsilon_delta(self.epsilon, self.delta)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)
        if not isinstance(self.adjust_confidence, bool):
            raise ValueError("adjust_confidence must be a bool.")

    @property
    def sigma(self) -> float:
        """The per-reward noise standard deviation (Theorem D.1)."""
        return gaussian_sigma(self.epsilon, self.delta)

    @property
    def confidence_factor(self) -> float:
        """The factor ``sqrt(1 + 4 sigma^2)`` applied to ``c`` (1 if not adjusted)."""
        if not self.adjust_confidence:
            return 1.0
        return math.sqrt(1.0 + 4.0 * self.sigma**2)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able plain data."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "adjust_confidence": self.adjust_confidence,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardPrivacy:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, dict) or set(data) != {"epsilon", "delta", "adjust_confidence"}:
            raise ValueError(
                "RewardPrivacy data must have keys epsilon, delta, adjust_confidence."
            )
        return cls(data["epsilon"], data["delta"], data["adjust_confidence"])


def privatize_rewards(
    rewards: np.ndarray, sigma: float, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Add independent ``N(0, sigma^2)`` noise to each reward (Algorithm 3, line 8).

    Args:
        rewards: Rewards in ``[0, 1]`` (the sensitivity argument of Remark D.1 needs it: clip
            before calling).
        sigma: The noise standard deviation (:func:`gaussian_sigma`).
        rng: Noise source. Defaults to :func:`optuna_fedbo.privacy._rng.secure_rng` (OS
            entropy); inject a generator only for reproducible tests.

    Returns:
        The noisy rewards (a new float array of the same shape).

    Raises:
        ValueError: If a reward is not finite or lies outside ``[0, 1]``, or ``sigma <= 0``.
    """
    rewards = np.asarray(rewards, dtype=float)
    if not np.all(np.isfinite(rewards)):
        raise ValueError("Rewards must be finite.")
    if np.any(rewards < 0.0) or np.any(rewards > 1.0):
        raise ValueError(
            "DP-Fed-PNE needs rewards in [0, 1] (sensitivity 1, Remark D.1); clip them first."
        )
    sigma = float(sigma)
    if not math.isfinite(sigma) or sigma <= 0.0:
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}.")
    if rng is None:
        rng = secure_rng()
    return rewards + rng.normal(0.0, sigma, size=rewards.shape)


def gaussian_mechanism_delta(epsilon: float, noise_ratio: float) -> float:
    """The exact ``delta(epsilon)`` of a Gaussian mechanism (Balle and Wang, 2018, Thm. 8).

    Args:
        epsilon: ``epsilon >= 0``.
        noise_ratio: Noise standard deviation divided by the L2 sensitivity.

    Returns:
        ``Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s)`` with ``s = noise_ratio``.
    """
    from scipy.special import log_ndtr
    from scipy.special import ndtr

    s = float(noise_ratio)
    a = 1.0 / (2.0 * s)
    first = ndtr(a - epsilon * s)
    second = math.exp(epsilon + float(log_ndtr(-a - epsilon * s)))
    return max(float(first - second), 0.0)


def gaussian_mechanism_epsilon(noise_ratio: float, delta: float) -> float:
    """The smallest ``epsilon`` for which a Gaussian mechanism is ``(epsilon, delta)``-DP.

    Args:
        noise_ratio: Noise standard deviation divided by the L2 sensitivity (> 0).
        delta: Target ``delta`` in ``(0, 1)``.

    Returns:
        The tight ``epsilon`` (0 if even ``epsilon = 0`` meets ``delta``).
    """
    from scipy.optimize import brentq

    s = float(noise_ratio)
    if not math.isfinite(s) or s <= 0.0:
        raise ValueError(f"noise_ratio must be a finite number > 0, got {noise_ratio!r}.")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}.")
    if gaussian_mechanism_delta(0.0, s) <= delta:
        return 0.0
    high = 1.0
    while gaussian_mechanism_delta(high, s) > delta:
        high *= 2.0
    return float(brentq(lambda e: gaussian_mechanism_delta(e, s) - delta, 0.0, high, xtol=1e-12))


@dataclass(frozen=True)
class FederatedDPGuarantee:
    """The (epsilon, delta, M)-federated DP guarantee of DP-Fed-PNE (Definition 2, Thm. D.1).

    Attributes:
        epsilon: The nominal ``epsilon`` the noise was calibrated for.
        delta: The privacy ``delta``.
        n_clients: ``M``.
        sigma: The per-reward noise standard deviation.
        tight_epsilon: The exact ``epsilon`` at ``delta`` of the worst-case release (one reward,
            ``t = 1``) by the analytic Gaussian mechanism; valid for every ``epsilon``.
        classic_bound_applies: Whether ``epsilon < 1``, the range in which the classic bound
            ``sigma = sqrt(2 log(1.25/delta))/epsilon`` (Dwork and Roth, Thm. A.1) is proven.
        description: A human-readable statement of the guarantee and its unit of protection.
    """

    epsilon: float
    delta: float
    n_clients: int
    sigma: float
    tight_epsilon: float
    classic_bound_applies: bool
    description: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able plain data."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "n_clients": self.n_clients,
            "sigma": self.sigma,
            "tight_epsilon": self.tight_epsilon,
            "classic_bound_applies": self.classic_bound_applies,
            "description": self.description,
        }


def federated_dp_guarantee(privacy: RewardPrivacy, n_clients: int) -> FederatedDPGuarantee:
    """Describe the guarantee of DP-Fed-PNE with ``M = n_clients`` clients.

    Args:
        privacy: The noise setting.
        n_clients: The number of clients ``M >= 2`` (Definition 2 needs ``M >= 2``).

    Returns:
        The guarantee. ``tight_epsilon <= epsilon`` whenever ``epsilon < 1``.
    """
    if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < 2:
        raise ValueError(f"n_clients must be an int >= 2 (Definition 2), got {n_clients!r}.")
    sigma = privacy.sigma
    tight = gaussian_mechanism_epsilon(sigma, privacy.delta)
    classic = privacy.epsilon < 1.0
    text = (
        f"DP-Fed-PNE is ({privacy.epsilon:g}, {privacy.delta:g}, {n_clients})-federated "
        "differentially private (Definition 2 and Theorem D.1 of the Fed-PNE paper): changing "
        "one reward of one client at one time step changes the distribution of every other "
        f"client's future actions by at most e^{privacy.epsilon:g} plus {privacy.delta:g}. "
        f"Each reward gets independent N(0, {sigma:.6g}^2) noise on the client before averaging; "
        "every reward enters exactly one node mean, released once (Remark D.1), so the whole run "
        "costs one Gaussian mechanism with sensitivity 1, no composition over phases. "
        f"Exact (analytic Gaussian) epsilon at this delta: {tight:.6g}."
    )
    if not classic:
        text += (
            " Note: the classic calibration is only proven for epsilon < 1; the exact epsilon "
            "above is the guarantee that holds."
        )
    return FederatedDPGuarantee(
        epsilon=privacy.epsilon,
        delta=privacy.delta,
        n_clients=n_clients,
        sigma=sigma,
        tight_epsilon=tight,
        classic_bound_applies=classic,
        description=text,
    )
