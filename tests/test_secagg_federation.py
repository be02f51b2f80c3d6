"""Secure aggregation in a federation: the server learns only the sum of the pooled statistics.

In-process: participants and the server share a storage (SQLite, or in-memory), the tests poll
the participants and step the server in turn (no background thread), and dropouts are injected
by no longer polling a participant from a given step on.
"""

from __future__ import annotations

from dataclasses import replace
import json
import logging
import time

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
import pytest

import optuna_fedbo as fb
from optuna_fedbo.core.pooling import block_sizes
from optuna_fedbo.core.pooling import choose_posterior
from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.pooling import PoolingChoice
from optuna_fedbo.core.pooling import select_posterior
from optuna_fedbo.core.pooling import unpack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secure_statistics import input_length
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationConfig
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.fts import secure
from optuna_fedbo.federation.fts.influence import bounded
from optuna_fedbo.federation.fts.secure import driver_of
from optuna_fedbo.federation.fts.secure import pooled_from_sum
from optuna_fedbo.federation.fts.secure import secure_input
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.secagg.relay import message_key
from optuna_fedbo.federation.secagg.relay import parse_key
from optuna_fedbo.federation.secagg.relay import parse_message
from optuna_fedbo.federation.secagg.relay import record_body
from optuna_fedbo.federation.secagg.relay import record_key
from optuna_fedbo.federation.secagg.relay import Relay
from optuna_fedbo.federation.secagg.relay import round_setup
from optuna_fedbo.federation.secagg.relay import verify_record

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
M = 6


@pytest.fixture(autouse=True)
def _propagate_optuna_logs(propagate):
    """caplog sees optuna-fedbo's records at every level (the ``propagate`` fixture)."""
    yield


def _statistics(features: RandomFourierFeatures, x: np.ndarray, y: np.ndarray):
    statistics = SufficientStatistics(features.n_features)
    statistics.add(features(x), y)
    return statistics


def _packed(fed: Federation, seed: int, n: int = 6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 2))
    y = np.sin(3 * x[:, 0]) + x[:, 1] ** 2 + seed + 0.01 * rng.standard_normal(n)
    return pack_blocks([_statistics(f, x, y) for f in fed.pooling_features()])


def _input(fed: Federation, packed: np.ndarray) -> np.ndarray:
    """A participant's input to the sum, decoded (the ring's sum of inputs decodes to the sum of
    these, exactly: the ring is sized so that it never wraps)."""
    config = fed.secure_aggregation
    ring = config.ring(fed.n_clients, input_length(M))
    return decode(secure_input(packed, M, config.max_observations, ring), ring)


