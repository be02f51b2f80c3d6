"""``SecureAggregation``: the server learns only the sum of at least ``t`` participants' inputs.

Passed as ``Federation.create(..., secure_aggregation=SecureAggregation(...))`` (or
``optuna-fedbo create --secure-aggregation``), it is stored in the federation's configuration
(hashed and signed with it), so every participant and the server run the same protocol
(:mod:`optuna_fedbo.core.secagg`: pairwise X25519 masks, Shamir-shared seeds, dropout recovery)
over the storage relay, once per round.

What the participants' inputs are is the protocol's business (the FTS family's pooled
statistics: :mod:`optuna_fedbo.federation.fts.secure`); this module fixes the ring they are
encoded in, so that the sum of every participant's clipped input can never wrap it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import replace
import math
from typing import Any

from optuna_fedbo.core.secagg.graph import choose_degree
from optuna_fedbo.core.secagg.graph import majority
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.ring import RingSpec
from optuna_fedbo.core.secure_statistics import DIGIT_MAX
from optuna_fedbo.core.secure_statistics import MAX_CAP

#: The fewest participants secure aggregation runs with (a strict majority of 2 is both).
MIN_PARTICIPANTS = 3
#: From this many participants on, ``degree=None`` picks SecAgg+'s sparse graph (below it the
#: complete graph costs little: 7 s a round at N = 30 on SQLite, and a sparse graph's failure
#: bound, computed for 10% dropped and 10% corrupt participants, rounds those to zero).
AUTO_DEGREE_FROM = 50
#: The failure probability the automatic degree meets (union bound of Bell et al.'s three
#: failure events on this Harary graph: :func:`~optuna_fedbo.core.secagg.graph.choose_degree`).
AUTO_DEGREE_FAILURE = 2.0**-30


@dataclass(frozen=True)
class SecureAggregation:
    """Secure aggregation of the participants' uploads (SecAgg / SecAgg+).

    The server never sees one participant's upload: each participant uploads its input masked,
    in a finite ring, and the server can remove the masks only from the sum of at least
    ``threshold`` participants' inputs. A round in which fewer than ``threshold`` participants
    survive a step of the protocol publishes nothing (and says so); the round then starts over.

    What it costs: the server can no longer weigh, offset or check one participant's upload.
    A participant clips its own input to the bound the protocol fixes; a malicious participant
    can still send any value within it (a bound per participant cannot be checked on masked
    data without zero-knowledge proofs, which are out of scope).

    Args:
        threshold: ``t``, the fewest participants whose sum is published; a strict majority of
            ``N`` (the default: ``N // 2 + 1``), so that two disjoint groups can never both be
            unmasked and subtracted.
        max_observations: Pooled statistics: each participant's statistics enter as those of
            at most this many observations (a participant with more scales them down: the
            server's bound on one participant's weight, now applied by the participant), which
            also bounds its count and Gram entries (at most ``2**31``).
        step: The fixed-point step: inputs are rounded to multiples of it (the sum is the plain
            sum within ``N * step / 2`` per coordinate). The pooled statistics' sums that
            involve the values are exact instead (:mod:`optuna_fedbo.core.secure_statistics`);
            their base-``2^32`` digits are coordinates at this step.
        degree: An even number ``k`` of neighbours for SecAgg+'s sparse graph (Bell et al., CCS
            2020: each participant masks with, and secret-shares to, only its ``k`` neighbours
            of a Harary graph ``H(k, N)`` on a public random placement; cost ``O(k)`` per
            participant instead of ``O(N)``), or ``None``: the complete graph of SecAgg below
            :data:`AUTO_DEGREE_FROM` (50) participants, from there on the smallest even ``k``
            whose failure probability is at most :data:`AUTO_DEGREE_FAILURE` (``2**-30``) when
            at most 10% of the participants drop out and at most 10% collude with the server
            (``k = O(log N)``: 12 at ``N = 50``, 20 at 100, 32 at 200). The failure probability
            is the union bound of :func:`optuna_fedbo.core.secagg.secagg_plus_failure_bounds`
            over a dropped participant's shares becoming unrecoverable (the round then
            publishes nothing and starts over), an honest participant's shares reaching
            ``share_threshold`` colluders, and the survivors' graph disconnecting (exact
            hypergeometric tails, no asymptotics). It is over the random placement, which the
            setup's digest seeds: a server that makes attempts fail, or admits different sets
            of enrolled participants, draws a new placement each time (over ``A`` attempts the
            failure probability is at most ``A`` times the bound).
        step_timeout: Seconds the server waits in each of the protocol's steps after the first
            for the participants that have not answered, before it goes on without them (they
            count as dropped; their masks are removed with the others' shares).
    """

    threshold: int | None = None
    max_observations: int = 1000
    step: float = 2.0**-20
    degree: int | None = None
    step_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.threshold is not None and (
            isinstance(self.threshold, bool) or not isinstance(self.threshold, int)
        ):
            raise ValueError(f"threshold must be an integer or None, got {self.threshold!r}.")
        if (
            isinstance(self.max_observations, bool)
            or not isinstance(self.max_observations, int)
            or not 1 <= self.max_observations <= MAX_CAP
        ):
            raise ValueError(
                f"max_observations must be an integer in [1, {MAX_CAP}], got "
                f"{self.max_observations!r}."
            )
        for name in ("step", "step_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a positive number, got {value!r}.")
            smallest_ok = 0.0 if name == "step_timeout" else math.ulp(0.0)
            if not (math.isfinite(value) and value >= smallest_ok):
                raise ValueError(f"{name} must be positive and finite, got {value!r}.")
            object.__setattr__(self, name, float(value))
        if self.degree is not None and (
            isinstance(self.degree, bool)
            or not isinstance(self.degree, int)
            or self.degree < 2
            or self.degree % 2
        ):
            raise ValueError(f"degree must be None or an even integer >= 2, got {self.degree!r}.")

    @property
    def bound(self) -> float:
        """The clipping bound of every input coordinate: the count and Gram entries of at most
        ``max_observations`` observations on unit-norm features, and the base-``2^32`` digits of
        the exact sums (:mod:`optuna_fedbo.core.secure_statistics`), whichever is larger."""
        return max(float(self.max_observations), DIGIT_MAX * self.step)

    def resolve(self, n_clients: int, dimension: int) -> SecureAggregation:
        """The configuration with its threshold made explicit, checked for ``n_clients``.

        Raises:
            ValueError: If there are fewer than 3 or fewer than ``threshold`` participants, the
                threshold is not a strict majority, the degree does not fit, or the sum of
                ``n_clients`` inputs could wrap the ring (each message names the fix).

        The degree is made explicit too (``None`` stays ``None`` only for the complete graph).
        """
        if n_clients < MIN_PARTICIPANTS:
            raise ValueError(
                f"Secure aggregation needs at least {MIN_PARTICIPANTS} participants, got "
                f"n_clients={n_clients}: register more participants."
            )
        threshold = majority(n_clients) if self.threshold is None else self.threshold
        if threshold > n_clients:
            raise ValueError(
                f"Secure aggregation threshold {threshold} exceeds the {n_clients} participants: "
                f"lower the threshold to at most {n_clients} or register more participants."
            )
        if 2 * threshold <= n_clients:
            raise ValueError(
                f"Secure aggregation threshold {threshold} is not above N/2 = {n_clients / 2:g}: "
                f"use at least {majority(n_clients)} (a smaller one would let the server unmask "
                "two disjoint groups and subtract them)."
            )
        if self.degree is not None and self.degree >= n_clients:
            raise ValueError(
                f"The SecAgg+ degree {self.degree} must be below N = {n_clients}: use a smaller "
                "degree or degree=None (every participant masks with every other)."
            )
        self.ring(n_clients, dimension)
        degree = self.degree
        if degree is None and n_clients >= AUTO_DEGREE_FROM:
            degree = choose_degree(n_clients, target=AUTO_DEGREE_FAILURE)
        return replace(self, threshold=threshold, degree=degree)

    def ring(self, n_clients: int, dimension: int) -> RingSpec:
        """The ring in which the sum of ``n_clients`` inputs of ``dimension`` cannot wrap.

        Raises:
            ValueError: If it would need more than 64 bits (names the fix).
        """
        return plan_ring(n_inputs=n_clients, bound=self.bound, step=self.step, dimension=dimension)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> SecureAggregation:
        """Rebuild a stored configuration.

        Raises:
            ValueError: For unknown or invalid fields.
        """
        names = set(cls.__dataclass_fields__)
        if not isinstance(record, Mapping) or set(record) - names:
            raise ValueError(f"A secure aggregation record has only the fields {sorted(names)}.")
        return cls(**record)


def stored_secure_aggregation(
    value: Any, protocol: Any, privacy: Any, n_clients: int
) -> dict[str, Any] | None:
    """The stored form of ``Federation.create(..., secure_aggregation=value)`` (threshold
    resolved), or ``None``; ``protocol`` is the resolved ``ProtocolConfig``.

    Raises:
        ValueError: If ``value`` is not a :class:`SecureAggregation`, the protocol cannot run
            under it, or it does not fit ``n_clients`` (see :meth:`SecureAggregation.resolve`).
    """
    if value is None:
        return None
    if not isinstance(value, SecureAggregation):
        raise ValueError(f"secure_aggregation must be None or a SecureAggregation, got {value!r}.")
    dimension = protocol.check_secure_aggregation(privacy)
    return value.resolve(n_clients, dimension).to_dict()


def no_single_upload(name: str) -> str:
    """Why ``Federation.read_upload`` has nothing to read under secure aggregation."""
    return (
        f"Federation {name!r} uses secure aggregation: there is no single upload to read (each "
        "is masked; the server learns only the sum of at least t participants')."
    )


__all__ = ["SecureAggregation", "no_single_upload", "stored_secure_aggregation"]
