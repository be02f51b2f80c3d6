"""Influence audit: the most one participant can do to a broadcast without differential privacy.

One participant (the attacker) uploads a crafted contribution to a round together with ``k - 1``
honest participants, ``k = 1, 2, 3, 10``, on a real server (in-memory federation, the ordinary
upload path). The attacker wants the broadcast to point where it chose, ``x* = (0.1, 0.9)``,
far from the honest optimum ``(0.7, 0.3)`` of the honest participants' objective
``-|x - (0.7, 0.3)|^2``:

* vector uploads (``aggregation="weighted"``, ``P = 1``): its vector is ``1.2e11 phi(x*)``, the
  function ``1.2e11 k(x, x*)`` that peaks at ``x*``, of a norm just below the refused absurd
  values (the honest uploads are posterior means of 15 observations each);
* pooled statistics (``aggregation="pooled"``, the default): the statistics of 10,000
  observations, half at ``x*`` of value ``+1000``, half uniform of value ``-1000`` (the honest
  ones hold 15 observations each); and ``pooled (matched)``, an attacker that knows the rule:
  15 observations of the honest values' mean and spread, its 7 high values at ``x*``; and
  ``pooled (level)``: 15 observations all near 1000 (a tiny spread), the highest at ``x*``,
  which the joint standardization turns into "high at the attacker's points".

Printed per ``k``: whether a broadcast was published, the cosine of the broadcast to the
attacker's crafted direction (its vector; for pooled statistics the posterior mean of its
statistics alone, on the broadcast's feature block), and the distance from the broadcast
function's argmax (on a 101 x 101 grid) to ``x*``: the largest influence (largest cosine,
smallest distance) over the seeds. A cosine of 1 and a distance of 0 mean the attacker set the
broadcast; with ``k = 1`` a published broadcast is the attacker's upload alone. The honest
broadcast's argmax lies about 0.85 from ``x*``.

Also audited, for ``aggregation="sample"`` (the original FTS, which relays every vector): how
often the public seed's permutation (``default_rng([seed, round])``) says which relayed vector
is the attacker's: always when the order comes from the public seed, by chance (1 in ``k``)
when it is secret to the server.

Usage::

    python benchmarks/influence_audit.py                      # the code on the path
    python benchmarks/influence_audit.py --before /path/to/old-checkout

``--before`` runs the same audit on another checkout of the package (e.g. ``git worktree add
/tmp/before <commit>``) in a subprocess, prints both tables and plots both to
``benchmarks/results/influence_audit.png``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
from pathlib import Path
import subprocess
import sys
import warnings

import numpy as np
import optuna
from optuna.distributions import FloatDistribution

from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.pooling import pooled_posterior
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig

RESULTS = Path(__file__).resolve().parent / "results"
SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
TARGET = np.array([0.1, 0.9])
HONEST_OPTIMUM = np.array([0.7, 0.3])
CONTRIBUTORS = (1, 2, 3, 10)
ATTACKS = ("weighted", "pooled", "pooled (matched)", "pooled (level)")
HONEST_POINTS = 15
GRID = np.stack(np.meshgrid(*[np.linspace(0, 1, 101)] * 2), -1).reshape(-1, 2)
_names = itertools.count()


def _objective(x: np.ndarray) -> np.ndarray:
    return -np.sum((x - HONEST_OPTIMUM) ** 2, axis=1)


def _federation(k: int, aggregation: str, seed: int) -> Federation:
    # At least two registered participants: with k = 1 only the attacker uploads.
    n_clients = max(k, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fed = Federation.create(
            f"audit-{next(_names)}",
            search_space=SPACE,
            n_clients=n_clients,
            protocol=FTSConfig(aggregation=aggregation),
            seed=seed,
        )
    for i in range(n_clients):
        fed.join(f"p{i}")
    return fed


def _statistics(features, x: np.ndarray, y: np.ndarray) -> SufficientStatistics:
    statistics = SufficientStatistics(features.n_features)
    statistics.add(features(x), y)
    return statistics


def _honest_upload(fed: Federation, rng: np.random.Generator, aggregation: str) -> np.ndarray:
    x = rng.uniform(size=(HONEST_POINTS, 2))
    y = _objective(x) + 0.01 * rng.standard_normal(HONEST_POINTS)
    if aggregation == "pooled":
        return pack_blocks([_statistics(f, x, y) for f in fed.pooling_features()])
    statistics = _statistics(fed.features(), x, y)
    return statistics.posterior(fed.fts.noise_variance).mean  # the default vector upload


def _attack_statistics(features, rng: np.random.Generator, attack: str) -> SufficientStatistics:
    """High values at x*, low ones elsewhere: 10,000 observations of +-1000; or (``matched``)
    as many observations as an honest participant, of the same mean and spread; or
    (``level``) as many, all near 1000 (a spread of 0.005), the highest at x*."""
    if attack == "level":
        high = 7
        x = np.concatenate(
            [np.tile(TARGET, (high, 1)), rng.uniform(size=(HONEST_POINTS - high, 2))]
        )
        y = np.concatenate([np.full(high, 1000.01), np.full(HONEST_POINTS - high, 1000.0)])
        return _statistics(features, x, y)
    if attack != "matched":
        half = 5_000
        x = np.concatenate([np.tile(TARGET, (half, 1)), rng.uniform(size=(half, 2))])
        y = np.concatenate([np.full(half, 1000.0), np.full(half, -1000.0)])
        return _statistics(features, x, y)
    honest = _objective(np.random.default_rng(12345).uniform(size=(1000, 2)))
    mean, spread, high = float(honest.mean()), float(honest.std()), 7
    share = high / HONEST_POINTS
    x = np.concatenate([np.tile(TARGET, (high, 1)), rng.uniform(size=(HONEST_POINTS - high, 2))])
    y = np.concatenate(
        [
            np.full(high, mean + spread * np.sqrt((1 - share) / share)),
            np.full(HONEST_POINTS - high, mean - spread * np.sqrt(share / (1 - share))),
        ]
    )
    return _statistics(features, x, y)


def _round(k: int, attack: str, seed: int) -> dict[str, float]:
    """One round: the attacker p0 and k - 1 honest participants; the broadcast's influence."""
    aggregation, variant = attack.split(" ")[0], attack.partition("(")[2].rstrip(")")
    fed = _federation(k, aggregation, seed)
    rng = np.random.default_rng(seed)
    server = FederationServer(fed)
    if aggregation == "pooled":
        crafted = [
            _attack_statistics(f, np.random.default_rng(seed), variant)
            for f in fed.pooling_features()
        ]
        fed.upload("p0", pack_blocks(crafted), n_observations=crafted[0].count, iteration=0)
    else:
        crafted = fed.features()(TARGET[None, :])[0]
        fed.upload("p0", 1.2e11 * crafted, n_observations=HONEST_POINTS, iteration=0)
    for i in range(1, k):
        vector = _honest_upload(fed, rng, aggregation)
        fed.upload(f"p{i}", vector, n_observations=HONEST_POINTS, iteration=0)
    server.step(force=True)
    broadcast = fed.latest_broadcast()
    if broadcast is None:
        return {"published": 0.0, "cosine": float("nan"), "distance": float("nan")}
    omega = broadcast.vectors[0]
    if aggregation == "pooled":
        features = fed.pooling_features()[broadcast.feature_block]
        alone = _attack_statistics(features, np.random.default_rng(seed), variant)
        crafted = pooled_posterior([alone], np.ones(1), fed.fts.noise_variance, 0.0)[0]
    else:
        features = fed.features()
    argmax = GRID[int(np.argmax(features(GRID) @ omega))]
    cosine = float(crafted @ omega / (np.linalg.norm(crafted) * np.linalg.norm(omega)))
    return {
        "published": 1.0,
        "cosine": cosine,
        "distance": float(np.linalg.norm(argmax - TARGET)),
    }


