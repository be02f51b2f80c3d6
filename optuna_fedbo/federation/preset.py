"""A named setting of a paper: a protocol configuration together with its privacy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.dp_config import DPConfig


@dataclass(frozen=True)
class Preset:
    """A protocol with the differential privacy it comes with.

    Pass it where a protocol is expected (``Federation.create(..., protocol=preset)``,
    ``simulate(..., protocol=preset)``): the federation then runs ``preset.protocol`` with
    ``preset.privacy``. An explicit ``privacy=`` argument replaces the preset's privacy.

    Attributes:
        protocol: The protocol configuration.
        privacy: Its privacy configuration (``None``: no differential privacy).
    """

    protocol: ProtocolConfig
    privacy: DPConfig | None = None


def unpack(protocol: Any, privacy: Any) -> tuple[Any, Any]:
    """``(protocol, privacy)`` with a :class:`Preset` opened (an explicit privacy wins)."""
    if isinstance(protocol, Preset):
        return protocol.protocol, protocol.privacy if privacy is None else privacy
    return protocol, privacy


__all__ = ["Preset", "unpack"]