def _federation(storage=None, n_clients: int = 4, **secagg) -> Federation:
    fed = Federation.create(
        "secure",
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=FTSConfig(n_features=M, n_init=2),
        secure_aggregation=fb.SecureAggregation(**{"step_timeout": 0.0, **secagg}),
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    driver_of(fed.channel).background = False
    return fed


class _Round:
    """Drives one round: participants poll (unless dropped at their step), the server steps."""

    def __init__(self, fed: Federation, server: FederationServer) -> None:
        self.fed, self.server = fed, server
        self.driver = driver_of(fed.channel)
        self.sums: list[np.ndarray] = []

    def upload(self, clients: list[str], n: int = 6) -> dict[str, np.ndarray]:
        inputs = {}
        for c in clients:
            packed = _packed(self.fed, seed=int(c[1:]), n=n)
            self.fed.upload(c, packed, n_observations=n, iteration=0)
            inputs[c] = _input(self.fed, packed)
        return inputs

    def run(self, *, drop_after: dict[str, int] | None = None, steps: int = 12):
        """Poll and step until a report; ``drop_after[c] = k``: ``c`` answers only its first
        ``k`` steps (1: keys only, 2: and shares, 3: and its masked input, ...)."""
        drop_after = drop_after or {}
        for _ in range(steps):
            for c, participant in self.driver._participants.items():
                sent = self._sent(c)
                if c not in drop_after or sent < drop_after[c]:
                    participant.poll()
            report = self.server.step()
            if report is not None:
                return report
        return None

    def _sent(self, client: str) -> int:
        entries = Relay(self.fed.store).entries(self.fed.open_round(), inputs=True)
        return sum(
            1
            for k in entries
            if k.startswith("secagg:") and k.endswith(f":{client}") and ":msg:" in k
        )


@pytest.fixture
def capture_sum(monkeypatch):
    sums: list[np.ndarray] = []

    def spy(values, n_features, round_index, step, slack, **kept):
        sums.append(np.array(values))
        return pooled_from_sum(values, n_features, round_index, step, slack, **kept)

    monkeypatch.setattr(secure, "pooled_from_sum", spy)
    return sums


def test_a_round_over_sqlite_publishes_the_posterior_of_the_plain_sum(tmp_path, capture_sum):
    fed = _federation(f"sqlite:///{tmp_path / 'f.db'}")
    server = FederationServer(fed)
    driven = _Round(fed, server)
    inputs = driven.upload([f"c{i}" for i in range(4)])
    report = driven.run()
    assert report is not None and report.published and report.n_contributors == 4
    assert report.n_recovered == 0
    plain = sum(inputs.values())
    step = fed.secure_aggregation.step
    (summed,) = capture_sum
    assert np.max(np.abs(summed - plain)) <= 4 * step / 2 + 1e-9
    broadcast = fed.latest_broadcast()
    expected, block = pooled_from_sum(plain, M, 0, step)
    assert broadcast.round == 0 and broadcast.feature_block == block
    np.testing.assert_allclose(broadcast.vectors, expected, atol=1e-4)
    assert broadcast.n_contributors == 4
    # The round's entries and masked inputs are discarded with its uploads once it is published.
    names = [s.study_name for s in fed.storage.get_all_studies()]
    assert not [n for n in names if ":fedbo:uploads:000000" in n]


def test_read_upload_raises_there_is_no_single_upload() -> None:
    fed = _federation()
    FederationServer(fed)
    _Round(fed, None).upload(["c0"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no single upload to read"):
        fed.read_upload(0, "c0")


def _masked(fed: Federation, round_index: int) -> dict[str, np.ndarray]:
    """What a spy with the server's private keys and the storage reads: each masked input."""
    entries = Relay(fed.store).entries(round_index, inputs=True)
    found = {}
    for key, text in entries.items():
        parsed = parse_key(key)
        if parsed is None or parsed[1] != "msg:masked":
            continue
        client = parsed[2]
        _, plaintext = fed.trust.open_upload_bytes(
            text, client_id=client, public_key=fed.public_key_of(client), round_index=round_index
        )
        found[client] = parse_message(plaintext, parsed[0], "masked", client).masked
    return found


def _uniform_p_value(elements: np.ndarray, bits: int) -> float:
    """Chi-square p-value of the top 4 bits of ring elements against the uniform distribution."""
    from scipy.stats import chisquare

    bins = np.bincount((elements >> np.uint64(bits - 4)).astype(int), minlength=16)
    return float(chisquare(bins).pvalue)


def test_a_spy_with_the_server_keys_and_the_storage_sees_uniform_masked_uploads() -> None:
    fed = _federation()
    server = FederationServer(fed, discard_uploads=False)
    driven = _Round(fed, server)
    clients = [f"c{i}" for i in range(4)]
    bits = fed.secure_aggregation.ring(4, fed.fts.upload_length).bits
    p_values, plain_p_values = [], []
    for round_index in range(3):  # three rounds: fresh masks each time
        inputs = driven.upload(clients)
        report = driven.run()
        assert report is not None and report.published and report.round == round_index
        masked = _masked(fed, round_index)
        assert sorted(masked) == clients
        for client in clients:
            p_values.append(_uniform_p_value(masked[client], bits))
            encoded = encode(inputs[client], fed.secure_aggregation.ring(4, len(inputs[client])))
            plain_p_values.append(_uniform_p_value(encoded, bits))
    # 12 masked vectors of 21,000+ elements each: uniform (a Bonferroni bound at 1e-3 overall).
    assert min(p_values) > 1e-3 / len(p_values)
    # The same test tells the unmasked inputs apart at once: it has the power to see them.
    assert max(plain_p_values) < 1e-12


@pytest.mark.parametrize(
    ("answered", "survivors", "recovered"),
    [(1, 3, 0), (2, 3, 1), (3, 4, 0)],
    ids=["after-keys", "after-shares", "after-masked-input"],
)
def test_a_dropout_at_each_step_still_publishes_the_right_sum(
    capture_sum, answered, survivors, recovered
) -> None:
    fed = _federation()
    server = FederationServer(fed)
    driven = _Round(fed, server)
    inputs = driven.upload([f"c{i}" for i in range(4)])
    report = driven.run(drop_after={"c3": answered})
    assert report is not None and report.published
    assert report.n_contributors == survivors and report.n_recovered == recovered
    counted = [f"c{i}" for i in range(survivors)]
    plain = sum(inputs[c] for c in counted)
    step = fed.secure_aggregation.step
    assert np.max(np.abs(capture_sum[0] - plain)) <= len(counted) * step / 2 + 1e-9


def test_fewer_than_t_survivors_publish_nothing_and_say_so(caplog) -> None:
    fed = _federation()
    server = FederationServer(fed)
    driven = _Round(fed, server)
    driven.upload([f"c{i}" for i in range(4)])
    with caplog.at_level(logging.WARNING):
        report = driven.run(drop_after={"c2": 1, "c3": 1})
    assert report is not None and not report.published and report.reason == "secagg-failed"
    assert "only 2 participants shared keys (at least 3 needed)" in caplog.text
    assert "nothing is published" in caplog.text
    assert fed.latest_broadcast() is None
    status = fed.status()
    assert status.secure_aggregation["step"] == "failed"
    assert "round 0 attempt 0: failed (secure aggregation round 0 failed at step" in (
        status.format()
    )
    assert driven.run(drop_after={"c2": 1, "c3": 1}) is None  # the next attempt waits for t
    assert fed.latest_broadcast() is None and fed.open_round() == 0


# ----------------------------------------------------------------------- forged messages
def _coordinator(server: FederationServer):
    return server._secure.coordinator  # type: ignore[attr-defined]


def _advance_to(driven: _Round, step: str, polls: int = 10) -> None:
    """Poll and step until the server's attempt collects ``step`` (participants not yet)."""
    for _ in range(polls):
        driven.server.step()
        attempt = _coordinator(driven.server).attempt
        if attempt is not None and attempt.server.step == step:
            return
        for participant in driven.driver._participants.values():
            participant.poll()
    raise AssertionError(f"never reached step {step!r}")


def test_a_forged_message_is_refused_and_the_round_goes_on_without_it() -> None:
    fed = _federation()
    server = FederationServer(fed, round_timeout=0.0)
    driven = _Round(fed, server)
    driven.upload([f"c{i}" for i in range(4)])
    _advance_to(driven, "keys")
    for participant in driven.driver._participants.values():
        participant.poll()  # everyone advertises keys
    # Someone with the storage but not c1's key writes a message in c1's name.
    impostor = ParticipantKey.generate(fed.federation_id, "c1", fed.fingerprint)
    own = Relay(fed.store).entries(0, inputs=True)[message_key(0, "keys", "c1")]
    _, plaintext = fed.trust.open_upload_bytes(
        own, client_id="c1", public_key=fed.public_key_of("c1"), round_index=0
    )
    forged = fed.trust.seal_upload(impostor, 0, time.time_ns(), plaintext, "")
    Relay(fed.store).write(0, message_key(0, "keys", "c1"), forged)
    report = driven.run()
    assert report is not None and report.published and report.n_contributors == 3
    assert report.contributors == ("c0", "c2", "c3")
    assert "not signed by the enrolled key" in dict(report.rejected)["c1"]


def test_a_message_copied_from_another_round_is_refused() -> None:
    fed = _federation()
    server = FederationServer(fed, round_timeout=0.0, discard_uploads=False)
    driven = _Round(fed, server)
    clients = [f"c{i}" for i in range(4)]
    driven.upload(clients)
    assert driven.run().round == 0
    old = Relay(fed.store).entries(0, inputs=True)[message_key(0, "keys", "c0")]
    driven.upload(clients[1:])  # c0 sends nothing to round 1; a copy of its round-0 keys does
    _advance_to(driven, "keys")
    Relay(fed.store).write(1, message_key(0, "keys", "c0"), old)
    report = driven.run()
    assert report is not None and report.round == 1 and report.contributors == ("c1", "c2", "c3")
    assert "sent for round 0, found in round 1 (a copy)" in dict(report.rejected)["c0"]


def test_a_message_replayed_into_a_later_attempt_is_refused(caplog) -> None:
    fed = _federation()
    server = FederationServer(fed, round_timeout=0.0)
    driven = _Round(fed, server)
    driven.upload([f"c{i}" for i in range(4)])
    report = driven.run(drop_after={"c2": 1, "c3": 1})  # attempt 0 fails
    assert report is not None and not report.published
    old = Relay(fed.store).entries(0, inputs=True)[message_key(0, "keys", "c3")]
    server.step()  # attempt 1's setup
    Relay(fed.store).write(0, message_key(1, "keys", "c3"), old)
    with caplog.at_level(logging.WARNING):
        server.step()
    assert "a message of attempt 0 step 'keys' found under attempt 1" in caplog.text
    attempt = _coordinator(server).attempt
    assert attempt.attempt == 1 and "c3" in attempt.server.missing()


# ------------------------------------------------------------------- a malicious server
def _sign_record(fed: Federation, kind: str, round_index: int, attempt: int, content) -> str:
    return fed.trust.sign(f"secagg-{kind}", record_body(round_index, attempt, content))


def test_participants_refuse_a_setup_with_a_lower_threshold(caplog) -> None:
    fed = _federation()
    FederationServer(fed)
    driven = _Round(fed, None)  # type: ignore[arg-type]
    driven.upload([f"c{i}" for i in range(4)])
    honest = round_setup(fed, 0, 0, ("c0", "c1", "c2"))
    lowered = replace(honest, threshold=2)
    text = _sign_record(fed, "setup", 0, 0, {"setup": lowered.to_dict()})
    Relay(fed.store).write(0, record_key(0, "setup"), text)
    with caplog.at_level(logging.WARNING):
        for participant in driven.driver._participants.values():
            participant.poll()
    assert "the round's setup differs from the one the configuration gives" in caplog.text
    assert not [k for k in Relay(fed.store).entries(0, inputs=True) if ":msg:" in k]


def test_participants_refuse_to_reveal_both_shares_of_one_peer(caplog) -> None:
    fed = _federation()
    server = FederationServer(fed)
    driven = _Round(fed, server)
    driven.upload([f"c{i}" for i in range(4)])
    _advance_to(driven, "unmask")
    relay = Relay(fed.store)
    honest = verify_record(fed.trust, "unmask", relay.entries(0)[record_key(0, "unmask")], 0, 0)
    request = dict(honest["message"], dropped=["c3"])  # c3 survived: both its shares wanted
    relay.write(
        0, record_key(0, "unmask"), _sign_record(fed, "unmask", 0, 0, {"message": request})
    )
    with caplog.at_level(logging.WARNING):
        for participant in driven.driver._participants.values():
            participant.poll()
    assert "asks for both shares of ['c3']: refused" in caplog.text
    assert not [k for k in relay.entries(0, inputs=True) if ":msg:unmask:" in k]


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("n_clients", "protocol", "secagg", "message"),
    [
        (4, {}, {"threshold": 2}, "threshold 2 is not above N/2 = 2: use at least 3"),
        (4, {}, {"threshold": 5}, "threshold 5 exceeds the 4 participants"),
        (2, {}, {}, "at least 3 participants, got n_clients=2"),
        (4, {}, {"max_observations": 10**9, "step": 1e-12}, "would wrap the ring"),
        (4, {"aggregation": "weighted"}, {}, "sums the pooled statistics of the default"),
        (4, {}, {"degree": 4}, "degree 4 must be below N = 4"),
    ],
)
def test_creation_with_bad_secure_aggregation_fails_clearly_and_writes_nothing(
    n_clients, protocol, secagg, message
) -> None:
    storage = optuna.storages.InMemoryStorage()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Federation.create(
            "bad",
            search_space=SPACE,
            n_clients=n_clients,
            storage=storage,
            protocol=FTSConfig(n_features=M, **protocol),
            secure_aggregation=fb.SecureAggregation(**secagg),
        )
    assert storage.get_all_studies() == []


def test_the_threshold_is_stored_resolved_and_the_configuration_round_trips() -> None:
    fed = _federation()
    assert fed.secure_aggregation.threshold == 3
    loaded = Federation.load("secure", fed.storage)
    assert loaded.secure_aggregation == fed.secure_aggregation
    assert loaded.config_hash == fed.config_hash


def test_the_server_waits_for_t_enrolled_participants(caplog) -> None:
    fed = Federation.create(
        "few",
        search_space=SPACE,
        n_clients=4,
        protocol=FTSConfig(n_features=M, n_init=2),
        secure_aggregation=fb.SecureAggregation(),
    )
    for c in ("c0", "c1"):
        fed.join(c)
    server = FederationServer(fed)
    with caplog.at_level(logging.INFO, logger="optuna_fedbo"):
        assert server.step(force=True) is None
    assert "round 0 waits for 3 enrolled participants" in caplog.text
    assert fed.status().secure_aggregation["step"] == "setup"


def test_a_participant_enrolled_after_the_attempt_began_waits_for_the_next(caplog) -> None:
    fed = Federation.create(
        "late",
        search_space=SPACE,
        n_clients=4,
        protocol=FTSConfig(n_features=M, n_init=2),
        secure_aggregation=fb.SecureAggregation(step_timeout=0.0),
    )
    for c in ("c0", "c1", "c2"):
        fed.join(c)
    driver_of(fed.channel).background = False
    server = FederationServer(fed, round_timeout=0.0)
    driven = _Round(fed, server)
    server.step()  # the setup names c0, c1, c2
    fed.join("c3")
    with caplog.at_level(logging.INFO, logger="optuna_fedbo"):
        driven.upload([f"c{i}" for i in range(4)])
    assert "c3: not among the participants of round 0 attempt 0" in caplog.text
    report = driven.run()
    assert report is not None and report.contributors == ("c0", "c1", "c2")


def test_status_shows_the_step_and_who_is_missing() -> None:
    fed = _federation()
    server = FederationServer(fed)
    driven = _Round(fed, server)
    driven.upload([f"c{i}" for i in range(4)])
    _advance_to(driven, "shares")
    for c in ("c0", "c2"):
        driven.driver._participants[c].poll()
    status = fed.status()
    assert status.secure_aggregation == {
        "round": 0,
        "attempt": 0,
        "step": "shares",
        "missing": ["c1", "c3"],
        "answered": ["c0", "c2"],
        "taking_part": ["c0", "c1", "c2", "c3"],
        "failed": None,
    }
    assert status.uploaded == ("c0", "c1", "c2", "c3") and status.missing == ()
    assert "round 0 attempt 0: sharing keys; 2 answered, missing c1, c3" in status.format()
    assert status.to_dict()["secure_aggregation"]["step"] == "shares"


def test_the_cli_creates_a_federation_with_secure_aggregation(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    space = json.dumps({"x": json.loads(optuna.distributions.distribution_to_json(SPACE["x"]))})
    common = ["--storage", url, "--search-space", space, "--n-clients", "5"]
    assert cli_main(["create", "--name", "a", *common, "--secure-aggregation"]) == 0
    assert "secure aggregation: threshold 3 of 5, every pair" in capsys.readouterr().out
    assert Federation.load("a", url).secure_aggregation.threshold == 3
    options = '{"threshold": 4, "degree": 2}'
    assert cli_main(["create", "--name", "b", *common, "--secure-aggregation", options]) == 0
    assert Federation.load("b", url).secure_aggregation.degree == 2
    assert (
        cli_main(["create", "--name", "c", *common, "--secure-aggregation", '{"threshold": 2}'])
        == 2
    )
    assert "not above N/2" in capsys.readouterr().err


def test_simulate_runs_the_default_sampler_under_secure_aggregation() -> None:
    def objective(i: int):
        def f(trial: optuna.Trial) -> float:
            x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
            return -((x - 0.3) ** 2 + (y - 0.7) ** 2) + 0.01 * i

        return f

    result = fb.simulate(
        [objective(i) for i in range(3)],
        search_space=SPACE,
        n_rounds=2,
        protocol=FTSConfig(n_features=M, n_init=2),
        progress=False,
        secure_aggregation=fb.SecureAggregation(),
    )
    assert [(r.round, r.n_contributors, r.published) for r in result.reports] == [
        (0, 3, True),
        (1, 3, True),
    ]
    modes = [t.system_attrs.get("fedbo:mode") for t in result.studies[0].trials]
    assert modes[:2] == ["init", "init"] and set(modes[2:]) <= {"transfer", "own"}


def test_participants_whose_masked_input_was_never_summed_rejoin_the_next_attempt(
    caplog,
) -> None:
    fed = _federation()
    server = FederationServer(fed)
    driven = _Round(fed, server)
    driven.upload([f"c{i}" for i in range(4)])
    with caplog.at_level(logging.WARNING):
        report = driven.run(drop_after={"c2": 3, "c3": 3})  # 2 of 4 sign the survivor list
    assert report is not None and not report.published
    assert "only 2 participants signed the survivor list" in caplog.text
    server.step()  # attempt 1's setup
    for c in ("c0", "c1"):
        driven.driver._participants[c].poll()
    status = fed.status().secure_aggregation
    assert status["attempt"] == 1 and status["taking_part"] == ["c0", "c1"]


def test_a_restarted_server_starts_the_round_over_and_publishes_it(capture_sum) -> None:
    fed = _federation()
    first = FederationServer(fed)
    driven = _Round(fed, first)
    inputs = driven.upload([f"c{i}" for i in range(4)])
    _advance_to(driven, "consistency")  # masked inputs are in; then the server is replaced
    driven.server = FederationServer(fed)
    assert driven.server.step() is None
    assert _coordinator(driven.server).attempt.attempt == 1  # never attempt 0 again
    report = driven.run()
    assert report is not None and report.published and report.n_contributors == 4
    plain = sum(inputs.values())
    assert np.max(np.abs(capture_sum[0] - plain)) <= 4 * fed.secure_aggregation.step / 2 + 1e-9


def test_a_round_without_an_uploads_study_has_no_entries_and_refuses_writes() -> None:
    fed = _federation()
    relay = Relay(fed.store)
    assert relay.entries(7) == {} and relay.entries(7, inputs=True) == {}
    with pytest.raises(KeyError):
        relay.write(7, message_key(0, "keys", "c0"), "x")


def test_asynchronous_participants_answer_in_the_background() -> None:
    # No explicit polls: each participant's driver thread answers the steps between uploads.
    fed = _federation(step_timeout=60.0)  # every step closes complete
    driver_of(fed.channel).background = True
    driver_of(fed.channel).interval = 0.01
    server = FederationServer(fed)
    inputs = _Round(fed, server).upload([f"c{i}" for i in range(4)])
    assert len(inputs) == 4
    report, deadline = None, time.monotonic() + 120
    while report is None and time.monotonic() < deadline:
        report = server.step()
        time.sleep(0.01)
    assert report is not None and report.published and report.n_contributors == 4
    driver = driver_of(fed.channel)
    while driver._thread is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert driver._thread is None  # nothing left to do: the thread ended


def test_a_participant_sending_values_outside_its_bound_gets_nothing_published(
    monkeypatch, caplog
) -> None:
    # c0 bypasses its own encoding and sends arbitrary ring elements (a malicious participant
    # can: the server cannot see one input). The sum is then not statistics any observations
    # give: the round publishes nothing and says so.
    fed = _federation()
    server = FederationServer(fed)
    driven = _Round(fed, server)
    honest = secure.secure_input
    rng = np.random.default_rng(0)
    calls = []

    def secure_input(omega, n_features, cap, ring):
        calls.append(len(omega))
        if len(calls) == 1:  # the first to upload: c0
            return rng.integers(0, 2**ring.bits, size=ring.dimension, dtype=np.uint64)
        return honest(omega, n_features, cap, ring)

    monkeypatch.setattr(secure, "secure_input", secure_input)
    driven.upload([f"c{i}" for i in range(4)])
    with caplog.at_level(logging.WARNING):
        report = driven.run()
    assert len(calls) == 4  # each participant's upload
    assert report is not None and not report.published and report.reason == "secagg-invalid"
    assert "is not statistics that observations on these features give" in caplog.text
    assert fed.latest_broadcast() is None


def test_a_version_without_secure_aggregation_refuses_such_a_federation() -> None:
    fed = _federation()
    record = json.loads(fed.config.to_json())
    assert record["format"] == 3 and record["secure_aggregation"]["threshold"] == 3
    # A version that knows only format 2 refuses format 3; this one refuses a mismatch.
    with pytest.raises(ValueError, match="Unsupported federation configuration format 2"):
        FederationConfig.from_json(json.dumps({**record, "format": 2}))
    plain = {k: v for k, v in record.items() if k != "secure_aggregation"}
    with pytest.raises(ValueError, match="Unsupported federation configuration format 3"):
        FederationConfig.from_json(json.dumps(plain))
    assert (
        FederationConfig.from_json(json.dumps({**plain, "format": 2})).secure_aggregation is None
    )


def test_the_sum_is_pooled_as_everyones_values_standardized_together() -> None:
    """The server standardizes the summed statistics by everyone's pooled mean and spread, as
    if it held all the values (the sums with values are exact), whatever each site's level."""
    fed = _federation()
    packed = [_packed(fed, seed=i, n=6 + i) for i in range(4)]  # levels 0, 1, 2, 3
    step = fed.secure_aggregation.step
    vectors, block = pooled_from_sum(sum(_input(fed, p) for p in packed), M, 0, step)
    everyone = unpack_blocks(sum(packed), M)
    expected_block, mean = select_posterior([everyone], offset_scales=(0.0,))
    assert block == expected_block
    expected = bounded(mean[None, :], block_sizes(M)[block], 0)
    np.testing.assert_allclose(vectors, expected, atol=20 * step)  # the Gram at the step
    # Each site's own statistics differ from the pooled values' standardization.
    alone = select_posterior([unpack_blocks(packed[3], M)], offset_scales=(0.0,))[1]
    assert not np.allclose(alone, mean, atol=1e-2)


def test_the_server_keeps_its_pooling_choice_as_the_plain_server_does(monkeypatch) -> None:
    """Block and noise are chosen again only once the same contributors' summed count has grown
    by 10% since the choice (the plain server's rule); in between, the kept choice's posterior
    is published."""
    calls: list[tuple[float, PoolingChoice | None, PoolingChoice]] = []

    def spy(participants, keep=None, **options):  # noqa: ANN001, ANN003, ANN202
        choice, mean = choose_posterior(participants, keep=keep, **options)
        calls.append((float(participants[0][0].count), keep, choice))
        return choice, mean

    monkeypatch.setattr("optuna_fedbo.core.pooling.choose_posterior", spy)
    fed = _federation()
    driven = _Round(fed, FederationServer(fed))
    everyone = [f"c{i}" for i in range(4)]
    for n, drop_after in ((6, None), (6, None), (7, None), (7, {"c3": 1})):
        driven.upload(everyone, n=n)
        report = driven.run(drop_after=drop_after)
        assert report is not None and report.published
    (first, _, chosen), (second, kept, again), (third, fresh, _), (fourth, other, _) = calls
    assert first == second == 24 and third == 28 and fourth == 21
    # Round 1: the same four at the same count, the choice kept; round 2: 28 >= 1.1 * 24,
    # chosen anew; round 3: c3 dropped out, other contributors, chosen anew.
    assert kept == chosen == again and fresh is None and other is None
    broadcast = fed.latest_broadcast()
    assert broadcast is not None and broadcast.n_contributors == 3


def test_an_input_whose_sum_was_unmasked_is_never_masked_again(capture_sum, caplog) -> None:
    """A server that unmasks an attempt's sum and then starts the round over (a deviating
    server, or one restarted before it published) gets no second sum of the same inputs: the
    participants that answered the unmask request sit out until they have new inputs."""
    fed = _federation()
    driven = _Round(fed, FederationServer(fed))
    driven.upload([f"c{i}" for i in range(4)])
    _advance_to(driven, "unmask")
    for participant in driven.driver._participants.values():
        participant.poll()  # every survivor answers the unmask request: the sum can be had
    driven.server = FederationServer(fed)  # and the round starts over instead of publishing
    with caplog.at_level(logging.WARNING):
        assert driven.run() is None
    assert _coordinator(driven.server).attempt.attempt == 1
    assert fed.status().secure_aggregation["taking_part"] == []
    assert "its input is never masked again" in caplog.text
    assert capture_sum == []
    driven.upload([f"c{i}" for i in range(4)], n=7)  # their next inputs take part
    report = driven.run()
    assert report is not None and report.published and report.n_contributors == 4
    assert len(capture_sum) == 1
