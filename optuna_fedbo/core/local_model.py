"""A participant's own model over the shared features: one value scale, scales chosen from data.

Two choices a participant can make alone, without changing what it shares:

* **Normalization** of its values before fitting (:func:`normalization`): ``"raw"`` (the papers'
  zero-mean GP on raw values), ``"participant"`` (standardized by the mean and standard deviation
  of all its values so far: scale-free, but a participant that has explored only a good region
  reports it as average), or ``"shared"`` (standardized by the mean and standard deviation of
  its first ``n_reference`` values, its space-filling initial design over the whole search
  space, then frozen: every participant measures its values against the same reference, the
  whole space, so values and sub-regions stay comparable across participants and over time,
  while sites whose values differ in scale or offset are still brought to one scale).
* **Which scales of the shared features to trust** (:class:`ModelSelection`): a prior scale per
  feature from :func:`~optuna_fedbo.core.rff.scale_window` and a noise variance, chosen by
  marginal likelihood. With multi-scale shared features this is a per-participant lengthscale
  choice that leaves the shared basis, and therefore the federation, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from optuna_fedbo.core.posterior import LinearPosterior
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import scale_window

#: Value normalizations (see the module docstring).
NORMALIZATIONS = ("shared", "participant", "raw")
#: Favoured lengthscales of :class:`ModelSelection` over multi-scale features (``None``: all).
WINDOW_CENTERS: tuple[float | None, ...] = (None, 0.02, 0.05, 0.1, 0.2, 0.5)
#: Candidate noise variances of :class:`ModelSelection` (standardized values).
NOISE_VARIANCES = (1e-3, 1e-2, 1e-1)


def normalization(targets: np.ndarray, mode: str, n_reference: int) -> tuple[float, float]:
    """``(mean, std)`` that map a participant's values to the scale its model fits.

    Args:
        targets: The participant's values in the order observed.
        mode: One of :data:`NORMALIZATIONS`.
        n_reference: Number of first values that define the ``"shared"`` reference.

    Returns:
        ``(0, 1)`` for ``"raw"`` or without data; the standard deviation is 1 where it is 0.
    """
    if mode not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {mode!r}.")
    targets = np.asarray(targets, dtype=float)
    reference = targets[: max(n_reference, 1)] if mode == "shared" else targets
    if mode == "raw" or len(reference) == 0:
        return 0.0, 1.0
    mean = float(reference.mean())
    std = float(reference.std())
    if std <= 1e-12 * max(1.0, abs(mean)):
        std = 1.0
    return mean, std


class ModelSelection:
    """Prior scales and noise variance of the local posterior, by marginal likelihood.

    The choice is made anew whenever the number of observations has grown by 10% since the last
    choice (at every observation early on), so its cost fades from long studies.

    Args:
        lengthscales: The shared features' lengthscales, shape ``(M,)``.
        centers: Favoured lengthscales to compare (``None``: equal prior scales).
        noise_variances: Noise variances to compare.
    """

    def __init__(
        self,
        lengthscales: np.ndarray,
        centers: Sequence[float | None] = WINDOW_CENTERS,
        noise_variances: Sequence[float] = NOISE_VARIANCES,
    ) -> None:
        if len(centers) == 0 or len(noise_variances) == 0:
            raise ValueError("ModelSelection needs at least one center and one noise variance.")
        self.candidates = [
            (None if c is None else scale_window(lengthscales, c), float(lam))
            for c in centers
            for lam in noise_variances
        ]
        self._choice: tuple[int, int] | None = None  # (count at the choice, candidate index)

    def posterior(
        self, statistics: SufficientStatistics, location_scale: tuple[float, float]
    ) -> LinearPosterior:
        """The posterior of the chosen candidate, on targets ``(y - mean) / std``."""
        count = statistics.count
        choice = self._choice
        if choice is None or not choice[0] <= count < max(choice[0] + 1, 1.1 * choice[0]):
            if len(self.candidates) == 1:
                index = 0
            else:
                scores = [
                    statistics.posterior(
                        lam, standardize=location_scale, prior_scales=s
                    ).log_marginal_likelihood()
                    for s, lam in self.candidates
                ]
                index = int(np.argmax(scores))
            choice = self._choice = (count, index)
        scales, lam = self.candidates[choice[1]]
        return statistics.posterior(lam, standardize=location_scale, prior_scales=scales)
