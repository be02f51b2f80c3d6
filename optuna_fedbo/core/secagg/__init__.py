"""Secure aggregation (SecAgg, SecAgg+) and distributed DP: the server learns only a sum.

Pure protocol core (numpy, ``cryptography``, pycryptodome's Shamir): no Optuna, no storage. The
state machines :class:`SecAggClient` and :class:`SecAggServer` exchange the message dataclasses of
:mod:`.messages` (each bound to federation, round, setup and participant, with ``to_dict`` /
``from_dict``), so a federation can carry them over its storage relay as sealed, signed uploads
and server records.

* :mod:`.ring`: fixed-point encoding into ``Z_{2^k}`` sized so that the sum cannot wrap.
* :mod:`.masks`, :mod:`.sharing`: X25519 + HKDF + ChaCha20 masks, Shamir shares sealed per holder.
* :mod:`.graph`: complete graph (SecAgg) or Harary graph (SecAgg+) and its failure bounds.
* :mod:`.setup`: the round's public setup every key and message is bound to.
* :mod:`.client`, :mod:`.server`: the five steps and unmasking with dropout recovery.
* :mod:`.distributed_dp`: each participant's share of Skellam noise, and the accounting.
* :mod:`.local`: one round in one process (tests, benchmarks, simulations).
"""

from __future__ import annotations

from optuna_fedbo.core.secagg.client import SecAggClient
from optuna_fedbo.core.secagg.distributed_dp import DistributedSkellam
from optuna_fedbo.core.secagg.graph import choose_degree
from optuna_fedbo.core.secagg.graph import secagg_plus_failure_bounds
from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.ring import RingSpec
from optuna_fedbo.core.secagg.server import AggregateResult
from optuna_fedbo.core.secagg.server import RoundFailed
from optuna_fedbo.core.secagg.server import SecAggServer
from optuna_fedbo.core.secagg.setup import RoundSetup

__all__ = [
    "AggregateResult",
    "DistributedSkellam",
    "MessageRejected",
    "RingSpec",
    "RoundFailed",
    "RoundSetup",
    "SecAggClient",
    "SecAggServer",
    "choose_degree",
    "decode",
    "encode",
    "plan_ring",
    "secagg_plus_failure_bounds",
]
