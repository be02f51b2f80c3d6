"""The papers' FTS-family federation in lock-step, without Optuna studies or storage.

``simulate()`` runs every participant as a :class:`~optuna_fedbo.FedThompsonSampler` in its own
Optuna study and the server over a storage: per agent-trial it creates a trial, seals, signs and
stores an upload, reads and verifies the broadcast, and records the trial. At the papers' scale
(N = 200 agents, 40 rounds: 8,200 uploads and trials) that machinery, not the algorithm, is what
a run costs (``REPRODUCTION.md``'s cost section quotes the profile). This module runs the same
algorithm on the same library functions, in the same order and from the same random streams:

- each participant: the generator ``default_rng(seed_n)`` of ``simulate()``'s seed sequence,
  its uniform initial points in its sub-region, after every trial the posterior on the shared
  features (:class:`~optuna_fedbo.core.posterior.SufficientStatistics`, normalized as
  ``FTSConfig.normalization`` says) and its Thompson sample as the upload, then
  Algorithm 2's coin (``p_t``), local Thompson sampling or the broadcast's maximizer
  (:func:`~optuna_fedbo.core.acquisition.maximize`, per sub-region, the incumbent as a
  candidate in its own), exactly as the participant draws them;
- the server: the uploads in agent order, :func:`~optuna_fedbo.federation.fts.influence.bounded`
  and the weighted sum of :func:`~optuna_fedbo.privacy._gaussian.aggregate` with DP-FTS-DE's
  softmax weights, or its subsampled Gaussian mechanism (noise from
  ``research_rng(insecure_noise_seed)``), or the original FTS's relay in a seeded secret order;
  epsilon from the federation's own :class:`~optuna_fedbo.privacy._curve.EpsilonCurve`.

``tests/test_reproduce_lockstep.py`` checks that the points, values, uploads' norms, clipped
counts and epsilons are those of ``simulate()`` (bit for bit) on small federations of every
kind this module runs. Only ``transfer="schedule"`` with uniform initial points and
``"weighted"`` or ``"sample"`` aggregation is supported (:func:`supports`); anything else
(e.g. the product defaults) runs through ``simulate()``.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
import uuid

import federation_synthetic as fs
import numpy as np

from optuna_fedbo.core.acquisition import LinearAcquisition
from optuna_fedbo.core.acquisition import maximize
from optuna_fedbo.core.acquisition import search_budget
from optuna_fedbo.core.local_model import normalization
from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.threads import one_blas_thread
from optuna_fedbo.core.weights import subregion_weights
from optuna_fedbo.core.weights import WeightSchedule
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.fts.influence import bounded
from optuna_fedbo.federation.fts.influence import secret_order
from optuna_fedbo.federation.fts.schedules import local_probability
from optuna_fedbo.federation.fts.schedules import resolve_schedule
from optuna_fedbo.privacy._gaussian import aggregate
from optuna_fedbo.privacy._rng import research_rng


def supports(protocol: FTSConfig) -> bool:
    """Whether :func:`run_lockstep` runs this protocol (else use ``simulate()``)."""
    return (
        protocol.transfer == "schedule"
        and protocol.initial_design == "uniform"
        and protocol.aggregation in ("weighted", "sample")
    )


@dataclass
class LockstepReport:
    """What ``reproduce.py`` reads of a server round (as ``RoundReport``)."""

    round: int
    n_contributors: int
    n_clipped: int | None
    upload_norms: tuple[float, ...]
    published: bool = True


@dataclass
class LockstepResult:
    """``f`` (noiseless value) of every agent's trials in order, the rounds, and epsilon."""

    f_values: list[list[float]]
    reports: list[LockstepReport]
    epsilon: float

    def dp_counters(self) -> dict[str, float]:
        """Clipped and contributed vectors over the published rounds, and epsilon."""
        published = [r for r in self.reports if r.published]
        return {
            "clipped": sum(r.n_clipped or 0 for r in published),
            "contributed": sum(r.n_contributors for r in published),
            "epsilon": self.epsilon,
        }


