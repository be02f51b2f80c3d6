"""Secure aggregation over a federation's storage relay: the server learns only a sum.

* :mod:`.config`: :class:`SecureAggregation`, stored in the federation's configuration.
* :mod:`.relay`: where the protocol's messages and the server's records live in the storage
  (the open round's uploads study), sealed and signed as uploads and broadcasts are.
* :mod:`.participant`: a participant's side, one round at a time.
* :mod:`.claims`: what a participant keeps outside the storage (the attempts it joined, so that
  a restarted process or a second worker of the site never joins one twice; its scale).
* :mod:`.server`: the server's side: the protocol's steps of the open round, then the sum.
* :mod:`.status`: which step the open round is in and who is missing (for ``status``).

The protocol itself is :mod:`optuna_fedbo.core.secagg`; what the inputs are is the protocol's
(the FTS family: :mod:`optuna_fedbo.federation.fts.secure`).
"""

from __future__ import annotations

from optuna_fedbo.federation.secagg.config import SecureAggregation

__all__ = ["SecureAggregation"]
