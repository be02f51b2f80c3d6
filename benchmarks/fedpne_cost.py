"""Cost of Fed-PNE over the federation machinery: per trial (participant) and per phase (server).

A lock-step federation of ``M`` participants on Garland (a free objective, so only the machinery
is timed) with the federation's state in memory, in an SQLite file or in a journal file; the
participants' own studies are in memory. Measured:

* participant: wall time of ``study.optimize`` per trial, everything included (reading the
  published phase, choosing the pull, recording the trial attributes, rescaling the reward and,
  at the last pull of a phase, averaging and uploading the node means), against Optuna's
  ``RandomSampler`` and ``TPESampler`` on the same objective for reference;
* server: wall time of one ``step()`` that closes a phase (reading and checking ``M`` uploads,
  averaging, elimination, expansion, persisting the state, publishing the next phase).

Run: ``python benchmarks/fedpne_cost.py`` (about 2 minutes). The table goes to
``benchmarks/results/fedpne_cost.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import tempfile
import time
import uuid

import numpy as np
import optuna
from optuna.distributions import FloatDistribution

from optuna_fedbo.core.fedpne.synthetic import make_federated_problem
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.samplers._fed_pne import FedPNESampler

RESULTS = Path(__file__).resolve().parent / "results"
SPACE = {"x": FloatDistribution(0.0, 1.0)}


def objectives(n_clients: int) -> list:
    problem = make_federated_problem("garland", n_clients, seed=0)
    rewards = problem.objectives(np.random.default_rng(0))

    def make(m: int):
        def objective(trial: optuna.Trial) -> float:
            return float(rewards[m](np.array([[trial.suggest_float("x", 0.0, 1.0)]]))[0])

        return objective

    return [make(m) for m in range(n_clients)]


def fedpne_cost(storage: str | None, n_clients: int, horizon: int) -> dict[str, float]:
    federation = Federation.create(
        f"cost-{uuid.uuid4().hex[:8]}",
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=FedPNEConfig(horizon=horizon),
    )
    server = FederationServer(federation)
    studies = [
        optuna.create_study(
            direction="maximize",
            sampler=FedPNESampler(federation, f"c{m}", phase_timeout=0.0, seed=m),
        )
        for m in range(n_clients)
    ]
    funcs = objectives(n_clients)
    trial_time = step_time = 0.0
    trials = phases = 0
    while True:
        phase = server.phase
        start = time.perf_counter()
        for study, func in zip(studies, funcs):
            study.optimize(func, n_trials=phase.budget)
        trial_time += time.perf_counter() - start
        trials += n_clients * phase.budget
        if phase.final:
            break
        start = time.perf_counter()
        report = server.step()
        step_time += time.perf_counter() - start
        assert report is not None
        phases += 1
    return {
        "ms_per_trial": 1e3 * trial_time / trials,
        "ms_per_phase": 1e3 * step_time / phases,
        "phases": phases,
        "trials": trials,
    }


def reference_cost(sampler: optuna.samplers.BaseSampler, n_trials: int) -> float:
    study = optuna.create_study(direction="maximize", sampler=sampler)
    func = objectives(1)[0]
    start = time.perf_counter()
    study.optimize(func, n_trials=n_trials)
    return 1e3 * (time.perf_counter() - start) / n_trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=500)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, make_storage in (
            ("memory", lambda: None),
            ("sqlite", lambda: f"sqlite:///{tmp}/{uuid.uuid4().hex[:8]}.db"),
            ("journal", lambda: f"journal:{tmp}/{uuid.uuid4().hex[:8]}.log"),
        ):
            for n_clients in (10, 50):
                horizon = args.horizon if n_clients == 10 else args.horizon // 2
                cost = fedpne_cost(make_storage(), n_clients, horizon)
                rows.append(
                    f"| {label:<7} | {n_clients:>2} | {horizon:>4} | {cost['trials']:>6} | "
                    f"{cost['phases']:>6} | {cost['ms_per_trial']:>10.3f} | "
                    f"{cost['ms_per_phase']:>11.1f} |"
                )
    random_ms = reference_cost(optuna.samplers.RandomSampler(seed=0), args.horizon)
    tpe_ms = reference_cost(optuna.samplers.TPESampler(seed=0), args.horizon)
    text = "\n".join(
        [
            "### Fed-PNE cost over the federation machinery (Garland, lock-step, one process)",
            "",
            "| storage | M  | T    | trials | phases | ms / trial | ms / phase  |",
            "|---------|----|------|--------|--------|------------|-------------|",
            *rows,
            "",
            f"Reference on the same objective, {args.horizon} trials in memory: RandomSampler "
            f"{random_ms:.3f} ms / trial, TPESampler {tpe_ms:.3f} ms / trial.",
            "",
        ]
    )
    print(text)
    (RESULTS / "fedpne_cost.md").write_text(text)


if __name__ == "__main__":
    main()
