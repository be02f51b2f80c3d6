"""Where secure aggregation's messages live in the storage, and how they are sealed and signed.

Everything of round ``r`` hangs off round ``r``'s uploads study (discarded with it once the round
is published), under keys ``secagg:{attempt}:...``; an *attempt* is one run of the protocol for
the round (a round whose attempt fails, or whose server restarts, starts over with the next
attempt). Three places, so that what a participant polls stays small (``O(N)`` bytes, never the
others' messages or shares):

* the uploads study's system attributes: the server's records ``secagg:{a}:setup``,
  ``secagg:{a}:keys``, ``secagg:{a}:bundles`` (which trial of the bundles study holds each
  participant's share bundle), ``secagg:{a}:survivors``, ``secagg:{a}:unmask`` and
  ``secagg:{a}:failed``, signed by the server (``Trust.sign``, one purpose per kind) and bound
  to the round and attempt; a participant verifies each against the configuration's server
  key;
* the round's bundles study (``...:secagg-bundles``): trials of about ``sqrt(N)`` recipients
  each, whose system attribute ``secagg:{a}:bundles`` maps each of them to the server's signed
  record of the shares sealed to it (a participant reads its trial: ``O(sqrt(N) degree)`` bytes,
  not everyone's shares; the server writes ``sqrt(N)`` trials);
* the round's messages study (``...:secagg-messages``; the masked inputs, large, one trial each
  in the inputs study ``...:secagg-inputs``, read at that step only and, through Optuna's cache
  of an RDB storage, each once however often the server polls), read by the server (and
  ``status``): ``secagg:{a}:msg:{step}:{participant}``, a participant's message of a step,
  sealed to the server and signed by the participant's enrolled key exactly as an upload is
  (``Trust.seal_upload``: bound to the federation, configuration, round, counter and the
  round's opening), its plaintext bound to the attempt and step.

The protocol's own messages are, in addition, bound to the attempt's setup digest
(:class:`~optuna_fedbo.core.secagg.RoundSetup`), so one copied from another round, attempt or
federation is refused by the protocol as well as by its envelope.
"""

from __future__ import annotations

import math
from typing import Any

from optuna.trial import create_trial
from optuna.trial import TrialState

from optuna_fedbo.core.secagg.messages import Message
from optuna_fedbo.core.secagg.messages import message_from_header
from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.setup import RoundSetup
from optuna_fedbo.federation._codec import binary_frame
from optuna_fedbo.federation._codec import split_frame
from optuna_fedbo.federation.keys import verify_signature
from optuna_fedbo.federation.store import FederationStore

PREFIX = "secagg:"
#: The server's records, in the order the protocol publishes them.
RECORDS = ("setup", "keys", "bundles", "survivors", "unmask")
#: The participants' steps (as the server names them) and the record each one answers.
STEPS = ("keys", "shares", "masked", "consistency", "unmask")
ANSWERS = dict(zip(STEPS, RECORDS))
#: The studies of the participants' messages and of their masked inputs, read by the server.
MESSAGES_SUFFIX = ":secagg-messages"
INPUTS_SUFFIX = ":secagg-inputs"
#: The step whose (large) messages go to the inputs study.
INPUTS_STEP = "masked"
#: The study of the share bundles, one trial per recipient.
BUNDLES_SUFFIX = ":secagg-bundles"
#: Signature purpose of the participants' signatures for their peers (advertised keys, the
#: survivor list): separate from every other use of the enrolled key.
PEER_PURPOSE = "secagg-peer"


def record_key(attempt: int, kind: str, recipient: str | None = None) -> str:
    suffix = "" if recipient is None else f":{recipient}"
    return f"{PREFIX}{attempt}:{kind}{suffix}"


def message_key(attempt: int, step: str, client_id: str) -> str:
    return f"{PREFIX}{attempt}:msg:{step}:{client_id}"


