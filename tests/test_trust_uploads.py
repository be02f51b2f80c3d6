"""Sealed, signed uploads: forged, replayed, copied, oversized and cross-round uploads are refused
with a logged reason; a spy holding the storage URL recovers nothing from the sealed uploads by
any decoding, and their bytes are indistinguishable from random ones (real processes)."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import logging
import lzma
import os
from pathlib import Path
import subprocess
import sys
import uuid
import zlib

import _upload_attacks as attacks
from cryptography.exceptions import InvalidTag
import numpy as np
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation._codec import split_frame
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.fts.messages import encode_upload
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.trust import _SUITE
from optuna_fedbo.federation.trust import MAX_UPLOAD_CHARS
from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.federation.trust import Trust

M = 6
SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _federation(n_clients: int = 2, storage: object = None, **kwargs) -> Federation:
    fed = Federation.create(
        f"up-{next(_names)}",
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=kwargs.pop("protocol", FTSConfig(n_features=M, n_init=1, aggregation="weighted")),
        **kwargs,
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def _omega(i: int) -> np.ndarray:
    return np.linspace(-1.0, 1.0, M) * (i + 1)


def _payload(fed: Federation, client: str, round_index: int = 0, i: int = 0) -> str:
    return encode_upload(
        config_hash=fed.config_hash,
        round_index=round_index,
        client_id=client,
        omega=_omega(i),
        n_observations=3,
        iteration=round_index,
    )


def _reasons(caplog: pytest.LogCaptureFixture) -> str:
    return " ".join(r.getMessage() for r in caplog.records if "Rejected" in r.getMessage())


def _upload_many(fed: Federation, repeats: int = 6, seed: int = 7) -> list[tuple[str, np.ndarray]]:
    """Seeded uploads of every participant to round 0 (each replaces the previous one);
    returns ``(stored text, vector)`` of each."""
    rng = np.random.default_rng(seed)
    sent = []
    for _ in range(repeats):
        for client in fed.participants():
            omega = rng.normal(0.0, 3.0, M)
            fed.upload(client, omega, n_observations=3, iteration=0)
            sent.append((fed.store.read_uploads(0)[client], omega))
    return sent


def test_a_spy_recovers_nothing_from_stored_uploads_by_any_decoding() -> None:
    """base64 / JSON / numpy buffers / decompression of everything stored: no vector value, no
    statistic of it, no field of the plaintext; the sealed bytes are not text nor JSON."""
    fed = _federation(n_clients=3)
    for text, omega in _upload_many(fed):
        assert attacks.recover(text, attacks.secrets_of(omega)) == []
        sealed = attacks.ciphertext(text)
        with pytest.raises(ValueError):  # UnicodeDecodeError or JSONDecodeError
            json.loads(sealed.decode("utf-8"))
    # The attack does find an upload that is merely encoded (it is not blind).
    text, omega = _upload_many(fed, repeats=1)[0]
    plaintext = fed.trust.open_upload_bytes(
        text, client_id="c0", public_key=fed.public_key_of("c0"), round_index=0
    )[1]
    header, _ = attacks.envelope(text)
    for encode in (
        lambda b: base64.b64encode(b),
        lambda b: base64.urlsafe_b64encode(zlib.compress(b)),
        lambda b: base64.b64encode(lzma.compress(b)),
    ):
        leaked = attacks.stored_upload(header, encode(plaintext).decode())
        assert attacks.recover(leaked, attacks.secrets_of(omega)) != []
    raw = json.dumps({"ct": base64.b64encode(omega.astype("<f4").tobytes()).decode()})
    assert attacks.recover(raw, attacks.secrets_of(omega)) != []


def test_stored_uploads_are_indistinguishable_from_random_bytes() -> None:
    fed = _federation(n_clients=3)
    sent = _upload_many(fed)
    sealed = [attacks.ciphertext(text) for text, _ in sent]
    p_value, ratio = attacks.randomness(sealed)
    # Uniform bytes: p-value uniform on [0, 1] (fails 1 run in a million), no compression.
    assert p_value > 1e-6 and ratio > 0.98, (p_value, ratio)
    # Sealing is randomized: the same upload sealed twice shares no more bytes than chance.
    key = fed._participant_key("c0")
    plaintext = _payload(fed, "c0")
    a, b = (attacks.ciphertext(fed.trust.seal_upload(key, 0, 9, plaintext)) for _ in range(2))
    assert len(a) == len(b) and sum(x == y for x, y in zip(a, b)) < 16
    # The test is not blind: the same bytes merely encoded are told apart at once.
    plain = [fed.trust.open_upload_bytes(
        text, client_id=attacks.envelope(text)[0]["client"],
        public_key=fed.public_key_of(attacks.envelope(text)[0]["client"]),
        round_index=attacks.envelope(text)[0]["round"],
    )[1] for text, _ in sent]  # fmt: skip
    assert max(attacks.randomness(plain)) < 0.6
    xored = [bytes(c ^ 0x5A for c in p) for p in plain]
    assert attacks.randomness(xored)[0] < 1e-6


def test_uploads_are_ciphertexts_that_only_the_server_opens() -> None:
    fed = _federation()
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    stored = fed.store.read_uploads(0)["c0"]
    envelope, ciphertext = attacks.envelope(stored)
    assert set(envelope) == {"v", "client", "round", "counter", "after", "sig"}
    assert stored == f"{canonical_json(envelope)}\n{ciphertext}"  # a header line, then base64
    assert '"omega"' not in stored and '"f8"' not in stored
    assert split_frame(fed.read_upload(0, "c0"))[0]["client"] == "c0"
    # Anyone can check the envelope's signature, but a key other than the server's cannot open
    # it: the decryption itself fails (not a missing key: here a key is present).
    participant = Federation.load(fed.name, fed.storage, server_fingerprint=fed.fingerprint)
    participant._trust.server_keys = ServerKeys.generate()
    assert participant._trust.check_upload(
        stored, client_id="c0", public_key=fed.public_key_of("c0"), round_index=0
    )[0] == envelope["counter"]  # fmt: skip
    with pytest.raises(UploadRejected, match="cannot be opened"):
        participant.read_upload(0, "c0")
    # Nor can the server under another binding (the HPKE info): round, participant, counter.
    sealed, context = (
        attacks.ciphertext(stored),
        fed.trust._upload_context(0, "c0", envelope["counter"] + 1, envelope["after"]),
    )
    with pytest.raises(InvalidTag):
        _SUITE.decrypt(sealed, fed.trust.server_keys.sealing_private_key, info=context)


@pytest.mark.parametrize(
    "attack",
    ["forged key", "other id", "unsigned", "cross round", "cross federation", "oversized"],
)
def test_forged_copied_and_oversized_uploads_are_rejected(attack: str, caplog) -> None:
    fed = _federation()
    server = FederationServer(fed)
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    trust = fed.trust
    if attack == "forged key":  # signed by a key that is not c1's enrolled one
        forger = ParticipantKey.generate(fed.federation_id, "c1", fed.fingerprint)
        text = trust.seal_upload(forger, 0, 1, _payload(fed, "c1"))
        reason = "not signed by the enrolled key"
    elif attack == "other id":  # c0's genuine upload copied under c1's key
        text = fed.store.read_uploads(0)["c0"]
        reason = "written under participant 'c1' but sent by 'c0'"
    elif attack == "unsigned":  # the old plain-JSON upload
        text = _payload(fed, "c1")
        reason = "not a sealed upload"
    elif attack == "cross round":  # c1's genuine upload for round 3, copied into round 0
        text = trust.seal_upload(fed._participant_key("c1"), 3, 1, _payload(fed, "c1", 3))
        reason = "sent for round 3, found in round 0"
    elif attack == "cross federation":  # c1's genuine upload to another federation
        other = _federation()
        other_key = other._participant_key("c1")
        text = other.trust.seal_upload(other_key, 0, 1, _payload(other, "c1"))
        reason = "not signed by the enrolled key"
    else:
        text = "x" * (MAX_UPLOAD_CHARS + 1)
        reason = "oversized"
    fed.store.write_upload(0, "c1", text)
    with caplog.at_level(logging.WARNING):
        assert server.step() is None  # c1 does not count: the round is not complete
    assert reason in _reasons(caplog)
    report = server.step(force=True)
    assert report.contributors == ("c0",) and reason in dict(report.rejected)["c1"]


def _flip(ciphertext: str) -> str:
    """The base64 ciphertext with one character changed (still base64)."""
    return ciphertext[:10] + ("A" if ciphertext[10] != "A" else "B") + ciphertext[11:]


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        pytest.param(lambda e, c: ({**e, "v": 1}, c), "not a sealed upload", id="format 1"),
        pytest.param(lambda e, c: ({**e, "v": 3}, c), "not a sealed upload", id="format 3"),
        pytest.param(
            lambda e, c: ({**e, "counter": float(e["counter"])}, c),
            "not a sealed upload",
            id="float counter",
        ),
        pytest.param(
            lambda e, c: ({**e, "counter": True}, c), "not a sealed upload", id="bool counter"
        ),
        pytest.param(
            lambda e, c: ({**e, "round": 0.0}, c), "not a sealed upload", id="float round"
        ),
        pytest.param(lambda e, c: ([e], c), "not a sealed upload", id="not an object"),
        pytest.param(lambda e, c: (e, c + "\n"), "not a sealed upload", id="two lines"),
        pytest.param(lambda e, c: (e, c[:8] + "\n" + c[8:]), "not a sealed upload", id="split"),
        pytest.param(lambda e, c: (e, c + "A"), "not a sealed upload", id="not base64"),
        pytest.param(
            lambda e, c: (e, _flip(c)), "not signed by the enrolled key", id="ciphertext"
        ),
        pytest.param(
            lambda e, c: ({**e, "after": "x"}, c), "not signed by the enrolled key", id="opening"
        ),
        pytest.param(
            lambda e, c: ({**e, "counter": e["counter"] + 1}, c),
            "not signed by the enrolled key",
            id="counter",
        ),
    ],
)
def test_a_genuine_upload_with_a_rewritten_envelope_is_rejected(tamper, reason, caplog) -> None:
    """The envelope's format, round and counter fields are not covered by the signature as
    such (the counter is signed as an integer): a rewritten one is refused, never coerced; nor
    is one whose framing (one header line, then base64) is broken, or whose signed parts were
    changed."""
    fed = _federation()
    server = FederationServer(fed)
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    fed.upload("c1", _omega(1), n_observations=3, iteration=0)
    header, ciphertext = attacks.envelope(fed.store.read_uploads(0)["c1"])
    fed.store.write_upload(0, "c1", attacks.stored_upload(*tamper(header, ciphertext)))
    report = server.step(force=True)
    assert report.contributors == ("c0",)
    assert reason in dict(report.rejected)["c1"]


def test_the_previous_envelope_format_is_refused() -> None:
    """Format 1 (one JSON object, the ciphertext a field of it), even genuinely signed."""
    fed = _federation()
    header, ciphertext = attacks.envelope(
        fed.trust.seal_upload(fed._participant_key("c0"), 0, 1, _payload(fed, "c0"))
    )
    key = {"client_id": "c0", "public_key": fed.public_key_of("c0"), "round_index": 0}
    for v in (1, 2):
        old = canonical_json({**header, "v": v, "ct": ciphertext})
        with pytest.raises(UploadRejected, match="unknown envelope format"):
            fed.trust.check_upload(old, **key)


def test_the_size_bound_is_inclusive() -> None:
    """An envelope of exactly ``MAX_UPLOAD_CHARS`` is within the bound (then judged on its
    content); one character more is refused for its size alone."""
    fed = _federation()
    genuine = fed.trust.seal_upload(fed._participant_key("c0"), 0, 1, _payload(fed, "c0"))
    envelope, ciphertext = attacks.envelope(genuine)
    padding = MAX_UPLOAD_CHARS - len(attacks.stored_upload({**envelope, "pad": ""}, ciphertext))
    at_bound = attacks.stored_upload({**envelope, "pad": "x" * padding}, ciphertext)
    assert len(at_bound) == MAX_UPLOAD_CHARS
    key = fed.public_key_of("c0")
    counter = fed.trust.check_upload(at_bound, client_id="c0", public_key=key, round_index=0)[0]
    assert counter == 1
    with pytest.raises(UploadRejected, match="oversized"):
        fed.trust.check_upload(at_bound + " ", client_id="c0", public_key=key, round_index=0)


def test_an_upload_sealed_for_another_configuration_is_rejected() -> None:
    """Same federation, same keys, another configuration hash: the binding refuses it."""
    fed = _federation()
    server = FederationServer(fed)
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    other = Trust(fed.trust.identity, "0" * 64, fed.trust.server_keys)
    text = other.seal_upload(fed._participant_key("c1"), 0, 1, _payload(fed, "c1"))
    fed.store.write_upload(0, "c1", text)
    report = server.step(force=True)
    assert report.contributors == ("c0",)
    assert "not signed by the enrolled key" in dict(report.rejected)["c1"]
    with pytest.raises(UploadRejected, match="not signed by the enrolled key"):
        fed.trust.open_upload_bytes(
            text, client_id="c1", public_key=fed.public_key_of("c1"), round_index=0
        )


def test_trust_refuses_server_keys_of_another_identity() -> None:
    fed = _federation()
    with pytest.raises(ValueError, match="do not belong"):
        Trust(fed.trust.identity, fed.config_hash, ServerKeys.generate())
    assert Trust(fed.trust.identity, fed.config_hash, fed.trust.server_keys).server_keys


def test_an_older_upload_of_the_same_round_is_a_replay(caplog) -> None:
    fed = _federation()
    server = FederationServer(fed)
    fed.upload("c1", _omega(1), n_observations=3, iteration=0)
    older = fed.store.read_uploads(0)["c1"]
    fed.upload("c1", _omega(2), n_observations=3, iteration=0)
    assert server.step() is None  # the server saw the newer upload of c1
    fed.store.write_upload(0, "c1", older)  # someone with the URL puts the older one back
    with caplog.at_level(logging.WARNING):
        assert server.step() is None
    assert "replayed" in _reasons(caplog)


def test_uploads_to_a_closed_or_future_round_never_count(caplog) -> None:
    fed = _federation()
    server = FederationServer(fed)
    # Forged uploads pre-seeded for future rounds (the attack that published 28 rounds with no
    # honest data): signed by nobody enrolled, they never count.
    for round_index in range(1, 4):
        fed.store.open_uploads(round_index)
        forger = ParticipantKey.generate(fed.federation_id, "c0", fed.fingerprint)
        for client in ("c0", "c1"):
            forged = fed.trust.seal_upload(forger, round_index, 1, _payload(fed, client, 1))
            fed.store.write_upload(round_index, client, forged)
    for i in range(2):
        fed.upload(f"c{i}", _omega(i), n_observations=3, iteration=0)
    assert server.step().round == 0
    with caplog.at_level(logging.WARNING):
        assert server.step() is None and server.step(force=True) is None
    assert "not signed by the enrolled key" in _reasons(caplog)
    assert fed.open_round() == 1


def test_a_missed_upload_is_reported_and_resent_to_the_next_round(caplog) -> None:
    # Round 0 is published with c0 alone: c1's upload misses it.
    fed = _federation(
        protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted", min_contributors=1)
    )
    server = FederationServer(fed, discard_uploads=False)
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    collect = server._collect

    def late_c1(round_index: int):  # noqa: ANN202
        result = collect(round_index)
        # c1 writes while the server closes the round: after its read, before the release.
        fed.upload("c1", _omega(1), n_observations=3, iteration=0)
        return result

    server._collect = late_c1
    assert server.step(force=True).contributors == ("c0",)
    server._collect = collect
    with caplog.at_level(logging.WARNING):
        assert fed.latest_broadcast().round == 0
    assert any("arrived after the server closed" in r.getMessage() for r in caplog.records)
    # Re-sent to round 1: the server finds it there.
    assert "c1" in fed.store.read_uploads(1)
    np.testing.assert_allclose(split_frame(fed.read_upload(1, "c1"))[0]["round"], 1)


def test_fedpne_node_means_are_sealed_too() -> None:
    fed = _federation(n_clients=2, protocol=FedPNEConfig(horizon=40))
    channel = fed.channel
    phase = channel.view().phase
    means = {node.key: 0.5 for node in phase.nodes}
    # Garbage written under c1's key does not pass for c1's upload (c1 still sends its own).
    fed.store.write_upload(0, "c1", json.dumps({"means": means}))
    assert not channel.has_uploaded("c1", phase.index)
    assert channel.upload("c0", phase, means) and channel.has_uploaded("c0", phase.index)
    stored = fed.store.read_uploads(0)["c0"]
    assert '"means"' not in stored and json.loads(fed.read_upload(0, "c0"))["means"] == means


# ------------------------------------------------------------------------ real processes
_SPY = """
import json, os, sys, time
from optuna_fedbo.federation.storages import resolve_storage
storage = resolve_storage(sys.argv[1])
seen, uploads, deadline = set(), set(), time.monotonic() + 150
while time.monotonic() < deadline:
    done = os.path.exists(sys.argv[2])
    for study in storage.get_all_studies():
        if not study.study_name.startswith(sys.argv[4]):  # this federation's studies only
            continue
        seen.update(str(v) for v in study.system_attrs.values())
        if study.study_name.startswith(sys.argv[4] + ":fedbo:uploads:"):  # (PostgreSQL holds
            # other tests' federations too: their uploads are not this test's ground truth)
            round_index = int(study.study_name.rsplit(":", 1)[1])
            uploads.update(
                (round_index, k[2:], v) for k, v in study.system_attrs.items() if k[:2] == "u:"
            )
        try:
            trials = storage.get_all_trials(study._study_id, deepcopy=False)
        except KeyError:  # an uploads study deleted meanwhile
            continue
        seen.update(str(v) for t in trials for v in t.system_attrs.values())
    if done:
        break
    time.sleep(0.02)