def _sample_attribution(k: int, rounds: int) -> float:
    """How often the public seed's permutation locates the attacker's relayed vector."""
    fed = _federation(k, "sample", seed=3)
    server = FederationServer(fed)
    rng = np.random.default_rng(0)
    hits = 0
    for round_index in range(rounds):
        vectors = [rng.standard_normal(fed.fts.n_features) for _ in range(k)]
        for i, vector in enumerate(vectors):
            fed.upload(f"p{i}", vector, n_observations=HONEST_POINTS, iteration=round_index)
        report = server.step(force=True)
        relayed = fed.latest_broadcast().vectors
        order = np.random.default_rng([fed.seed, round_index]).permutation(k)
        attacker = list(report.contributors).index("p0")
        guess = int(np.flatnonzero(order == attacker)[0])
        hits += bool(np.allclose(relayed[guess], vectors[0]))
    return hits / rounds


def audit(seeds: int) -> dict[str, object]:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.getLogger("optuna_fedbo").setLevel(logging.ERROR)  # withheld rounds are expected
    table: dict[str, object] = {}
    for aggregation in ATTACKS:
        for k in CONTRIBUTORS:
            runs = [_round(k, aggregation, seed) for seed in range(seeds)]
            published = [r for r in runs if r["published"]]
            table[f"{aggregation}/{k}"] = {
                "published": len(published) / len(runs),
                "cosine": max((r["cosine"] for r in published), default=float("nan")),
                "distance": min((r["distance"] for r in published), default=float("nan")),
            }
    table["sample/attribution"] = {k: _sample_attribution(k, 30) for k in (2, 3, 10)}
    return table


