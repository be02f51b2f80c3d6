"""Tune an SVC from accuracies that users report under local differential privacy (LDP-BO).

A model is trained on public data for each suggested ``(C, gamma)``; then one user evaluates it on
20 examples of their own private data and reports the accuracy through the Laplace mechanism
CTL(epsilon = 1) on their side (:class:`optuna_fedbo.privacy.LaplaceMechanism`). The study, and
the sampler, only ever see privatized accuracies. The accuracy is centred (``acc - 0.5``), so its
mean lies in ``[-0.5, 0.5]`` (``value_bound = 0.5``) and a user's report too; ``noise_bound =
0.5`` declares the range ``[-1, 1]``, safely wider than needed. The Laplace noise has scale
``2 (B + R) / epsilon = 2``: several times the spread of the accuracies being compared.

Run: ``python examples/ldp_svc_users.py`` (about half a minute). It prints the suggestion the
sampler favours, its true accuracy on all private data, and that of random search.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import optuna  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.svm import SVC  # noqa: E402

from optuna_fedbo import LaplaceMechanism  # noqa: E402
from optuna_fedbo import LDPUCBSampler  # noqa: E402

EPSILON = 1.0
N_TRIALS = 300
BATCH = 20


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    x, y = load_digits(return_X_y=True)
    x_public, x_private, y_public, y_private = train_test_split(
        x / 16.0, y, test_size=0.5, random_state=0
    )
    users = np.random.default_rng(0)  # which user (20 private examples) answers each trial

    def fit(c: float, gamma: float) -> SVC:
        return SVC(C=c, gamma=gamma).fit(x_public, y_public)

    def user_accuracy(trial: optuna.Trial) -> float:
        model = fit(
            trial.suggest_float("C", 1e-2, 1e3, log=True),
            trial.suggest_float("gamma", 1e-4, 1e1, log=True),
        )
        batch = users.choice(len(x_private), size=BATCH, replace=False)
        return float(np.mean(model.predict(x_private[batch]) == y_private[batch])) - 0.5

    # Each user's own mechanism (noise from OS entropy); the learner sees only its output.
    mechanism = LaplaceMechanism(EPSILON, value_bound=0.5, noise_bound=0.5)
    sampler = LDPUCBSampler(
        "tgp", epsilon=EPSILON, value_bound=0.5, noise_bound=0.5, horizon=N_TRIALS, seed=0
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(mechanism.wrap(user_accuracy), n_trials=N_TRIALS)

    # With privatized values "best_trial" is the luckiest draw; the sampler's favourite region is
    # better read from where it kept suggesting: the median of the last 50 suggestions.
    late = study.trials[-50:]
    c = float(np.exp(np.median([np.log(t.params["C"]) for t in late])))
    gamma = float(np.exp(np.median([np.log(t.params["gamma"]) for t in late])))
    accuracy = float(np.mean(fit(c, gamma).predict(x_private) == y_private))
    print(f"LDP-TGP-UCB ({N_TRIALS} users, epsilon = {EPSILON}): C = {c:.3g}, gamma = {gamma:.3g}")
    print(f"  accuracy on all private data {accuracy:.3f}; values clipped {mechanism.n_clipped}")

    rng = np.random.default_rng(1)
    random_accuracies = [
        float(
            np.mean(
                fit(10 ** rng.uniform(-2, 3), 10 ** rng.uniform(-4, 1)).predict(x_private)
                == y_private
            )
        )
        for _ in range(20)
    ]
    print(f"  a random configuration: {np.mean(random_accuracies):.3f} on average")


if __name__ == "__main__":
    main()
