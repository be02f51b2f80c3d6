"""A participant's side of secure aggregation over the storage relay.

The protocol's input is the participant's newest one (:meth:`SecAggParticipant.offer`, called
for every upload); :meth:`SecAggParticipant.poll` takes it through the open round's protocol as
far as the server's records allow: it advertises its keys once the server has published the
attempt's setup (and it has a fresh input), then answers each record (key directory, share
bundle, survivor list, unmask request) with its message, sealed to the server and signed as an
upload. It masks the newest input it has when the share bundle arrives; an input offered later
goes to the next round. A record that does not verify, or a step the protocol refuses, ends the
participant's part in that attempt (logged once): the round then goes on without it, or
starts over. Its protocol state is in memory only: a participant joins an attempt at most once
(:func:`~optuna_fedbo.federation.secagg.claims.claim`), so a restarted process, or a second
worker of the site, takes part from the next attempt.

Under distributed DP a participant counts every masked input in its own ledger in its key folder
before it sends it (:class:`~optuna_fedbo.federation.secagg.spending.OwnLedger`), noises an input
masked again afresh, never joins or masks into an attempt at or below the newest it masked into
(a rolled-back storage), and takes no further part once one more release would exceed the
federation's budget: a server that unmasks sums and never publishes them gets at most the
budget's number of sums of any participant's input.

:class:`Driver` polls a process's participants in a background thread while any has work
left, so that asynchronous participants (which never wait for a broadcast) still answer each
step between their trials.
"""

from __future__ import annotations

from collections.abc import Callable
import threading
import time
from typing import Any

import numpy as np
import optuna

from optuna_fedbo.core.secagg.client import SecAggClient
from optuna_fedbo.core.secagg.messages import KeyDirectory
from optuna_fedbo.core.secagg.messages import Message
from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.messages import ShareBundle
from optuna_fedbo.core.secagg.messages import SurvivorList
from optuna_fedbo.core.secagg.messages import UnmaskRequest
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import to_ring
from optuna_fedbo.core.secagg.setup import RoundSetup
from optuna_fedbo.federation._openings import open_round_and_opening
from optuna_fedbo.federation.secagg.claims import claim
from optuna_fedbo.federation.secagg.relay import checked_setup
from optuna_fedbo.federation.secagg.relay import message_key
from optuna_fedbo.federation.secagg.relay import message_plaintext
from optuna_fedbo.federation.secagg.relay import parse_key
from optuna_fedbo.federation.secagg.relay import PEER_PURPOSE
from optuna_fedbo.federation.secagg.relay import peer_verifier
from optuna_fedbo.federation.secagg.relay import record_key
from optuna_fedbo.federation.secagg.relay import Relay
from optuna_fedbo.federation.secagg.relay import verify_record
from optuna_fedbo.federation.secagg.spending import own_ledger
from optuna_fedbo.federation.secagg.spending import OwnLedgerError
from optuna_fedbo.federation.trust import MAX_UPLOAD_CHARS
from optuna_fedbo.federation.trust import UntrustedRecordError

_logger = optuna.logging.get_logger(__name__)

#: The client's next step -> (the server record it answers, the step its message belongs to).
_ANSWER = {
    "share_keys": ("keys", "shares", KeyDirectory),
    "mask_input": ("bundles", "masked", ShareBundle),
    "sign_survivors": ("survivors", "consistency", SurvivorList),
    "unmask": ("unmask", "unmask", UnmaskRequest),
}


