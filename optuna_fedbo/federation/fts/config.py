"""The FTS family's protocol configuration: :class:`FTSConfig` (FTS, FTS-DE, DP-FTS, DP-FTS-DE)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace
from typing import Any
from typing import ClassVar

from optuna_fedbo.core.local_model import NORMALIZATIONS
from optuna_fedbo.core.pooling import packed_blocks_length
from optuna_fedbo.core.secure_statistics import input_length
from optuna_fedbo.federation.config import _non_negative_int
from optuna_fedbo.federation.config import _positive_float
from optuna_fedbo.federation.config import _positive_int
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.fts.influence import check_without_privacy
from optuna_fedbo.federation.fts.schedules import check_schedule_name
from optuna_fedbo.search_space import SearchSpaceEncoder

#: Shared features ``M`` of ``FTSConfig(n_features=None)``: with 1-3 varying parameters, and
#: with 4 or more without differential privacy (:meth:`FTSConfig.resolve`).
DEFAULT_N_FEATURES = (100, 200)
#: Aggregations of the FTS family's server (see :class:`FTSConfig`).
AGGREGATIONS = ("pooled", "weighted", "sample")
#: Most shared features with ``aggregation="pooled"``: the upload holds their Gram matrix, and
#: a sealed upload must stay under :data:`~optuna_fedbo.federation.trust.MAX_UPLOAD_CHARS`.
MAX_POOLED_FEATURES = 300
#: Factor of a categorical parameter's one-hot columns in the shared features of
#: ``FTSConfig(categorical_scale=None)`` (:meth:`FTSConfig.resolve`). Unscaled, two choices are
#: ``sqrt(2)`` apart, beyond every shared lengthscale (at most 0.5), so the broadcast modelled
#: each choice as a separate function, from a fraction of the trials each. On
#: ``benchmarks/fts_value_tuning.py --family mlp-digits`` (36 site-runs, a relu/tanh choice)
#: 0.25 took regret at 10 / 20 trials from 0.051 / 0.026 to 0.034 / 0.020 (paired -0.017 +-
#: 0.005 / -0.006 +- 0.002), 0 to 0.042 / 0.022.
CATEGORICAL_SCALE = 0.25


@dataclass(frozen=True)
class FTSConfig(ProtocolConfig):
    """Federated Thompson sampling (FTS) and its distributed-exploration variant (FTS-DE).

    In the papers every participant fits a Bayesian linear model on ``n_features`` shared
    random Fourier features (drawn from the federation's public seed) and uploads one draw
    ``omega`` of its weights per round. The server combines the draws into one vector per
    sub-region (the modified FTS of DP-FTS-DE, ``aggregation="weighted"``) or relays them all
    so that each participant picks one at random (the original FTS, ``aggregation="sample"``).

    The defaults are the best federated sampler this package measured (``benchmarks/
    fts_value.py``), beyond the papers: multi-scale shared features (no lengthscale to choose),
    a space-filling initial design over the whole space, one value scale for every participant,
    without differential privacy the server's posterior given everyone's pooled statistics
    (``aggregation="pooled"``, on the feature block its evidence picks), and the broadcast used
    as a weighted prior mean of each participant's own GP, so that it helps where it predicts
    the participant's values and is ignored where it does not. The papers' algorithms are the
    settings ``aggregation="weighted"`` (or ``"sample"``), ``lengthscale=<float>``,
    ``initial_design="uniform"``, ``normalization="raw"`` and ``transfer="schedule"`` (see
    :mod:`optuna_fedbo.federation.fts.presets`).

    Args:
        n_features: Number of random features ``M``, or ``None`` (default) for
            :data:`DEFAULT_N_FEATURES` chosen by the search space when the federation is created
            (:meth:`resolve`; the stored configuration holds the number): 100, or 200 with 4
            or more varying parameters and no differential privacy.
        lengthscale: SE kernel lengthscale of the shared features, in unit-cube coordinates, or
            ``None`` (default) for multi-scale features: each feature's lengthscale log-uniform
            over :func:`~optuna_fedbo.core.rff.multiscale_range` (0.02 to 0.5 in 1-2 D, from
            0.09 in 3-D, 0.2 in 4-D), all with the same prior weight
            (``benchmarks/fts_value.py --features`` compares the options).
        noise_variance: Noise variance ``lambda`` of the participants' normalized values.
        n_subregions: Number ``P`` of equal-volume sub-regions for distributed exploration;
            1 disables it (modified FTS / DP-FTS).
        weight_a: The softmax constant ``a`` of the sub-region weights (the paper uses 15).
        weight_hold_rounds: Rounds during which the weights keep their full exponent ``a + 1``.
        weight_decay_rounds: Rounds over which the exponent decays linearly to 1 (uniform
            weights). ``weight_hold_rounds = weight_decay_rounds = 0`` gives equal weights from
            the start (the "equal weights" ablation of the paper's appendix).
        n_init: Number of initial points per participant, drawn from the participant's
            sub-region (from the whole domain if ``init_in_subregion`` is false or ``P = 1``);
            round 0 closes once every participant has them. Two instead of five made the
            federation's first 10 to 20 trials better on smooth related sites and cost
            rough 2-D ones and one-site federations at 30 (the README's value section).
        init_in_subregion: Draw the initial points in the assigned sub-region (distributed
            exploration) rather than in the whole domain (the other ablation of the appendix).
        initial_design: ``"space-filling"`` (default: a Latin hypercube per participant, from
            its own seed) or ``"uniform"`` (independent uniform points, the papers').
        aggregation: ``"pooled"``, ``"weighted"`` (DP-FTS-DE's server aggregation) or
            ``"sample"`` (the original FTS: the server relays every agent's vector and a
            participant draws one of the others' from ``P_N``, uniform over the agents that
            uploaded), or ``None`` (default): ``"pooled"`` without differential privacy and
            sub-regions, else ``"weighted"`` (:meth:`resolve`). With ``"pooled"`` every
            participant uploads the sufficient statistics of its values on the shared
            features and on :data:`~optuna_fedbo.core.pooling.POOLING_LENGTHSCALES` blocks of
            single-scale features, and the server broadcasts the posterior mean given all
            participants' statistics together (everyone's values standardized together), on
            the feature block, with the noise variance and with offsets of each participant's
            own (or none) of largest pooled marginal likelihood
            (:mod:`optuna_fedbo.core.pooling`): exactly the posterior a model of everyone's
            observations would have, where averaging the participants' posterior means blurs
            it. The server sees each participant's statistics (as it sees each participant's
            vector with ``"weighted"``) unless the federation has secure aggregation
            (:class:`~optuna_fedbo.SecureAggregation`: only their sum); participants see only
            the broadcast.
        schedule: Default ``p_t`` schedule of the participants (a name of
            :data:`optuna_fedbo.federation.fts.schedules.SCHEDULES`); a participant may override
            it with any callable.
        normalization: How participants scale their values before fitting and sharing
            (:func:`optuna_fedbo.core.local_model.normalization`): ``"shared"`` (default:
            standardized by the mean and spread of the participant's initial design, then
            frozen; with a whole-space design every participant measures against the same
            reference, so values and sub-regions stay comparable across participants, yet sites
            whose values differ in scale or offset are brought to one scale), ``"participant"``
            (standardized by all the participant's values so far: the first release) or
            ``"raw"`` (the papers' zero-mean GP on raw values). With ``aggregation="pooled"``
            it applies to the participant's own model only: participants upload the
            statistics of their values themselves and the server standardizes everyone's
            together. Each participant's own reference, five initial values, is too noisy a
            scale to pool by (measured with a prototype of this aggregation on
            ``benchmarks/fts_value.py``, 4-D, lengthscale 0.2, 10 seed functions: regret at
            10 / 20 trials 0.92x / 0.73x the best stock sampler's with each participant's
            scale, 0.72x / 0.42x with one scale for all).
        transfer: How a participant uses the broadcast after its initial design: ``"prior"``
            (default: at every trial, expected improvement on its own exact GP whose prior mean
            is the broadcast function weighted by how well it predicts the participant's own
            values and how well it ranks them against the participant's own GP, see
            :mod:`optuna_fedbo.core.transfer`; a participant that joins after the first
            broadcast uses it from its first trial) or ``"schedule"`` (the papers: with
            probability ``p_t`` local Thompson sampling, else the broadcast function's
            maximizer).
        min_contributors: Without differential privacy, the fewest distinct participants whose
            uploads a published round aggregates (default 2): a round that closes with fewer
            (forced, or after its timeout) publishes nothing, stays open and keeps the previous
            broadcast, so that no broadcast is one participant's upload alone. A federation of
            fewer participants is refused at creation; 1 publishes a lone participant's model
            (readable by anyone with the storage URL), with a warning. With differential
            privacy the noise protects each contribution and this is not used.
        categorical_scale: Factor of each categorical parameter's one-hot columns in the shared
            features: two choices are ``sqrt(2) categorical_scale`` apart there (0: the
            broadcast is a function of the numeric parameters alone, shared by every choice;
            the participant's own GP still tells the choices apart). ``None`` (default):
            :data:`CATEGORICAL_SCALE` when a federation of a space with a categorical parameter
            is created (without one it stays ``None``: nothing to scale); a stored
            configuration without it (a federation created before this field) keeps 1, the
            one-hot encoding as is.
    """

    kind: ClassVar[str] = "fts"
    binary_uploads: ClassVar[bool] = True  # see fts.messages.encode_upload

    n_features: int | None = None
    lengthscale: float | None = None
    noise_variance: float = 1e-2
    n_subregions: int = 1
    weight_a: float = 15.0
    weight_hold_rounds: int = 10
    weight_decay_rounds: int = 30
    n_init: int = 5
    init_in_subregion: bool = True
    aggregation: str | None = None
    schedule: str = "1-1/t"
    normalization: str = "shared"
    initial_design: str = "space-filling"
    transfer: str = "prior"
    min_contributors: int = 2
    categorical_scale: float | None = None

    def __post_init__(self) -> None:
        if self.n_features is not None:
            _positive_int("n_features", self.n_features)
        if self.lengthscale is not None:
            object.__setattr__(
                self, "lengthscale", _positive_float("lengthscale", self.lengthscale)
            )
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
        if self.aggregation not in (None, *AGGREGATIONS):
            raise ValueError(
                f"aggregation must be one of {list(AGGREGATIONS)} or None, got "
                f"{self.aggregation!r}."
            )
        if self.aggregation == "sample" and self.n_subregions != 1:
            raise ValueError(
                "aggregation='sample' (the original FTS) relays whole vectors and has no "
                f"sub-regions; use n_subregions=1, got {self.n_subregions}."
            )
        if self.aggregation == "pooled" and self.n_subregions != 1:
            raise ValueError(
                "aggregation='pooled' models everyone's observations together over the whole "
                f"space and has no sub-regions; use n_subregions=1, got {self.n_subregions}."
            )
        if (
            self.aggregation == "pooled"
            and self.n_features is not None
            and self.n_features > MAX_POOLED_FEATURES
        ):
            raise ValueError(
                f"aggregation='pooled' uploads a {self.n_features}x{self.n_features} matrix of "
                f"statistics, beyond the upload size bound from {MAX_POOLED_FEATURES} features "
                f"on; use n_features <= {MAX_POOLED_FEATURES}."
            )
        check_schedule_name(self.schedule)
        _choice("normalization", self.normalization, NORMALIZATIONS)
        _choice("initial_design", self.initial_design, ("space-filling", "uniform"))
        _choice("transfer", self.transfer, ("prior", "schedule"))
        _positive_int("min_contributors", self.min_contributors)
        if self.categorical_scale is not None:
            scale = self.categorical_scale
            if (
                isinstance(scale, bool)
                or not isinstance(scale, (int, float))
                or not (0 <= scale < float("inf"))
            ):
                raise ValueError(
                    f"categorical_scale must be a non-negative number, got {scale!r}."
                )
            object.__setattr__(self, "categorical_scale", float(scale))

    def resolve(self, encoder: SearchSpaceEncoder, privacy: Any) -> FTSConfig:
        """``n_features=None``, ``aggregation=None`` and ``categorical_scale=None`` made explicit
        for this search space and privacy setting.

        Rough functions in 4-D are modelled better with more shared features. With ``M = 200``
        instead of 100 on ``benchmarks/fts_value.py``, near-identical sites, 30 seed functions,
        paired, the regret at 20 trials went from 0.230 to 0.212 at lengthscale 0.1, and from
        0.133 to 0.104 at 0.2. At 0.5 (20 seed functions) it went from 0.028 to 0.034, a
        difference within noise (± 0.008). Under differential privacy the number stays 100,
        for want of evidence: with 200 sites at epsilon 7.1 (4-D, lengthscale 0.2, 10 seed
        functions) 200 features were not measurably better (regret at 20 trials 0.167 against
        0.172, a paired difference of -0.005 ± 0.016). The clip norm would fit either number
        for the default's uploads (posterior means: median norm 3.8 with 100 features and with
        200), but not for a posterior draw's (``transfer="schedule"``), whose norm grows as
        ``sqrt(M)``.
        """
        resolved = self
        if self.aggregation is None:
            pooled = privacy is None and self.n_subregions == 1
            resolved = replace(resolved, aggregation="pooled" if pooled else "weighted")
        if self.categorical_scale is None and encoder.encoding.categorical_columns.any():
            resolved = replace(resolved, categorical_scale=CATEGORICAL_SCALE)
        if self.n_features is None:
            large = encoder.n_varying >= 4 and privacy is None
            resolved = replace(
                resolved, n_features=DEFAULT_N_FEATURES[1] if large else DEFAULT_N_FEATURES[0]
            )
        return resolved

    @property
    def upload_length(self) -> int:
        """Length of a participant's upload vector (of a resolved configuration)."""
        if self.n_features is None or self.aggregation is None:
            raise ValueError("upload_length needs a resolved configuration (see resolve()).")
        if self.aggregation == "pooled":
            return packed_blocks_length(self.n_features)
        return self.n_features

    def check_privacy(self, privacy: Any) -> None:
        if self.aggregation == "pooled":
            raise ValueError(
                "DPConfig privatizes vectors of bounded norm (aggregation='weighted'); "
                "aggregation='pooled' uploads sufficient statistics, which it does not protect."
            )
        if self.aggregation not in (None, "weighted"):
            raise ValueError(
                "DPConfig needs aggregation='weighted' (DP-FTS / DP-FTS-DE): the original FTS "
                "relays every agent's vector, which no amount of noise on an aggregate protects."
            )

    def check_secure_aggregation(self, privacy: Any) -> int:
        if privacy is not None and self.aggregation == "weighted":
            # DP-FTS / DP-FTS-DE: every participant's omega weighed for the P sub-regions, with
            # its share of distributed noise (federation.secagg.distributed_dp).
            return self.n_subregions * self.upload_length
        if privacy is not None or self.aggregation != "pooled":
            raise ValueError(
                "Secure aggregation sums the pooled statistics of the default protocol "
                "(aggregation='pooled', no DPConfig) or, with a DPConfig, the vectors of DP-FTS "
                f"/ DP-FTS-DE (aggregation='weighted'); this federation uses aggregation="
                f"{self.aggregation!r}"
                + (" with a DPConfig" if privacy is not None else " without one")
                + ": leave aggregation=None, or drop secure_aggregation."
            )
        return input_length(self.n_features)

    def check_creation(self, n_clients: int, privacy: Any) -> None:
        if privacy is None:
            check_without_privacy(self, n_clients)

    def check_search_space(self, encoder: SearchSpaceEncoder) -> None:
        if self.n_subregions > 1 and all(
            d.kind == "categorical" for d in encoder.encoding.dimensions
        ):
            raise ValueError(
                "Sub-regions split numeric parameters; this search space has only categorical "
                f"ones, so n_subregions must be 1 (got {self.n_subregions})."
            )


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}.")


__all__ = ["FTSConfig"]
