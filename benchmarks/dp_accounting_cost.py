"""What the privacy ledger costs per round, over 1,000 rounds, for the three accountants.

One round of accounting is what the DP server does between aggregating and staging a broadcast:
``PrivacyLedger.would_exceed`` (the budget check) and ``PrivacyLedger.account`` (compose the
round into the persistent ledger: epsilon after it, and one storage write). Measured on a
federation in memory (``N = 29``, ``q = 0.35``, ``z = 1``, ``delta = N^-1.1``: the landmine
setting; ``rdp`` and ``moments`` are closed forms in the number of rounds, ``pld`` composes
distributions).

Modes:

- ``no budget``: nothing precomputed; each round asks the epsilon curve for the next count
  (PLD: one convolution of the running distribution with the one-round distribution);
- ``budget``: a budget allowing the 1,000 rounds, with the server's precomputation run to the
  end (``PrivacyLedger.prepare(seconds=inf)``; a server caps it at 2 s by default and computes
  the rest as rounds come); every round is then a table lookup;
- ``before`` (PLD only, for reference): the previous ledger arithmetic,
  ``PrivacyAccountant.epsilon(T)``, which re-self-composes ``T`` rounds every time (sampled).

Prints one table and saves ``benchmarks/results/dp_accounting_cost.txt``.

Run: ``python benchmarks/dp_accounting_cost.py`` (about 4 minutes on two shared cores).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
import statistics
import time

import optuna
from optuna.distributions import FloatDistribution

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.privacy import PrivacyAccountant

RESULTS = Path(__file__).resolve().parent / "results"
N_AGENTS, Q, Z = 29, 0.35, 1.0
WINDOWS = ((1, 10), (91, 100), (491, 500), (991, 1000))


def ledger_run(accountant: str, rounds: int, budgeted: bool) -> dict[str, object]:
    budget = None
    if budgeted:
        # The ledger composes PLD round by round; a fresh self-composition of T rounds agrees
        # to about 1e-12 relative, so leave that much room for the budget to allow T rounds.
        budget = DPConfig(Z, Q, 1.0, accountant=accountant).epsilon(rounds, N_AGENTS) * (1 + 1e-9)
    privacy = DPConfig(Z, Q, 1.0, accountant=accountant, epsilon_budget=budget)
    fed = Federation.create(
        "cost",
        search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=N_AGENTS,
        protocol=FTSConfig(n_features=4),
        privacy=privacy,
    )
    ledger = fed.privacy_ledger()
    start = time.perf_counter()
    ledger.prepare(seconds=math.inf)
    setup = time.perf_counter() - start
    times = []
    for round_index in range(rounds):
        tick = time.perf_counter()
        assert not ledger.would_exceed(round_index)
        entry = ledger.account(round_index, noise_std=1.0, phi_max=1.0 / N_AGENTS)
        times.append(time.perf_counter() - tick)
    return {"setup": setup, "times": times, "epsilon": entry.epsilon}


def before_run(rounds: int) -> dict[str, float]:
    """The previous per-round cost: a fresh self-composition at each T (uncached calls)."""
    out = {}
    for _, last in WINDOWS:
        if last > rounds:
            continue
        samples = []
        for _ in range(3):
            accountant = PrivacyAccountant(Z, Q, N_AGENTS**-1.1, accountant="pld")
            tick = time.perf_counter()
            accountant.epsilon(last)
            samples.append(time.perf_counter() - tick)
        out[f"{last}"] = statistics.median(samples)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()
    windows = [w for w in WINDOWS if w[1] <= args.rounds]
    lines = [
        f"Ledger accounting per round (would_exceed + account), N = {N_AGENTS}, q = {Q}, "
        f"z = {Z}, delta = N^-1.1, {args.rounds} rounds; per-round median in ms over "
        "the rounds of each window",
        f"{'accountant':10s} {'mode':10s} {'setup s':>8s}"
        + "".join(f"{f'{a}-{b}':>11s}" for a, b in windows)
        + f"{'total s':>9s}{'max ms':>8s}{'eps(T)':>9s}",
    ]
    for accountant in ("moments", "rdp", "pld"):
        for budgeted in (False, True):
            result = ledger_run(accountant, args.rounds, budgeted)
            times = result["times"]
            assert isinstance(times, list)
            cells = "".join(
                f"{1e3 * statistics.median(times[a - 1 : b]):11.3f}" for a, b in windows
            )
            lines.append(
                f"{accountant:10s} {'budget' if budgeted else 'no budget':10s} "
                f"{result['setup']:8.2f}{cells}{sum(times):9.2f}{1e3 * max(times):8.1f}"
                f"{result['epsilon']:9.2f}"
            )
    before = before_run(args.rounds)
    cells = "".join(
        f"{1e3 * before[str(b)]:11.3f}" if str(b) in before else f"{'-':>11s}" for _, b in windows
    )
    lines.append(
        f"{'pld':10s} {'before':10s} {'-':>8s}{cells}   (one uncached epsilon(T) at T = b)"
    )
    lines.append(f"\ntotal {time.perf_counter() - start:.0f} s")
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dp_accounting_cost.txt").write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