class SecAggParticipant:
    """One participant's secure aggregation in this process.

    Args:
        federation: The federation (with secure aggregation).
        client_id: The participant (enrolled, its key on this machine).
    """

    def __init__(self, federation: Any, client_id: str) -> None:
        self.federation = federation
        self.client_id = client_id
        self._relay = Relay(federation.store)
        self._lock = threading.RLock()
        self._input: np.ndarray | None = None
        self._encoded = False
        self._redraw: Callable[[], np.ndarray] | None = None
        self._masked = False  # whether the input was counted (under DP: noised afresh next time)
        #: The participant's own count of releases under distributed DP (``None`` without).
        self.own_ledger = own_ledger(federation, client_id)
        self._fresh = False
        #: Whether the input was in a sum this participant helped unmask (never masked again).
        self._revealed = False
        self._attempt: tuple[int, int] | None = None  # (round, attempt) it takes part in
        self._client: SecAggClient | None = None
        self._counter = 0
        self._opening = ""  # the open round's opening, read with the round at each poll
        self._said: set[str] = set()
        #: ``(round, attempt)`` of each masked input this participant sent (newest last).
        self.masked_rounds: list[tuple[int, int]] = []

    def offer(
        self,
        vector: np.ndarray,
        *,
        encoded: bool = False,
        redraw: Callable[[], np.ndarray] | None = None,
    ) -> None:
        """Make ``vector`` the input to mask next.

        Args:
            vector: The protocol's input, or with ``encoded`` its ring elements already (with
                distributed DP: clipped, rounded and noised by the participant, never clipped
                again, which would cut its noise).
            redraw: With distributed DP, draws the same input with fresh noise: an input masked
                again (in a later attempt) is noised afresh, so that no noise share is ever in
                two sums.
        """
        with self._lock:
            self._input = np.array(vector, dtype=np.uint64 if encoded else float)
            self._encoded = encoded
            self._redraw = redraw
            self._masked = False
            self._fresh = True
            self._revealed = False

    @property
    def busy(self) -> bool:
        """Whether it has an input not yet masked or an attempt under way."""
        with self._lock:
            client = self._client
            return self._fresh or (client is not None and client.step != "done")

    def poll(self) -> bool:
        """Advance through the open round's protocol as far as the server's records allow.

        Returns:
            :attr:`busy` afterwards.
        """
        with self._lock:
            try:
                self._advance()
            except KeyError:
                self._client = None  # the round closed under it: its input goes to the next
            except (MessageRejected, UntrustedRecordError, OwnLedgerError) as error:
                self._say(
                    f"{self.client_id}: secure aggregation round {self._where()}: {error}; it "
                    "takes no further part in this attempt.",
                    warning=True,
                )
                self._client = None
            return self.busy

    def _where(self) -> str:
        return "?" if self._attempt is None else f"{self._attempt[0]} attempt {self._attempt[1]}"

    def _say(self, message: str, *, warning: bool = False) -> None:
        if message in self._said:
            return
        self._said.add(message)
        (_logger.warning if warning else _logger.info)(message)

    def _advance(self) -> None:
        round_index, self._opening = open_round_and_opening(self.federation.store)
        entries = self._relay.entries(round_index)
        setups = [
            parsed[0]
            for parsed in map(parse_key, entries)
            if parsed is not None and parsed[1] == "setup"
        ]
        if not setups:
            return
        attempt = max(setups)
        if self._attempt != (round_index, attempt):
            if self._attempt is not None and self._attempt[0] == round_index:
                # The round starts over (an attempt failed, or the server restarted): an input
                # masked in an attempt that failed before its unmask step was never summed, so
                # it goes to this one. An input whose sum this participant helped unmask never
                # does: a server that claims such an attempt failed would otherwise get a second
                # sum over other survivors of the same inputs, and the difference of the two.
                # (The >= t participants that unmasked a sum all sit out, and t > N / 2, so no
                # later attempt of the round reaches t with those inputs.)
                self._fresh = self._input is not None and not self._revealed
                if self._revealed:
                    self._say(
                        f"{self.client_id}: round {round_index} starts over after attempt "
                        f"{self._attempt[1]}, whose sum it helped unmask; its input is never "
                        "masked again (it takes part with its next one).",
                        warning=True,
                    )
            self._client = None
            if not self._join(round_index, attempt, entries):
                return
        client = self._client
        failed = entries.get(record_key(attempt, "failed"))
        if client is not None and failed is not None:
            # The server closed the attempt as failed: nothing more goes into it (a masked input
            # sent now would be counted, and could be summed, for nothing). Not verified: a
            # forged record only makes it leave the attempt, as any record that does not verify
            # does (availability is not protected).
            self._client = None
            return
        while client is not None and client.step in _ANSWER:
            kind, step, message_type = _ANSWER[client.step]
            text = entries.get(record_key(attempt, kind))
            if kind == "bundles" and text is not None:
                text, kind = self._bundle(round_index, attempt, text), "bundle"
            if text is None:
                if kind == "bundle":
                    self._say(
                        f"{self.client_id}: round {round_index} attempt {attempt} went on "
                        "without its shares (too slow); its input goes to the next attempt."
                    )
                    self._client = None
                return
            body = verify_record(self.federation.trust, kind, text, round_index, attempt)
            request = message_type.from_dict(body.get("message"))
            if step == "masked":
                if not self._count():
                    return
                assert self._input is not None
                encoded = (
                    to_ring(self._input.view(np.int64), client.setup.ring)
                    if self._encoded
                    else encode(self._input, client.setup.ring)
                )
                self._send(round_index, attempt, step, client.mask_input(request, encoded))
                self._fresh = False
                self.masked_rounds.append((round_index, attempt))
            else:
                answer: Callable[[Any], Message] = getattr(client, client.step)
                self._send(round_index, attempt, step, answer(request))
                if step == "unmask" and (round_index, attempt) in self.masked_rounds:
                    self._revealed = True

    def _count(self) -> bool:
        """Under distributed DP, count the masking in the participant's own ledger before the
        masked input is sent (noised afresh if the input was masked before); ``False``: its own
        budget is spent, it takes no further part."""
        own = self.own_ledger
        if own is None:
            return True
        assert self._attempt is not None  # set when it joined the attempt it masks in
        round_index, attempt = self._attempt
        if self._masked and self._redraw is not None:
            self._input = np.array(self._redraw(), dtype=np.uint64)
        if own.record(round_index, attempt):
            self._masked = True  # counted: if masked again, with fresh noise
            return True
        self._stop_spent()
        return False

    def _stop_spent(self) -> None:
        own = self.own_ledger
        assert own is not None
        releases = own.releases()
        self._say(
            f"{self.client_id}: its own privacy budget is spent ({releases} masked input(s) "
            f"counted {own.where()}, epsilon {own.epsilon(releases):.4g}; one more would "
            f"take it above {own.budget:g} at delta {own.delta:g}): it masks no further input "
            "and takes no further part in secure aggregation.",
            warning=True,
        )
        self._fresh, self._client = False, None  # every next attempt stops at _join

    def _bundle(self, round_index: int, attempt: int, index: str) -> str | None:
        """This participant's bundle record, found through the server's index of them
        (``None``: the index does not list it, the server went on without its shares).

        Raises:
            MessageRejected: If the index does not verify or the trial it names holds no
                bundle record of this participant.
        """
        body = verify_record(self.federation.trust, "bundles", index, round_index, attempt)
        trials = body.get("trials")
        if not isinstance(trials, dict):
            raise MessageRejected("the server's index of share bundles is malformed")
        if self.client_id not in trials:
            return None
        text = self._relay.read_bundle(trials[self.client_id], attempt, self.client_id)
        if text is None:
            raise MessageRejected("the share bundle is missing from its trial")
        return text

    def _join(self, round_index: int, attempt: int, entries: dict[str, Any]) -> bool:
        """Start the attempt (advertise keys) if this participant is in it with a fresh input."""
        if not self._fresh:
            return False
        if self.own_ledger is not None and self.own_ledger.would_exceed():
            self._stop_spent()
            return False
        text = entries[record_key(attempt, "setup")]
        body = verify_record(self.federation.trust, "setup", text, round_index, attempt)
        setup: RoundSetup = checked_setup(self.federation, body)
        self._attempt = (round_index, attempt)
        if self.client_id not in setup.participants:
            self._say(
                f"{self.client_id}: not among the participants of round {round_index} attempt "
                f"{attempt} (it enrolled after the attempt started); it takes part in the next."
            )
            return False
        if not claim(self.federation, self.client_id, round_index, attempt):
            self._say(
                f"{self.client_id}: round {round_index} attempt {attempt} was joined before by "
                "this participant (a process of it that restarted, or another worker of it on "
                "this host), whose protocol state is not here; it takes part from the next "
                "attempt."
            )
            return False
        if self.own_ledger is not None:
            # Never again into an attempt at or below one it masked an input into (a storage
            # rolled back past its older claims): raises, logged, and it stays out of the attempt.
            self.own_ledger.check_newer(round_index, attempt)
        key = self.federation._participant_key(self.client_id)
        self._client = SecAggClient(
            setup,
            self.client_id,
            sign=lambda message: key.sign(PEER_PURPOSE, message),
            verify=peer_verifier(self.federation),
        )
        self._send(round_index, attempt, "keys", self._client.advertise())
        return True

    def _send(self, round_index: int, attempt: int, step: str, message: Message) -> None:
        """Seal ``message`` to the server, sign it as this participant's upload, write it."""
        federation = self.federation
        key = federation._participant_key(self.client_id)
        self._counter = max(self._counter + 1, time.time_ns())
        sealed = federation.trust.seal_upload(
            key,
            round_index,
            self._counter,
            message_plaintext(attempt, step, message),
            self._opening,
        )
        if len(sealed) > MAX_UPLOAD_CHARS:
            raise ValueError(
                f"The {step} message of {self.client_id!r} has {len(sealed):,} characters "
                f"sealed, over the bound of {MAX_UPLOAD_CHARS:,}."
            )
        self._relay.write(round_index, message_key(attempt, step, self.client_id), sealed)


