"""The server's side of secure aggregation over the storage relay: one attempt at a time.

For the open round the server publishes an attempt's setup (the enrolled participants; the
threshold, ring and graph come from the configuration), then collects each step's messages
(opened and checked as uploads are, then by the protocol: a forged, copied, replayed,
cross-round or out-of-step message is refused and logged, never used) and closes the step with
its record:

* the key step closes as a round does without secure aggregation: when every participant of the
  setup has advertised keys (``"complete"``), on ``force``, or ``round_timeout`` after the first
  one with at least ``max(t, min_uploads)`` of them (``"timeout"``);
* every later step closes once all the participants it expects have answered, or
  ``SecureAggregation.step_timeout`` seconds after it began with at least ``t`` (those missing
  count as dropped: the survivors' shares remove their masks).

A step that ends with fewer than ``t`` participants fails the attempt: nothing is published, a
signed ``failed`` record and a warning say why and who was missing, and the next step starts
the round over with a new attempt (as does a restarted server: attempts are never reused).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import time
from typing import Any

import optuna

from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.server import AggregateResult
from optuna_fedbo.core.secagg.server import RoundFailed
from optuna_fedbo.core.secagg.server import SecAggServer
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.secagg.relay import INPUTS_STEP
from optuna_fedbo.federation.secagg.relay import message_key
from optuna_fedbo.federation.secagg.relay import parse_message
from optuna_fedbo.federation.secagg.relay import peer_verifier
from optuna_fedbo.federation.secagg.relay import record_body
from optuna_fedbo.federation.secagg.relay import record_key
from optuna_fedbo.federation.secagg.relay import Relay
from optuna_fedbo.federation.secagg.relay import round_setup

_logger = optuna.logging.get_logger(__name__)


@dataclass(frozen=True)
class Outcome:
    """An attempt that ended: its sum, or why it failed.

    Attributes:
        round: The round.
        attempt: The attempt.
        result: The unmasked sum, or ``None`` if the attempt failed.
        failed: Why it failed (``None`` if it did not).
        reason: Why its key step closed (``"complete"``, ``"timeout"``, ``"forced"``).
        rejected: ``(participant, reason)`` of every message refused.
    """

    round: int
    attempt: int
    result: AggregateResult | None
    failed: str | None
    reason: str
    rejected: tuple[tuple[str, str], ...]


class _Attempt:
    def __init__(self, round_index: int, attempt: int, server: SecAggServer) -> None:
        self.round = round_index
        self.attempt = attempt
        self.server = server
        self.step_started = time.monotonic()
        self.first_seen: float | None = None
        self.seen: dict[str, str] = {}  # message key -> the text already handled
        self.rejected: dict[str, str] = {}
        self.reason = ""


class SecAggCoordinator:
    """Runs the open round's protocol for a server.

    Args:
        federation: The federation (with secure aggregation).
        open_upload: ``(client_id, text, round) -> (counter, plaintext)``: the server's check
            and opening of an upload (``FederationServer._open_upload_bytes``).
        min_uploads: The server's ``min_uploads``.
        round_timeout: The server's current round timeout (``None``: wait for everyone).
    """

    def __init__(
        self,
        federation: Any,
        *,
        open_upload: Callable[[str, str, int], tuple[int, bytes]],
        min_uploads: int,
        round_timeout: Callable[[], float | None],
    ) -> None:
        self.federation = federation
        self.config = federation.secure_aggregation
        self._open = open_upload
        self._min_uploads = min_uploads
        self._round_timeout = round_timeout
        self._relay = Relay(federation.store)
        self._attempt: _Attempt | None = None
        self._said: set[str] = set()

    def discard(self, round_index: int) -> None:
        """Delete a published round's masked inputs (its other entries go with its uploads)."""
        self._relay.discard(round_index)

    @property
    def attempt(self) -> _Attempt | None:
        """The attempt under way (``None`` between attempts)."""
        return self._attempt

    def step(self, round_index: int, *, force: bool = False) -> Outcome | None:
        """Collect the current step's messages and close it if it is ready.

        Returns:
            The :class:`Outcome` once the attempt ends (unmasked or failed), else ``None``.
        """
        current = self._attempt
        if current is None or current.round != round_index:
            current = self._start(round_index)
            if current is None:
                return None
        self._receive(current)
        reason = self._ready(current, force)
        if reason is None:
            return None
        try:
            result = self._close(current, reason)
        except RoundFailed as error:
            self._attempt = None
            message = f"Federation {self.federation.name!r}: {error}"
            _logger.warning(message + " The round starts over.")
            self._publish(current, "failed", {"reason": str(error)})
            return Outcome(
                round_index,
                current.attempt,
                None,
                str(error),
                current.reason,
                tuple(current.rejected.items()),
            )
        if result is None:
            current.step_started = time.monotonic()
            return None
        self._attempt = None
        return Outcome(
            round_index,
            current.attempt,
            result,
            None,
            current.reason,
            tuple(current.rejected.items()),
        )

    # -------------------------------------------------------------------------- attempts
    def _start(self, round_index: int) -> _Attempt | None:
        participants = tuple(self.federation.participants())
        threshold = self.config.threshold
        if len(participants) < threshold:
            self._say(
                f"Federation {self.federation.name!r}: round {round_index} waits for "
                f"{threshold} enrolled participants (secure aggregation's threshold); "
                f"{len(participants)} are enrolled."
            )
            return None
        entries = self._relay.entries(round_index)
        attempt = self._relay.newest_attempt(entries) + 1
        setup = round_setup(self.federation, round_index, attempt, participants)
        current = _Attempt(
            round_index, attempt, SecAggServer(setup, verify=peer_verifier(self.federation))
        )
        self._publish(current, "setup", {"setup": setup.to_dict()})
        self._attempt = current
        _logger.info(
            f"Federation {self.federation.name!r}: round {round_index} secure aggregation "
            f"attempt {attempt} ({len(participants)} participants, threshold {threshold})."
        )
        return current

    def _publish(self, current: _Attempt, kind: str, content: dict[str, Any]) -> None:
        trust = self.federation.trust
        text = trust.sign(f"secagg-{kind}", record_body(current.round, current.attempt, content))
        self._relay.write(current.round, record_key(current.attempt, kind), text)

    def _say(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            _logger.info(message)

    # ------------------------------------------------------------------------- receiving
    def _receive(self, current: _Attempt) -> None:
        server = current.server
        step = server.step
        entries = self._relay.entries(current.round, messages=True, inputs=step == INPUTS_STEP)
        for client_id in server.expected():
            key = message_key(current.attempt, step, client_id)
            text = entries.get(key)
            if text is None or current.seen.get(key) == text:
                continue
            current.seen[key] = text
            try:
                _, plaintext = self._open(client_id, text, current.round)
                server.receive(parse_message(plaintext, current.attempt, step, client_id))
            except (UploadRejected, MessageRejected) as error:
                current.rejected[client_id] = str(error)
                _logger.warning(
                    f"Rejected the secure-aggregation {step} message of {client_id!r} in round "
                    f"{current.round} (attempt {current.attempt}): {error}."
                )
                continue
            if current.first_seen is None:
                current.first_seen = time.monotonic()

    def _ready(self, current: _Attempt, force: bool) -> str | None:
        server = current.server
        received = len(server.expected()) - len(server.missing())
        if not server.missing():
            return "complete"
        if server.step == "keys" and received == 0:
            return None  # as without secure aggregation: a round without uploads never closes
        if force:
            return "forced"
        if server.step == "keys":
            timeout = self._round_timeout()
            needed = max(self.config.threshold, self._min_uploads)
            waited = (
                timeout is not None
                and current.first_seen is not None
                and time.monotonic() - current.first_seen >= timeout
            )
            return "timeout" if waited and received >= needed else None
        if time.monotonic() - current.step_started >= self.config.step_timeout:
            return "timeout"
        return None

    def _close(self, current: _Attempt, reason: str) -> AggregateResult | None:
        """Close the current step: publish the next record (or return the sum)."""
        server = current.server
        step = server.step
        if step == "keys":
            current.reason = reason
            self._publish(current, "keys", {"message": server.key_directory().to_dict()})
        elif step == "shares":
            sign = self.federation.trust.sign
            records = {
                holder: sign(
                    "secagg-bundle",
                    record_body(current.round, current.attempt, {"message": b.to_dict()}),
                )
                for holder, b in server.share_bundles().items()
            }
            trials = self._relay.write_bundles(current.round, current.attempt, records)
            self._publish(current, "bundles", {"trials": trials})
        elif step == "masked":
            self._publish(current, "survivors", {"message": server.survivor_list().to_dict()})
        elif step == "consistency":
            self._publish(current, "unmask", {"message": server.unmask_request().to_dict()})
        else:
            return server.aggregate()
        return None


__all__ = ["Outcome", "SecAggCoordinator"]
