"""The layout of a federation's records in an Optuna storage: studies and attribute keys.

Everyone who holds the storage URL can read and write everything here, so nothing is trusted
because of where it is: uploads are sealed to the server and signed by their participant, and
every record the server writes is signed by it and verified by whoever reads it
(:mod:`optuna_fedbo.federation.trust`). Layout (``NAME`` is the federation name; every write has
a single writer, because Optuna's attribute writes are last-writer-wins):

* study ``NAME`` -- what every participant reads. Study system attributes ``fedbo:config``
  (canonical JSON, holding the server's public keys), ``fedbo:config_signature`` and
  ``fedbo:config_hash`` (written once at creation), ``fedbo:latest`` (signed pointer to the
  newest broadcast) and ``fedbo:server`` (the server's signed heartbeat). Each trial is one
  broadcast: system attributes ``fedbo:round`` and ``fedbo:broadcast`` (the signed payload),
  state ``COMPLETE`` once published (``RUNNING`` while staged, ``FAIL`` with the payload erased
  once abandoned), value = number of contributors.
* study ``NAME:fedbo:participants`` -- one trial per enrollment, signed by the server (the
  participant's id and public signing key); the roster is the first ``N`` distinct enrolled ids
  in trial-number order, so a participant's index never changes once it is enrolled.
* study ``NAME:fedbo:uploads:RRRRRR`` per open round -- the sealed uploads, which only the
  server can open: one system attribute ``u:<client_id>`` per participant (a second upload in
  the same round overwrites the first, so it cannot count twice). The server deletes the study
  once the round is published, so a late upload fails and uploads do not outlive their round.
* studies ``NAME:fedbo:server:EEEEEE`` -- one per server start (its *epoch*): a server claims
  the next free epoch by creating the study, which only one writer can do, signs the claim,
  and stops publishing as soon as a later signed claim exists.
* study ``NAME:fedbo:ledger`` -- the privacy ledger of a differentially private federation,
  written by the server only and readable by everyone: one signed, append-only entry
  ``r:RRRRRR:<digest>`` per payload that ever becomes readable (written before the payload is).
  When the privacy budget is exhausted the server writes a signed ``fedbo:budget_exhausted``
  to the main study.
"""

from __future__ import annotations

import json
from typing import Any

CONFIG_KEY = "fedbo:config"
CONFIG_HASH_KEY = "fedbo:config_hash"
CONFIG_SIGNATURE_KEY = "fedbo:config_signature"
ENROLLMENT_KEY = "fedbo:enrollment"
EPOCH_KEY = "fedbo:epoch"
PURGED = "purged"
LATEST_KEY = "fedbo:latest"
SERVER_KEY = "fedbo:server"
ROUND_KEY = "fedbo:round"
BROADCAST_KEY = "fedbo:broadcast"
CLIENT_KEY = "fedbo:client"
OPENED_KEY = "fedbo:opened_at"
UPLOAD_PREFIX = "u:"
LEDGER_PREFIX = "r:"
BUDGET_EXHAUSTED_KEY = "fedbo:budget_exhausted"

#: Longest accepted participant id (RDB attribute keys are limited to 512 characters).
MAX_CLIENT_ID_LENGTH = 128


def check_client_id(client_id: Any) -> str:
    """Validate a participant id: a non-empty printable string of at most 128 characters."""
    if not isinstance(client_id, str) or not client_id:
        raise ValueError(f"client_id must be a non-empty string, got {client_id!r}.")
    if len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise ValueError(
            f"client_id must have at most {MAX_CLIENT_ID_LENGTH} characters, got {len(client_id)}."
        )
    if not client_id.isprintable():
        raise ValueError(f"client_id must be printable, got {client_id!r}.")
    return client_id


def ledger_key(round_index: Any, payload_digest: Any) -> str:
    """The ledger key of the entry accounting one payload of a round."""
    if isinstance(round_index, bool) or not isinstance(round_index, int):
        raise ValueError("malformed round")
    if not isinstance(payload_digest, str) or len(payload_digest) != 64:
        raise ValueError("malformed payload digest")
    return f"{LEDGER_PREFIX}{round_index:06d}:{payload_digest[:32]}"


def loads_object(text: Any) -> dict[str, Any]:
    """Parse a JSON object stored as a string.

    Raises:
        ValueError: If ``text`` is not a string holding a JSON object.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a JSON string, got {type(text).__name__}")
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError("not valid JSON") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value
