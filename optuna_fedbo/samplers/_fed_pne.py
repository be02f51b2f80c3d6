"""Fed-PNE: the participant of federated phased node elimination (Algorithms 1 and 3)."""

from __future__ import annotations

from collections.abc import Sequence
import math
import threading
import time
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.core.fedpne import FederatedDPGuarantee
from optuna_fedbo.core.fedpne import local_node_means
from optuna_fedbo.core.fedpne import Phase
from optuna_fedbo.federation._damage import ErasureCheck
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fedpne.channel import FedPNEChannel
from optuna_fedbo.federation.fedpne.channel import FedPNEStatus
from optuna_fedbo.federation.fedpne.releases import ReleaseBook
from optuna_fedbo.privacy._rng import refuse_insecure_noise_seed
from optuna_fedbo.privacy._rng import research_rng
from optuna_fedbo.samplers._fed import DEFAULT_LEASE_TTL
from optuna_fedbo.samplers._fed import FedSampler
from optuna_fedbo.samplers._fed import STALL_SECONDS
from optuna_fedbo.samplers._pne_slots import CONFIG_ATTR
from optuna_fedbo.samplers._pne_slots import NODE_ATTR
from optuna_fedbo.samplers._pne_slots import PHASE_ATTR
from optuna_fedbo.samplers._pne_slots import PhaseSlots
from optuna_fedbo.samplers._pne_slots import REWARD_ATTR
from optuna_fedbo.samplers._pne_slots import SLOT_ATTR
from optuna_fedbo.samplers._waiting import Waits

_logger = optuna.logging.get_logger(__name__)

#: Trial system attribute: how the trial's point was chosen: ``"pull"`` (a pull of the current
#: phase), ``"exploit"`` (after the horizon: the best node), ``"timeout"`` (the best node while
#: waiting too long for a phase, with ``on_timeout="best"``), ``"enqueued"`` (parameters fixed by
#: ``enqueue_trial``: not a pull).
MODE_ATTR = "fedbo:mode"
CLIPPED_ATTR = "fedpne:clipped"

ON_TIMEOUT = ("raise", "best")


class FedPNEPhaseTimeout(RuntimeError):
    """The next Fed-PNE phase was not published in time (the message says who is missing)."""


