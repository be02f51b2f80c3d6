"""Simulate a whole Fed-PNE federation in one process, phase by phase (lock-step)."""

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
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from optuna_fedbo.core.fedpne import Phase
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fedpne.config import FedPNEConfig
from optuna_fedbo.federation.fedpne.server import FedPNEServer
from optuna_fedbo.federation.fedpne.server import PhaseRoundReport
from optuna_fedbo.federation.server import FederationServer
from optuna_fedbo.privacy._rng import check_insecure_noise_seed
from optuna_fedbo.samplers._fed_pne import FedPNESampler

_logger = optuna.logging.get_logger(__name__)

Objective = Callable[[optuna.Trial], float]

#: Extra attempts per participant and phase when trials fail (a failed trial is not a pull).
_MAX_RETRIES = 20


@dataclass
class FedPNESimulationResult:
    """The outcome of :func:`simulate_fedpne`.

    Attributes:
        federation: The simulated federation.
        studies: One study per participant, in participant order.
        client_ids: The participants' ids.
        reports: The server's report of every closed phase.
        phases: Every phase the participants pulled, in order (the last may be final).
        elapsed: Wall-clock seconds.
    """

    federation: Federation
    studies: list[optuna.Study]
    client_ids: list[str]
    reports: list[PhaseRoundReport]
    phases: list[Phase]
    elapsed: float

    def table(self) -> list[dict[str, Any]]:
        """A tidy table: one row per participant trial.

        Columns: ``participant``, ``client_id``, ``trial``, ``state``, ``value``, ``mode``
        (``"pull"``, ``"exploit"``, ...), ``phase``, ``slot``, ``node``, ``reward``, then the
        parameters (``params_<name>``).
        """
        rows: list[dict[str, Any]] = []
        for index, (client_id, study) in enumerate(zip(self.client_ids, self.studies)):
            for trial in study.get_trials(deepcopy=False):
                attrs = trial.system_attrs
                row: dict[str, Any] = {
                    "participant": index,
                    "client_id": client_id,
                    "trial": trial.number,
                    "state": trial.state.name,
                    "value": trial.value if trial.state == TrialState.COMPLETE else None,
                    "mode": attrs.get("fedbo:mode"),
                    "phase": attrs.get("fedpne:phase"),
                    "slot": attrs.get("fedpne:slot"),
                    "node": attrs.get("fedpne:node"),
                    "reward": attrs.get("fedpne:reward"),
                }
                row.update({f"params_{k}": v for k, v in trial.params.items()})
                rows.append(row)
        return rows

    def to_dataframe(self) -> Any:
        """:meth:`table` as a ``pandas.DataFrame`` (requires pandas)."""
        import pandas as pd

        return pd.DataFrame(self.table())

    def values(self) -> np.ndarray:
        """Objective values of the completed trials, shape ``(N, n)`` (``n``: the fewest)."""
        series = [
            [t.value for t in s.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
            for s in self.studies
        ]
        n = min(len(v) for v in series)
        return np.array([v[:n] for v in series], dtype=float)

    def communication(self) -> dict[str, int]:
        """The server's communication counters at the end."""
        if not self.reports:
            return {"rounds": 0, "nodes_per_client": 0, "uploaded_means": 0}
        last = self.reports[-1]
        return {
            "rounds": len(self.reports),
            "nodes_per_client": sum(len(r.phase_report.phase.nodes) for r in self.reports),
            "uploaded_means": sum(
                len(r.phase_report.phase.nodes) * r.n_contributors for r in self.reports
            ),
            "broadcast_nodes": sum(len(r.phase_report.phase.nodes) for r in self.reports)
            + len(last.next_phase.nodes),
        }


def _completed_pulls(study: optuna.Study, phase_index: int) -> int:
    return sum(
        1
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.system_attrs.get("fedpne:phase") == phase_index
        and t.system_attrs.get("fedbo:mode") == "pull"
    )


def simulate_fedpne(
    objectives: Sequence[Objective],
    *,
    search_space: Mapping[str, BaseDistribution],
    protocol: FedPNEConfig,
    direction: str = "maximize",
    seed: int = 0,
    storage: str | BaseStorage | None = None,
    name: str | None = None,
    max_phases: int | None = None,
    extra_trials: int = 0,
    sampler_kwargs: Mapping[str, Any] | None = None,
    quiet: bool = True,
    insecure_noise_seed: int | None = None,
) -> FedPNESimulationResult:
    """Run ``M = len(objectives)`` Fed-PNE participants and the server in lock-step phases.

    In each phase every participant runs exactly its pulls of the phase (its ``budget``; a
    failed trial is not a pull and is repeated), then the server closes the phase with all
    uploads and publishes the next one, so no participant ever waits. The run ends with the
    final phase (the horizon ``T``), or after ``max_phases`` closed phases; then every
    participant runs ``extra_trials`` more trials (the best node once the horizon is reached,
    otherwise pulls of the open phase, and FedPNEPhaseTimeout once they are done).

    Args:
        objectives: One objective per participant (``trial -> value``), suggesting the
            federation's search space.
        search_space: The federation's search space.
        protocol: The Fed-PNE configuration.
        direction: ``"maximize"`` or ``"minimize"``, for every participant.
        seed: Public seed of the federation (the partition's split dimensions); the
            participants' own seeds derive from it.
        storage: Storage of the federation state (``None``: in memory). The participants'
            studies are in memory.
        name: Federation name (default: a fresh unique one).
        max_phases: Stop after this many closed phases (``None``: run to the horizon).
        extra_trials: Trials per participant after the end (evaluating the best node).
        sampler_kwargs: Extra arguments of :class:`~optuna_fedbo.samplers.FedPNESampler`
            (``phase_timeout`` defaults to 0 here: in lock-step nobody has to wait).
        quiet: Silence Optuna's per-trial log lines during the run.
        insecure_noise_seed: Research runs only, and NOT private: seed the participants'
            DP-Fed-PNE reward noise (one stream per participant) so that a DP run can be
            repeated exactly. ``None`` (the default) draws it from the operating system's
            entropy, as a real participant does; :class:`FedPNESampler` refuses the seed.

    Returns:
        The studies, the server's reports and the phases.
    """
    if len(objectives) == 0:
        raise ValueError("simulate_fedpne needs at least one objective.")
    if not isinstance(protocol, FedPNEConfig):
        raise ValueError(f"protocol must be a FedPNEConfig, got {protocol!r}.")
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}.")
    if max_phases is not None and (
        isinstance(max_phases, bool) or not isinstance(max_phases, int) or max_phases < 0
    ):
        raise ValueError(f"max_phases must be None or a non-negative integer, got {max_phases!r}.")
    if isinstance(extra_trials, bool) or not isinstance(extra_trials, int) or extra_trials < 0:
        raise ValueError(f"extra_trials must be a non-negative integer, got {extra_trials!r}.")
    insecure_noise_seed = check_insecure_noise_seed(insecure_noise_seed)
    verbosity = optuna.logging.get_verbosity()
    if quiet:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies: list[optuna.Study] = []
    try:
        n_clients = len(objectives)
        federation = Federation.create(
            name or f"fedpne-simulation-{uuid.uuid4().hex[:12]}",
            search_space=search_space,
            n_clients=n_clients,
            storage=storage,
            protocol=protocol,
            seed=seed,
        )
        server = FederationServer(federation)
        assert isinstance(server, FedPNEServer)
        width = max(4, len(str(n_clients - 1)))
        client_ids = [f"agent-{i:0{width}d}" for i in range(n_clients)]
        seeds = np.random.SeedSequence(seed).generate_state(n_clients)
        kwargs = {"phase_timeout": 0.0, **dict(sampler_kwargs or {})}
        samplers = [
            FedPNESampler(federation, client_id, seed=int(s), **kwargs)
            for client_id, s in zip(client_ids, seeds)
        ]
        if insecure_noise_seed is not None and protocol.dp_epsilon is not None:
            _logger.warning(
                f"Research run: the DP noise of {federation.name!r} comes from "
                f"insecure_noise_seed={insecure_noise_seed}; it protects nobody who knows it."
            )
            for index, sampler in enumerate(samplers):
                sampler._use_insecure_noise_seed(insecure_noise_seed, index)
        studies = [optuna.create_study(direction=direction, sampler=s) for s in samplers]
        reports: list[PhaseRoundReport] = []
        phases: list[Phase] = []
        start = time.perf_counter()
        while True:
            phase = server.phase
            if max_phases is not None and len(reports) >= max_phases:
                break
            phases.append(phase)
            for client_id, study, objective in zip(client_ids, studies, objectives):
                for _ in range(_MAX_RETRIES + 1):
                    remaining = phase.budget - _completed_pulls(study, phase.index)
                    if remaining <= 0:
                        break
                    study.optimize(objective, n_trials=remaining)
                else:
                    raise RuntimeError(
                        f"{client_id} could not complete the {phase.budget} pulls of phase "
                        f"{phase.index}: its trials keep failing."
                    )
            if phase.final:
                break
            report = server.step(force=True)
            if report is None:
                raise RuntimeError(f"Phase {phase.index} received no valid upload.")
            reports.append(report)
        for study, objective in zip(studies, objectives):
            if extra_trials:
                study.optimize(objective, n_trials=extra_trials)
        return FedPNESimulationResult(
            federation=federation,
            studies=studies,
            client_ids=client_ids,
            reports=reports,
            phases=phases,
            elapsed=time.perf_counter() - start,
        )
    finally:
        finish_participants(studies)
        optuna.logging.set_verbosity(verbosity)


def finish_participants(studies: Sequence[optuna.Study]) -> None:
    """Mark the simulation's participants finished: their leases stop beating (a heartbeat
    thread never outlives the run, nor writes into a later federation of the same storage)."""
    for study in studies:
        finish = getattr(study.sampler, "finish", None)
        if finish is not None:
            finish()


__all__ = ["FedPNESimulationResult", "simulate_fedpne"]
