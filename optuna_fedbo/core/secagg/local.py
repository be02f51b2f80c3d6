"""One round of secure aggregation in one process: every party, every message through ``to_dict``.

For tests, benchmarks and research simulations: participants are driven in turn, each message is
serialised and parsed as it would be over the storage relay, and dropouts are injected at a given
step. Identities are fresh Ed25519 keys (a real federation uses the enrolled ones).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
import json
import os
import time
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
import numpy as np

from optuna_fedbo.core.secagg.client import SecAggClient
from optuna_fedbo.core.secagg.client import Verifier
from optuna_fedbo.core.secagg.messages import Message
from optuna_fedbo.core.secagg.messages import message_from_dict
from optuna_fedbo.core.secagg.server import AggregateResult
from optuna_fedbo.core.secagg.server import SecAggServer
from optuna_fedbo.core.secagg.setup import RoundSetup

#: The participant steps after which a dropout can be injected.
DROP_POINTS = ("advertise", "share_keys", "mask_input", "sign_survivors")


class Identities:
    """Fresh Ed25519 identity keys for the participants of a local round."""

    def __init__(self, participants: tuple[str, ...]) -> None:
        self._keys = {p: Ed25519PrivateKey.generate() for p in participants}
        self.public: dict[str, Ed25519PublicKey] = {
            p: k.public_key() for p, k in self._keys.items()
        }

    def signer(self, participant: str) -> Callable[[bytes], bytes]:
        return self._keys[participant].sign

    def verify(self, participant: str, message: bytes, signature: bytes) -> bool:
        key = self.public.get(participant)
        if key is None:
            return False
        try:
            key.verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass
class LocalRound:
    """Measurements of one local round.

    Times are CPU seconds (``time.process_time``, plus the worker processes that rebuild the
    seeds), so that other load on the machine does not count; the unmasking's wall seconds
    are given too (its combinations run on several cores at once).

    Attributes:
        result: The server's result.
        client_seconds: Per participant, the time spent in its own steps.
        client_bytes: Per participant, bytes sent plus received (JSON of the messages).
        server_seconds: Time of the server's steps, unmasking included.
        unmask_seconds: Time of the final unmasking alone.
        unmask_wall_seconds: Wall time of the final unmasking.
    """

    result: AggregateResult
    client_seconds: dict[str, float] = field(default_factory=dict)
    client_bytes: dict[str, int] = field(default_factory=dict)
    server_seconds: float = 0.0
    unmask_seconds: float = 0.0
    unmask_wall_seconds: float = 0.0


def _cpu() -> float:
    """CPU seconds of this process and of its finished worker processes."""
    children = os.times()
    return time.process_time() + children.children_user + children.children_system


def _wire(message: Message) -> tuple[Message, int]:
    text = json.dumps(message.to_dict(), separators=(",", ":"))
    return message_from_dict(json.loads(text)), len(text)


def run_local_round(
    setup: RoundSetup,
    inputs: dict[str, np.ndarray],
    *,
    drop_after: dict[str, str] | None = None,
    identities: Identities | None = None,
    verify: Verifier | None = None,
    workers: int | None = None,
) -> LocalRound:
    """Run one round: ``inputs`` maps each participant to its ring-encoded vector.

    Args:
        setup: The round setup.
        inputs: Ring elements (``uint64``) per participant.
        drop_after: ``{participant: step}``: it goes silent after that step (one of
            :data:`DROP_POINTS`), or ``"start"`` to never appear.
        identities: Identity keys (fresh ones by default).
        verify: Overrides the signature check (default: ``identities.verify``).
        workers: The server's processes for rebuilding seeds (see :class:`SecAggServer`).

    Raises:
        RoundFailed: When fewer than ``t`` survive a step.
    """
    drop_after = dict(drop_after or {})
    ids = identities or Identities(setup.participants)
    check = verify or ids.verify
    server = SecAggServer(setup, verify=check, workers=workers)
    clients = {
        p: SecAggClient(setup, p, sign=ids.signer(p), verify=check) for p in setup.participants
    }
    seconds = dict.fromkeys(clients, 0.0)
    sent = dict.fromkeys(clients, 0)
    server_time = 0.0

    def alive(p: str, step: str) -> bool:
        stop = drop_after.get(p)
        if stop is None:
            return True
        order = ("start", *DROP_POINTS, "unmask")
        return order.index(stop) >= order.index(step)

    def round_trip(step: str, call: Callable[[str], Message]) -> None:
        nonlocal server_time
        for p in clients:
            if not alive(p, step):
                continue
            start = time.process_time()
            message, size = _wire(call(p))
            seconds[p] += time.process_time() - start
            sent[p] += size
            start = time.process_time()
            server.receive(message)
            server_time += time.process_time() - start

    def server_step(close: Callable[[], Any]) -> Any:
        nonlocal server_time
        start = time.process_time()
        out = close()
        server_time += time.process_time() - start
        return out

    def deliver(message: Message, to: list[str]) -> Message:
        parsed, size = _wire(message)
        for p in to:
            sent[p] += size
        return parsed

    round_trip("advertise", lambda p: clients[p].advertise())
    directory: Any = deliver(server_step(server.key_directory), list(server.expected()))
    round_trip("share_keys", lambda p: clients[p].share_keys(directory))
    bundles = server_step(server.share_bundles)
    parsed: dict[str, Any] = {h: deliver(b, [h]) for h, b in bundles.items()}
    round_trip("mask_input", lambda p: clients[p].mask_input(parsed[p], inputs[p]))
    survivors: Any = deliver(server_step(server.survivor_list), list(server.expected()))
    round_trip("sign_survivors", lambda p: clients[p].sign_survivors(survivors))
    request: Any = deliver(server_step(server.unmask_request), list(server.expected()))
    round_trip("unmask", lambda p: clients[p].unmask(request))
    start, wall = _cpu(), time.perf_counter()
    result = server.aggregate()
    unmask, unmask_wall = _cpu() - start, time.perf_counter() - wall
    return LocalRound(
        result=result,
        client_seconds=seconds,
        client_bytes=sent,
        server_seconds=server_time + unmask,
        unmask_seconds=unmask,
        unmask_wall_seconds=unmask_wall,
    )
