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
  itself rather than through the shared ledger);
* ``simulate``: the dotted path ``"module:function"`` of its one-process simulation, an entry
  point above the samplers (imported only when called).

The shared machinery (:class:`~optuna_fedbo.federation.Federation`, the server, the CLI) looks a
protocol up here by ``kind`` and never imports a protocol package at module level; the built-in
packages are imported on first use. Adding a protocol is a new package plus one line in
:data:`BUILTIN_PROTOCOLS` (or a :func:`register_protocol` call from the user's code).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import importlib
from typing import Any
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optuna_fedbo.federation.config import ProtocolConfig
    from optuna_fedbo.federation.federation import Federation
    from optuna_fedbo.federation.server import FederationServer

#: ``kind -> package`` of the protocols shipped with optuna-fedbo (imported on first use).
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
        config: Its configuration class.
        server: Its server-round class (a ``FederationServer`` subclass).
        channel: ``federation -> participant channel``.
        simulate: ``"module:function"`` of its simulation entry point.
    """

    kind: str
    config: type[ProtocolConfig]
    server: type[FederationServer]
    channel: Callable[[Federation], Any]
    simulate: str

    def simulate_function(self) -> Callable[..., Any]:
        """Import and return the simulation entry point."""
        module, _, name = self.simulate.partition(":")
        return getattr(importlib.import_module(module), name)


def register_protocol(protocol: Protocol) -> None:
    """Register a protocol (idempotent for the same classes).

    Raises:
        ValueError: If another protocol is registered under the same ``kind``.
    """
    if protocol.kind != protocol.config.kind:
        raise ValueError(
            f"Protocol kind {protocol.kind!r} differs from its config's {protocol.config.kind!r}."
        )
    existing = _REGISTRY.get(protocol.kind)
    if existing is not None and existing != protocol:
        raise ValueError(f"Protocol {protocol.kind!r} is already registered.")
    _REGISTRY[protocol.kind] = protocol


def get_protocol(kind: str) -> Protocol:
    """The registered protocol of tag ``kind`` (importing a built-in one on first use).

    Raises:
        ValueError: For an unknown ``kind``.
    """
    if kind not in _REGISTRY and kind in BUILTIN_PROTOCOLS:
        importlib.import_module(BUILTIN_PROTOCOLS[kind])
    if kind not in _REGISTRY:
        known = sorted(set(_REGISTRY) | set(BUILTIN_PROTOCOLS))
        raise ValueError(
            f"Unknown protocol kind {kind!r}; known kinds: {known} (import the package that "
            "registers it first)."
        )
    return _REGISTRY[kind]


__all__ = [
    "BUILTIN_PROTOCOLS",
    "DEFAULT_PROTOCOL",
    "Protocol",
    "get_protocol",
    "register_protocol",
]
