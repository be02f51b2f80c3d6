"""Simulate a whole federation in one process, in lock-step rounds."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
import time
from typing import Any
import uuid

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import TrialState

from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fts.config import FTSConfig
from optuna_fedbo.federation.fts.secure import close_in_turn
from optuna_fedbo.federation.fts.secure import driver_of
from optuna_fedbo.federation.preset import unpack
from optuna_fedbo.federation.server import FederationServer
from optuna_fedbo.federation.server import RoundReport
from optuna_fedbo.privacy._rng import check_insecure_noise_seed
from optuna_fedbo.samplers._fed import FedSampler
from optuna_fedbo.simulation.fedpne import finish_participants
from optuna_fedbo.simulation.fedpne import simulate_fedpne

_logger = optuna.logging.get_logger(__name__)

Objective = Callable[[optuna.Trial], float]
SamplerFactory = Callable[[Federation, str, int], BaseSampler]


@dataclass
class SimulationResult:
    """The outcome of :func:`simulate`.

    Attributes:
        federation: The simulated federation.
        studies: One study per participant, in participant order.
        client_ids: The participants' ids.
        reports: The server's report of every round.
        n_init: Number of trials each participant ran in round 0.
        n_rounds: Number of BO rounds after round 0.
        elapsed: Wall-clock seconds.
    """

    federation: Federation
    studies: list[optuna.Study]
    client_ids: list[str]
    reports: list[RoundReport]
    n_init: int
    n_rounds: int
    elapsed: float

    def round_of(self, trial_number: int) -> int:
        """The round of a participant's trial (round 0 holds the initial design)."""
        return 0 if trial_number < self.n_init else trial_number - self.n_init + 1

    def table(self) -> list[dict[str, Any]]:
        """A tidy table: one row per participant trial.

        Columns: ``participant`` (index), ``client_id``, ``trial``, ``round``, ``state``,
        ``value``, ``best`` (best value so far, in the study's direction), ``mode`` (how the
        point was chosen), ``broadcast_round``, then the parameters (``params_<name>``) and
        the user attributes (``user_attrs_<name>``).
        """
        rows: list[dict[str, Any]] = []
        for index, (client_id, study) in enumerate(zip(self.client_ids, self.studies)):
            maximize = study.direction == StudyDirection.MAXIMIZE
            best = -np.inf if maximize else np.inf
            for trial in study.get_trials(deepcopy=False):
                value = trial.value if trial.state == TrialState.COMPLETE else None
                if value is not None and np.isfinite(value):
                    best = max(best, value) if maximize else min(best, value)
                row: dict[str, Any] = {
                    "participant": index,
                    "client_id": client_id,
                    "trial": trial.number,
                    "round": self.round_of(trial.number),
                    "state": trial.state.name,
                    "value": value,
                    "best": best if np.isfinite(best) else None,
                    "mode": trial.system_attrs.get("fedbo:mode"),
                    "broadcast_round": trial.system_attrs.get("fedbo:broadcast_round"),
                }
                row.update({f"params_{k}": v for k, v in trial.params.items()})
                row.update({f"user_attrs_{k}": v for k, v in trial.user_attrs.items()})
                rows.append(row)
        return rows

    def to_dataframe(self) -> Any:
        """:meth:`table` as a ``pandas.DataFrame`` (requires pandas)."""
        import pandas as pd

        return pd.DataFrame(self.table())

    def best_values(self) -> np.ndarray:
        """Best value so far per participant and round, shape ``(N, n_rounds + 1)``."""
        n_rounds = self.n_rounds + 1
        out = np.full((len(self.studies), n_rounds), np.nan)
        for row in self.table():
            if row["best"] is not None and row["round"] < n_rounds:
                out[row["participant"], row["round"]] = row["best"]
        # Rounds in which a participant had no trial keep the previous best.
        for i in range(out.shape[0]):
            for r in range(1, n_rounds):
                if np.isnan(out[i, r]):
                    out[i, r] = out[i, r - 1]
        return out


def _progress(total: int, enabled: bool, description: str) -> Any:
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        _logger.info("Install tqdm for a progress bar.")
        return None
    return tqdm(total=total, desc=description, unit="round")