#: Seconds of polls that all fail after which the background thread stops (with a warning); the
#: next upload starts it again (:meth:`Driver.kick`), a wait for a broadcast polls as well.
FAILURE_PATIENCE = 60.0


class Driver:
    """Polls a process's participants in a daemon thread while any of them is busy (and its
    polls do not all fail for :data:`FAILURE_PATIENCE` seconds).

    Args:
        interval: Seconds between polls.
        background: Poll in a thread (``False``: only when the caller polls, e.g. in tests).
    """

    def __init__(self, interval: float = 0.2, background: bool = True) -> None:
        self.interval = interval
        self.background = background
        self._participants: dict[str, SecAggParticipant] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def participant(self, federation: Any, client_id: str) -> SecAggParticipant:
        """The participant's driver (made on first use)."""
        with self._lock:
            if client_id not in self._participants:
                self._participants[client_id] = SecAggParticipant(federation, client_id)
            return self._participants[client_id]

    def poll(self) -> bool:
        """Poll every participant once; whether any is still busy."""
        with self._lock:
            participants = list(self._participants.values())
        busy = False
        for participant in participants:
            busy |= participant.poll()
        return busy

    def kick(self) -> None:
        """Start the polling thread unless it runs (or polling in the background is off)."""
        if not self.background:
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._run, name="optuna-fedbo-secagg", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        failing_since: float | None = None
        while True:
            try:
                busy = self.poll()
                failing_since = None
            except Exception as error:
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                busy = now - failing_since < FAILURE_PATIENCE
                if busy:
                    _logger.debug("Secure aggregation poll failed; retrying.", exc_info=True)
                else:
                    _logger.warning(
                        f"Secure aggregation: every poll of the storage failed for "
                        f"{FAILURE_PATIENCE:.0f} s (last: {type(error).__name__}: {error}); the "
                        "background polling stops until the next upload or wait for a broadcast "
                        "(check that the storage is reachable)."
                    )
            if not busy:
                with self._lock:
                    self._thread = None
                return
            time.sleep(self.interval)


__all__ = ["Driver", "SecAggParticipant"]
