"""Privacy accounting benchmark: the papers' epsilons, ledger cost per round, calibration.

Prints three plain-text tables (and a fourth on fixed-size sampling) and saves them, with the raw
numbers, under ``benchmarks/results/``:

(a) epsilon of the DP-FTS-DE paper's 14 settings by the moments, RDP and PLD accountants;
(b) the cost of one ``PrivacyAccountant.epsilon(t)`` call at t = 1, 10, 100, 1000 (medians of
    uncached calls) and of a whole 1,000-round ledger (one call per round);
(c) the noise multiplier needed for epsilon 1, 3, 8 at N = 200, q = 0.25, T = 60;
(d) Poisson versus fixed-size sampling (footnote 14) on the landmine settings.

Run: ``python benchmarks/privacy_accounting.py`` (about two minutes on one core).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import statistics
import time

from optuna_fedbo.privacy import ACCOUNTANTS
from optuna_fedbo.privacy import calibrate_noise_multiplier
from optuna_fedbo.privacy import compute_epsilon
from optuna_fedbo.privacy import PrivacyAccountant

RESULTS = Path(__file__).resolve().parent / "results"

# (setting, N, q, z, T, published loss)
PAPER_SETTINGS = [
    ("synthetic", 200, 0.15, 1.0, 40, 5.93),
    ("synthetic", 200, 0.25, 1.0, 40, 9.91),
    ("synthetic", 200, 0.50, 1.0, 40, 20.12),
    ("synthetic", 200, 0.25, 1.2, 40, 7.39),
    ("synthetic", 200, 0.25, 1.5, 40, 5.22),
    ("landmine", 29, 0.10, 1.0, 60, 3.75),
    ("landmine", 29, 0.15, 1.0, 60, 5.98),
    ("landmine", 29, 0.20, 1.0, 60, 7.69),
    ("landmine", 29, 0.25, 1.0, 60, 9.82),
    ("landmine", 29, 0.35, 1.0, 60, 15.17),
    ("landmine", 29, 0.35, 1.6, 60, 7.12),
    ("landmine", 29, 0.35, 2.0, 60, 5.14),
    ("landmine", 29, 0.35, 3.0, 60, 3.05),
    ("landmine", 29, 0.35, 4.0, 60, 2.16),
]


def epsilon_table() -> tuple[str, list[dict[str, float | str]]]:
    rows = []
    lines = [
        "(a) epsilon of the DP-FTS-DE settings (delta = N^-1.1, Poisson sampling)",
        f"{'setting':<10} {'N':>4} {'q':>5} {'z':>4} {'T':>3} {'paper':>7} "
        f"{'moments':>8} {'rdp':>7} {'pld':>7}",
    ]
    for name, n_agents, q, z, rounds, paper in PAPER_SETTINGS:
        values = {
            kind: compute_epsilon(
                noise_multiplier=z,
                sample_rate=q,
                rounds=rounds,
                delta=n_agents**-1.1,
                accountant=kind,
            )
            for kind in ACCOUNTANTS
        }
        rows.append({"setting": name, "N": n_agents, "q": q, "z": z, "T": rounds, "paper": paper})
        rows[-1].update(values)
        lines.append(
            f"{name:<10} {n_agents:>4} {q:>5.2f} {z:>4.1f} {rounds:>3} {paper:>7.2f} "
            f"{values['moments']:>8.2f} {values['rdp']:>7.2f} {values['pld']:>7.2f}"
        )
    return "\n".join(lines), rows


def timing_table(horizon: int, repeats: int) -> tuple[str, dict[str, object]]:
    q, z, n_agents = 0.35, 1.0, 29
    delta = n_agents**-1.1
    checkpoints = [t for t in (1, 10, 100, 1000) if t <= horizon]
    per_call: dict[str, dict[int, float]] = {}
    setup: dict[str, float] = {}
    ledger_total: dict[str, float] = {}
    final: dict[str, float] = {}
    for kind in ACCOUNTANTS:
        build_times = []
        per_call[kind] = {}
        for t in checkpoints:
            samples = []
            for _ in range(repeats):
                start = time.perf_counter()
                ledger = PrivacyAccountant(z, q, delta, accountant=kind)
                built = time.perf_counter()
                ledger.epsilon(t)  # a fresh ledger: never a cache hit
                samples.append(time.perf_counter() - built)
                build_times.append(built - start)
            per_call[kind][t] = statistics.median(samples)
        setup[kind] = statistics.median(build_times)
        ledger = PrivacyAccountant(z, q, delta, accountant=kind)
        start = time.perf_counter()
        for t in range(1, horizon + 1):
            epsilon = ledger.epsilon(t)
        ledger_total[kind] = time.perf_counter() - start
        final[kind] = epsilon
    header = " ".join(f"{'t=' + str(t):>10}" for t in checkpoints)
    lines = [
        f"(b) cost of PrivacyAccountant.epsilon(t), N={n_agents} q={q} z={z}: median of "
        f"{repeats} uncached calls (ms); setup once per ledger; a {horizon}-round ledger",
        f"{'accountant':<10} {'setup ms':>9} {header} {'ledger s':>9} {'ms/round':>9} "
        f"{'eps(' + str(horizon) + ')':>10}",
    ]
    for kind in ACCOUNTANTS:
        cells = " ".join(f"{1e3 * per_call[kind][t]:>10.3f}" for t in checkpoints)
        lines.append(
            f"{kind:<10} {1e3 * setup[kind]:>9.1f} {cells} {ledger_total[kind]:>9.2f} "
            f"{1e3 * ledger_total[kind] / horizon:>9.3f} {final[kind]:>10.2f}"
        )
    raw = {
        "per_call_seconds": per_call,
        "setup_seconds": setup,
        "ledger_seconds": ledger_total,
        "final_epsilon": final,
    }
    return "\n".join(lines), raw


def calibration_table() -> tuple[str, list[dict[str, float | str]]]:
    n_agents, q, rounds = 200, 0.25, 60
    delta = n_agents**-1.1
    targets = (1.0, 3.0, 8.0)
    rows = []
    lines = [
        f"(c) noise multiplier z for a target epsilon (N={n_agents}, q={q}, T={rounds}, "
        "delta = N^-1.1); achieved epsilon and seconds in brackets",
        f"{'accountant':<10} " + " ".join(f"{'eps=' + format(t, 'g'):>24}" for t in targets),
    ]
    for kind in ACCOUNTANTS:
        cells = []
        for target in targets:
            start = time.perf_counter()
            z = calibrate_noise_multiplier(
                target_epsilon=target,
                sample_rate=q,
                rounds=rounds,
                delta=delta,
                accountant=kind,
            )
            seconds = time.perf_counter() - start
            achieved = compute_epsilon(
                noise_multiplier=z, sample_rate=q, rounds=rounds, delta=delta, accountant=kind
            )
            rows.append(
                {
                    "accountant": kind,
                    "target": target,
                    "z": z,
                    "achieved": achieved,
                    "seconds": seconds,
                }
            )
            cells.append(f"{z:>8.3f} ({achieved:.3f}, {seconds:4.1f}s)")
        lines.append(f"{kind:<10} " + " ".join(f"{cell:>24}" for cell in cells))
    return "\n".join(lines), rows


def fixed_size_table() -> tuple[str, list[dict[str, float]]]:
    n_agents, rounds = 29, 60
    delta = n_agents**-1.1
    rows = []
    lines = [
        "(d) landmine (N=29, T=60): Poisson (add/remove-one) vs fixed-size round(Nq) "
        "(replace-one, z/2 per library convention)",
        f"{'q':>5} {'z':>4} {'poisson moments':>16} {'poisson pld':>12} "
        f"{'fixed moments':>14} {'fixed rdp':>10}",
    ]
    for q, z in ((0.10, 1.0), (0.35, 1.0), (0.35, 2.0), (0.35, 4.0)):
        common = {"noise_multiplier": z, "sample_rate": q, "rounds": rounds, "delta": delta}
        row = {
            "q": q,
            "z": z,
            "poisson_moments": compute_epsilon(accountant="moments", **common),
            "poisson_pld": compute_epsilon(accountant="pld", **common),
            "fixed_moments": compute_epsilon(
                accountant="moments", sampling="fixed_size", n_agents=n_agents, **common
            ),
            "fixed_rdp": compute_epsilon(
                accountant="rdp", sampling="fixed_size", n_agents=n_agents, **common
            ),
        }
        rows.append(row)
        lines.append(
            f"{q:>5.2f} {z:>4.1f} {row['poisson_moments']:>16.2f} {row['poisson_pld']:>12.2f} "
            f"{row['fixed_moments']:>14.2f} {row['fixed_rdp']:>10.2f}"
        )
    return "\n".join(lines), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=1000, help="ledger length in rounds")
    parser.add_argument("--repeats", type=int, default=5, help="uncached calls per median")
    args = parser.parse_args()
    started = time.perf_counter()
    sections = []
    raw: dict[str, object] = {}
    for name, run in (
        ("epsilon", epsilon_table),
        ("timing", lambda: timing_table(args.horizon, args.repeats)),
        ("calibration", calibration_table),
        ("fixed_size", fixed_size_table),
    ):
        text, data = run()
        print(text + "\n", flush=True)
        sections.append(text)
        raw[name] = data
    raw["total_seconds"] = time.perf_counter() - started
    print(f"total {raw['total_seconds']:.1f} s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "privacy_accounting.txt").write_text("\n\n".join(sections) + "\n")
    (RESULTS / "privacy_accounting.json").write_text(json.dumps(raw, indent=2, default=str))


if __name__ == "__main__":
    main()
