"""The FTS family (FTS, FTS-DE, DP-FTS, DP-FTS-DE) as a federation protocol.

Its configuration (:class:`FTSConfig`), messages (uploads of ``omega``, :class:`Broadcast`), the
participants' channel (:class:`FTSChannel`), the server round (:class:`FTSServer`), the ``p_t``
schedules, the sub-regions and the paper presets. The simulation entry point lives above the
samplers, in :mod:`optuna_fedbo.simulation.fts`.
"""

from __future__ import annotations

from optuna_fedbo.federation.fts import presets
from optuna_fedbo.federation.fts.channel import FTSChannel
from optuna_fedbo.federation.fts.config import FTSConfig
from optuna_fedbo.federation.fts.messages import Broadcast
from optuna_fedbo.federation.fts.server import FTSServer
from optuna_fedbo.federation.protocol import Protocol
from optuna_fedbo.federation.protocol import register_protocol

register_protocol(
    Protocol(
        kind=FTSConfig.kind,
        config=FTSConfig,
        server=FTSServer,
        channel=FTSChannel,
    )
)

__all__ = ["Broadcast", "FTSChannel", "FTSConfig", "FTSServer", "presets"]
