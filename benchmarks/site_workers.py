"""Wall-clock time to a regret with 1, 2 and 4 workers per site, against GPSampler and TPE.

Setting: three sites of one federation (FTS, the default transfer participant), each maximizing
its own shift of ``f(x, y) = -(x - 0.3 - s)^2 - (y - 0.6)^2`` over ``[0, 1]^2`` (``s`` = 0, 0.02,
0.04; site 0 is measured), with an objective of fixed duration (``--duration``, 0.5 s: a sleep,
as a training run of fixed length). Each site runs ``W`` workers (``n_jobs=W`` threads of one
process: one lease, one study, as Optuna runs a study on ``W`` workers); a server thread closes
rounds as they are ready. The stock samplers run site 0's objective alone with the same ``W``
workers: ``GPSampler`` (needs torch; left out with a note if ``import torch`` fails) and
``TPESampler``.

Measured: seconds from the start until site 0 first completes a trial with regret at most
``--target`` (``None`` if it does not within ``--trials`` trials), the median over ``--seeds``
seeds. Prints one table.

Run: ``nice -n 10 python benchmarks/site_workers.py`` (``--seeds``, ``--trials``, ``--target``,
``--duration``); a few minutes on two shared cores.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import math
import statistics
import threading
import time
import uuid

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from optuna_fedbo import FedSampler
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
N_SITES = 3


def objective_of(site: int, duration: float) -> Callable[[optuna.Trial], float]:
    shift = 0.02 * site

    def objective(trial: optuna.Trial) -> float:
        x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
        time.sleep(duration)
        return -((x - 0.3 - shift) ** 2) - (y - 0.6) ** 2

    return objective


def time_to_target(study: optuna.Study, start: float, target: float) -> tuple[float, int] | None:
    """Seconds from ``start`` (epoch seconds) to the first completed trial of regret <= target
    (the maximum is 0), and how many trials had completed by then (all workers)."""
    done = sorted(
        (t.datetime_complete.timestamp() - start, t.value)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.value is not None and t.datetime_complete is not None
    )
    for k, (seconds, value) in enumerate(done):
        if -value <= target:
            return seconds, k + 1
    return None


def run_federated(workers: int, seed: int, args: argparse.Namespace) -> tuple[float, int] | None:
    fed = Federation.create(
        f"bench-{uuid.uuid4().hex[:8]}", search_space=SPACE, n_clients=N_SITES,
        protocol=FTSConfig(n_features=100, n_init=3), seed=seed,
    )  # fmt: skip
    server = FederationServer(fed, round_timeout=2 * args.duration)
    stop = threading.Event()
    serving = threading.Thread(
        target=server.serve,
        kwargs={"poll_interval": 0.05, "stop": stop, "idle_timeout": None},
        daemon=True,
    )
    studies = []
    for site in range(N_SITES):
        sampler = FedSampler(fed, client_id=f"site-{site}", seed=seed * 10 + site)
        studies.append(optuna.create_study(direction="maximize", sampler=sampler))
    start = time.time()
    serving.start()
    threads = [
        threading.Thread(
            target=study.optimize,
            args=(objective_of(site, args.duration),),
            kwargs={"n_trials": args.trials, "n_jobs": workers},
        )
        for site, study in enumerate(studies)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    serving.join(timeout=30)
    return time_to_target(studies[0], start, args.target)


def run_stock(make: Callable[[int], optuna.samplers.BaseSampler], workers: int, seed: int,
              args: argparse.Namespace) -> tuple[float, int] | None:  # fmt: skip
    study = optuna.create_study(direction="maximize", sampler=make(seed))
    start = time.time()
    study.optimize(objective_of(0, args.duration), n_trials=args.trials, n_jobs=workers)
    return time_to_target(study, start, args.target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=24, help="trials per site (all workers)")
    parser.add_argument("--target", type=float, default=0.005, help="regret to reach")
    parser.add_argument("--duration", type=float, default=0.5, help="seconds per trial")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    methods: dict[str, Callable[[int, int], tuple[float, int] | None]] = {
        "FedSampler (3 sites)": lambda w, s: run_federated(w, s, args),
    }
    try:
        import torch  # noqa: F401

        methods["GPSampler"] = lambda w, s: run_stock(
            lambda seed: optuna.samplers.GPSampler(seed=seed), w, s, args
        )
    except ImportError:
        print("torch is not importable: GPSampler is left out.")
    methods["TPESampler"] = lambda w, s: run_stock(
        lambda seed: optuna.samplers.TPESampler(seed=seed), w, s, args
    )
    print(
        f"Seconds to regret <= {args.target:g} [trials completed by then, all workers] (median "
        f"of {args.seeds} seeds; trials of {args.duration:g} s, at most {args.trials} per site; "
        "'-' = the median seed missed)"
    )
    header = f"{'sampler':<22}" + "".join(f"{f'{w} worker(s)':>16}" for w in args.workers)
    print(header)
    for name, run in methods.items():
        cells = []
        for workers in args.workers:
            results = [run(workers, seed) for seed in range(args.seeds)]
            seconds = statistics.median(math.inf if r is None else r[0] for r in results)
            trials = statistics.median(math.inf if r is None else r[1] for r in results)
            text = "-" if math.isinf(seconds) else f"{seconds:.1f} [{trials:g}]"
            cells.append(f"{text:>16}")
        print(f"{name:<22}" + "".join(cells), flush=True)


if __name__ == "__main__":
    main()
