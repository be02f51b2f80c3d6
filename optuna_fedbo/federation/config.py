"""Frozen, hashed, JSON-serializable configuration of a federation.

A federation is fixed at creation by a :class:`FederationConfig`: its name, the search space every
participant tunes, the number of registered participants ``N``, a protocol configuration (a
tagged :class:`ProtocolConfig` such as :class:`FTSConfig`), the privacy configuration and the
public seed. The configuration is stored in canonical JSON next to its SHA-256 hash; every
upload carries that hash, so a participant running with another configuration is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
from dataclasses import dataclass
import json
import math
from typing import Any
from typing import ClassVar

from optuna.distributions import BaseDistribution
from optuna.distributions import distribution_to_json
from optuna.distributions import json_to_distribution

from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation._codec import digest
from optuna_fedbo.search_space import SearchSpaceEncoder

#: Version of the stored configuration format. Raised whenever the same stored fields would
#: mean something else to this version (format 2: ``FTSConfig(lengthscale=None)`` features
#: follow :func:`~optuna_fedbo.core.rff.multiscale_range`), so that participants of different
#: versions cannot silently disagree on the shared features: a federation stored by another
#: format is refused with an error naming both.
CONFIG_FORMAT = 2
#: The format of a configuration with secure aggregation, so that a version that does not know
#: it refuses the federation instead of uploading what its server never reads.
SECURE_CONFIG_FORMAT = 3

_PROTOCOLS: dict[str, type[ProtocolConfig]] = {}


@dataclass(frozen=True)
class ProtocolConfig:
    """Base class of protocol configurations: a tagged, frozen, JSON-serializable dataclass.

    Subclasses set the class variable ``kind`` (a unique tag) and use only JSON scalars (int,
    float, str, bool, None) as fields; they are registered automatically so that
    :meth:`from_dict` can rebuild them from storage.
    """

    kind: ClassVar[str] = ""
    #: Whether the protocol's uploads are binary frames (bytes) rather than JSON text.
    binary_uploads: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            if cls.kind in _PROTOCOLS and _PROTOCOLS[cls.kind].__qualname__ != cls.__qualname__:
                raise ValueError(f"Protocol kind {cls.kind!r} is already registered.")
            _PROTOCOLS[cls.kind] = cls

    def to_dict(self) -> dict[str, Any]:
        """The configuration as a JSON object tagged with ``kind``."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {"kind": self.kind, **fields}

    @staticmethod
    def from_dict(record: Mapping[str, Any]) -> ProtocolConfig:
        """Rebuild a configuration from :meth:`to_dict`'s output.

        Raises:
            ValueError: For an unknown ``kind`` or invalid fields.
        """
        record = dict(record)
        kind = record.pop("kind", None)
        if kind not in _PROTOCOLS:
            raise ValueError(
                f"Unknown protocol kind {kind!r}; known kinds: {sorted(_PROTOCOLS)} (import the "
                "module that defines it first)."
            )
        cls = _PROTOCOLS[kind]
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(record) - names
        if unknown:
            raise ValueError(f"Unknown fields {sorted(unknown)} for protocol {kind!r}.")
        return cls(**record)

    def resolve(self, encoder: SearchSpaceEncoder, privacy: Any) -> ProtocolConfig:
        """The configuration with every default that depends on the federation made explicit.

        Called once, when the federation is created; the stored configuration is the result,
        so that what it means never depends on this package's version. The base class has no
        such defaults and returns itself.

        Args:
            encoder: The search space's encoding.
            privacy: The central ``DPConfig``, or ``None``.
        """
        return self

    def check_search_space(self, encoder: SearchSpaceEncoder) -> None:
        """Raise ``ValueError`` if the protocol cannot run on this search space."""

    def check_creation(self, n_clients: int, privacy: Any) -> None:
        """Raise ``ValueError`` if the protocol cannot serve ``n_clients`` participants with
        this privacy (``None`` or a ``DPConfig``), and warn about settings that expose them.
        Called once, on the resolved configuration, when the federation is created."""

    def check_privacy(self, privacy: Any) -> None:
        """Raise ``ValueError`` if the protocol cannot run with this central ``DPConfig``.

        The default refuses: only a protocol whose server privatizes an aggregate (the FTS
        family) overrides it.
        """
        raise ValueError(
            f"DPConfig privatizes the FTS server's aggregation; protocol {self.kind!r} is not FTS."
        )

    def check_secure_aggregation(self, privacy: Any) -> int:
        """The length of one participant's input to secure aggregation (a resolved
        configuration); raise ``ValueError`` if the protocol cannot run under it. The default
        refuses: only the FTS family's pooled statistics are summed securely."""
        raise ValueError(
            f"Secure aggregation sums the FTS family's uploads; protocol {self.kind!r} is not FTS."
        )


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")


def _non_negative_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}.")


def _positive_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a positive number, got {value!r}.")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}.")
    return float(value)


def search_space_to_json(search_space: Mapping[str, BaseDistribution]) -> list[list[Any]]:
    """Encode a search space as an ordered list of ``[name, distribution]`` pairs."""
    return [[name, json.loads(distribution_to_json(d))] for name, d in search_space.items()]


def search_space_from_json(record: Any) -> dict[str, BaseDistribution]:
    """Decode :func:`search_space_to_json`'s output (the order of the parameters is kept)."""
    if not isinstance(record, list):
        raise ValueError("A stored search space must be a list of [name, distribution] pairs.")
    return {name: json_to_distribution(json.dumps(d)) for name, d in record}


