"""A participant process for tests/test_lifecycle_multiprocess.py.

Usage: python tests/_lifecycle_worker.py STORAGE NAME CLIENT_ID N_TRIALS SEED [options]
Prints one JSON line (counts, modes) after its study; Optuna warnings go to stderr.
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
    parser.add_argument("storage")
    parser.add_argument("name")
    parser.add_argument("client_id")
    parser.add_argument("n_trials", type=int)
    parser.add_argument("seed", type=int)
    parser.add_argument("--lease-ttl", type=float, default=60.0)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per objective call")
    parser.add_argument("--crash-at", type=int, default=None, help="os._exit at this trial")
    parser.add_argument("--raise-at", type=int, default=None, help="raise at this trial")
    parser.add_argument("--synchronous", action="store_true")
    parser.add_argument("--sync-timeout", type=float, default=120.0)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    federation = Federation.load(args.name, args.storage)
    kwargs = {"synchronous": True, "sync_timeout": args.sync_timeout} if args.synchronous else {}
    sampler = FedSampler(
        federation,
        client_id=args.client_id,
        seed=args.seed,
        lease_ttl=args.lease_ttl,
        poll_interval=0.1,
        n_candidates=64,
        **kwargs,
    )
    print(json.dumps({"started": args.client_id}), flush=True)

    def objective(trial: optuna.Trial) -> float:
        if args.crash_at is not None and trial.number == args.crash_at:
            os._exit(17)  # a hard crash: no clean-up, the lease is left to expire
        if args.raise_at is not None and trial.number == args.raise_at:
            raise RuntimeError("the objective failed")  # ends the process: unhandled
        time.sleep(args.sleep)
        x = trial.suggest_float("x", 0.0, 1.0)
        return -((x - 0.3 - 0.05 * args.seed) ** 2)

    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(objective, n_trials=args.n_trials)
    modes = [t.system_attrs.get("fedbo:mode") for t in study.trials]
    counts = sampler.counts.to_dict()
    print(json.dumps({"counts": counts, "modes": modes, "pid": os.getpid()}), flush=True)


if __name__ == "__main__":
    main()
