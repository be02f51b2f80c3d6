"""The only source of randomness for differential-privacy noise."""

from __future__ import annotations

import secrets

import numpy as np


def secure_rng() -> np.random.Generator:
    """Return a NumPy generator seeded from the operating system's entropy source.

    Differential-privacy noise and subsampling must never depend on a user-visible seed: anyone
    who knows the seed could subtract the noise. Every privacy mechanism draws from a generator
    made here unless a caller explicitly injects one for reproducible tests.

    Returns:
        A fresh ``numpy.random.Generator`` seeded with 256 bits from :mod:`secrets`.
    """
    return np.random.default_rng(secrets.randbits(256))