class _Agent:
    """One participant's state: its generator, observations and newest posterior."""

    def __init__(self, seed: int, noise_seed: int, n_features: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.noise = np.random.default_rng(noise_seed)
        self.statistics = SufficientStatistics(n_features)
        self.targets: list[float] = []
        self.f_values: list[float] = []
        self.best_point: np.ndarray | None = None
        self.best_value = -math.inf
        self.posterior: LinearPosterior | None = None
        self.upload: np.ndarray | None = None


def run(
    functions: np.ndarray,
    n_rounds: int,
    seed: int,
    protocol: FTSConfig,
    privacy: DPConfig | None = None,
    insecure_noise_seed: int | None = None,
) -> LockstepResult:
    """``federation_synthetic.run_federated``'s outcome: by :func:`run_lockstep` where it
    :func:`supports` the protocol, else by ``simulate()``."""
    if supports(protocol):
        return run_lockstep(functions, n_rounds, seed, protocol, privacy, insecure_noise_seed)
    result = fs.run_federated(functions, n_rounds, seed, protocol, privacy, insecure_noise_seed)
    reports = [
        LockstepReport(r.round, r.n_contributors, r.n_clipped, r.upload_norms, r.published)
        for r in result.reports
    ]
    epsilon = result.federation.privacy_spent()[0]
    return LockstepResult(fs.f_values_of(result.studies), reports, epsilon)


def run_lockstep(
    functions: np.ndarray,
    n_rounds: int,
    seed: int,
    protocol: FTSConfig,
    privacy: DPConfig | None = None,
    insecure_noise_seed: int | None = None,
) -> LockstepResult:
    """``federation_synthetic.run_federated`` (``simulate()`` with ``SAMPLER_KWARGS``: no
    L-BFGS-B refinement) of agents maximizing ``functions[n][x]`` plus the objectives' noise
    (agent ``n``'s from ``default_rng(seed * 7919 + n)``, as ``make_objective``)."""
    if not supports(protocol):
        raise ValueError(f"run_lockstep does not run {protocol!r}; use simulate().")
    if fs.SAMPLER_KWARGS.get("n_refinements", 0) != 0:
        raise ValueError("run_lockstep runs the participants without L-BFGS-B refinement.")
    search_space, n_candidates = fs.SPACE, int(fs.SAMPLER_KWARGS["n_candidates"])
    noise_std = float(np.sqrt(fs.NOISE_VARIANCE))
    (name,) = search_space
    n_agents = len(functions)
    federation = Federation.create(
        f"lockstep-{uuid.uuid4().hex[:12]}",
        search_space=search_space,
        n_clients=n_agents,
        protocol=protocol,
        privacy=privacy,
        seed=seed,
    )
    encoder, features, partition = (
        federation.encoder,
        federation.features(),
        federation.partition(),
    )
    encoding = encoder.encoding
    schedule = resolve_schedule(protocol.schedule)
    weight_schedule = WeightSchedule(
        a=protocol.weight_a,
        hold_rounds=protocol.weight_hold_rounds,
        decay_rounds=protocol.weight_decay_rounds,
    )
    assignment = federation.assignment()
    mechanism = None if privacy is None else federation.privacy.mechanism()
    server_rng = None if insecure_noise_seed is None else research_rng(insecure_noise_seed)
    seeds = np.random.SeedSequence(seed).generate_state(n_agents)
    agents = [_Agent(int(s), seed * 7_919 + n, protocol.n_features) for n, s in enumerate(seeds)]
    n_init = max(protocol.n_init, 1)
    budget = search_budget(0, n_candidates, 0)  # <= LARGE_STUDY observations throughout
    n_regions = partition.n_subregions
    region_candidates = max(n_candidates // n_regions, 16)
    boxes = [partition.box(r) for r in range(n_regions)]

    def observe(agent: _Agent, values: np.ndarray, point: np.ndarray) -> None:
        """Evaluate, add the observation, upload the posterior's Thompson sample."""
        params = encoder.decode(point)
        index = params[name]
        point = encoder.encode([params])[0]
        agent.f_values.append(float(values[index]))
        target = float(values[index] + agent.noise.normal(0.0, noise_std))
        agent.statistics.add(features(point[None, :]), np.array([target]))
        agent.targets.append(target)
        if target > agent.best_value:
            agent.best_value, agent.best_point = target, point
        location = normalization(np.array(agent.targets), protocol.normalization, protocol.n_init)
        agent.posterior = agent.statistics.posterior(protocol.noise_variance, standardize=location)
        agent.upload = agent.posterior.sample(agent.rng)

    def federated_point(agent: _Agent, vectors: np.ndarray) -> np.ndarray | None:
        if protocol.aggregation == "sample":
            others = np.flatnonzero(~np.all(vectors == agent.upload, axis=1))
            if others.size == 0:
                return None
            chosen = vectors[others[int(agent.rng.integers(others.size))]]
            return maximize(
                LinearAcquisition(features, chosen), encoding, agent.rng,
                n_candidates=budget.n_candidates, n_refinements=0,
            )[0]  # fmt: skip
        if len(vectors) == 1:
            return maximize(
                LinearAcquisition(features, vectors[0]), encoding, agent.rng,
                n_candidates=budget.n_candidates, n_refinements=0,
            )[0]  # fmt: skip
        best_point, best_value = None, -math.inf
        incumbent = agent.best_point
        incumbent_region = (
            None if incumbent is None else int(partition.index_of(incumbent[None, :])[0])
        )
        for region in range(n_regions):
            point, value = maximize(
                LinearAcquisition(features, vectors[region]), encoding, agent.rng,
                box=boxes[region], n_candidates=region_candidates, n_refinements=0,
                extra_candidates=incumbent[None, :] if incumbent_region == region else None,
            )  # fmt: skip
            if value > best_value:
                best_point, best_value = point, value
        return best_point

    reports: list[LockstepReport] = []
    broadcast: np.ndarray | None = None
    with one_blas_thread():
        for n, (agent, values) in enumerate(zip(agents, functions)):
            box = boxes[assignment[n]] if protocol.init_in_subregion else None
            for _ in range(n_init):
                observe(agent, values, encoding.sample(1, agent.rng, box)[0])
        for round_index in range(n_rounds + 1):
            if round_index > 0:
                probability = local_probability(schedule, round_index)
                for agent, values in zip(agents, functions):
                    assert agent.posterior is not None
                    point = None
                    if agent.rng.uniform() > probability and broadcast is not None:
                        point = federated_point(agent, broadcast)
                    if point is None:
                        omega = agent.posterior.sample(agent.rng)
                        best = agent.best_point
                        point = maximize(
                            LinearAcquisition(features, omega), encoding, agent.rng,
                            n_candidates=budget.n_candidates, n_refinements=0,
                            extra_candidates=None if best is None else best[None, :],
                        )[0]  # fmt: skip
                    observe(agent, values, point)
            if round_index == n_rounds:
                break  # simulate() leaves the last round open
            uploads = np.stack([agent.upload for agent in agents])
            norms = tuple(float(np.linalg.norm(v)) for v in uploads)
            indices = np.arange(n_agents)
            weights = subregion_weights(
                assignment, n_regions, round_index=round_index, schedule=weight_schedule
            )
            n_clipped = None
            if mechanism is not None:
                private = aggregate(uploads, indices, weights, mechanism=mechanism, rng=server_rng)
                broadcast = np.asarray(private.vectors)
                count, n_clipped = int(private.contributors.size), private.n_clipped
            else:
                clipped = bounded(uploads, protocol.n_features, round_index)
                count = n_agents
                if protocol.aggregation == "sample":
                    broadcast = clipped[secret_order(n_agents, server_rng)]
                else:
                    broadcast = np.array(
                        aggregate(clipped, indices, weights, mechanism=None).vectors
                    )
            reports.append(LockstepReport(round_index, count, n_clipped, norms))
    epsilon = math.inf
    if privacy is not None:  # PLD round by round, as the ledger composes it (to the bit)
        curve = federation.privacy.curve(n_agents)
        counts = range(1, n_rounds + 1) if privacy.accountant == "pld" else [n_rounds]
        epsilon = max((curve.epsilon(t) for t in counts), default=0.0)
    return LockstepResult([a.f_values for a in agents], reports, float(epsilon))