@dataclass(frozen=True)
class FederationConfig:
    """Everything that defines a federation; equal configurations have equal hashes.

    Args:
        name: Federation name (the name of its study in the storage).
        search_space: Parameter names to Optuna distributions, in column order.
        n_clients: Number ``N`` of registered participants (public).
        protocol: The protocol configuration.
        privacy: The privacy configuration as a JSON object, or ``None`` for no privacy.
        seed: Public seed of the shared randomness (random features, assignments).
        server: The server's public identity (``ServerIdentity.to_dict()``: the federation id
            and the server's public signing and sealing keys); the stored configuration is
            signed by that server, and ``Federation.load`` checks it against a pinned
            fingerprint.
        direction: The objective's direction, ``"maximize"`` or ``"minimize"``: a site whose
            study has the other one is refused. ``None`` (federations created before it
            existed, or without it): not checked, each site's values are taken in its own
            study's direction.
        secure_aggregation: ``SecureAggregation.to_dict()`` (threshold resolved), or ``None``:
            the server reads each upload.
    """

    name: str
    search_space: Mapping[str, BaseDistribution]
    n_clients: int
    protocol: ProtocolConfig
    privacy: Mapping[str, Any] | None = None
    seed: int = 0
    server: Mapping[str, str] | None = None
    direction: str | None = None
    secure_aggregation: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"The federation name must be a non-empty string, got {self.name!r}.")
        if len(self.name) > 200:
            raise ValueError("The federation name must have at most 200 characters.")
        if not isinstance(self.search_space, Mapping) or len(self.search_space) == 0:
            raise ValueError("The search space must be a non-empty mapping of distributions.")
        for key, dist in self.search_space.items():
            if not isinstance(dist, BaseDistribution):
                raise ValueError(
                    f"search_space[{key!r}] must be an Optuna distribution, got {dist!r}."
                )
        _positive_int("n_clients", self.n_clients)
        if not isinstance(self.protocol, ProtocolConfig):
            raise ValueError(f"protocol must be a ProtocolConfig, got {self.protocol!r}.")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}.")
        if self.direction not in (None, "maximize", "minimize"):
            raise ValueError(
                f"direction must be 'maximize', 'minimize' or None, got {self.direction!r}."
            )
        object.__setattr__(self, "search_space", dict(self.search_space))
        self.protocol.check_search_space(SearchSpaceEncoder(self.search_space))

    def to_dict(self) -> dict[str, Any]:
        """The configuration as a JSON object."""
        return {
            "format": CONFIG_FORMAT if self.secure_aggregation is None else SECURE_CONFIG_FORMAT,
            "name": self.name,
            "search_space": search_space_to_json(self.search_space),
            "n_clients": self.n_clients,
            "protocol": self.protocol.to_dict(),
            "privacy": None if self.privacy is None else dict(self.privacy),
            "seed": self.seed,
            **({} if self.server is None else {"server": dict(self.server)}),
            # Only when declared: the configurations (and hashes) of older federations stay.
            **({} if self.direction is None else {"direction": self.direction}),
            **(
                {}
                if self.secure_aggregation is None
                else {"secure_aggregation": dict(self.secure_aggregation)}
            ),
        }

    def to_json(self) -> str:
        """Canonical JSON of :meth:`to_dict`."""
        return canonical_json(self.to_dict())

    @property
    def hash(self) -> str:
        """SHA-256 of the canonical JSON: the identity of this configuration."""
        return digest(self.to_json())

    @classmethod
    def from_json(cls, text: str) -> FederationConfig:
        """Rebuild a configuration from :meth:`to_json`'s output.

        Raises:
            ValueError: If the text is not a valid stored configuration.
        """
        try:
            record = json.loads(text)
        except (TypeError, ValueError):
            raise ValueError("The stored federation configuration is not valid JSON.") from None
        secure = isinstance(record, dict) and record.get("secure_aggregation") is not None
        expected = SECURE_CONFIG_FORMAT if secure else CONFIG_FORMAT
        if not isinstance(record, dict) or record.get("format") != expected:
            raise ValueError(
                f"Unsupported federation configuration format {record.get('format')!r} "
                f"(this version reads format {CONFIG_FORMAT}, and {SECURE_CONFIG_FORMAT} with "
                "secure aggregation)."
            )
        return cls(
            name=record["name"],
            search_space=search_space_from_json(record["search_space"]),
            n_clients=record["n_clients"],
            protocol=ProtocolConfig.from_dict(record["protocol"]),
            privacy=record["privacy"],
            seed=record["seed"],
            server=record.get("server"),
            direction=record.get("direction"),
            secure_aggregation=record.get("secure_aggregation"),
        )

    def differences(self, other: FederationConfig) -> list[str]:
        """Human-readable differences between two configurations (empty if equal)."""
        mine, theirs = self.to_dict(), other.to_dict()
        out = []
        for key in ("name", "n_clients", "seed", "privacy", "direction", "secure_aggregation"):
            if mine.get(key) != theirs.get(key):
                out.append(f"{key}: {mine.get(key)!r} != {theirs.get(key)!r}")
        if mine["search_space"] != theirs["search_space"]:
            a = dict((n, d) for n, d in mine["search_space"])
            b = dict((n, d) for n, d in theirs["search_space"])
            differing = [n for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
            for name in differing:
                out.append(f"search_space[{name!r}]: {a.get(name)} != {b.get(name)}")
            if not differing:
                out.append(f"search_space order: {list(a)} != {list(b)}")
        if mine["protocol"] != theirs["protocol"]:
            p, q = mine["protocol"], theirs["protocol"]
            for key in sorted(set(p) | set(q)):
                if p.get(key) != q.get(key):
                    out.append(f"protocol.{key}: {p.get(key)!r} != {q.get(key)!r}")
        return out