class FedPNESampler(FedSampler):
    """A participant of Fed-PNE / DP-Fed-PNE over a :class:`~optuna_fedbo.Federation`.

    Each completed trial is one *pull* of Algorithm 1: the sampler gives the trial a point of
    the next pending node of the current phase (a uniform point of the node's cell with the
    default ``variant="tuning"``, the cell centre with ``variant="paper"``), each node of
    ``K^p`` ``t`` times in a row, in index order. The objective value is rescaled to a reward in
    ``[0, 1]`` from the federation's ``value_range`` widened by its ``noise_bound`` and the
    study's direction (values outside are clipped and counted: :attr:`n_clipped`, one warning
    at the first, and the trial attribute ``fedpne:clipped``). When the participant's pulls of
    the phase are done, ``after_trial`` averages the rewards per node (adding ``N(0, sigma^2)``
    to each reward first under DP-Fed-PNE, from OS entropy) and uploads the node means; errors
    there are logged, never raised into ``study.optimize``. The next trial waits for the server
    to publish the next phase (``phase_timeout``). After the horizon ``T`` the sampler keeps
    evaluating the centre of the best node (:meth:`recommended_params`; ``K^p`` never shrinks
    to one node before the horizon: every survivor has ``k`` children). Only the node means
    leave the study; the trials stay in it.

    The phase lives in the study, not in the worker (:mod:`~optuna_fedbo.samplers._pne_slots`):
    pulls are counted from its trials (attributes ``fedpne:phase``, ``fedpne:slot``,
    ``fedpne:node``, ``fedpne:reward``) and a running trial claims its slot (``fedpne:claim``),
    so any number of workers (threads, processes, hosts) of one site pull the phase's schedule
    between them, each slot once; any of them uploads the phase's means when its last pull is
    done (an upload already in the open round is not sent again). Under DP-Fed-PNE the release
    kept first in the key folder is the one every worker sends: the workers of a site on
    several hosts share that folder, or a phase's rewards may be noised once per host. A
    failed or pruned trial is not a pull and its node is pulled again, and a worker killed at
    any moment and restarted with the same study resumes the phase where the site stands.
    Trials whose federation parameters were fixed by ``enqueue_trial`` are not pulls.

    Search space: every parameter of the federation's search space that the objective suggests
    must use exactly the federation's distribution (a different one raises ``ValueError``: a
    pull must evaluate the node's point); parameters outside it are sampled by
    ``independent_sampler`` (with Optuna's usual warning). Objectives that ignore a federation
    parameter are fine (a function constant in it).

    Args:
        federation: A federation created with ``protocol=FedPNEConfig(...)``.
        client_id: This participant's id; it joins the federation on construction.
        phase_timeout: Longest wait (seconds) for the next phase; ``None``: no limit of its own.
        on_timeout: When ``phase_timeout`` passes: ``"raise"`` (default): the trial fails with
            :class:`FedPNEPhaseTimeout`, whose message names the missing participants (resume
            the study later: nothing is lost); ``"best"``: evaluate the current best node (not
            a pull) and wait again at the next trial.
        patience: A wait for the next phase also ends, whatever ``phase_timeout``, at the
            timeout of ``study.optimize``, at once when the federation has finished or its
            server stopped, and after ``patience`` seconds of no server, a server down or too
            few participants (see :mod:`optuna_fedbo.samplers._waiting`): the trial then
            evaluates the current best node (not a pull; mode ``"timeout"``), with one
            warning, and the next trial waits again (at once, while that problem lasts).
        poll_interval: Seconds between storage reads while waiting.
        independent_sampler: Sampler for parameters outside the federation's search space.
        warn_independent_sampling: Warn when such a parameter is sampled independently.
        seed: Seed of this participant's own randomness (uniform representative points and the
            independent sampler). DP noise never depends on it, and the sampler refuses a
            noise seed (``insecure_noise_seed``: research simulations only, see
            :func:`~optuna_fedbo.simulation.simulate_fedpne`).
        insecure_noise_seed: Always refused (``ValueError``): a participant's DP noise comes
            from the operating system's entropy.
        lease_ttl: Seconds after its last heartbeat at which this participant's lease on
            ``client_id`` expires if its process dies (see :class:`~optuna_fedbo.FedSampler`).
    """

    protocol_kind = "fedpne"

    def __init__(
        self,
        federation: Federation,
        client_id: str,
        *,
        phase_timeout: float | None = 3600.0,
        on_timeout: str = "raise",
        patience: float = STALL_SECONDS,
        poll_interval: float = 0.25,
        independent_sampler: BaseSampler | None = None,
        warn_independent_sampling: bool = True,
        seed: int | None = None,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        insecure_noise_seed: None = None,
        worker: str | None = None,
    ) -> None:
        if insecure_noise_seed is not None:
            refuse_insecure_noise_seed("FedPNESampler")
        self._waits = Waits(
            self,
            limit=("phase_timeout", phase_timeout),
            patience=patience,
            fallback="the current best node (not a pull)",
        )
        if on_timeout not in ON_TIMEOUT:
            raise ValueError(f"on_timeout must be one of {ON_TIMEOUT}, got {on_timeout!r}.")
        if not poll_interval > 0:
            raise ValueError(f"poll_interval must be > 0, got {poll_interval!r}.")
        super().__init__(
            independent_sampler=independent_sampler,
            warn_independent_sampling=warn_independent_sampling,
            seed=seed,
        )
        self.channel = FedPNEChannel(federation)
        self._participate(federation, client_id, lease_ttl, worker)
        self._config = self.channel.config
        self._tag = federation.config_hash[:16]
        self._space = federation.search_space
        self._on_timeout = on_timeout
        self._poll_interval = poll_interval
        self._lock = threading.RLock()
        self._points: dict[int, dict[str, Any]] = {}
        self._inflight: dict[int, tuple[int, int]] = {}
        self._uploaded: set[int] = set()
        self._slots = PhaseSlots(
            self._tag, self._config.reward, self._draw_ticket, min(poll_interval, 0.05)
        )
        self._n_clipped = 0
        self._noise_rng: np.random.Generator | None = None  # None: OS entropy
        self._erasures = ErasureCheck()
        # DP-Fed-PNE: the noisy means released, kept to be re-sent as they are.
        self._releases = (
            None
            if self._config.reward_privacy is None
            else ReleaseBook(federation, self.client_id)
        )
        guarantee = self.privacy_guarantee
        if guarantee is not None:
            _logger.info(f"{client_id}: {guarantee.description}")

    def _use_insecure_noise_seed(self, insecure_noise_seed: int, stream: int) -> None:
        """Draw the reward noise from a seeded generator: for ``simulate_fedpne()`` only."""
        self._noise_rng = research_rng(insecure_noise_seed, stream)

    # ------------------------------------------------------------------------ accessors
    @property
    def n_clipped(self) -> int:
        """Objective values outside ``value_range`` seen by this sampler object (clipped)."""
        return self._n_clipped

    @property
    def privacy_guarantee(self) -> FederatedDPGuarantee | None:
        """The ``(epsilon, delta, M)``-federated DP guarantee of DP-Fed-PNE, or ``None``."""
        return self._config.guarantee(self.federation.n_clients)

    def recommended_params(self) -> dict[str, Any]:
        """The parameters to deploy: the centre of the current best node ``(h^p, i^p)``.

        That is the node with the largest estimated global mean among the deepest nodes the
        server has decided on (a survivor of the last closed phase; the root before any
        close). It is the same for every participant, and it is an estimate of the *global*
        objective (the participants' average), not of this participant's own: unlike
        ``study.best_params``, it is neither the luckiest noisy value nor the last pull.
        """
        return self.channel.recommended_params()

    def status(self) -> FedPNEStatus:
        """The federation's phase, who is missing, the best node."""
        return self.channel.status()

    # --------------------------------------------------------------------- sampling
    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        # The point of a trial is dictated by the protocol; every federation parameter is
        # served from it by sample_independent.
        return {}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._check_study(study)
        return {}

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        self._check_study(study)
        expected = self._space.get(param_name)
        if expected is not None:
            if param_distribution != expected:
                raise ValueError(
                    f"Parameter {param_name!r} is suggested with {param_distribution}, but "
                    f"Fed-PNE federation {self.federation.name!r} defines it as {expected}. A "
                    "pull must evaluate the node's point: suggest the federation's search "
                    "space exactly."
                )
            return self._point(study, trial)[param_name]
        return self._sample_outside(study, trial, param_name, param_distribution)

    def _point(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """This trial's parameters (chosen once, at its first federation parameter)."""
        with self._lock:
            cached = self._points.get(trial._trial_id)
        if cached is not None:
            return cached
        params = self._choose(study, trial)
        with self._lock:
            self._points[trial._trial_id] = params
        return params

    def _choose(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        fixed = trial.system_attrs.get("fixed_params") or {}
        if any(name in self._space for name in fixed):
            self._record(study, trial, {MODE_ATTR: "enqueued"})
            return self.channel.recommended_params()
        if self.federation_finished:  # the federation is over: its best node
            self._record(study, trial, {MODE_ATTR: "exploit"})
            return self.channel.centre(self.channel.view().best)
        wait = self._waits.begin("the next phase")
        announced = 0
        while True:
            view = self.channel.view()
            phase = view.phase
            slot, n_done = self._slots.claim(study, trial, phase)
            if slot is not None:
                with self._lock:
                    self._inflight[trial._trial_id] = (phase.index, slot)
                return self._pull(study, trial, phase, slot)
            if phase.final:
                self._record(study, trial, {MODE_ATTR: "exploit"})
                return self.channel.centre(view.best)
            if n_done == phase.budget:
                self._ensure_uploaded(study, phase, self._slots.done(study, phase))
            waited = time.monotonic() - wait.started
            if wait.over():
                if self.channel.view().phase.index != phase.index:
                    continue  # published just before what ended the wait (e.g. "serve ended")
                assert wait.reason is not None
                if wait.reason[0] == "limit" and self._on_timeout == "raise":
                    raise FedPNEPhaseTimeout(self._timeout_message(phase, waited, raising=True))
                if wait.reason[0] != "limit":
                    wait.end(False)
                elif self._first("phase-timeout"):
                    _logger.warning(self._timeout_message(phase, waited, raising=False))
                self._record(study, trial, {MODE_ATTR: "timeout"})
                return self.channel.centre(view.best)
            self._check_progress(stalled=waited >= STALL_SECONDS)
            if announced != phase.index:
                announced = phase.index
                _logger.info(
                    f"{self.client_id}: pulls of phase {phase.index} done; waiting for phase "
                    f"{phase.index + 1} of {self.federation.name!r}."
                )
            self._workers.check(study, trial)  # a dead worker's pull is failed, then pulled
            time.sleep(self._poll_interval)

    def _pull(self, study: Study, trial: FrozenTrial, phase: Phase, slot: int) -> dict[str, Any]:
        node = phase.schedule()[slot]
        try:
            self._record(
                study,
                trial,
                {
                    MODE_ATTR: "pull",
                    CONFIG_ATTR: self._tag,
                    PHASE_ATTR: phase.index,
                    SLOT_ATTR: slot,
                    NODE_ATTR: node.key,
                },
            )
            return self.channel.point(node, self._rng)
        except Exception:
            with self._lock:
                self._inflight.pop(trial._trial_id, None)
            raise

    def _record(self, study: Study, trial: FrozenTrial, attrs: dict[str, Any]) -> None:
        mode = attrs[MODE_ATTR]
        if mode == "enqueued":
            kind = "local"
        elif mode == "pull" and attrs[PHASE_ATTR] == 1:
            kind = "initial"  # phase 1 follows from the configuration alone
        else:
            kind = "federated"  # a published phase, or its best node
        self._count(trial._trial_id, kind)
        storage = study._storage
        for key, value in attrs.items():
            storage.set_trial_system_attr(trial._trial_id, key, value)

    def _timeout_message(self, phase: Phase, waited: float, *, raising: bool) -> str:
        try:
            status = self.channel.status()
            missing = list(status.missing)
            if status.not_joined:
                missing.append(f"{status.not_joined} participant(s) not joined yet")
            server = status.server
            seen = (
                "never seen"
                if server is None
                else f"last seen {time.time() - float(server.get('heartbeat', 0.0)):.0f} s ago"
            )
        except Exception:
            missing, seen = ["(unknown: the status could not be read)"], "unknown"
        text = (
            f"{self.client_id}: phase {phase.index + 1} of Fed-PNE federation "
            f"{self.federation.name!r} was not published within {waited:.0f} s. Phase "
            f"{phase.index} still waits for {missing}; the server was {seen} (is "
            f"`optuna-fedbo serve --name {self.federation.name}` running?). "
        )
        if raising:
            text += (
                "Completed pulls and uploaded means are kept: resume the study later, or use "
                "phase_timeout=None to wait indefinitely, or on_timeout='best' to evaluate the "
                "current best node meanwhile."
            )
        else:
            text += "Evaluating the current best node meanwhile (not a pull)."
        return text

    # ------------------------------------------------------------------ trial hooks
    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._start_trial(study, trial)
        super().before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        super().after_trial(study, trial, state, values)
        with self._lock:
            self._points.pop(trial._trial_id, None)
            entry = self._inflight.get(trial._trial_id)
        if entry is None:
            return
        try:
            self._after_pull(study, trial, entry, state, values)
        except Exception:
            _logger.warning(
                f"{self.client_id}: handling the pull of trial {trial.number} failed; the study "
                "continues (the phase's upload is retried at the next trial).",
                exc_info=True,
            )
        finally:
            # The slot stays busy until it is recorded as done (or, for a failed trial, is to
            # be pulled again): freed any earlier, another thread could pull it twice.
            with self._lock:
                self._inflight.pop(trial._trial_id, None)

    def _after_pull(
        self,
        study: Study,
        trial: FrozenTrial,
        entry: tuple[int, int],
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        phase_index, slot = entry
        if (
            state != TrialState.COMPLETE
            or values is None
            or len(values) != 1
            or not math.isfinite(values[0])
        ):
            _logger.debug(
                f"{self.client_id}: trial {trial.number} ended {state.name}; its node is "
                "pulled again."
            )
            return
        reward, clipped = self._config.reward(values[0], study.direction)
        storage = study._storage
        storage.set_trial_system_attr(trial._trial_id, REWARD_ATTR, reward)
        if clipped:
            storage.set_trial_system_attr(trial._trial_id, CLIPPED_ATTR, True)
            with self._lock:
                self._n_clipped += 1
                first = self._n_clipped == 1
            if first:
                lo, hi = self._config.reward_range
                _logger.warning(
                    f"{self.client_id}: trial {trial.number}'s value {values[0]!r} lies outside "
                    f"[{lo}, {hi}] (value_range widened by noise_bound); its reward is clipped "
                    f"to {reward}, which biases the node means. Widen value_range or set "
                    "noise_bound in FedPNEConfig. Further clipped values are not logged one by "
                    "one: they are counted in FedPNESampler.n_clipped, marked with the trial "
                    f"attribute {CLIPPED_ATTR!r} and the count is logged with each upload."
                )
        view = self.channel.view()
        phase = view.phase
        if phase.index != phase_index:
            _logger.warning(
                f"{self.client_id}: phase {phase_index} was closed before this participant "
                f"finished it; its pulls are not uploaded. Continuing with phase {phase.index}."
            )
            return
        # The reward attribute above makes this pull done for every worker (the trial is
        # stored as complete only after after_trial).
        done = self._slots.done(study, phase)
        if not phase.final and len(done) == phase.budget:
            self._ensure_uploaded(study, phase, done)

    def _ensure_uploaded(self, study: Study, phase: Phase, done: dict[int, float]) -> None:
        """Upload the node means of a completed phase unless they are already in its round
        (checked again while waiting: means erased from the storage are sent again).

        Under DP-Fed-PNE the noisy means are kept (sealed, in the participant's key folder)
        before they are sent, and a later upload of the phase re-sends them as they are: the
        rewards are never noised twice (:mod:`~optuna_fedbo.federation.fedpne.releases`).
        """
        with self._lock:
            if phase.index in self._uploaded:
                if not self._erasures.erased(self.federation, phase.index - 1, [self.client_id]):
                    return
                if self.channel.view().phase.index != phase.index:
                    return  # the phase closed meanwhile (and its uploads were discarded)
                _logger.info(f"{self.client_id}: its means of phase {phase.index} were erased.")
            elif self.channel.has_uploaded(self.client_id, phase.index):
                self._uploaded.add(phase.index)
                return
            means = None if self._releases is None else self._releases.recall(phase)
            if means is None:
                schedule = phase.schedule()
                means = local_node_means(
                    phase,
                    [schedule[k] for k in range(phase.budget)],
                    [done[k] for k in range(phase.budget)],
                    privacy=self._config.reward_privacy,
                    noise_rng=self._noise_rng,
                )
                if self._releases is not None:  # another worker's, if it kept one first
                    means = self._releases.keep(phase, means)
            sent = self.channel.upload(self.client_id, phase, means)
            self._uploaded.add(phase.index)
        if sent:
            clipped = f" ({self._n_clipped} clipped values so far)" if self._n_clipped else ""
            _logger.info(
                f"{self.client_id}: uploaded {len(means)} node means of phase "
                f"{phase.index}{clipped}."
            )
        else:
            _logger.warning(
                f"{self.client_id}: phase {phase.index} was closed before its upload; the "
                "means are not sent."
            )


__all__ = ["FedPNEPhaseTimeout", "FedPNESampler"]
