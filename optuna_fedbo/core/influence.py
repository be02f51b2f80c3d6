"""How much one participant can move a broadcast without differential privacy: bounds that need
no honest peers.

Without differential privacy the server publishes an aggregate of the participants' uploads,
and nothing but these bounds limits what one upload does to it. Bounds relative to the round's
median (the rule this replaces) need an honest majority, and none at all with one or two
contributors; the bounds here hold whatever the other participants send.

**Vectors** (``aggregation="weighted"`` or ``"sample"``). The protocol fixes the model behind an
honest upload: Bayesian linear regression on ``M`` random features of unit norm
(``||phi(x)|| = 1``) with the prior ``omega ~ N(0, I_M)``, fitted to values on the unit scale of
the configured normalization (their prior variance is ``phi(x)^T phi(x) = 1``). Under that
model ``||omega||^2`` is chi-square with ``M`` degrees of freedom. A posterior draw (the papers'
Thompson sample, ``transfer="schedule"``) has the prior as its marginal, so
``||omega_draw||^2 ~ chi2_M`` exactly; the posterior mean (the default upload) is the conditional
expectation ``E[omega | data]``, so ``||mean||^2 <= E[||omega||^2 | data]`` (Jensen) and
``||mean||^2`` is below ``chi2_M`` in the convex order: its tails are no heavier. The bound is
therefore the ``chi_M`` quantile of tail probability :data:`INFLUENCE_TAIL`
(:func:`vector_norm_bound`: about ``sqrt(M) + 3.5``, 13.5 for ``M = 100``), and every uploaded
vector is clipped to it from the first contributor on: an honest upload on the model's scale is
longer with probability below ``1e-6``, and whatever a participant sends, its share of the
broadcast function is at most ``bound`` in value anywhere (``|phi(x)^T omega| <= ||omega||``),
times its aggregation weight. Values on another scale (``normalization="raw"``) are clipped
more often when they are larger than one; clipping keeps each vector's direction, which is
what a participant's use of the broadcast (its maximizer, or its fitted weight as a prior mean)
depends on.

**Pooled statistics** (``aggregation="pooled"``). The server's posterior is fitted to the
values of everyone, standardized together, so it is again on the unit scale of the model above,
and its mean is clipped to the same bound (:func:`vector_norm_bound` of the block's features).
Inside the pool, the statistics carry no scale the protocol fixes (they are of raw values, and
counts grow with the trials), so a participant's weight is bounded by the others' instead, by a
rule that needs none of them to be honest (:func:`capped_by_others`): no participant counts for
more observations, or values of a wider spread, than the largest of the other participants.
With ``k`` contributors one participant's share of the pooled count is then at most ``1/2``
(``k = 2``) and at most the share of the heaviest other participant in general, whoever the
others are.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from optuna_fedbo.privacy._gaussian import clip_to_norm

#: Probability that an honest vector on the model's scale exceeds :func:`vector_norm_bound`.
INFLUENCE_TAIL = 1e-6


@functools.lru_cache(maxsize=64)  # (a scipy quantile: 16 ms, asked once per round)
def vector_norm_bound(n_features: int, tail: float = INFLUENCE_TAIL) -> float:
    """The largest norm an uploaded or pooled vector of ``n_features`` weights keeps.

    The ``1 - tail`` quantile of the chi distribution with ``n_features`` degrees of freedom,
    the law of ``||omega||`` under the prior ``N(0, I)`` that the protocol fixes (see the module
    documentation).

    Args:
        n_features: Number ``M`` of features (>= 1).
        tail: Probability of an honest vector beyond the bound (in ``(0, 1)``).

    Returns:
        The bound (``sqrt(M) + 3.5`` roughly, for ``M`` from 20 to 300).
    """
    if isinstance(n_features, bool) or not isinstance(n_features, (int, np.integer)):
        raise ValueError(f"n_features must be a positive integer, got {n_features!r}.")
    if n_features < 1 or not 0.0 < tail < 1.0:
        raise ValueError(
            f"vector_norm_bound needs n_features >= 1 and 0 < tail < 1, got {n_features}, {tail}."
        )
    # The chi-square quantile (what scipy.stats.chi2.isf calls) without importing scipy.stats,
    # which takes seconds. (Imported here: `import optuna_fedbo` stays light.)
    from scipy.special import chdtri

    return math.sqrt(float(chdtri(int(n_features), tail)))


def bound_vectors(vectors: np.ndarray, bound: float) -> tuple[np.ndarray, int]:
    """Each row clipped to norm ``bound``, and how many were longer.

    Args:
        vectors: Rows of shape ``(K, M)``, finite (any magnitude: the norms do not overflow).
        bound: The norm bound, e.g. :func:`vector_norm_bound`.

    Returns:
        ``(clipped rows, number clipped)``; rows within the bound are unchanged, bit for bit.
    """
    clipped = clip_to_norm(vectors, bound)
    return clipped, int(np.sum(np.any(clipped != np.asarray(vectors), axis=-1)))


def capped_by_others(sizes: np.ndarray, factor: float = 1.0) -> np.ndarray:
    """Each size capped at ``factor`` times the largest *other* size: ``min(s_n, factor
    max_{m != n} s_m)``.

    One participant then never weighs more than another one does, whatever the others send; a
    lone size is returned as it is (the server publishes nothing of a lone contributor).

    Args:
        sizes: Non-negative sizes (observation counts, value spreads), one per participant.
        factor: How many times the largest other size a size may reach (>= 1).

    Returns:
        The capped sizes, of the same shape.
    """
    sizes = np.asarray(sizes, dtype=float)
    if sizes.size < 2:
        return sizes.copy()
    order = np.argsort(sizes)
    largest, second = sizes[order[-1]], sizes[order[-2]]
    others_max = np.full(sizes.shape, largest)
    others_max[order[-1]] = second
    return np.minimum(sizes, factor * others_max)


__all__ = ["INFLUENCE_TAIL", "bound_vectors", "capped_by_others", "vector_norm_bound"]
