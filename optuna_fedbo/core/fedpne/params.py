"""Fed-PNE parameters: the paper's experimental defaults and its theoretical constants."""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any

from optuna_fedbo.core.fedpne.privacy import RewardPrivacy
from optuna_fedbo.core.fedpne.schedule import confidence_width
from optuna_fedbo.core.fedpne.schedule import log_term
from optuna_fedbo.core.fedpne.schedule import pulls_per_client
from optuna_fedbo.core.fedpne.schedule import threshold


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")
    return int(value)


def _positive_float(name: str, value: Any) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real number, got {value!r}.") from exc
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    return value


@dataclass(frozen=True)
class FedPNEParams:
    """The constants of Fed-PNE (Algorithm 2) for one federation.

    Defaults are the paper's experimental settings (Appendix E.1.5): ``nu1 = 1``, ``rho = 0.5``,
    ``c = 0.1``, ``c1 = 1``. The experiments do not state ``delta``; the default ``None`` means
    ``delta = 1/M``, the value Theorem 3.1 (and Theorem D.2) sets. :meth:`theory` gives the
    constants for which the regret bound is proven.

    Attributes:
        horizon: ``T``, the number of pulls (rounds) per client.
        n_clients: ``M``, the number of clients.
        nu1: Smoothness constant ``nu1`` (Assumption 2).
        rho: Smoothness constant ``rho`` in ``(0, 1)``.
        c: Confidence constant ``c`` (before the DP adjustment).
        c1: Confidence constant ``c1``.
        delta: Confidence parameter ``delta`` in ``(0, 1]``; ``None`` for ``1/M``.
        privacy: DP-Fed-PNE noise setting (Appendix D), or ``None`` for plain Fed-PNE.
        max_phase_nodes: Safety bound on the size of a phase's node set.
    """

    horizon: int
    n_clients: int
    nu1: float = 1.0
    rho: float = 0.5
    c: float = 0.1
    c1: float = 1.0
    delta: float | None = None
    privacy: RewardPrivacy | None = None
    max_phase_nodes: int = 100_000

    def __post_init__(self) -> None:
        object.__setattr__(self, "horizon", _positive_int("horizon", self.horizon))
        object.__setattr__(self, "n_clients", _positive_int("n_clients", self.n_clients))
        object.__setattr__(self, "nu1", _positive_float("nu1", self.nu1))
        rho = _positive_float("rho", self.rho)
        if rho >= 1.0:
            raise ValueError(f"rho must lie in (0, 1), got {rho!r}.")
        object.__setattr__(self, "rho", rho)
        object.__setattr__(self, "c", _positive_float("c", self.c))
        object.__setattr__(self, "c1", _positive_float("c1", self.c1))
        if self.delta is not None:
            delta = _positive_float("delta", self.delta)
            if delta > 1.0:
                raise ValueError(f"delta must lie in (0, 1], got {delta!r}.")
            object.__setattr__(self, "delta", delta)
        if self.privacy is not None and not isinstance(self.privacy, RewardPrivacy):
            raise ValueError("privacy must be a RewardPrivacy or None.")
        object.__setattr__(
            self, "max_phase_nodes", _positive_int("max_phase_nodes", self.max_phase_nodes)
        )
        # Fail early if log(c1 T / delta) <= 0.
        log_term(self.c1, self.horizon, self.confidence_delta)

    @classmethod
    def theory(
        cls,
        horizon: int,
        n_clients: int,
        *,
        nu1: float = 1.0,
        rho: float = 0.5,
        privacy: RewardPrivacy | None = None,
        max_phase_nodes: int = 100_000,
    ) -> FedPNEParams:
        """The constants of the regret analysis.

        ``c = 2`` and ``c1 = (2M)^(1/8)``, the smallest values Lemma B.2 allows, and
        ``delta = 1/M`` (Theorem 3.1). With ``privacy`` the effective ``c`` becomes
        ``sqrt(4 + 16 sigma^2)`` and ``c1`` stays ``(2M)^(1/8)``, exactly Lemma D.3.
        Appendix E.1.5 reports that these explore more slowly (larger regret, lower variance).
        """
        return cls(
            horizon=horizon,
            n_clients=n_clients,
            nu1=nu1,
            rho=rho,
            c=2.0,
            c1=(2.0 * n_clients) ** 0.125,
            delta=1.0 / n_clients,
            privacy=privacy,
            max_phase_nodes=max_phase_nodes,
        )

    # ----------------------------------------------------------------------------- derived
    @property
    def confidence_delta(self) -> float:
        """The ``delta`` of ``tau_h`` and ``b_{h,i}`` (``1/M`` when not given)."""
        return self.delta if self.delta is not None else 1.0 / self.n_clients

    @property
    def log_term(self) -> float:
        """``log(c1 T / delta)``."""
        return log_term(self.c1, self.horizon, self.confidence_delta)

    @property
    def effective_c(self) -> float:
        """``c``, times ``sqrt(1 + 4 sigma^2)`` under DP (Lemma D.3, Remark D.2)."""
        factor = 1.0 if self.privacy is None else self.privacy.confidence_factor
        return self.c * factor

    def tau(self, depth: int) -> int:
        """``tau_h`` for nodes of depth ``h`` (Eqn. 3, with the effective ``c``)."""
        return threshold(
            depth, c=self.effective_c, log_c1t_delta=self.log_term, nu1=self.nu1, rho=self.rho
        )

    def pulls_per_client(self, depth: int) -> int:
        """``t_{m,h,i} = ceil(tau_h / M)``."""
        return pulls_per_client(self.tau(depth), self.n_clients)

    def width(self, total_pulls: int) -> float:
        """``b_{h,i} = c sqrt(log(c1 T / delta) / T_{h,i})`` with the effective ``c``."""
        return confidence_width(
            c=self.effective_c, log_c1t_delta=self.log_term, total_pulls=total_pulls
        )

    def smoothness(self, depth: int) -> float:
        """``nu1 rho^h``, the variation of the objective inside a node of depth ``h``."""
        return self.nu1 * self.rho**depth

    # ----------------------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """JSON-able plain data."""
        return {
            "horizon": self.horizon,
            "n_clients": self.n_clients,
            "nu1": self.nu1,
            "rho": self.rho,
            "c": self.c,
            "c1": self.c1,
            "delta": self.delta,
            "privacy": None if self.privacy is None else self.privacy.to_dict(),
            "max_phase_nodes": self.max_phase_nodes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FedPNEParams:
        """Inverse of :meth:`to_dict`."""
        keys = {"horizon", "n_clients", "nu1", "rho", "c", "c1", "delta", "privacy"}
        keys.add("max_phase_nodes")
        if not isinstance(data, dict) or set(data) != keys:
            raise ValueError(f"FedPNEParams data must be a dict with keys {sorted(keys)}.")
        privacy = data["privacy"]
        return cls(
            horizon=data["horizon"],
            n_clients=data["n_clients"],
            nu1=data["nu1"],
            rho=data["rho"],
            c=data["c"],
            c1=data["c1"],
            delta=data["delta"],
            privacy=None if privacy is None else RewardPrivacy.from_dict(privacy),
            max_phase_nodes=data["max_phase_nodes"],
        )