def parse_key(key: str) -> tuple[int, str, str | None] | None:
    """``(attempt, kind, participant or None)`` of a ``secagg:`` key (kind ``msg:{step}`` for a
    participant's message), or ``None`` for another key."""
    if not key.startswith(PREFIX):
        return None
    parts = key[len(PREFIX) :].split(":", 3)
    if len(parts) < 2 or not parts[0].isdigit():
        return None
    attempt = int(parts[0])
    if parts[1] == "msg" and len(parts) == 4:
        return attempt, f"msg:{parts[2]}", parts[3]
    return attempt, parts[1], ":".join(parts[2:]) or None


class Relay:
    """Reads and writes one federation's secure-aggregation entries.

    Args:
        store: The federation's store.
    """

    def __init__(self, store: FederationStore) -> None:
        self.store = store
        self._round: int | None = None

    def _study_id(self, round_index: int) -> int:
        """The round's uploads study id (cached while this relay works on that round: a
        closed round's ids are forgotten, as a storage may give a deleted study's id to a new
        one)."""
        if self._round != round_index:
            if self._round is not None:
                self._forget(self._round)
            self._round = round_index
        return self.store._study_id(self.store.uploads_study_name(round_index))

    def _inputs_study(self, round_index: int) -> str:
        return self.store.uploads_study_name(round_index) + INPUTS_SUFFIX

    def _messages_study(self, round_index: int) -> str:
        return self.store.uploads_study_name(round_index) + MESSAGES_SUFFIX

    def _bundles_study(self, round_index: int) -> str:
        return self.store.uploads_study_name(round_index) + BUNDLES_SUFFIX

    def _forget(self, round_index: int) -> None:
        """Forget the round's study ids (they were deleted, or deleted and made again)."""
        for name in (
            self.store.uploads_study_name(round_index),
            *self._side_studies(round_index),
        ):
            self.store._forget(name)

    def _side_studies(self, round_index: int) -> tuple[str, ...]:
        return (
            self._messages_study(round_index),
            self._inputs_study(round_index),
            self._bundles_study(round_index),
        )

    def _study_of(self, name: str) -> int:
        try:
            return self.store._study_id(name)
        except KeyError:
            return self.store._create_study(name)

    def entries(
        self, round_index: int, *, inputs: bool = False, messages: bool = False
    ) -> dict[str, Any]:
        """The server's records of a round (empty once its uploads study is gone); with
        ``messages`` the participants' messages but not their masked inputs, with ``inputs``
        all their messages (the inputs are large: the server reads them at that step only).
        Study ids are cached (a poll costs one query per study)."""
        storage = self.store.storage
        attrs: dict[str, Any] = {}
        try:
            attrs.update(storage.get_study_system_attrs(self._study_id(round_index)))
            if messages or inputs:
                name = self._messages_study(round_index)
                try:
                    attrs.update(storage.get_study_system_attrs(self.store._study_id(name)))
                except KeyError:
                    self.store._forget(name)  # no message yet
            if inputs:
                name = self._inputs_study(round_index)
                try:
                    trials = storage.get_all_trials(self.store._study_id(name), deepcopy=False)
                except KeyError:
                    self.store._forget(name)  # no masked input yet
                else:
                    for trial in trials:  # in the order written: a later copy wins
                        attrs.update(trial.system_attrs)
        except KeyError:
            self._forget(round_index)  # the round closed
        return {k: v for k, v in attrs.items() if k.startswith(PREFIX)}

    def write(self, round_index: int, key: str, value: str) -> None:
        """Write an entry of the round (a participant's message into the round's messages
        study, so that participants polling the round's records never read the others').

        Raises:
            KeyError: If the round's uploads study is gone (the round closed).
        """
        storage = self.store.storage
        try:
            study_id = self._study_id(round_index)
            if f":msg:{INPUTS_STEP}:" in key:
                storage.create_new_trial(
                    self._study_of(self._inputs_study(round_index)),
                    create_trial(state=TrialState.FAIL, system_attrs={key: value}),
                )
                return
            if ":msg:" in key:
                study_id = self._study_of(self._messages_study(round_index))
            storage.set_study_system_attr(study_id, key, value)
        except KeyError:
            self._forget(round_index)
            raise

    def write_bundles(
        self, round_index: int, attempt: int, records: dict[str, str]
    ) -> dict[str, int]:
        """Write the recipients' bundle records (``recipient -> text``) into trials of the
        round's bundles study, about ``sqrt(N)`` records a trial under one key
        (``secagg:{attempt}:bundles``: ``sqrt(N)`` writes for the server; a participant reads
        ``sqrt(N)`` bundles of ``O(degree)`` shares); the trial of each recipient's record.

        Raises:
            KeyError: If the round's uploads study is gone (the round closed).
        """
        self._study_id(round_index)
        storage = self.store.storage
        recipients = sorted(records)
        size = max(1, math.isqrt(len(recipients) - 1) + 1) if recipients else 1
        key = record_key(attempt, "bundles")
        trials: dict[str, int] = {}
        try:
            study_id = self._study_of(self._bundles_study(round_index))
            for start in range(0, len(recipients), size):
                group = {r: records[r] for r in recipients[start : start + size]}
                trial_id = storage.create_new_trial(
                    study_id, create_trial(state=TrialState.FAIL, system_attrs={key: group})
                )
                trials.update(dict.fromkeys(group, trial_id))
        except KeyError:
            self._forget(round_index)
            raise
        return trials

    def read_bundle(self, trial_id: Any, attempt: int, recipient: str) -> Any:
        """``recipient``'s bundle record in a trial of the round's bundles study (``None`` if
        there is none there: what it holds is the server's signed record, bound to the round,
        the attempt and the recipient, so the trial it is read from need not be trusted)."""
        if isinstance(trial_id, bool) or not isinstance(trial_id, int):
            return None
        try:
            attrs = self.store.storage.get_trial_system_attrs(trial_id)
        except KeyError:
            return None
        group = attrs.get(record_key(attempt, "bundles"))
        return group.get(recipient) if isinstance(group, dict) else None

    def discard(self, round_index: int) -> None:
        """Delete a published round's messages and bundles (no-op if they are gone)."""
        storage = self.store.storage
        for name in self._side_studies(round_index):
            try:
                storage.delete_study(self.store._study_id(name))
            except KeyError:
                pass
        self._forget(round_index)

    def newest_attempt(self, entries: dict[str, Any]) -> int:
        """The highest attempt with any entry (-1: none)."""
        found = [parsed[0] for parsed in map(parse_key, entries) if parsed is not None]
        return max(found, default=-1)


