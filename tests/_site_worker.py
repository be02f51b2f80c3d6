"""A worker process of a site for tests/test_site_workers.py (and benchmarks/site_workers.py).

Usage: python tests/_site_worker.py STORAGE NAME CLIENT_ID STUDY_STORAGE STUDY N_TRIALS SEED
    [--sleep S] [--lease-ttl T] [--n-jobs J] [--worker NAME]
Runs N_TRIALS trials of the site's shared study (created or loaded by name in STUDY_STORAGE);
prints one JSON line after its study; Optuna warnings go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import optuna

from optuna_fedbo import FedSampler
from optuna_fedbo.federation import Federation


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("storage", "name", "client_id", "study_storage", "study"):
        parser.add_argument(name)
    parser.add_argument("n_trials", type=int)
    parser.add_argument("seed", type=int)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per objective call")
    parser.add_argument("--lease-ttl", type=float, default=60.0)
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--worker", default=None)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    federation = Federation.load(args.name, args.storage)
    sampler = FedSampler(
        federation,
        client_id=args.client_id,
        seed=args.seed,
        lease_ttl=args.lease_ttl,
        poll_interval=0.1,
        n_candidates=64,
        worker=args.worker,
    )
    study = optuna.create_study(
        study_name=args.study,
        storage=args.study_storage,
        direction="maximize",
        sampler=sampler,
        load_if_exists=True,
    )
    print(json.dumps({"started": args.client_id, "epoch": sampler._lease.epoch}), flush=True)
    shift = 0.02 * (int(args.client_id.rsplit("-", 1)[-1]) if "-" in args.client_id else 0)

    def objective(trial: optuna.Trial) -> float:
        x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
        time.sleep(args.sleep)
        return -((x - 0.3 - shift) ** 2) - (y - 0.6) ** 2

    study.optimize(objective, n_trials=args.n_trials, n_jobs=args.n_jobs)
    out = {"counts": sampler.counts.to_dict(), "epoch": sampler._lease.epoch, "pid": os.getpid()}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
