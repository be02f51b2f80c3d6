"""A participant process for tests/test_dp_multiprocess.py.

Usage: python tests/_dp_worker.py STORAGE NAME CLIENT_ID N_TRIALS SEED
Prints one JSON line with what happened (modes, rounds, the warnings it logged).
"""

from __future__ import annotations

import json
import logging
import sys

import optuna

from optuna_fedbo.federation import Federation
from optuna_fedbo.samplers._fed_thompson import FedThompsonSampler


class _Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def main() -> int:
    storage, name, client_id, n_trials, seed = sys.argv[1:6]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    recorder = _Recorder()
    logging.getLogger("optuna_fedbo").addHandler(recorder)
    federation = Federation.load(name, storage)
    sampler = FedThompsonSampler(
        federation,
        client_id,
        synchronous=True,
        sync_timeout=None,  # never give up waiting: only the budget state may end a wait
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
    print(
        json.dumps(
            {
                "client": client_id,
                "n_trials": len(study.trials),
                "last_upload_round": sampler.last_upload_round,
                "budget_exhausted": sampler.budget_exhausted,
                "modes": [t.system_attrs.get("fedbo:mode") for t in study.trials],
                "rounds": [t.system_attrs.get("fedbo:broadcast_round") for t in study.trials],
                "spent": list(federation.privacy_spent()),
                "warnings": recorder.messages,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
