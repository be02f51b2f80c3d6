"""Signed lease records: what a participant says about itself in the storage, and the checks.

A participant's lease record is written by that participant only and signed with its enrolled key
(Ed25519, purpose ``"lease"``, bound to the federation id like every signed record of
:mod:`.trust`), so nobody else can write one that verifies. Its body::

    {"client", "epoch", "seq", "time", "ttl", "state", "token", "sealed"[, "worker"]}

* ``epoch`` (how many times the id was claimed: each worker process of a participant claims its
  own) and ``seq`` (a counter that only grows within a process: wall-clock nanoseconds, bumped)
  order a worker's records. A reader that has verified a record ignores any older one of the
  same epoch: a genuine old record written back (a *replay*) changes nothing for it.
* ``worker``: the worker's name, when it was given one (a restart under the same name while the
  named worker is live elsewhere is refused).
* ``time`` (the heartbeat) and ``ttl``: the lease is live until ``time + ttl``. An old copy of a
  live lease carries its old ``time``, so it shows as expired and locks nobody out.
* ``state``: ``"active"``, ``"finished"`` (the study ended) or ``"lost"`` (the process ended on an
  unhandled exception).
* ``token``: lets a process recognize its own records (a digest of a random per-process secret and
  the id, so that the records of two ids run by one process cannot be linked).
* ``sealed``: host, pid, trial counts and the typical trial duration, sealed (HPKE) to the server
  and bound to the federation, the participant and the epoch, padded to a fixed size. The server
  uses the trial duration for its round timeout; the operator sees them in ``status``; anyone
  else sees only that the participant is alive.
"""

from __future__ import annotations

from dataclasses import dataclass
import hashlib
import json
import math
import os
import threading
import time
from typing import Any
from typing import Final

from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.federation.trust import UntrustedRecordError

PURPOSE: Final[str] = "lease"
STATES: Final[tuple[str, ...]] = ("active", "finished", "lost")
#: The sealed fields are padded to a multiple of this many bytes (their length tells nothing).
_PAD: Final[int] = 256
_SECRET = os.urandom(32)
_seq_lock = threading.Lock()
_last_seq = 0


def process_token(client_id: str) -> str:
    """This process's token in the records of ``client_id``."""
    return hashlib.sha256(_SECRET + client_id.encode()).hexdigest()[:32]


def next_seq() -> int:
    """A sequence number larger than every one this process handed out before."""
    global _last_seq
    with _seq_lock:
        _last_seq = max(_last_seq + 1, time.time_ns())
        return _last_seq


@dataclass(frozen=True)
class LeaseRecord:
    """A verified lease record (see the module docstring)."""

    client_id: str
    epoch: int
    seq: int
    time: float
    ttl: float
    state: str
    token: str
    sealed: str
    worker: str | None = None

    @property
    def mark(self) -> tuple[int, int]:
        """What orders a participant's records: ``(epoch, seq)``."""
        return (self.epoch, self.seq)

    def status(self, now: float) -> str:
        """``"active"`` (live), ``"finished"`` or ``"lost"`` (ended, or expired at ``now``)."""
        if self.state != "active":
            return self.state
        return "active" if now - self.time < self.ttl else "lost"


def _info(federation_id: str, client_id: str, epoch: int) -> bytes:
    return canonical_json(
        {"federation": federation_id, "purpose": "lease-private", "client": client_id,
         "epoch": int(epoch)}
    ).encode()  # fmt: skip


def sign_lease(
    trust: Trust,
    key: ParticipantKey,
    *,
    epoch: int,
    state: str,
    ttl: float,
    private: dict[str, Any],
    token: str | None = None,
    worker: str | None = None,
) -> str:
    """A lease record of ``key``'s participant, signed, with ``private`` sealed to the server.

    ``token`` is this process's (:func:`process_token`) unless given: a process that takes over
    the lease of a dead worker of the same participant marks it lost under the dead one's.
    """
    plain = canonical_json(private).encode()
    plain += b" " * (-len(plain) % _PAD)
    body = {
        "client": key.client_id,
        "epoch": int(epoch),
        "seq": next_seq(),
        "time": time.time(),
        "ttl": float(ttl),
        "state": state,
        "token": process_token(key.client_id) if token is None else token,
        "sealed": trust.seal_to_server(_info(trust.federation_id, key.client_id, epoch), plain),
    }
    if worker is not None:
        body["worker"] = worker
    return trust.sign_as(key, PURPOSE, body)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UntrustedRecordError("the lease record is malformed")
    return value


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UntrustedRecordError("the lease record is malformed")
    return float(value)


def verify_lease(trust: Trust, client_id: str, public_key: bytes | None, text: Any) -> LeaseRecord:
    """The verified lease record of ``client_id`` stored as ``text``.

    Raises:
        UntrustedRecordError: If the participant is not enrolled, or the record is malformed,
            not signed by its enrolled key, or names another participant (a copy).
    """
    if public_key is None:
        raise UntrustedRecordError("the participant is not enrolled")
    body = trust.verify_by(public_key, PURPOSE, text)
    if body.get("client") != client_id:
        raise UntrustedRecordError("the lease record names another participant (a copy)")
    state, token, sealed = body.get("state"), body.get("token"), body.get("sealed")
    if state not in STATES or not isinstance(token, str) or not isinstance(sealed, str):
        raise UntrustedRecordError("the lease record is malformed")
    worker = body.get("worker")
    if worker is not None and not isinstance(worker, str):
        raise UntrustedRecordError("the lease record is malformed")
    ttl = _float(body.get("ttl"))
    if ttl <= 0:
        raise UntrustedRecordError("the lease record is malformed")
    return LeaseRecord(
        client_id=client_id,
        epoch=_int(body.get("epoch")),
        seq=_int(body.get("seq")),
        time=_float(body.get("time")),
        ttl=ttl,
        state=state,
        token=token,
        sealed=sealed,
        worker=worker,
    )


def open_private(trust: Trust, record: LeaseRecord) -> dict[str, Any]:
    """The sealed fields of a verified record (the server only): host, pid, counts, duration.

    Raises:
        UntrustedRecordError: If this process holds no server keys or they cannot be opened.
    """
    info = _info(trust.federation_id, record.client_id, record.epoch)
    plain = trust.open_sealed(info, record.sealed)
    try:
        fields = json.loads(plain.decode())
    except (UnicodeDecodeError, ValueError):
        raise UntrustedRecordError("the lease record's sealed fields are malformed") from None
    if not isinstance(fields, dict):
        raise UntrustedRecordError("the lease record's sealed fields are malformed")
    return fields


__all__ = [
    "LeaseRecord",
    "next_seq",
    "open_private",
    "process_token",
    "sign_lease",
    "verify_lease",
]