def simulate(
    objectives: Sequence[Objective],
    *,
    search_space: Mapping[str, BaseDistribution],
    n_rounds: int,
    protocol: ProtocolConfig | None = None,
    privacy: Any = None,
    direction: str = "maximize",
    seed: int = 0,
    storage: str | BaseStorage | None = None,
    name: str | None = None,
    sampler_factory: SamplerFactory | None = None,
    sampler_kwargs: Mapping[str, Any] | None = None,
    progress: bool = True,
    quiet: bool = True,
    as_table: bool = False,
    insecure_noise_seed: int | None = None,
    secure_aggregation: Any = None,
) -> SimulationResult | list[dict[str, Any]]:
    """Run ``N = len(objectives)`` participants and the server in lock-step rounds.

    Round 0 is the initial design: every participant runs its ``n_init`` initial trials, then
    the server closes the round. Each of the next ``n_rounds`` rounds is one BO iteration: every
    participant runs one trial (using the broadcast of the previous round), then the server
    closes the round with all uploads (``force=True``, so failing participants do not block it).
    This is the synchronous schedule of the papers' experiments. The last round is not closed:
    its broadcast would reach nobody, and with differential privacy it would cost a round of
    epsilon for nothing. The server therefore publishes exactly ``n_rounds`` broadcasts (rounds
    ``0 .. n_rounds - 1``), the ``T`` of the papers' privacy losses.

    Args:
        objectives: One objective per participant (``trial -> value``).
        search_space: The federation's search space (the objectives must suggest it).
        n_rounds: Number of BO rounds after the initial design.
        protocol: Protocol configuration; ``None`` is ``FTSConfig()``.
        privacy: Privacy configuration (``None``: no differential privacy).
        direction: ``"maximize"`` or ``"minimize"``, for every participant.
        seed: Public seed of the federation; the participants' own seeds derive from it.
        storage: Storage of the federation state (``None``: in memory). The participants'
            studies are always in memory.
        name: Federation name (default: a fresh unique one).
        sampler_factory: ``(federation, client_id, participant_seed) -> sampler``; defaults to
            :class:`~optuna_fedbo.FedSampler` (the participant of the protocol's ``transfer``:
            :class:`~optuna_fedbo.FedTransferSampler` or
            :class:`~optuna_fedbo.FedThompsonSampler`) with ``sampler_kwargs``.
        sampler_kwargs: Extra keyword arguments of the default sampler.
        progress: Show a progress bar (needs ``tqdm``).
        quiet: Silence Optuna's per-trial log lines during the run.
        as_table: Return :meth:`SimulationResult.table` instead of the result object.
        insecure_noise_seed: Research runs only, and NOT private: seed the server's
            differential-privacy subsampling and noise (Fed-PNE: the participants' reward noise;
            ``aggregation="sample"``: the order of the relayed vectors, which a real server
            keeps secret) so that a comparison can be rerun exactly. ``None`` (the default)
            draws them from the operating system's entropy, as a real federation does; the
            server, the samplers and the command line refuse this seed.
        secure_aggregation: ``None`` or a :class:`~optuna_fedbo.SecureAggregation`: each round
            then runs the whole protocol in turn (every participant answers every step).

    With a :class:`~optuna_fedbo.federation.fedpne.config.FedPNEConfig` protocol this runs
    :func:`~optuna_fedbo.simulation.fedpne.simulate_fedpne`: a round is a Fed-PNE
    phase, ``n_rounds`` bounds the phases the server closes (the run also ends at the horizon),
    and the result is a :class:`~optuna_fedbo.federation.FedPNESimulationResult`.

    Returns:
        A :class:`SimulationResult` (or its tidy table).
    """
    if len(objectives) == 0:
        raise ValueError("simulate needs at least one objective.")
    if isinstance(n_rounds, bool) or not isinstance(n_rounds, int) or n_rounds < 0:
        raise ValueError(f"n_rounds must be a non-negative integer, got {n_rounds!r}.")
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}.")
    if sampler_factory is not None and sampler_kwargs:
        raise ValueError("Pass either sampler_factory or sampler_kwargs, not both.")
    protocol, privacy = unpack(protocol, privacy)
    insecure_noise_seed = check_insecure_noise_seed(insecure_noise_seed)
    if protocol is not None and protocol.kind == "fedpne":
        # Fed-PNE's rounds are its phases: see simulate_fedpne (n_rounds = closed phases).
        if privacy is not None or sampler_factory is not None:
            raise ValueError(
                "Fed-PNE takes its privacy from FedPNEConfig(dp_epsilon=..., dp_delta=...) and "
                "runs FedPNESampler: pass neither privacy nor sampler_factory."
            )
        fedpne = simulate_fedpne(
            objectives,
            search_space=search_space,
            protocol=protocol,  # type: ignore[arg-type]
            direction=direction,
            seed=seed,
            storage=storage,
            name=name,
            max_phases=n_rounds,
            sampler_kwargs=sampler_kwargs,
            quiet=quiet,
            insecure_noise_seed=insecure_noise_seed,
        )
        return fedpne.table() if as_table else fedpne  # type: ignore[return-value]
    verbosity = optuna.logging.get_verbosity()
    if quiet:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return _run(
            objectives,
            search_space=search_space,
            n_rounds=n_rounds,
            protocol=FTSConfig() if protocol is None else protocol,
            privacy=privacy,
            direction=direction,
            seed=seed,
            storage=storage,
            name=name,
            sampler_factory=sampler_factory,
            sampler_kwargs=sampler_kwargs,
            progress=progress,
            as_table=as_table,
            insecure_noise_seed=insecure_noise_seed,
            secure_aggregation=secure_aggregation,
        )
    finally:
        optuna.logging.set_verbosity(verbosity)


