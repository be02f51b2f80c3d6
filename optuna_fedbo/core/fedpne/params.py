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
        node_pulls: ``None`` (the paper): ``tau_h`` is Eqn. (3). An int ``n``: the *tuning
            schedule*, ``tau_h = ceil(n (1 + 4 sigma^2))`` at every depth (``sigma`` the
            DP-Fed-PNE noise, 0 without DP), so every node gets about ``n`` pulls over all
            clients and a phase costs each client ``|K^p| ceil(tau_h / M)`` trials, whatever
            the depth. A departure from the paper (see :meth:`tuning`).
        max_survivors: ``None`` (the paper): only Eqn. (1) eliminates. An int ``S``: after
            Eqn. (1), keep at most the ``S`` nodes with the largest means (a beam); the others
            are eliminated too. A departure from the paper (see :meth:`tuning`).
        spread_bonus: With ``max_survivors``: the beam ranks nodes by their mean plus this
            times the spread of the participants' means (``None``: by the mean); see
            :func:`~optuna_fedbo.core.fedpne.elimination.beam_scores`.
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
    node_pulls: int | None = None
    max_survivors: int | None = None
    spread_bonus: float | None = None

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
        for name in ("node_pulls", "max_survivors"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        if self.spread_bonus is not None:
            bonus = float(self.spread_bonus)
            if not math.isfinite(bonus) or bonus < 0.0:
                raise ValueError(f"spread_bonus must be >= 0, got {self.spread_bonus!r}.")
            object.__setattr__(self, "spread_bonus", bonus)
        if self.node_pulls == 1:
            raise ValueError(
                "node_pulls must be >= 2: with tau_h <= 1 Algorithm 2 (line 5) keeps expanding."
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

    @classmethod
    def tuning(
        cls,
        horizon: int,
        n_clients: int,
        *,
        dim: int = 1,
        node_pulls: int | None = None,
        max_survivors: int | None = None,
        spread_bonus: float = 1.0,
        privacy: RewardPrivacy | None = None,
        max_phase_nodes: int = 100_000,
    ) -> FedPNEParams:
        """Constants for tuning budgets (tens to a few hundred pulls per client).

        Three departures from Algorithm 2, because Eqn. (3) and Eqn. (1) are sized for
        horizons of thousands of pulls (pair them with uniform pulls and longest-side splits,
        :class:`~optuna_fedbo.core.fedpne.partition.Partition`, as ``FedPNEConfig`` does):

        * **Schedule** (``node_pulls``): Eqn. (3) makes ``tau_h`` grow like ``4^h``; with the
          paper's constants, ``M = 10`` and ``T = 200`` a node of depth 6 needs 312 pulls, so
          the phase of depth 6 does not fit in the budget and the run ends inside it, pulling
          every surviving node (far ones too) until the horizon. The tuning schedule gives
          every node of every depth the same ``n`` pulls over all clients (``n (1 + 4
          sigma^2)`` under DP, the variance factor of Lemma D.3), so phases stay short and
          the tree keeps deepening. The unbiasedness of the global means (every client pulls
          every node equally often, Section 3.1) is kept. On Garland, DoubleSine and Bumps2D
          (``benchmarks/fedpne_tuning.py``) one pull per client and node did best for
          ``M = 2..20``; ``n = 10`` cost up to 3x the regret at ``M = 2``.
        * **Beam** (``max_survivors``, default ``2 + dim``, ``dim`` the dimension of the
          partitioned cube): Eqn. (1) with ``nu1 = 1`` in reward units eliminates
          nothing until ``nu1 rho^h`` is small, so the node set doubles phase after phase. The
          beam keeps the ``S`` best-estimated survivors, so a phase holds at most ``k S``
          nodes. It can cut the node of the optimum when the estimates are within noise of
          each other (Lemma B.3 no longer holds); at that point the kept nodes are about as
          good, which is what costs little regret at small budgets. A wider beam explores
          more and exploits less: on Garland and DoubleSine (1-D) ``S = 3`` had 10-25% less
          cumulative regret than ``S = 4``; on Bumps2D ``S = 4`` found the narrow global peak
          more often (recommendation regret 0.144 vs 0.177) at the same cumulative regret.
        * **Optimism** (``spread_bonus``, default 1): the beam ranks nodes by their mean plus
          the spread of the participants' means, so a cell with a narrow peak (low average,
          high spread) is not cut in favour of a broad lower plateau. In the core simulator
          (10 seeds, ``M = 10, T = 200``) it cut the recommendation's regret on Bumps2D from
          0.144 to 0.133 and on DoubleSine from 0.015 to 0.011, and cost Garland 0.010 ->
          0.016 (cumulative regret within 10% everywhere); on 20 held-out seeds (10-29):
          Bumps2D 0.175 -> 0.139, DoubleSine 0.0150 -> 0.0131, Garland 0.0153 -> 0.0169.

        The widths ``b_{h,i}`` and the rule of Eqn. (1) are unchanged (with the paper's
        experimental ``c = 0.1, c1 = 1, delta = 1/M``). Use the plain constructor for the
        paper's algorithm.
        """
        return cls(
            horizon=horizon,
            n_clients=n_clients,
            privacy=privacy,
            max_phase_nodes=max_phase_nodes,
            node_pulls=max(2, n_clients) if node_pulls is None else node_pulls,
            max_survivors=2 + _positive_int("dim", dim)
            if max_survivors is None
            else max_survivors,
            spread_bonus=spread_bonus,
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
        """``tau_h`` for nodes of depth ``h`` (Eqn. 3 with the effective ``c``; or the tuning
        schedule ``ceil(node_pulls (1 + 4 sigma^2))``)."""
        if self.node_pulls is not None:
            factor = 1.0 if self.privacy is None else self.privacy.confidence_factor
            return math.ceil(self.node_pulls * factor**2)
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
            "node_pulls": self.node_pulls,
            "max_survivors": self.max_survivors,
            "spread_bonus": self.spread_bonus,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FedPNEParams:
        """Inverse of :meth:`to_dict`."""
        keys = {"horizon", "n_clients", "nu1", "rho", "c", "c1", "delta", "privacy"}
        keys.add("max_phase_nodes")
        optional = {
            "node_pulls",
            "max_survivors",
            "spread_bonus",
        }  # absent in states saved before they existed
        if not isinstance(data, dict) or not keys <= set(data) <= keys | optional:
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
            node_pulls=data.get("node_pulls"),
            max_survivors=data.get("max_survivors"),
            spread_bonus=data.get("spread_bonus"),
        )
