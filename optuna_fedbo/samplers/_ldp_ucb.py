"""GP-UCB under local differential privacy (LDP-BO): the TGP, ATA and MoMA samplers.

Every user evaluates one configuration and releases its value through a local Laplace mechanism
(:class:`optuna_fedbo.privacy.LaplaceMechanism`, CTL(epsilon)); the study only ever stores the
privatized values. This sampler reads them and runs one of the three algorithms of Zhou and Tan
(AAAI 2021) from :mod:`optuna_fedbo.core.ldp`. Without a mechanism (``epsilon=None``) the same
algorithms are BO for heavy-tailed noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
import datetime
import hashlib
import json
import math
import threading
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.distributions import distribution_to_json
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.core.acquisition import maximize
from optuna_fedbo.core.ldp.acquisition import argmax_finite
from optuna_fedbo.core.ldp.acquisition import GPUCBIndex
from optuna_fedbo.core.ldp.ata import ATAGPUCB
from optuna_fedbo.core.ldp.kernels import Kernel
from optuna_fedbo.core.ldp.kernels import make_kernel
from optuna_fedbo.core.ldp.moma import MoMAGPUCB
from optuna_fedbo.core.ldp.nystrom import DEFAULT_MAX_DICTIONARY_SIZE
from optuna_fedbo.core.ldp.parameters import HeavyTailedRewards
from optuna_fedbo.core.ldp.parameters import LaplaceRewards
from optuna_fedbo.core.ldp.parameters import RewardModel
from optuna_fedbo.core.ldp.tgp import TGPUCB
from optuna_fedbo.core.space import Dimension
from optuna_fedbo.core.threads import one_blas_thread
from optuna_fedbo.samplers._common import check_single_objective
from optuna_fedbo.samplers._common import LocalModelSampler
from optuna_fedbo.samplers._common import study_key
from optuna_fedbo.search_space import SearchSpaceEncoder

_logger = optuna.logging.get_logger(__name__)

#: Study system attribute recording the direction the sampler's values were oriented for.
DIRECTION_KEY = "ldp_ucb:direction"
#: Trial system attribute marking a MoMA play: epoch, play index, ``k``, space and point.
PLAY_KEY = "ldp_ucb:moma_play"

#: The algorithms, by name.
ALGORITHMS = ("tgp", "ata", "moma")

#: Default ``beta_scale`` per algorithm. The paper's experiments set the parameters "order-wise
#: similar to those recommended by the theorems"; the theorems' ``beta`` (``beta_scale=1``) is
#: hundreds of times the range of the objective. ``beta_scale`` multiplies every term of
#: ``beta`` but ``B`` (those growing with ``ln t``, ``gamma_t``, ``m_t`` and ``1/epsilon``, and
#: ATA's and MoMA's Nystrom term ``B / sqrt(1 - varepsilon)``), so each theorem's form is kept
#: and exploration never falls below the scale of ``f``. The factors were chosen, with the
#: practical ``regularization``, from {0.03, 0.01, 0.005, 0.003, 0.002, 0.001} on development
#: seeds (100-105) of ``benchmarks/ldp_gp_draws.py`` (1-D and 2-D GP draws, SE and Matern,
#: T = 150, epsilon = 1); the benchmark reports other seeds (0-9).
DEFAULT_BETA_SCALES = {"tgp": 0.005, "ata": 0.01, "moma": 0.003}

#: Fully discrete search spaces with at most this many points are searched exhaustively.
DEFAULT_MAX_GRID_SIZE = 4096


@dataclass
class _Epoch:
    """The plays of one MoMA epoch found in the study."""

    point: np.ndarray
    done: dict[int, tuple[int, float]] = field(default_factory=dict)  # play -> (number, value)
    pending: set[int] = field(default_factory=set)


@dataclass
class _StudyState:
    """What the sampler has learned from one study over one search space."""

    key: tuple[int, int, str]
    encoder: SearchSpaceEncoder
    grid: np.ndarray | None
    algorithm: TGPUCB | ATAGPUCB | MoMAGPUCB
    fed_trials: set[int] = field(default_factory=set)
    fed_epochs: set[int] = field(default_factory=set)
    played: dict[bytes, np.ndarray] = field(default_factory=dict)
    # Finished trials never change: each is parsed once (epoch, play, point, finite value or
    # None), or recorded as None when it is not a play of this space.
    finished_plays: dict[int, tuple[int, int, np.ndarray, float | None] | None] = field(
        default_factory=dict
    )


class LDPUCBSampler(LocalModelSampler):
    """GP-UCB from locally privatized values: LDP-TGP-, LDP-ATA- and LDP-MoMA-GP-UCB.

    The objective's values must reach the study already privatized by each user, e.g. through
    :meth:`optuna_fedbo.privacy.LaplaceMechanism.wrap` with the same ``epsilon``,
    ``value_bound`` and ``noise_bound``: the sampler never sees a true value. It models the
    study's completed trials with the chosen algorithm (Zhou and Tan, AAAI 2021) over the search
    space encoded in ``[0, 1]^D``, and suggests the maximizer of ``mu(x) + beta sigma(x)``:

    * ``"tgp"``: LDP-TGP-UCB (Algorithm 2, Theorem 3): each value is truncated to 0 when
      ``|y| > b_t = B + R + L ln t``, then an exact GP posterior;
    * ``"ata"``: LDP-ATA-GP-UCB (Algorithm 1, Theorem 2): adaptive Nystrom features with
      ``q = 6 rho ln(4T/delta) / varepsilon^2`` and feature-wise truncation of all values;
    * ``"moma"``: LDP-MoMA-GP-UCB (Algorithm 3, Theorem 4, Corollary 1): epochs in which one
      point is suggested ``k`` times in a row, then a median-of-means choice among ``k``
      least-squares estimates.

    Defaults for tuning budgets, each departure from the paper behind an option that restores it
    (the theorems' parameters are for ``T`` in the thousands):

    * ``epoch_length="practical"``: ``k = min(ceil(ln(4eT/delta)), T / 10)`` (11 plays at
      ``T = 150``, 13 at 1000), at least ten epochs at any horizon; ``"theorem"`` is
      ``k = ceil(24 ln(4eT/delta))`` (202 plays at ``T = 20``: no epoch; 295 at ``T = 1000``:
      three). The shorter epoch keeps the ``ln(T/delta)`` growth that makes the median robust
      but not the theorem's confidence ``1 - delta``; see
      :func:`~optuna_fedbo.core.ldp.parameters.practical_epoch_length`.
    * ``regularization="practical"``: ``lambda = 4 c / B^2`` (the noise variance over the
      squared spread ``B / 2`` of ``f``, ``c = R^2 + 2 L^2``) instead of the analyses' 1, which
      makes the posterior mean chase the Laplace noise;
      :func:`~optuna_fedbo.core.ldp.parameters.practical_regularization`.
    * ``max_dictionary_size=64``: ATA's and MoMA's Nystrom dictionaries are bounded (``q`` is
      lowered until the expected size fits, so sampling stays proportional to the posterior
      variance), so that a trial costs the same at trial 1,000 as at trial 100 on a continuous
      space, where every trial is a new point; ``None`` is the paper's unbounded dictionary.
    * ``beta_scale``: the theorems' ``beta`` is hundreds of times the range of ``f``; all its
      terms but ``B`` are scaled down (:data:`DEFAULT_BETA_SCALES`), ``1.0`` is the theorem.

    ``epoch_length="theorem", regularization=1.0, max_dictionary_size=None, beta_scale=1.0``
    is the paper's algorithm as stated.

    With ``epsilon=None`` the rewards are not privatized and the algorithms run with the
    parameters of heavy-tailed noise: ``noise_moment`` ``c`` bounds ``E|eta|^(1+alpha)``
    (``moment_order`` ``alpha``).

    Search spaces: float, int and categorical parameters (one-hot) via the unit-cube encoding.
    A fully discrete space of at most ``max_grid_size`` points is searched exhaustively, as the
    paper does on finite domains; otherwise random candidates are refined with L-BFGS-B.
    Minimization is maximization of the negated values (the bounds are symmetric). Failed,
    pruned and non-finite trials are ignored (a MoMA play that fails is suggested again). The
    round index ``t`` of a value (in ``b_t`` and in ATA's ``b_tau``) is its rank in completion
    order; pending trials are not modelled, so parallel workers may receive the same point.

    MoMA bookkeeping lives in the storage: each suggested play records its epoch, play index,
    ``k`` and point in the trial's system attributes, so ``ask``/``tell``, restarts, parallel
    workers and enqueued trials cannot corrupt it. Enqueued or otherwise foreign trials are not
    plays of any epoch: TGP and ATA use every completed trial, MoMA only complete epochs (its
    estimator needs ``k`` values of one point). An epoch starts when every play of the previous
    one is completed or in flight; with parallel workers its point is chosen from the epochs
    completed so far. A worker that dies with its trial RUNNING holds its play until the trial is
    failed (e.g. by Optuna's heartbeat).

    Args:
        algorithm: ``"tgp"``, ``"ata"`` or ``"moma"``.
        epsilon: The privacy level of the mechanism that privatized the values, or ``None``
            for the non-private heavy-tailed variants.
        value_bound: ``B``: a bound on ``|f|`` (and on its RKHS norm).
        noise_bound: ``R``: a bound on the observation noise (required with ``epsilon``).
        horizon: ``T``, the planned number of trials (in ``q``, ``b_t``, ``beta`` and ``k``).
        delta: Confidence ``delta in (0, 1]`` of the theorems.
        kernel: ``"se"``, ``"matern"`` (``nu = 2.5``) or a :class:`~optuna_fedbo.core.ldp.Kernel`.
        lengthscale: Kernel lengthscale in unit-cube coordinates (0.2, the paper's synthetic
            setting).
        regularization: ``lambda > 0`` of the GP and ridge regressions, or ``"practical"``
            for ``4 c / B^2``; the paper leaves it open, 1 is the usual choice of the GP-UCB
            analyses it builds on.
        beta_scale: Multiplier of every term of the theorems' ``beta`` but ``B``; ``None`` uses
            :data:`DEFAULT_BETA_SCALES`, ``1.0`` the theorems as stated.
        nystrom_accuracy: ``varepsilon in (0, 1)`` of the Nystrom approximation (ATA, MoMA);
            the paper leaves it open. 0.5 gives ``rho = 3`` and ``q = 72 ln(4T/delta)``.
        epoch_length: MoMA's ``k``: ``"practical"``, ``"theorem"`` or a positive integer.
        max_dictionary_size: Bound on ATA's and MoMA's Nystrom dictionary; ``None``: unbounded
            (the paper).
        moment_order: ``alpha in (0, 1]`` of the heavy-tailed variants.
        noise_moment: ``c`` of the heavy-tailed variants (required when ``epsilon`` is None).
        reward_moment: ``v`` of the heavy-tailed variants; ``None`` derives it from ``B`` and
            ``c``.
        max_grid_size: Largest fully discrete space searched exhaustively.
        n_candidates: Random candidates per suggestion on a continuous space.
        n_refinements: Candidates refined with L-BFGS-B on a continuous space.
        independent_sampler: Sampler of the first trial and of parameters outside the relative
            search space; :class:`~optuna.samplers.RandomSampler` by default.
        warn_independent_sampling: Warn when a parameter is sampled independently.
        seed: Seed of the sampler's own randomness (candidates, ties, Nystrom dictionaries).
            It never touches privacy noise, which the users add.

    Raises:
        ValueError: For an unknown algorithm, ``epsilon <= 0``, ``value_bound <= 0``,
            a negative or missing ``noise_bound``, a horizon shorter than one MoMA epoch (only
            with ``epoch_length="theorem"`` or an integer), and other invalid parameters.
    """

    def __init__(
        self,
        algorithm: str,
        *,
        epsilon: float | None,
        value_bound: float,
        noise_bound: float | None = None,
        horizon: int = 1000,
        delta: float = 0.05,
        kernel: str | Kernel = "se",
        lengthscale: float = 0.2,
        regularization: float | str = "practical",
        beta_scale: float | None = None,
        nystrom_accuracy: float = 0.5,
        epoch_length: int | str = "practical",
        max_dictionary_size: int | None = DEFAULT_MAX_DICTIONARY_SIZE,
        moment_order: float = 1.0,
        noise_moment: float | None = None,
        reward_moment: float | None = None,
        max_grid_size: int = DEFAULT_MAX_GRID_SIZE,
        n_candidates: int = 1024,
        n_refinements: int = 4,
        independent_sampler: BaseSampler | None = None,
        warn_independent_sampling: bool = True,
        seed: int | None = None,
    ) -> None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}.")
        self._algorithm_name = algorithm
        self._rewards = _reward_model(
            epsilon, value_bound, noise_bound, moment_order, noise_moment, reward_moment
        )
        self._kernel = make_kernel(kernel, lengthscale)
        self._options: dict[str, Any] = {
            "delta": delta,
            "regularization": regularization,
            "beta_scale": DEFAULT_BETA_SCALES[algorithm] if beta_scale is None else beta_scale,
        }
        if algorithm != "tgp":
            self._options.update(
                horizon=horizon,
                accuracy=nystrom_accuracy,
                max_dictionary_size=max_dictionary_size,
            )
        if algorithm == "moma":
            self._options["epoch_length"] = epoch_length
        elif epoch_length != "practical":
            raise ValueError(f"epoch_length is MoMA's k; algorithm {algorithm!r} has no epochs.")
        if isinstance(max_grid_size, bool) or not isinstance(max_grid_size, int):
            raise ValueError(f"max_grid_size must be an integer, got {max_grid_size!r}.")
        if n_candidates < 1 or n_refinements < 0:
            raise ValueError("n_candidates must be positive and n_refinements non-negative.")
        self._horizon = horizon
        self._max_grid_size = max_grid_size
        self._n_candidates = n_candidates
        self._n_refinements = n_refinements
        # One startup trial: the first has no relative search space yet (its parameters are
        # sampled independently, without a warning); the model is used from the second on.
        super().__init__(
            n_startup_trials=1,
            independent_sampler=independent_sampler,
            warn_independent_sampling=warn_independent_sampling,
            seed=seed,
        )
        self._algorithm_seed = (
            seed if seed is not None else int(np.random.default_rng().integers(2**31))
        )
        # Build one algorithm now: it validates every remaining parameter (horizon vs. epoch).
        validated = self._new_algorithm()
        self._epoch_length = validated.epoch_length if isinstance(validated, MoMAGPUCB) else 1
        self._direction: StudyDirection | None = None
        self._state: _StudyState | None = None
        self._lock = threading.RLock()

    @property
    def algorithm(self) -> str:
        """The algorithm's name: ``"tgp"``, ``"ata"`` or ``"moma"``."""
        return self._algorithm_name

    @property
    def epoch_length(self) -> int:
        """MoMA's ``k`` (1 for TGP and ATA, which suggest a new point every trial)."""
        return self._epoch_length

    def reseed_rng(self) -> None:
        with self._lock:
            super().reseed_rng()

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        check_single_objective(study, self)
        if search_space == {}:
            return {}
        with one_blas_thread(), self._lock:
            self._check_direction(study)
            state = self._state_for(study, search_space)
            if isinstance(state.algorithm, MoMAGPUCB):
                point = self._sample_moma(study, trial, state)
            else:
                self._feed_trials(study, state)
                point = self._argmax(state)
            return state.encoder.decode(point)

    # --- state -------------------------------------------------------------------------------

    def _new_algorithm(self) -> TGPUCB | ATAGPUCB | MoMAGPUCB:
        options = dict(self._options)
        if self._algorithm_name == "tgp":
            return TGPUCB(self._kernel, self._rewards, **options)
        rng = np.random.default_rng(self._algorithm_seed)
        if self._algorithm_name == "ata":
            return ATAGPUCB(self._kernel, self._rewards, rng=rng, **options)
        return MoMAGPUCB(self._kernel, self._rewards, rng=rng, **options)

    def _check_direction(self, study: Study) -> None:
        direction = study.direction
        if self._direction is None:
            self._direction = direction
        elif direction != self._direction:
            raise ValueError(
                f"This LDPUCBSampler was used with a study that {_verb(self._direction)}s, but "
                f"study {study.study_name!r} {_verb(direction)}s. Its truncation levels and "
                "MoMA epochs are oriented for one direction: create a new sampler."
            )
        recorded = study._storage.get_study_system_attrs(study._study_id).get(DIRECTION_KEY)
        if recorded is None:
            study._storage.set_study_system_attr(study._study_id, DIRECTION_KEY, direction.name)
        elif recorded != direction.name:
            raise ValueError(
                f"Study {study.study_name!r} was optimized by LDPUCBSampler in direction "
                f"{recorded}, but its direction is now {direction.name}. The recorded values "
                "and MoMA epochs are oriented for the old direction: use a new study."
            )

    def _state_for(self, study: Study, search_space: dict[str, BaseDistribution]) -> _StudyState:
        key = (*study_key(study), _space_id(search_space))
        if self._state is None or self._state.key != key:
            encoder = SearchSpaceEncoder(search_space)
            self._state = _StudyState(
                key=key,
                encoder=encoder,
                grid=_finite_grid(encoder, self._max_grid_size),
                algorithm=self._new_algorithm(),
            )
        return self._state

    def _sign(self, study: Study) -> float:
        return 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0

    # --- TGP and ATA -------------------------------------------------------------------------

    def _feed_trials(self, study: Study, state: _StudyState) -> None:
        """Pass newly completed trials to the algorithm, in the order they completed."""
        trials = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True)
        new = [t for t in trials if t.number not in state.fed_trials]
        new.sort(key=lambda t: (t.datetime_complete or datetime.datetime.min, t.number))
        sign = self._sign(study)
        algorithm = state.algorithm
        assert not isinstance(algorithm, MoMAGPUCB)
        for trial in new:
            state.fed_trials.add(trial.number)
            value = _finite_value(trial)
            if value is None or not state.encoder.contains(trial.params):
                continue
            point = state.encoder.encode([trial.params])[0]
            state.played.setdefault(point.tobytes(), point)
            algorithm.observe(point, sign * value)

    def _argmax(self, state: _StudyState) -> np.ndarray:
        acquisition: GPUCBIndex = state.algorithm.acquisition()
        rng = self._rng
        if state.grid is not None:
            return state.grid[argmax_finite(acquisition, state.grid, rng)]
        played = np.array(list(state.played.values())) if state.played else None
        point, _ = maximize(
            acquisition,
            state.encoder.encoding,
            rng,
            n_candidates=self._n_candidates,
            n_refinements=self._n_refinements,
            extra_candidates=played,
        )
        return point

    # --- MoMA --------------------------------------------------------------------------------

    def _sample_moma(self, study: Study, trial: FrozenTrial, state: _StudyState) -> np.ndarray:
        own = trial.system_attrs.get(PLAY_KEY)
        if own is not None and own.get("space") == state.key[2]:
            return np.asarray(own["point"], dtype=float)
        epochs = self._read_epochs(study, trial, state)
        self._feed_epochs(study, state, epochs)
        if trial.system_attrs.get("fixed_params"):
            # A partly enqueued trial is not a play at the epoch's point: no bookkeeping.
            return self._argmax(state)
        k = self._epoch_length
        for index in sorted(epochs):
            epoch = epochs[index]
            free = [j for j in range(k) if j not in epoch.done and j not in epoch.pending]
            if free:
                self._tag(study, trial, state, index, free[0], epoch.point)
                return epoch.point
        index = max(epochs) + 1 if epochs else 0
        point = self._argmax(state)
        algorithm = state.algorithm
        assert isinstance(algorithm, MoMAGPUCB)
        if index == algorithm.n_epochs_in_horizon:
            _logger.info(
                f"LDPUCBSampler: epoch {index} starts beyond the horizon T = {self._horizon} "
                f"(N = {algorithm.n_epochs_in_horizon} epochs of k = {k}); continuing."
            )
        self._tag(study, trial, state, index, 0, point)
        return point

    def _tag(
        self,
        study: Study,
        trial: FrozenTrial,
        state: _StudyState,
        epoch: int,
        play: int,
        point: np.ndarray,
    ) -> None:
        tag = {
            "epoch": epoch,
            "play": play,
            "k": self._epoch_length,
            "space": state.key[2],
            "point": [float(v) for v in point],
        }
        study._storage.set_trial_system_attr(trial._trial_id, PLAY_KEY, tag)

    def _read_epochs(
        self, study: Study, trial: FrozenTrial, state: _StudyState
    ) -> dict[int, _Epoch]:
        """The MoMA epochs recorded in the study: their point, done and pending plays."""
        epochs: dict[int, _Epoch] = {}
        for other in study._get_trials(deepcopy=False, use_cache=False):
            if other.number == trial.number:
                continue
            if other.number in state.finished_plays:
                record = state.finished_plays[other.number]
            else:
                record = self._parse_play(other, state)
                if other.state.is_finished():
                    state.finished_plays[other.number] = record
            if record is None:
                continue
            index, play, point, value = record
            epoch = epochs.setdefault(index, _Epoch(point))
            if other.state in (TrialState.RUNNING, TrialState.WAITING):
                epoch.pending.add(play)
            elif value is not None and (
                play not in epoch.done or other.number < epoch.done[play][0]
            ):
                epoch.done[play] = (other.number, value)
        return epochs

    def _parse_play(
        self, trial: FrozenTrial, state: _StudyState
    ) -> tuple[int, int, np.ndarray, float | None] | None:
        """``(epoch, play, point, value)`` of a MoMA play of this space, or ``None``.

        ``value`` is ``None`` unless the trial completed with a finite value at the epoch's
        point (a failed, pruned or non-finite play is played again).
        """
        tag = trial.system_attrs.get(PLAY_KEY)
        if tag is None:
            return None
        k = self._epoch_length
        if tag.get("k") != k:
            raise ValueError(
                f"Trial {trial.number} is a play of a MoMA epoch of k = {tag.get('k')} "
                f"plays, but this sampler uses k = {k} (from horizon and delta, or "
                "epoch_length). Use the same settings as the earlier runs, or a new study."
            )
        if tag.get("space") != state.key[2]:
            return None
        point = np.asarray(tag["point"], dtype=float)
        value = _finite_value(trial) if trial.state == TrialState.COMPLETE else None
        if value is not None and not (
            state.encoder.contains(trial.params)
            and np.allclose(state.encoder.encode([trial.params])[0], point)
        ):
            value = None
        return int(tag["epoch"]), int(tag["play"]), point, value

    def _feed_epochs(self, study: Study, state: _StudyState, epochs: dict[int, _Epoch]) -> None:
        algorithm = state.algorithm
        assert isinstance(algorithm, MoMAGPUCB)
        sign = self._sign(study)
        k = self._epoch_length
        for index in sorted(epochs):
            epoch = epochs[index]
            if index in state.fed_epochs or len(epoch.done) < k:
                continue
            values = np.array([epoch.done[j][1] for j in range(k)])
            algorithm.add_epoch(epoch.point, sign * values)
            state.fed_epochs.add(index)
            state.played.setdefault(epoch.point.tobytes(), epoch.point)
            _logger.debug(f"LDPUCBSampler: MoMA epoch {index} complete; model updated.")


def _reward_model(
    epsilon: float | None,
    value_bound: float,
    noise_bound: float | None,
    moment_order: float,
    noise_moment: float | None,
    reward_moment: float | None,
) -> RewardModel:
    if epsilon is not None:
        if noise_bound is None:
            raise ValueError(
                "noise_bound (R, a bound on the observation noise) is required with epsilon."
            )
        if noise_moment is not None or reward_moment is not None or moment_order != 1.0:
            raise ValueError(
                "noise_moment, reward_moment and moment_order are for the non-private "
                "heavy-tailed variant (epsilon=None); with epsilon they follow from B, R and "
                "epsilon (Theorem 2, Corollary 1)."
            )
        return LaplaceRewards(epsilon, value_bound, noise_bound)
    if noise_moment is None:
        raise ValueError(
            "Without epsilon (the non-private heavy-tailed variant), noise_moment (c, a bound "
            "on E|noise|^(1+alpha)) is required."
        )
    return HeavyTailedRewards(value_bound, noise_moment, moment_order, reward_moment)


def _finite_value(trial: FrozenTrial) -> float | None:
    if trial.values is None or len(trial.values) != 1:
        return None
    value = float(trial.values[0])
    return value if math.isfinite(value) else None


def _space_id(search_space: dict[str, BaseDistribution]) -> str:
    description = json.dumps([[name, distribution_to_json(d)] for name, d in search_space.items()])
    return hashlib.sha1(description.encode()).hexdigest()[:16]


def _cardinality(dimension: Dimension) -> int | None:
    if dimension.kind == "categorical":
        return dimension.n_choices
    if dimension.step is None:
        return None
    return int(math.floor((dimension.high - dimension.low) / dimension.step + 1e-9)) + 1


def _finite_grid(encoder: SearchSpaceEncoder, max_size: int) -> np.ndarray | None:
    """Every admissible point of a fully discrete space, encoded, if there are few enough."""
    dimensions = encoder.encoding.dimensions
    sizes = [_cardinality(d) for d in dimensions]
    if any(s is None for s in sizes) or math.prod(s for s in sizes if s) > max_size:
        return None
    axes = []
    for dimension, size in zip(dimensions, sizes):
        if dimension.kind == "categorical":
            axes.append(np.arange(size, dtype=float))
        else:
            raw = dimension.low + dimension.step * np.arange(size)
            # Round-trip through the encoding so that grid values equal decoded suggestions.
            axes.append(np.unique(dimension.decode(dimension.encode(raw))))
    mesh = np.meshgrid(*axes, indexing="ij")
    values = np.stack([m.reshape(-1) for m in mesh], axis=1)
    return encoder.encoding.encode(values)


def _verb(direction: StudyDirection) -> str:
    return "maximize" if direction == StudyDirection.MAXIMIZE else "minimize"
