"""The protocol registry: what a federation protocol plugs into the shared machinery.

A protocol is a package under :mod:`optuna_fedbo.federation` (``fts/``, ``fedpne/``, the next
one) that registers one :class:`Protocol` when it is imported:

* ``config``: its :class:`~optuna_fedbo.federation.config.ProtocolConfig` subclass (the tag
  ``kind`` names the protocol in the stored configuration);
* ``server``: its server-round class, a subclass of
  :class:`~optuna_fedbo.federation.server.FederationServer` (``FederationServer(federation)``
  builds it);
* ``channel``: ``federation -> channel``, the participants' side (reading the published state,
  uploading, ``status()``; optionally ``privacy_spent()`` when the protocol accounts privacy
  itself rather than through the shared ledger).

A protocol's participant sampler subclasses :class:`optuna_fedbo.FedSampler` and names the
protocol in its ``protocol_kind`` (the samplers sit above this layer and find the protocol by
kind, never the other way round); its one-process simulation lives in
:mod:`optuna_fedbo.simulation`.

This module is the bottom of :mod:`optuna_fedbo.federation`: it imports nothing of optuna-fedbo
(not even for type annotations) and no module by name. The shared machinery
(:class:`~optuna_fedbo.federation.Federation`, the server, the CLI) looks a protocol up here by
``kind`` and never imports a protocol package; the built-in packages (:data:`BUILTIN_PROTOCOLS`)
are imported, and so registered, by :mod:`optuna_fedbo.federation` itself, which Python imports
before any of its modules. Adding a protocol is a new package plus one line there (or a
:func:`register_protocol` call from the user's code).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: ``kind -> package`` of the protocols shipped with optuna-fedbo (imported, and so registered,
#: by ``optuna_fedbo.federation``).
BUILTIN_PROTOCOLS: dict[str, str] = {
    "fts": "optuna_fedbo.federation.fts",
    "fedpne": "optuna_fedbo.federation.fedpne",
}

#: The protocol of ``Federation.create(..., protocol=None)``.
DEFAULT_PROTOCOL = "fts"

_REGISTRY: dict[str, Protocol] = {}


@dataclass(frozen=True)
class Protocol:
    """One federation protocol, as the shared machinery sees it.

    Attributes:
        kind: The tag of its configuration class (``config.kind``).
        config: Its configuration class (a ``ProtocolConfig`` subclass).
        server: Its server-round class (a ``FederationServer`` subclass).
        channel: ``federation -> participant channel``.
    """

    kind: str
    config: type
    server: type
    channel: Callable[[Any], Any]


def register_protocol(protocol: Protocol) -> None:
    """Register a protocol (idempotent for the same classes).

    Raises:
        ValueError: If another protocol is registered under the same ``kind``.
    """
    config_kind = getattr(protocol.config, "kind", None)
    if protocol.kind != config_kind:
        raise ValueError(
            f"Protocol kind {protocol.kind!r} differs from its config's {config_kind!r}."
        )
    existing = _REGISTRY.get(protocol.kind)
    if existing is not None and existing != protocol:
        raise ValueError(f"Protocol {protocol.kind!r} is already registered.")
    _REGISTRY[protocol.kind] = protocol


def get_protocol(kind: str) -> Protocol:
    """The registered protocol of tag ``kind``.

    Raises:
        ValueError: For an unknown ``kind``.
    """
    if kind not in _REGISTRY:
        raise ValueError(
            f"Unknown protocol kind {kind!r}; known kinds: {sorted(_REGISTRY)} (import the "
            "package that registers it first)."
        )
    return _REGISTRY[kind]


__all__ = [
    "BUILTIN_PROTOCOLS",
    "DEFAULT_PROTOCOL",
    "Protocol",
    "get_protocol",
    "register_protocol",
]