def _run(
    objectives: Sequence[Objective],
    *,
    search_space: Mapping[str, BaseDistribution],
    n_rounds: int,
    protocol: ProtocolConfig,
    privacy: Any,
    direction: str,
    seed: int,
    storage: str | BaseStorage | None,
    name: str | None,
    sampler_factory: SamplerFactory | None,
    sampler_kwargs: Mapping[str, Any] | None,
    progress: bool,
    as_table: bool,
    insecure_noise_seed: int | None,
    secure_aggregation: Any,
) -> SimulationResult | list[dict[str, Any]]:
    n_clients = len(objectives)
    federation = Federation.create(
        name or f"simulation-{uuid.uuid4().hex[:12]}",
        search_space=search_space,
        n_clients=n_clients,
        storage=storage,
        protocol=protocol,
        privacy=privacy,
        seed=seed,
        secure_aggregation=secure_aggregation,
    )
    if secure_aggregation is not None:  # the participants answer in turn (close_in_turn)
        driver_of(federation.channel).background = False
    server = FederationServer(federation)
    if insecure_noise_seed is not None and privacy is not None:
        _logger.warning(
            f"Research run: the DP noise of {federation.name!r} comes from "
            f"insecure_noise_seed={insecure_noise_seed}; it protects nobody who knows the seed."
        )
        server._use_insecure_noise_seed(insecure_noise_seed)
    elif insecure_noise_seed is not None and federation.fts.aggregation == "sample":
        # The relay order, secret in a real federation, repeats with the seed.
        server._use_insecure_noise_seed(insecure_noise_seed)
    kwargs = dict(sampler_kwargs or {})

    def default_factory(fed: Federation, client_id: str, participant_seed: int) -> BaseSampler:
        return FedSampler(fed, client_id, seed=participant_seed, **kwargs)

    factory = sampler_factory or default_factory
    width = max(4, len(str(n_clients - 1)))
    client_ids = [f"agent-{i:0{width}d}" for i in range(n_clients)]
    seeds = np.random.SeedSequence(seed).generate_state(n_clients)
    studies = [
        optuna.create_study(
            direction=direction, sampler=factory(federation, client_id, int(participant_seed))
        )
        for client_id, participant_seed in zip(client_ids, seeds)
    ]
    n_init = max(getattr(protocol, "n_init", 1), 1)
    reports: list[RoundReport] = []
    bar = _progress(n_rounds + 1, progress, federation.name)
    start = time.perf_counter()
    try:
        for round_index in range(n_rounds + 1):
            n_trials = n_init if round_index == 0 else 1
            for study, objective in zip(studies, objectives):
                study.optimize(objective, n_trials=n_trials)
            if bar is not None:
                bar.update(1)
            if round_index == n_rounds:
                break  # nobody would use this round's broadcast (see the docstring)
            report = (
                server.step(force=True)
                if secure_aggregation is None
                else close_in_turn(federation, server)
            )
            if report is None:
                if server.budget_exhausted is None:
                    _logger.warning(
                        f"Round {round_index} received no valid upload; not published."
                    )
            else:
                reports.append(report)
    finally:
        finish_participants(studies)
        if bar is not None:
            bar.close()
    result = SimulationResult(
        federation=federation,
        studies=studies,
        client_ids=client_ids,
        reports=reports,
        n_init=n_init,
        n_rounds=n_rounds,
        elapsed=time.perf_counter() - start,
    )
    return result.table() if as_table else result
