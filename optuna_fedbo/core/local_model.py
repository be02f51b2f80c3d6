"""One value scale for everyone: how a participant normalizes its values before fitting.

* ``"raw"``: the papers' zero-mean GP on raw values;
* ``"participant"``: standardized by the mean and standard deviation of all its values so far
  (scale-free, but a participant that has explored only a good region reports it as average, so
  regions explored by different participants are compared on different scales);
* ``"shared"``: standardized by the mean and standard deviation of its first ``n_reference``
  values, its space-filling initial design over the whole search space, then frozen. Every
  participant measures its values against the same reference, the whole space, so values and
  sub-regions stay comparable across participants and over time, while sites whose values
  differ in scale or offset are still brought to one scale.
"""

from __future__ import annotations

import numpy as np

#: Value normalizations (see the module docstring).
NORMALIZATIONS = ("shared", "participant", "raw")


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
