"""Find the best item under LDP on a real data set that ships with scikit-learn (digits).

The analogue of the paper's light-sensor experiment ("finding the maximum average reading of the
sensors"): the 64 pixels of scikit-learn's 8x8 digits are the items, each image is a user, and
a user asked about pixel ``i`` reports that pixel's intensity in their own image through
CTL(epsilon). The learner must find the pixel of highest mean intensity. As in the paper (Section
"Datasets and Settings", light sensor data): the images are split in half; ``f`` is the mean of
the test images (``B = max f``), the kernel is the empirical correlation of the (normalized)
train images, the noise is a test image minus ``f`` (``R = max |noise|``), and each reward is a
fresh random test image's pixel. Methods: LDP-TGP-, LDP-ATA-, LDP-MoMA-GP-UCB (theorem's ``k``
and "order-wise similar" ``k``), random search, and TPE (row and column as integers) on the same
privatized values.

Run: ``python benchmarks/ldp_dataset.py`` (``--quick`` for a smoke run). Prints the final
cumulative regret and the share of the last 10% of trials spent on one of the 5 best pixels;
saves ``results/ldp_dataset.png`` and ``.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

from ldp_common import cumulative_regret  # noqa: E402
from ldp_common import plot_panels  # noqa: E402
from ldp_common import practical_epoch_length  # noqa: E402
from ldp_common import RESULTS  # noqa: E402
from ldp_common import run_core  # noqa: E402
from ldp_common import run_random  # noqa: E402
from ldp_common import run_tpe  # noqa: E402
from ldp_common import summarize  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from optuna_fedbo import LaplaceMechanism  # noqa: E402
from optuna_fedbo.core.ldp import Kernel  # noqa: E402
from optuna_fedbo.core.ldp import LaplaceRewards  # noqa: E402
from optuna_fedbo.core.ldp.parameters import moma_epoch_length  # noqa: E402

EPSILONS = (1.0, 2.0, 4.0)
METHODS = ("tgp", "ata", "moma", "moma-k", "random", "tpe")


class ItemKernel(Kernel):
    """A kernel given as a matrix over items; a point is ``[item index]``.

    Only finite domains use it, so it has no gradient.
    """

    name = "matrix"

    def __init__(self, matrix: np.ndarray) -> None:
        super().__init__(1.0)
        self.matrix = np.asarray(matrix, dtype=float)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        rows = np.atleast_2d(a)[:, 0].astype(int)
        columns = np.atleast_2d(b)[:, 0].astype(int)
        return self.matrix[np.ix_(rows, columns)]

    def diag(self, a: np.ndarray) -> np.ndarray:
        return np.diag(self.matrix)[np.atleast_2d(a)[:, 0].astype(int)]

    def gradient(self, x: np.ndarray, z: np.ndarray) -> np.ndarray:
        raise TypeError("ItemKernel is defined on a finite set of items: it has no gradient.")

    def _from_squared_distances(self, d2: np.ndarray) -> np.ndarray:
        raise TypeError("ItemKernel is not a function of distances.")

    def _radial_factor(self, d2: np.ndarray) -> np.ndarray:
        raise TypeError("ItemKernel is not a function of distances.")


def digits_problem() -> tuple[np.ndarray, np.ndarray, ItemKernel]:
    """``(f, test_images, kernel)`` following the paper's recipe for real data."""
    images = load_digits().data
    train, test = train_test_split(images, test_size=0.5, random_state=0)
    f = test.mean(axis=0)
    std = train.std(axis=0)
    varying = std > 0
    normalized = np.zeros_like(train)
    normalized[:, varying] = (train[:, varying] - train[:, varying].mean(axis=0)) / std[varying]
    correlation = normalized.T @ normalized / len(train)
    correlation[~varying, ~varying] = 1.0  # constant pixels: independent items of variance 1
    return f, test, ItemKernel(correlation)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, T = 300")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--horizon", type=int, default=2000)
    args = parser.parse_args()
    seeds = list(range(2 if args.quick else args.seeds))
    horizon = 300 if args.quick else args.horizon
    f, test, kernel = digits_problem()
    bound = float(f.max())
    noise_bound = float(np.abs(test - f).max())
    domain = np.arange(64, dtype=float)[:, None]
    top5 = np.argsort(f)[-5:]
    print(
        f"digits: 64 pixels, {len(test)} test images; B = max f = {bound:.3f} (pixel "
        f"{int(np.argmax(f))}), R = {noise_bound:.3f}, mean f = {f.mean():.3f}; T = {horizon}; "
        f"MoMA k = {moma_epoch_length(horizon, 0.05)} (theorem), "
        f"{practical_epoch_length(horizon)} (moma-k)"
    )
    started = time.time()
    panels, table, top_share = {}, {}, {}
    for epsilon in EPSILONS:
        rewards = LaplaceRewards(epsilon, bound, noise_bound)
        curves: dict[str, list[np.ndarray]] = {m: [] for m in METHODS}
        shares: dict[str, list[float]] = {m: [] for m in METHODS}
        for seed in seeds:
            for method in METHODS:
                users = np.random.default_rng(3000 + seed)
                mechanism = LaplaceMechanism(
                    epsilon,
                    value_bound=bound,
                    noise_bound=noise_bound,
                    rng=np.random.default_rng(4000 + seed),
                )

                def reward(item: int, users=users, mechanism=mechanism) -> float:
                    return mechanism.privatize(test[users.integers(len(test)), item])

                if method == "random":
                    played = run_random(64, horizon, seed)
                elif method == "tpe":
                    played = run_tpe(
                        lambda t: 8 * t.suggest_int("row", 0, 7) + t.suggest_int("column", 0, 7),
                        reward,
                        horizon,
                        seed,
                    )
                else:
                    played = run_core(method, kernel, rewards, domain, reward, horizon, seed)
                assert mechanism.n_clipped == 0
                curves[method].append(cumulative_regret(f, played))
                shares[method].append(float(np.isin(played[-horizon // 10 :], top5).mean()))
        name = f"digits, eps = {epsilon}"
        panels[name], table[name] = curves, summarize(curves)
        top_share[name] = {m: float(np.mean(v)) for m, v in shares.items()}
        print(f"  done {name} ({time.time() - started:.0f} s)", flush=True)

    print(
        f"\nCumulative regret R_T at T = {horizon} (mean +- s.e. over {len(seeds)} seeds) | share "
        "of the last 10% of trials on a top-5 pixel (random: 5/64 = 0.08)"
    )
    names = list(table)
    print(f"| {'method':8s} | " + " | ".join(f"{n:^30s}" for n in names) + " |")
    print("|----------|" + "|".join("-" * 32 for _ in names) + "|")
    for method in METHODS:
        cells = [
            f"{table[n][method][0]:8.0f} +- {table[n][method][1]:5.0f}"
            f" | {top_share[n][method]:4.2f}"
            for n in names
        ]
        print(f"| {method:8s} | " + " | ".join(f"{c:30s}" for c in cells) + " |")
    plot_panels(panels, RESULTS / "ldp_dataset.png", "Digits: best pixel under LDP", columns=3)
    payload = {
        "horizon": horizon,
        "seeds": seeds,
        "value_bound": bound,
        "noise_bound": noise_bound,
        "final_regret": {k: {m: list(v) for m, v in s.items()} for k, s in table.items()},
        "top5_share_last_10pct": top_share,
    }
    (RESULTS / "ldp_dataset.json").write_text(json.dumps(payload, indent=2))
    print(f"total {time.time() - started:.0f} s; saved results/ldp_dataset.png and .json")


if __name__ == "__main__":
    main()
