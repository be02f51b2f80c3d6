"""What a party trusts of the secure-aggregation relay (``federation/secagg/relay.py``), in
process: keys parse back to what wrote them and odd ones to nothing; a server record of another
attempt, a malformed or mislabelled message, a forged peer signature and a bundle read from a
forged trial id or attribute are refused; a setup carries the configuration's graph and
distributed-DP ring (written to kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import optuna
from optuna.distributions import FloatDistribution
from optuna.study import StudyDirection
from optuna.trial import create_trial
from optuna.trial import TrialState
import pytest

import optuna_fedbo as fb
from optuna_fedbo.core.secagg.messages import Message
from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.messages import SurvivorList
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.secagg.relay import message_key
from optuna_fedbo.federation.secagg.relay import message_plaintext
from optuna_fedbo.federation.secagg.relay import parse_key
from optuna_fedbo.federation.secagg.relay import parse_message
from optuna_fedbo.federation.secagg.relay import PEER_PURPOSE
from optuna_fedbo.federation.secagg.relay import peer_verifier
from optuna_fedbo.federation.secagg.relay import record_key
from optuna_fedbo.federation.secagg.relay import Relay
from optuna_fedbo.federation.secagg.relay import round_setup
from optuna_fedbo.federation.secagg.relay import verify_record

SPACE = {"x": FloatDistribution(0.0, 1.0)}


def _federation(name: str, n_clients: int = 4, privacy=None, **secagg) -> Federation:
    fed = Federation.create(
        name,
        search_space=SPACE,
        n_clients=n_clients,
        protocol=FTSConfig(n_features=4, n_init=2, n_subregions=1 if privacy is None else 2),
        privacy=privacy,
        secure_aggregation=fb.SecureAggregation(**secagg),
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def test_keys_parse_back_to_what_wrote_them() -> None:
    assert parse_key(record_key(3, "setup")) == (3, "setup", None)
    assert parse_key(record_key(3, "bundles", "c1")) == (3, "bundles", "c1")
    assert parse_key(message_key(2, "masked", "c1")) == (2, "msg:masked", "c1")
    assert parse_key(message_key(2, "masked", "a:b")) == (2, "msg:masked", "a:b")
    assert parse_key("secagg:3:bundles:a:b") == (3, "bundles", "a:b")


@pytest.mark.parametrize("key", ["other:1:setup", "secagg:3", "secagg:x:setup", "secagg:-1:setup"])
def test_other_keys_parse_to_nothing(key: str) -> None:
    assert parse_key(key) is None


class _Trust:
    """Stands for a verified server record: returns its body for the right purpose."""

    def __init__(self, body: dict) -> None:
        self.body = body

    def verify(self, purpose: str, text: str) -> dict:
        assert purpose == "secagg-survivors" and text == "signed"
        return self.body


@pytest.mark.parametrize(("round_index", "attempt"), [(1, 3), (2, 2)])
def test_a_server_record_of_another_round_or_attempt_is_refused(
    round_index: int, attempt: int
) -> None:
    trust = _Trust({"round": 1, "attempt": 2, "survivors": ["c0"]})
    assert verify_record(trust, "survivors", "signed", 1, 2)["survivors"] == ["c0"]
    with pytest.raises(MessageRejected, match="bound to round 1 attempt 2"):
        verify_record(trust, "survivors", "signed", round_index, attempt)


def _server_message() -> Message:
    fed = _federation("relay-kills-message")
    setup = round_setup(fed, 1, 0, ("c0", "c1", "c2", "c3"))
    return SurvivorList(**Message.base_of(setup), survivors=("c0", "c1", "c2"))


def test_a_malformed_or_senderless_message_is_refused() -> None:
    message = _server_message()
    # A message with no sender (the server's own) found under a participant's key.
    with pytest.raises(MessageRejected, match="written under 'c0' but sent by None"):
        parse_message(message_plaintext(0, "consistency", message), 0, "consistency", "c0")
    head, _, tail = message_plaintext(0, "consistency", message).partition(b"\n")
    record = json.loads(head)
    for malformed in (list(record), {**record, "extra": 1}):
        with pytest.raises(MessageRejected, match="malformed secure-aggregation message"):
            parse_message(json.dumps(malformed).encode() + b"\n" + tail, 0, "consistency", "c0")
    for malformed_text in (head, head.decode(), b"{" + head):  # no frame, text, not JSON
        with pytest.raises(MessageRejected, match="malformed secure-aggregation message"):
            parse_message(malformed_text, 0, "consistency", "c0")


def test_a_peer_signature_counts_only_if_the_enrolled_key_made_it() -> None:
    fed = _federation("relay-kills-peer")
    verify = peer_verifier(fed)
    key = fed._participant_key("c1")
    genuine = key.sign(PEER_PURPOSE, b"keys")
    assert verify("c1", b"keys", genuine)
    assert not verify("c1", b"keys", bytes(64))
    assert not verify("c1", b"other keys", genuine)
    assert not verify("c2", b"keys", genuine)
    assert not verify("mallory", b"keys", genuine)


def test_a_bundle_is_read_only_from_a_real_trial_id_and_a_mapping() -> None:
    storage = optuna.storages.InMemoryStorage()
    relay = Relay(SimpleNamespace(storage=storage))  # type: ignore[arg-type]
    study_id = storage.create_new_study([StudyDirection.MINIMIZE], "bundles")
    key = record_key(0, "bundles")
    odd, good = (
        storage.create_new_trial(
            study_id, create_trial(state=TrialState.FAIL, system_attrs={key: group})
        )
        for group in ("not a mapping", {"c1": "record"})
    )
    assert (odd, good) == (0, 1)
    assert relay.read_bundle(good, 0, "c1") == "record"
    assert relay.read_bundle(odd, 0, "c1") is None
    # True == 1, "1" names trial 1 to no one: neither is a trial id.
    assert relay.read_bundle(True, 0, "c1") is None
    assert relay.read_bundle("1", 0, "c1") is None


def test_a_setup_carries_the_configured_graph_and_the_distributed_dp_ring() -> None:
    plus = _federation("relay-kills-plus", n_clients=6, degree=4)
    assert round_setup(plus, 1, 0, tuple(f"c{i}" for i in range(6))).degree == 4
    dp = fb.DPConfig(noise_multiplier=1.0, sample_rate=1.0, clip_norm=5.0, accountant="rdp")
    noisy = _federation("relay-kills-dp", privacy=dp)
    setup = round_setup(noisy, 1, 0, ("c0", "c1", "c2", "c3"))
    assert setup.ring == noisy.privacy.mechanism().ring()
    plain = _federation("relay-kills-plain")
    assert setup.ring != round_setup(plain, 1, 0, ("c0", "c1", "c2", "c3")).ring
