"""A participant process for tests/test_federation_multiprocess.py.

Usage: python tests/_federation_worker.py STORAGE NAME CLIENT_ID N_TRIALS SEED
Prints one JSON line with what happened; exits 1 if any upload or wait failed.
"""

from __future__ import annotations

import json
import logging
import sys

from _broadcast_check import broadcast_gap
import optuna

from optuna_fedbo import FedSampler
from optuna_fedbo.federation import Federation


class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def main() -> int:
    storage, name, client_id, n_trials, seed = sys.argv[1:6]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    counter = _Counter()
    logging.getLogger("optuna_fedbo").addHandler(counter)
    federation = Federation.load(name, storage)
    sampler = FedSampler(
        federation,
        client_id=client_id,
        synchronous=True,
        sync_timeout=120.0,
        poll_interval=0.1,
        n_candidates=128,
        seed=int(seed),
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    shift = 0.05 * int(seed)

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        y = trial.suggest_float("y", 0.0, 1.0)
        return -((x - 0.3 - shift) ** 2) - (y - 0.6) ** 2

    study.optimize(objective, n_trials=int(n_trials))
    modes = [t.system_attrs.get("fedbo:mode") for t in study.trials]
    federated = [t for t in study.trials if t.system_attrs.get("fedbo:mode") == "federated"]
    gap, spread = (
        broadcast_gap(
            federation, federated[0].params, federated[0].system_attrs["fedbo:broadcast_round"]
        )
        if federated
        else (float("nan"), float("nan"))
    )
    print(
        json.dumps(
            {
                "client": client_id,
                "index": sampler.participant.index,
                "n_trials": len(study.trials),
                "last_upload_round": sampler.last_upload_round,
                "modes": modes,
                "counts": sampler.counts.to_dict(),
                "federated_gap": gap,
                "federated_range": spread,
                "warnings": counter.messages,
            }
        ),
        flush=True,
    )
    return 1 if counter.messages else 0


if __name__ == "__main__":
    sys.exit(main())
