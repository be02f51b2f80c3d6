"""The Fed-PNE paper's configuration (Li et al., "Federated X-Armed Bandit", AAAI 2024).

An override with a value the paper does not use warns (:class:`PaperDepartureWarning`).
"""

from __future__ import annotations

from typing import Any

from optuna_fedbo.federation._paper import paper_preset
from optuna_fedbo.federation._paper import PaperDepartureWarning
from optuna_fedbo.federation.fedpne.config import FedPNEConfig

_FED_PNE = {
    "variant": ("paper",),  # Algorithms 1-2 as published
    "branching": (2,),  # App. E.1.5: a random binary partition
    "nu1": (1.0,),  # App. E.1.5
    "rho": (0.5,),  # App. E.1.5
    "c": (0.1, 2.0),  # App. E.1.5: c = 0.1 (c = 2 "also tuned")
    "c1": (1.0,),  # App. E.1.5 (c1 = (2M)^(1/8): constants="theory")
    "delta": (None,),  # 1/M (Lemma B.2)
    "constants": ("experiments", "theory"),
    "split": ("random", None),  # App. E.1.1/E.1.5: a uniformly random dimension is halved
    "representative": ("centre", None),  # the analysed strategy (Algorithm 1 pulls x_{h,i})
}


def fed_pne(horizon: int, **overrides: Any) -> FedPNEConfig:
    """Fed-PNE as in the paper's experiments (Section 4 and Appendix E.1.5).

    ``variant="paper"`` (Algorithms 1-2 as published), a random binary partition, ``nu1 = 1``,
    ``rho = 0.5``, ``c = 0.1``, ``c1 = 1``, ``delta = 1/M``, the centre of each node as its
    representative point. ``horizon`` is ``T``, the pulls per client; ``value_range`` (how
    objective values map to rewards in ``[0, 1]``) depends on the objective and never warns.
    DP-Fed-PNE (App. D) adds ``dp_epsilon`` and ``dp_delta``; the paper reports no experiment
    with it.

    Departures: none in the configuration. The paper's central HCT baseline uses ``rho = 0.75``
    (App. E.1.1), which is HCT's, not Fed-PNE's.
    """
    return paper_preset(
        "fed_pne",
        FedPNEConfig(horizon=horizon, variant="paper", split="random", representative="centre"),
        _FED_PNE,
        overrides,
    )


__all__ = ["PaperDepartureWarning", "fed_pne"]