def print_table(label: str, table: dict[str, object]) -> None:
    print(f"\n{label}: largest influence of one participant over the seeds")
    print(f"{'attack':18s}{'k':>4s}{'published':>11s}{'cosine':>9s}{'argmax to x*':>14s}")
    for aggregation in ATTACKS:
        for k in CONTRIBUTORS:
            row = table[f"{aggregation}/{k}"]
            print(
                f"{aggregation:18s}{k:4d}{row['published']:11.0%}{row['cosine']:9.3f}"
                f"{row['distance']:14.3f}"
            )
    shares = table["sample/attribution"]
    cells = ", ".join(f"k={k}: {share:.0%}" for k, share in shares.items())
    print(f"sample: the public seed's permutation locates the attacker's vector in {cells}")


def plot(tables: dict[str, dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label, table in tables.items():
        for aggregation, style in zip(ATTACKS, ("-o", "--s", ":^", "-.v")):
            rows = [table[f"{aggregation}/{k}"] for k in CONTRIBUTORS]
            name = f"{label}, {aggregation}"
            axes[0].plot(CONTRIBUTORS, [r["cosine"] for r in rows], style, label=name)
            axes[1].plot(CONTRIBUTORS, [r["distance"] for r in rows], style, label=name)
    axes[0].set_ylabel("cosine of the broadcast to the crafted direction (max)")
    axes[1].set_ylabel("distance of the broadcast's argmax to x* (min)")
    for axis in axes:
        axis.set_xscale("log")
        axis.set_xticks(CONTRIBUTORS, [str(k) for k in CONTRIBUTORS])
        axis.set_xlabel("contributors k (one of them the attacker)")
    axes[0].legend(fontsize=8)
    fig.suptitle("One participant's influence on a non-DP broadcast (missing: not published)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--before", help="a checkout of the package to audit as 'before'")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:  # the subprocess of --before
        print(json.dumps(audit(args.seeds)))
        return
    tables = {}
    if args.before:
        environment = {**os.environ, "PYTHONPATH": os.path.abspath(args.before)}
        output = subprocess.run(
            [sys.executable, __file__, "--json", "--seeds", str(args.seeds)],
            env=environment,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        before = json.loads(output.strip().splitlines()[-1])
        before["sample/attribution"] = {int(k): v for k, v in before["sample/attribution"].items()}
        tables["before"] = before
        print_table(f"before ({args.before})", before)
    tables["this code"] = audit(args.seeds)
    print_table("this code", tables["this code"])
    plot(tables, RESULTS / "influence_audit.png")
    print(f"plot saved to {RESULTS / 'influence_audit.png'}")


if __name__ == "__main__":
    main()
