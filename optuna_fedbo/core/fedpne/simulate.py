"""A lock-step simulator of Fed-PNE over in-memory client objectives (no Optuna, no storage)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from optuna_fedbo.core.fedpne.client import local_node_means
from optuna_fedbo.core.fedpne.client import pull_plan
from optuna_fedbo.core.fedpne.params import FedPNEParams
from optuna_fedbo.core.fedpne.partition import Partition
from optuna_fedbo.core.fedpne.protocol import FedPNEServerState


@dataclass(frozen=True)
class SimulationResult:
    """The trace of a simulated Fed-PNE run.

    Attributes:
        points: ``x_{m,t}``, shape ``(M, T, D)``.
        rewards: The rewards the clients observed (before DP noise), shape ``(M, T)``.
        regret: ``f* - f(x_{m,t})`` on the global objective, shape ``(M, T)``; ``None`` without
            a global objective.
        phase_ends: For every closed phase, the number of pulls per client at its end.
        state: The server state at the end (history, communication, recommendation).
    """

    points: np.ndarray
    rewards: np.ndarray
    regret: np.ndarray | None
    phase_ends: tuple[int, ...]
    state: FedPNEServerState

    @property
    def average_cumulative_regret(self) -> np.ndarray:
        """Average over clients of the cumulative regret after each round, shape ``(T,)``."""
        if self.regret is None:
            raise ValueError("No global objective was given: regret is unknown.")
        return np.cumsum(self.regret.mean(axis=0))


def simulate_fedpne(
    objectives: Sequence[Callable[[np.ndarray], np.ndarray]],
    horizon: int,
    *,
    rng: np.random.Generator,
    partition: Partition | None = None,
    params: FedPNEParams | None = None,
    global_objective: Callable[[np.ndarray], np.ndarray] | None = None,
    f_star: float | None = None,
    noise_rng: np.random.Generator | None = None,
) -> SimulationResult:
    """Run Algorithms 1 and 2 (3 and 4 with ``params.privacy``) in lock-step.

    Args:
        objectives: One reward function per client, ``(n, D) -> (n,)`` noisy rewards (in
            ``[0, 1]`` for the theory, and required so under DP).
        horizon: ``T``, pulls per client.
        rng: Randomness of the simulation (uniform representatives only).
        partition: Defaults to ``Partition(1)`` (binary, centres).
        params: Defaults to ``FedPNEParams(horizon, M)`` (the paper's experimental constants);
            must agree with ``horizon`` and ``len(objectives)``.
        global_objective: Noise-free ``f``, ``(n, D) -> (n,)``, to record regret.
        f_star: ``sup f``, required with ``global_objective``.
        noise_rng: DP noise; defaults to OS entropy. Inject only for reproducible tests.

    Returns:
        The trace.
    """
    n_clients = len(objectives)
    if n_clients < 1:
        raise ValueError("At least one client objective is needed.")
    if params is None:
        params = FedPNEParams(horizon=horizon, n_clients=n_clients)
    if params.horizon != horizon or params.n_clients != n_clients:
        raise ValueError("params.horizon / params.n_clients disagree with horizon / objectives.")
    if global_objective is not None and f_star is None:
        raise ValueError("f_star is required to compute the regret.")
    partition = partition if partition is not None else Partition(1)
    state = FedPNEServerState(params, partition)
    points = np.empty((n_clients, horizon, partition.dim))
    rewards = np.empty((n_clients, horizon))
    phase_ends = []
    while True:
        phase = state.current_phase()
        stop = phase.start + phase.budget
        for m, objective in enumerate(objectives):
            nodes, x = pull_plan(phase, partition, rng)
            if not nodes:
                continue
            y = np.asarray(objective(x), dtype=float).reshape(-1)
            if y.shape[0] != x.shape[0] or not np.all(np.isfinite(y)):
                raise ValueError(f"Objective {m} must return {x.shape[0]} finite rewards.")
            points[m, phase.start : stop] = x
            rewards[m, phase.start : stop] = y
            if not phase.final:
                means = local_node_means(
                    phase, nodes, y, privacy=params.privacy, noise_rng=noise_rng
                )
                state.submit(str(m), means, phase=phase.index)
        if phase.final:
            break
        state.close_phase()
        phase_ends.append(stop)
    regret = None
    if global_objective is not None:
        values = np.asarray(global_objective(points.reshape(-1, partition.dim)), dtype=float)
        regret = float(f_star) - values.reshape(n_clients, horizon)
    return SimulationResult(points, rewards, regret, tuple(phase_ends), state)
