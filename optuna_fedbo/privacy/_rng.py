"""The only source of randomness for differential-privacy noise, and the research exception."""

from __future__ import annotations

import secrets
from typing import NoReturn

import numpy as np

#: Name of the research-only noise seed; only the ``simulate`` drivers accept it.
INSECURE_NOISE_SEED = "insecure_noise_seed"


def secure_rng() -> np.random.Generator:
    """Return a NumPy generator seeded from the operating system's entropy source.

    Differential-privacy noise and subsampling must never depend on a user-visible seed: anyone
    who knows the seed could subtract the noise. Every privacy mechanism draws from a generator
    made here unless a caller explicitly injects one for reproducible tests, or a one-process
    research simulation passes ``insecure_noise_seed`` (see :func:`research_rng`).

    Returns:
        A fresh ``numpy.random.Generator`` seeded with 256 bits from :mod:`secrets`.
    """
    return np.random.default_rng(secrets.randbits(256))


def check_insecure_noise_seed(value: object) -> int | None:
    """Validate a research noise seed: ``None`` or a non-negative integer.

    Raises:
        ValueError: For anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(
            f"{INSECURE_NOISE_SEED} must be None or a non-negative integer, got {value!r}."
        )
    return int(value)


def research_rng(insecure_noise_seed: int, *stream: int) -> np.random.Generator:
    """A seeded generator for the DP noise of a research simulation. NOT private.

    Whoever knows the seed can subtract the noise, so the privacy guarantee of such a run holds
    only against someone who does not; it exists so that DP comparisons can be rerun exactly.
    ``stream`` separates independent noise sources of one run (e.g. one per participant).
    """
    return np.random.default_rng(np.random.SeedSequence([insecure_noise_seed, *stream]))


def refuse_insecure_noise_seed(where: str) -> NoReturn:
    """Raise the error for an ``insecure_noise_seed`` passed outside ``simulate()``."""
    raise ValueError(
        f"{where} refuses {INSECURE_NOISE_SEED}: a seeded noise source makes the privacy "
        "guarantee void (whoever knows the seed can remove the noise). Differential-privacy "
        "noise of a real federation comes from the operating system's entropy. The seed exists "
        "only for one-process research runs: optuna_fedbo.simulation.simulate(..., "
        f"{INSECURE_NOISE_SEED}=...)."
    )
