"""Empirical privacy audit: a distinguishing attack on the shipped mechanisms.

For each mechanism, two neighbouring inputs -- the audited agent takes part with a vector at the
clipping bound (or a reward at the range's edge), or does not -- are run many times with fresh
noise; a threshold test on the released value tells them apart. With Clopper-Pearson bounds
(95%, two-sided) on its true- and false-positive rates, ``eps_lb = log((TPR_lo - delta) /
FPR_hi)`` is a lower bound on the epsilon of the mechanism: an ``eps_lb`` above the claimed
epsilon (the accountant's) would prove the mechanism weaker than claimed. The threshold is
chosen on the first half of the runs and evaluated on the second half.

Audited: the DP-FTS-DE server's subsampled Gaussian aggregation
(:func:`optuna_fedbo.privacy._gaussian.aggregate`, one round) at the paper's ``z = 1, q = 0.35``
and at ``z = 0.5, q = 1``, both against the PLD accountant's epsilon; the LDP-BO Laplace
mechanism (CTL) at epsilon 1; the distributed Skellam mechanism of secure aggregation
(:class:`optuna_fedbo.core.secagg.distributed_dp.DistributedSkellam`: each of the ``t``
survivors adds its share, the audited participant's vector at the bound or zeroed out, the sum
taken in the ring and decoded) against its Skellam RDP epsilon. A broken mechanism (noise / 10,
claimed with the honest epsilon) is included as a control: the audit must flag it.

Usage::

    python benchmarks/privacy_audit.py            # 100,000 runs per side
    python benchmarks/privacy_audit.py --quick    # 20,000 runs per side
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from optuna_fedbo.core.secagg.distributed_dp import DistributedSkellam
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import ring_add
from optuna_fedbo.federation import DPConfig
from optuna_fedbo.privacy._gaussian import aggregate
from optuna_fedbo.privacy._gaussian import SubsampledGaussianMechanism
from optuna_fedbo.privacy._laplace import LaplaceMechanism

DELTA = 1e-5
ALPHA = 0.05


def clopper_pearson(successes: int, trials: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Two-sided ``1 - alpha`` Clopper-Pearson interval of a binomial proportion."""
    from scipy.stats import beta

    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, trials - successes + 1))
    high = (
        1.0
        if successes == trials
        else float(beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return low, high


def epsilon_lower_bound(present: np.ndarray, absent: np.ndarray, delta: float = DELTA) -> float:
    """The distinguishing attack's epsilon lower bound from released values of both sides.

    The threshold (``output > t`` guesses "present") is the one of a grid of quantiles of the
    absent side that maximizes the bound on the first half; the bound is computed on the second.
    """
    half = len(present) // 2
    grid = np.quantile(absent[:half], [0.9, 0.99, 0.999, 0.9999, 0.99999])

    def bound(p: np.ndarray, a: np.ndarray, threshold: float) -> float:
        tpr_low, _ = clopper_pearson(int(np.sum(p > threshold)), len(p))
        _, fpr_high = clopper_pearson(int(np.sum(a > threshold)), len(a))
        return math.log((tpr_low - delta) / fpr_high) if tpr_low > delta else 0.0

    best = max(grid, key=lambda t: bound(present[:half], absent[:half], t))
    return max(0.0, bound(present[half:], absent[half:], best))


def gaussian_outputs(
    noise_multiplier: float,
    sample_rate: float,
    clip_norm: float,
    present: bool,
    runs: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """First coordinate of the shipped aggregation's release over ``runs`` fresh draws."""
    mechanism = SubsampledGaussianMechanism(
        noise_multiplier=noise_multiplier, sample_rate=sample_rate, clip_norm=clip_norm
    )
    omega = np.array([[clip_norm if present else 0.0, 0.0]])
    weights = np.ones((1, 1))
    return np.array(
        [
            aggregate(omega, [0], weights, mechanism=mechanism, rng=rng).vectors[0, 0]
            for _ in range(runs)
        ]
    )


def audit_gaussian(
    z: float, q: float, runs: int, seed: int, *, broken: bool = False
) -> tuple[float, float]:
    """``(eps_lb, claimed)`` of one round of the subsampled Gaussian (``S = 22``)."""
    rng = np.random.default_rng(seed)
    actual_z = z / 10 if broken else z
    present = gaussian_outputs(actual_z, q, 22.0, True, runs, rng)
    absent = gaussian_outputs(actual_z, q, 22.0, False, runs, rng)
    claimed = DPConfig(z, q, 22.0, delta=DELTA).epsilon(1, 100)
    return epsilon_lower_bound(present, absent), claimed


def audit_skellam(z: float, runs: int, seed: int) -> tuple[float, float]:
    """``(eps_lb, claimed)`` of one round of distributed Skellam noise (``S = 22``, ``N = 5``,
    ``t = 3`` survivors: the least noise a released sum carries), zero-out neighbours."""
    rng = np.random.default_rng(seed)
    mechanism = DistributedSkellam(
        n_participants=5,
        threshold=3,
        clip_norm=22.0,
        step=2.0**-20,
        dimension=2,
        noise_multiplier=z,
    )
    ring = mechanism.ring()

    def outputs(present: bool) -> np.ndarray:
        audited = np.array([22.0 if present else 0.0, 0.0])
        values = np.empty(runs)
        for run in range(runs):
            total = mechanism.participant_input(audited, ring, rng)
            for _ in range(mechanism.threshold - 1):  # the other survivors send zeros
                total = ring_add(total, mechanism.participant_input(np.zeros(2), ring, rng), ring)
            values[run] = decode(total, ring)[0]
        return values

    present, absent = outputs(True), outputs(False)
    return epsilon_lower_bound(present, absent), mechanism.epsilon(rounds=1, delta=DELTA)


def audit_laplace(epsilon: float, runs: int, seed: int) -> tuple[float, float]:
    """``(eps_lb, epsilon)`` of the Laplace mechanism (values at the two ends of the range)."""
    rng = np.random.default_rng(seed)
    mechanism = LaplaceMechanism(epsilon=epsilon, value_bound=1.0, noise_bound=0.0, rng=rng)
    present = np.array([mechanism.privatize(1.0) for _ in range(runs)])
    absent = np.array([mechanism.privatize(-1.0) for _ in range(runs)])
    return epsilon_lower_bound(present, absent, delta=0.0), epsilon


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 runs per side.")
    parser.add_argument("--runs", type=int, default=None, help="Runs per side.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    runs = args.runs or (20_000 if args.quick else 100_000)
    cases = [
        (
            "subsampled Gaussian z=1 q=0.35 S=22",
            lambda: audit_gaussian(1.0, 0.35, runs, args.seed),
        ),
        ("subsampled Gaussian z=0.5 q=1 S=22", lambda: audit_gaussian(0.5, 1.0, runs, args.seed)),
        ("Laplace CTL epsilon=1", lambda: audit_laplace(1.0, runs, args.seed)),
        ("distributed Skellam z=1 t=3 of N=5", lambda: audit_skellam(1.0, runs, args.seed)),
        ("distributed Skellam z=0.5 t=3 of N=5", lambda: audit_skellam(0.5, runs, args.seed)),
        (
            "CONTROL: z=1 q=0.35 with noise/10",
            lambda: audit_gaussian(1.0, 0.35, runs, args.seed, broken=True),
        ),
    ]
    print(f"distinguishing attack, {runs:,} runs per side, delta {DELTA:g}, 95% Clopper-Pearson")
    print(
        f"{'mechanism':<40} {'eps lower bound':>16} {'claimed eps':>12} {'verdict':>10} {'s':>6}"
    )
    for label, run in cases:
        start = time.perf_counter()
        lower, claimed = run()
        verdict = "ok" if lower < claimed else "VIOLATED"
        print(
            f"{label:<40} {lower:>16.3f} {claimed:>12.3f} {verdict:>10} "
            f"{time.perf_counter() - start:>6.1f}"
        )


if __name__ == "__main__":
    main()