with open(sys.argv[3], "w") as f:
    json.dump({"n": len(seen), "uploads": sorted(uploads)}, f)
"""

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}
WORKER = Path(__file__).with_name("_federation_worker.py")


POSTGRES = os.environ.get("OPTUNA_FEDBO_TEST_POSTGRES_URL")


@pytest.mark.parametrize(
    "kind",
    [
        "sqlite",
        "journal",
        pytest.param(
            "postgresql",
            marks=pytest.mark.skipif(
                not POSTGRES, reason="set OPTUNA_FEDBO_TEST_POSTGRES_URL to run against PostgreSQL"
            ),
        ),
    ],
)
def test_a_spy_with_the_storage_url_recovers_no_vector(kind: str, tmp_path: Path) -> None:
    storage = {
        "sqlite": f"sqlite:///{tmp_path / 'fed.db'}",
        "journal": str(tmp_path / "f.log"),
        "postgresql": POSTGRES,
    }[kind]
    name = f"spy-{uuid.uuid4().hex[:8]}"
    Federation.create(
        name,
        search_space=SPACE,
        n_clients=3,
        storage=storage,
        protocol=FTSConfig(n_features=12, n_init=2, n_subregions=2),
        seed=1,
    )
    python = sys.executable
    server = subprocess.Popen(
        [python, "-m", "optuna_fedbo.federation.cli", "serve", "--storage", storage,
         "--name", name, "--poll-interval", "0.1", "--timeout", "120", "--max-rounds", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    assert "serving" in server.stdout.readline()  # participants start once a server runs
    spy = subprocess.Popen(
        [python, "-c", _SPY, storage, str(tmp_path / "done"), str(tmp_path / "spy.json"),
             name],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    workers = [
        subprocess.Popen(
            [python, str(WORKER), storage, name, f"site-{i}", "6", str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )  # fmt: skip
        for i in range(3)
    ]
    try:
        for worker in workers:
            out, err = worker.communicate(timeout=180)
            assert worker.returncode == 0, (out[-3000:], err[-3000:])
        server.communicate(timeout=120)
        (tmp_path / "done").touch()
        out, err = spy.communicate(timeout=120)
        assert spy.returncode == 0, err[-3000:]
    finally:
        for process in [*workers, server, spy]:
            if process.poll() is None:
                process.kill()
    seen = json.loads((tmp_path / "spy.json").read_text())["uploads"]
    assert len(seen) >= 6, seen  # it saw the uploads go by ...
    # ... and recovered nothing from any of them, while the server's key opens each one (the
    # ground truth: the vector the spy must not find).
    operator = Federation.load(name, storage)
    for round_index, client, text in seen:
        plaintext = operator.trust.open_upload_bytes(
            text, client_id=client, public_key=operator.public_key_of(client),
            round_index=round_index,
        )[1]  # fmt: skip
        tail = split_frame(plaintext)[1]  # (an upload naming a vector sent before has none)
        omega = np.frombuffer(tail, dtype="<f8")
        assert attacks.recover(text, attacks.secrets_of(omega)) == [], (round_index, client)
    p_value, ratio = attacks.randomness([attacks.ciphertext(text) for _, _, text in seen])
    assert p_value > 1e-6 and ratio > 0.98, (p_value, ratio)


def test_the_server_opens_only_an_upload_sent_after_one_of_the_rounds_openings() -> None:
    fed = _federation()
    fed.upload("c0", _omega(0), n_observations=3, iteration=0)
    stored = fed.store.read_uploads(0)["c0"]
    after = attacks.envelope(stored)[0]["after"]
    key = {"client_id": "c0", "public_key": fed.public_key_of("c0"), "round_index": 0}
    counter, plaintext = fed.trust.open_upload_bytes(stored, openings={after, "another"}, **key)
    assert counter == attacks.envelope(stored)[0]["counter"]
    assert split_frame(plaintext)[0]["client"] == "c0"
    with pytest.raises(UploadRejected, match="written before round 0 opened"):
        fed.trust.open_upload_bytes(stored, openings={"another"}, **key)


def test_an_uploads_receipt_is_the_digest_of_what_its_participant_signed() -> None:
    """Sealing and checking give one receipt without a pass over the stored text: a digest
    prefix of the signed binding and ciphertext digest. Another upload (counter, or the same
    one sealed again) has another; the same upload re-encoded keeps it."""
    fed = _federation()
    key, public = fed._participant_key("c0"), fed.public_key_of("c0")
    payload = _payload(fed, "c0")
    text, receipt = fed.trust.seal_upload_with_receipt(key, 0, 5, payload, "")

    def checked(stored: str) -> tuple:
        return fed.trust.check_upload(stored, client_id="c0", public_key=public, round_index=0)

    assert checked(text)[3] == receipt == attacks.receipt(fed.trust, text)
    assert len(receipt) == 32 and receipt != text_digest(text)[:32]
    opened = fed.trust.open_upload_with_receipt(
        text, client_id="c0", public_key=public, round_index=0
    )
    assert opened == (5, payload, receipt)
    others = {
        fed.trust.seal_upload_with_receipt(key, 0, 6, payload, "")[1],  # another counter
        fed.trust.seal_upload_with_receipt(key, 0, 5, payload, "")[1],  # sealed again
        fed.trust.seal_upload_with_receipt(key, 0, 5, payload, "after")[1],  # another opening
    }
    assert len(others) == 3 and receipt not in others
    respaced = attacks.stored_upload(*attacks.envelope(text), separators=(", ", ": "))
    assert respaced != text and checked(respaced)[3] == receipt


def test_a_participant_knows_its_receipt_without_hashing_its_stored_text(monkeypatch) -> None:
    """The receipt the participant checks broadcasts against is the one sealing gave."""
    fed = _federation()
    server = FederationServer(fed)
    hashed: list[int] = []
    real = hashlib.sha256

    def counted(data: bytes = b""):  # noqa: ANN202
        hashed.append(len(data))
        return real(data)

    monkeypatch.setattr(hashlib, "sha256", counted)
    receipt = fed.send_upload("c0", 0, _payload(fed, "c0"))
    stored = fed.store.read_uploads(0)["c0"]
    assert receipt == attacks.receipt(fed.trust, stored)
    assert len(stored) not in hashed  # the stored text is never hashed whole
    monkeypatch.undo()
    fed.upload("c1", _omega(1), n_observations=3, iteration=0)
    server.step(force=True)
    (broadcast,) = fed.store.broadcasts()
    assert receipt in broadcast.receipts


class _Unhashable(str):
    """A sealed upload that must never be hashed (a dictionary key): a pass over 0.4 MB."""

    __slots__ = ()

    def __hash__(self) -> int:
        raise AssertionError("a sealed upload was hashed")


def test_a_participant_recognises_its_own_upload_in_the_slot_without_hashing_it(
    monkeypatch,
) -> None:
    fed = _federation()
    real = Trust.seal_upload_with_receipt

    def unhashable(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        text, receipt = real(self, *args, **kwargs)
        return _Unhashable(text), receipt

    monkeypatch.setattr(Trust, "seal_upload_with_receipt", unhashable)
    for i in range(3):  # each finds the one before it in the slot, and replaces it
        fed.upload("c0", _omega(i), n_observations=3, iteration=0)
    stored = fed.store.read_uploads(0)["c0"]
    assert isinstance(stored, _Unhashable)  # what was compared is what was sealed
    monkeypatch.undo()
    opened = fed.trust.open_upload_bytes(
        str(stored), client_id="c0", public_key=fed.public_key_of("c0"), round_index=0
    )[1]
    assert split_frame(opened)[1] == _omega(2).astype("<f8").tobytes()


def test_seal_upload_seals_its_plaintext_bound_to_its_opening() -> None:
    fed = _federation()
    payload = _payload(fed, "c0")
    text = fed.trust.seal_upload(fed._participant_key("c0"), 0, 7, payload, "the opening")
    header, _ = attacks.envelope(text)
    assert (header["counter"], header["after"]) == (7, "the opening")
    key = {"client_id": "c0", "public_key": fed.public_key_of("c0"), "round_index": 0}
    assert fed.trust.open_upload_bytes(text, openings={"the opening"}, **key) == (7, payload)
