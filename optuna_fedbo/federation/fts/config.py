"""The FTS family's protocol configuration: :class:`FTSConfig` (FTS, FTS-DE, DP-FTS, DP-FTS-DE)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from typing import ClassVar

from optuna_fedbo.federation.config import _non_negative_int
from optuna_fedbo.federation.config import _positive_float
from optuna_fedbo.federation.config import _positive_int
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.fts.schedules import check_schedule_name
from optuna_fedbo.search_space import SearchSpaceEncoder


@dataclass(frozen=True)
class FTSConfig(ProtocolConfig):
    """Federated Thompson sampling (FTS) and its distributed-exploration variant (FTS-DE).

    Every participant fits a Bayesian linear model on ``n_features`` shared random Fourier
    features (drawn from the federation's public seed) and uploads one draw ``omega`` of its
    weights per round. The server combines the draws into one vector per sub-region (the
    modified FTS of DP-FTS-DE, ``aggregation="weighted"``) or relays them all so that each
    participant picks one at random (the original FTS, ``aggregation="sample"``).

    Args:
        n_features: Number of random features ``M``.
        lengthscale: SE kernel lengthscale of the shared features, in unit-cube coordinates.
        noise_variance: Noise variance ``lambda`` of the participants' standardized values.
        n_subregions: Number ``P`` of equal-volume sub-regions for distributed exploration;
            1 disables it (modified FTS / DP-FTS).
        weight_a: The softmax constant ``a`` of the sub-region weights (the paper uses 15).
        weight_hold_rounds: Rounds during which the weights keep their full exponent ``a + 1``.
        weight_decay_rounds: Rounds over which the exponent decays linearly to 1 (uniform
            weights). ``weight_hold_rounds = weight_decay_rounds = 0`` gives equal weights from
            the start (the "equal weights" ablation of the paper's appendix).
        n_init: Number of initial points per participant, drawn uniformly from the
            participant's sub-region (from the whole domain if ``init_in_subregion`` is false).
        init_in_subregion: Draw the initial points in the assigned sub-region (distributed
            exploration) rather than in the whole domain (the other ablation of the appendix).
        aggregation: ``"weighted"`` (DP-FTS-DE's server aggregation) or ``"sample"`` (the
            original FTS: the server relays every agent's vector and a participant draws one of
            the others' from ``P_N``, uniform over the agents that uploaded).
        schedule: Default ``p_t`` schedule of the participants (a name of
            :data:`optuna_fedbo.federation.fts.schedules.SCHEDULES`); a participant may override
            it with any callable.
        standardize: Fit (and share) each participant's values standardized by its own mean
            and standard deviation, so that scales and offsets do not matter. Set it to false
            when every participant reports values on a common scale of order one (e.g.
            accuracies): distributed exploration then compares sub-regions on that common
            scale, which per-participant standardization distorts early on, when each
            participant has only seen its own sub-region.
    """

    kind: ClassVar[str] = "fts"

    n_features: int = 100
    lengthscale: float = 0.2
    noise_variance: float = 1e-2
    n_subregions: int = 1
    weight_a: float = 15.0
    weight_hold_rounds: int = 10
    weight_decay_rounds: int = 30
    n_init: int = 10
    init_in_subregion: bool = True
    aggregation: str = "weighted"
    schedule: str = "1-1/t"
    standardize: bool = True

    def __post_init__(self) -> None:
        _positive_int("n_features", self.n_features)
        object.__setattr__(self, "lengthscale", _positive_float("lengthscale", self.lengthscale))
        object.__setattr__(
            self, "noise_variance", _positive_float("noise_variance", self.noise_variance)
        )
        _positive_int("n_subregions", self.n_subregions)
        object.__setattr__(self, "weight_a", _positive_float("weight_a", self.weight_a))
        _non_negative_int("weight_hold_rounds", self.weight_hold_rounds)
        _non_negative_int("weight_decay_rounds", self.weight_decay_rounds)
        _non_negative_int("n_init", self.n_init)
        if not isinstance(self.init_in_subregion, bool):
            raise ValueError(f"init_in_subregion must be a bool, got {self.init_in_subregion!r}.")
        if self.aggregation not in ("weighted", "sample"):
            raise ValueError(
                f"aggregation must be 'weighted' or 'sample', got {self.aggregation!r}."
            )
        if self.aggregation == "sample" and self.n_subregions != 1:
            raise ValueError(
                "aggregation='sample' (the original FTS) relays whole vectors and has no "
                f"sub-regions; use n_subregions=1, got {self.n_subregions}."
            )
        check_schedule_name(self.schedule)
        if not isinstance(self.standardize, bool):
            raise ValueError(f"standardize must be a bool, got {self.standardize!r}.")

    def check_privacy(self, privacy: Any) -> None:
        if self.aggregation != "weighted":
            raise ValueError(
                "DPConfig needs aggregation='weighted' (DP-FTS / DP-FTS-DE): the original FTS "
                "relays every agent's vector, which no amount of noise on an aggregate protects."
            )

    def check_search_space(self, encoder: SearchSpaceEncoder) -> None:
        if self.n_subregions > 1 and all(
            d.kind == "categorical" for d in encoder.encoding.dimensions
        ):
            raise ValueError(
                "Sub-regions split numeric parameters; this search space has only categorical "
                f"ones, so n_subregions must be 1 (got {self.n_subregions})."
            )


__all__ = ["FTSConfig"]