def record_body(round_index: int, attempt: int, content: dict[str, Any]) -> dict[str, Any]:
    """The body of a server record: the round and attempt, and its content."""
    return {"round": int(round_index), "attempt": int(attempt), **content}


def verify_record(
    trust: Any, kind: str, text: Any, round_index: int, attempt: int
) -> dict[str, Any]:
    """The content of a server record of ``kind`` for the round and attempt.

    Raises:
        UntrustedRecordError: If it is not signed by the server for that purpose.
        MessageRejected: If it is bound to another round or attempt.
    """
    body = trust.verify(f"secagg-{kind}", text)
    if body.get("round") != round_index or body.get("attempt") != attempt:
        raise MessageRejected(
            f"the server's {kind} record is bound to round {body.get('round')!r} attempt "
            f"{body.get('attempt')!r}, not round {round_index} attempt {attempt}"
        )
    return body


def message_plaintext(attempt: int, step: str, message: Message) -> bytes:
    """A participant message's plaintext (sealed to the server as an upload): a binary frame,
    the canonical JSON header (attempt, step and the message, its ring-element vectors
    replaced by their lengths), a newline, then the vectors' raw bytes (no base64 inside the
    envelope's own)."""
    header, blobs = message.to_header()
    return binary_frame({"attempt": attempt, "step": step, "message": header}, *blobs)


