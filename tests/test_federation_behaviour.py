"""Small federations where the papers' ordering is clear (fixed seeds, fast).

200-agent versions with regret curves are in ``benchmarks/federation_synthetic.py``.
"""

from __future__ import annotations

import numpy as np
import optuna
from optuna.distributions import IntDistribution

from optuna_fedbo import RFFThompsonSampler
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import simulate
from optuna_fedbo.federation.fts.presets import PAPER_ALGORITHM

optuna.logging.set_verbosity(optuna.logging.WARNING)

GRID = 400
N_AGENTS = 16
N_INIT = 6
N_ROUNDS = 12
SPACE = {"x": IntDistribution(0, GRID - 1)}
KWARGS = {"n_candidates": 256, "n_refinements": 0}


def _gp_functions(n: int, rng: np.random.Generator) -> np.ndarray:
    x = np.linspace(0.0, 1.0, GRID)
    kernel = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 0.05**2)
    samples = (np.linalg.cholesky(kernel + 1e-6 * np.eye(GRID)) @ rng.standard_normal((GRID, n))).T
    low, high = samples.min(axis=1, keepdims=True), samples.max(axis=1, keepdims=True)
    return (samples - low) / (high - low)


def _objective(values: np.ndarray, seed: int):
    noise = np.random.default_rng(seed)

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_int("x", 0, GRID - 1)
        trial.set_user_attr("f", float(values[x]))
        return float(values[x] + noise.normal(0.0, 0.05))

    return objective


def _regret(studies: list[optuna.Study], functions: np.ndarray) -> float:
    """Simple regret averaged over agents and BO rounds."""
    total = 0.0
    for study, values in zip(studies, functions):
        found = np.maximum.accumulate([t.user_attrs["f"] for t in study.trials])[N_INIT:]
        total += float(np.mean(values.max() - found))
    return total / len(studies)


def _config(**overrides) -> FTSConfig:
    base = dict(
        n_features=50,
        noise_variance=0.1,
        n_init=N_INIT,
        weight_hold_rounds=3,
        weight_decay_rounds=3,
        schedule="1-1/sqrt(t)",
        # The papers' algorithm; tests/test_fts_default.py checks the default sampler.
        **{**PAPER_ALGORITHM, "lengthscale": 0.05},
    )
    return FTSConfig(**{**base, **overrides})


def _run(functions: np.ndarray, protocol: FTSConfig | None, seed: int) -> float:
    objectives = [_objective(v, 100 * seed + n) for n, v in enumerate(functions)]
    if protocol is None:
        studies = []
        for n, objective in enumerate(objectives):
            sampler = RFFThompsonSampler(
                n_features=50,
                lengthscale=0.05,
                noise_variance=0.1,
                n_startup_trials=N_INIT,
                feature_seed=seed,
                seed=1000 * seed + n,
                **KWARGS,
            )
            study = optuna.create_study(direction="maximize", sampler=sampler)
            study.optimize(objective, n_trials=N_INIT + N_ROUNDS)
            studies.append(study)
    else:
        studies = simulate(
            objectives,
            search_space=SPACE,
            n_rounds=N_ROUNDS,
            protocol=protocol,
            seed=seed,
            sampler_kwargs=KWARGS,
            progress=False,
        ).studies
    return _regret(studies, functions)


def test_similar_agents_gain_from_the_federation() -> None:
    """FTS-DE < FTS < local TS on near-identical agents (f + d, d = +-0.02)."""
    regrets = {"ts": [], "fts": [], "fts-de": []}
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        functions = _gp_functions(1, rng) + rng.choice([-0.02, 0.02], size=(N_AGENTS, GRID))
        regrets["ts"].append(_run(functions, None, seed))
        regrets["fts"].append(_run(functions, _config(), seed))
        regrets["fts-de"].append(_run(functions, _config(n_subregions=2), seed))
    mean = {name: float(np.mean(values)) for name, values in regrets.items()}
    assert mean["fts"] < 0.8 * mean["ts"], mean
    assert mean["fts-de"] < mean["fts"], mean


def test_independent_agents_do_not_ruin_local_progress() -> None:
    """With unrelated agents and a fast-decaying 1 - p_t, FTS-DE stays close to local TS."""
    regrets = {"ts": [], "fts-de": []}
    for seed in (0, 1):
        functions = _gp_functions(N_AGENTS, np.random.default_rng(10 + seed))
        regrets["ts"].append(_run(functions, None, seed))
        regrets["fts-de"].append(
            _run(functions, _config(n_subregions=2, schedule="1-1/t^2"), seed)
        )
    ts, fed = float(np.mean(regrets["ts"])), float(np.mean(regrets["fts-de"]))
    assert fed < 1.5 * ts + 0.01, (ts, fed)