def parse_message(plaintext: bytes, attempt: int, step: str, client_id: str) -> Message:
    """The protocol message of an opened upload found under ``client_id``'s key of a step.

    Raises:
        MessageRejected: If it is malformed, of another attempt or step, or names another
            sender.
    """
    try:
        record, tail = split_frame(plaintext)
    except ValueError:
        raise MessageRejected("malformed secure-aggregation message") from None
    fields = {"attempt", "step", "message"}
    if not isinstance(record, dict) or set(record) != fields:
        raise MessageRejected("malformed secure-aggregation message")
    if record["attempt"] != attempt or record["step"] != step:
        raise MessageRejected(
            f"a message of attempt {record['attempt']!r} step {record['step']!r} found under "
            f"attempt {attempt} step {step!r} (a copy)"
        )
    message = message_from_header(record["message"], tail)
    if getattr(message, "sender", None) != client_id:
        raise MessageRejected(
            f"written under {client_id!r} but sent by {getattr(message, 'sender', None)!r}"
        )
    return message


def round_setup(
    federation: Any, round_index: int, attempt: int, participants: tuple[str, ...]
) -> RoundSetup:
    """The setup of an attempt: its participants, and the federation's threshold, ring and
    graph (every party derives these from the signed configuration, never from the server).

    Raises:
        ValueError: If the participants are fewer than the threshold.
    """
    config = federation.secure_aggregation
    dimension = federation.protocol.check_secure_aggregation(federation.privacy)
    privacy = federation.privacy
    if privacy is None:
        ring = config.ring(federation.n_clients, dimension)
    else:  # distributed DP: the ring of the clipped inputs plus the summed noise
        ring = privacy.mechanism().ring()
    return RoundSetup(
        federation_id=f"{federation.federation_id}:{federation.config_hash[:16]}:{attempt}",
        round_index=round_index,
        participants=participants,
        threshold=config.threshold,
        ring=ring,
        degree=config.degree,
    )


def checked_setup(federation: Any, body: dict[str, Any]) -> RoundSetup:
    """The setup a participant accepts from a verified ``setup`` record: exactly the one the
    configuration gives for its round, attempt and participants (enrolled ones only), so that a
    server cannot lower the threshold, widen the ring or pick the graph.

    Raises:
        MessageRejected: If it is not.
    """
    try:
        stored = RoundSetup.from_dict(body.get("setup"))
        enrolled = set(federation.participants())
        if not set(stored.participants) <= enrolled:
            raise ValueError("it names participants that are not enrolled")
        expected = round_setup(federation, body["round"], body["attempt"], stored.participants)
    except (TypeError, ValueError) as error:
        raise MessageRejected(f"the round's setup is not acceptable ({error})") from None
    if stored != expected:
        raise MessageRejected(
            "the round's setup differs from the one the configuration gives (threshold, ring, "
            "graph or binding)"
        )
    return expected


def peer_verifier(federation: Any) -> Any:
    """``verify(participant, message, signature)`` against the participants' enrolled keys."""

    def verify(participant: str, message: bytes, signature: bytes) -> bool:
        public_key = federation.public_key_of(participant)
        return public_key is not None and verify_signature(
            public_key, federation.federation_id, PEER_PURPOSE, message, signature
        )

    return verify


__all__ = [
    "ANSWERS",
    "BUNDLES_SUFFIX",
    "PEER_PURPOSE",
    "RECORDS",
    "Relay",
    "STEPS",
    "checked_setup",
    "message_key",
    "message_plaintext",
    "parse_key",
    "parse_message",
    "peer_verifier",
    "record_body",
    "record_key",
    "round_setup",
    "verify_record",
]
