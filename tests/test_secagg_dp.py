"""DP-FTS / DP-FTS-DE under secure aggregation: Skellam noise in shares, accounted before release.

In-process: the participants and the server share an in-memory storage, the tests poll the
participants and step the server in turn, and dropouts are injected by no longer polling a
participant from a given step on. Noise is drawn from OS entropy except where a test opts in to
a seeded generator explicitly (``private_input(..., rng=...)``).
"""

from __future__ import annotations

import json
import math

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
import pytest

import optuna_fedbo as fb
from optuna_fedbo.core.secagg import distributed_dp as core_dp
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import ring_add
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationNotFoundError
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.fts import secure_dp
from optuna_fedbo.federation.fts.secure import driver_of
from optuna_fedbo.federation.secagg.distributed_dp import DistributedDPConfig
from optuna_fedbo.federation.secagg.relay import parse_key
from optuna_fedbo.federation.secagg.relay import Relay
from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.privacy._skellam import SKELLAM_ORDERS
from optuna_fedbo.privacy._skellam import skellam_rdp

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
M, P, S = 6, 2, 5.0


def _dp(**changes) -> fb.DPConfig:
    fields = {"noise_multiplier": 1.0, "sample_rate": 1.0, "clip_norm": S, "accountant": "rdp"}
    return fb.DPConfig(**{**fields, **changes})


def _federation(n_clients: int = 4, storage=None, name: str = "sdp", **dp) -> Federation:
    fed = Federation.create(
        name,
        search_space=SPACE,
        n_clients=n_clients,
        storage=storage,
        protocol=FTSConfig(n_features=M, n_init=2, n_subregions=P),
        privacy=_dp(**dp),
        secure_aggregation=fb.SecureAggregation(step_timeout=0.0),
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    driver_of(fed.channel).background = False
    return fed


def _omegas(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"c{i}": 2.0 * rng.standard_normal(M) for i in range(n)}


def _run(fed: Federation, server: FederationServer, omegas, drop_after=None, steps: int = 12):
    """Upload ``omegas`` and poll/step until a report; ``drop_after[c] = k``: ``c`` sends only
    its first ``k`` protocol messages (1: keys only, 2: and shares, ...)."""
    round_index = fed.open_round()
    for client, omega in omegas.items():
        fed.upload(client, omega, n_observations=3, iteration=round_index)
    driver, drop_after = driver_of(fed.channel), drop_after or {}
    for _ in range(steps):
        for client, participant in driver._participants.items():
            if client not in drop_after or _sent(fed, client) < drop_after[client]:
                participant.poll()
        report = server.step()
        if report is not None:
            return report
    return None


def _sent(fed: Federation, client: str) -> int:
    entries = Relay(fed.store).entries(fed.open_round(), inputs=True)
    return sum(1 for k in entries if k.endswith(f":{client}") and ":msg:" in k)


def _expected_mean(fed: Federation, omegas, survivors, round_index: int = 0) -> np.ndarray:
    """The weighted mean over the survivors of the clipped omegas, per sub-region."""
    weights = secure_dp.round_weights(fed, round_index)
    out = np.zeros((P, M))
    for client in survivors:
        n = fed.index_of(client)
        norm = np.linalg.norm(omegas[client])
        clipped = omegas[client] * min(1.0, S / math.sqrt(P) / norm)
        out += weights[:, n, None] * clipped[None, :]
    mass = weights[:, [fed.index_of(c) for c in survivors]].sum(axis=1)
    return out / mass[:, None]


# --------------------------------------------------------------------------- the noise
@pytest.mark.parametrize("n_survivors", [5, 3])
def test_the_unmasked_noisy_sum_carries_the_mechanisms_noise(n_survivors: int) -> None:
    """Over 400 rounds with a seeded test generator: the released sub-region vectors are the
    survivors' weighted mean with noise of variance ``s V / t`` (in units), i.e. exactly the
    central mechanism's ``V`` when ``s = t`` survive, standardized to 1."""
    fed = _federation(n_clients=5)
    mechanism = fed.privacy.mechanism()
    assert mechanism.threshold == 3
    ring = mechanism.ring()
    omegas = _omegas(5, seed=1)
    survivors = tuple(f"c{i}" for i in range(n_survivors))
    expected = _expected_mean(fed, omegas, survivors)
    weights = secure_dp.round_weights(fed, 0)
    mass = weights[:, [fed.index_of(c) for c in survivors]].sum(axis=1)
    scale = float(weights.max()) / mass  # the release's factor per sub-region
    # D2 = S / step + sqrt(P M) / 2 integer units; the sum of s shares has variance (s/t) (z D2)^2.
    l2 = S / mechanism.step + math.sqrt(P * M) / 2
    unit_std = math.sqrt(n_survivors / 3) * 1.0 * l2 * mechanism.step
    rng = np.random.default_rng(12345)  # opted in: tests only
    residuals = []
    for _ in range(400):
        total = np.zeros(mechanism.dimension, dtype=np.uint64)
        for client in survivors:
            elements = secure_dp.private_input(fed, client, omegas[client], 0, rng=rng)
            total = ring_add(total, elements, ring)
        vectors, noise_std, _ = secure_dp.release(fed, decode(total, ring), survivors, 0)
        residuals.append((vectors - expected) / (unit_std * scale[:, None]))
        assert noise_std == pytest.approx(
            math.sqrt(mechanism.central_variance) * mechanism.step * scale.max()
        )
    z = np.concatenate([r.ravel() for r in residuals])  # 4,800 standardized draws
    assert abs(z.mean()) < 0.08  # 5.5 standard errors
    assert abs(z.var() - 1.0) < 0.1  # 4.9 standard errors; one noise share missing: -0.2+
    if n_survivors == 3:  # t survivors: the central mechanism's noise, z S phi_max / mass
        assert unit_std == pytest.approx(mechanism.noise_multiplier * S, rel=1e-5)


def test_a_participants_weighted_input_is_bounded_by_the_clip_norm() -> None:
    fed = _federation()
    weights = secure_dp.round_weights(fed, 0)
    for scale in (1e-3, 1.0, 1e6):
        joint = secure_dp.weighted_input(np.full(M, scale), weights, 1, S)
        assert np.linalg.norm(joint) <= S * (1 + 1e-12)
    # At the bound: the agent of largest weight sends its clipped vector at full norm there.
    index = int(np.argmax(weights.max(axis=0)))
    joint = secure_dp.weighted_input(np.full(M, 1e6), weights, index, S)
    assert np.linalg.norm(joint) > S / math.sqrt(P) * (1 - 1e-9)


def test_participants_draw_their_noise_from_os_entropy(monkeypatch) -> None:
    fed = _federation()
    calls = []

    def spy():
        calls.append(1)
        return np.random.default_rng()

    monkeypatch.setattr(core_dp, "secure_rng", spy)
    for client, omega in _omegas(4).items():
        fed.upload(client, omega, n_observations=3, iteration=0)
    assert len(calls) == 4  # one noise draw per upload, each from the OS entropy source


# ------------------------------------------------------------------------- accounting
def test_the_ledger_spends_dp_accountings_epsilon_of_the_skellam_bound() -> None:
    from dp_accounting import dp_event
    from dp_accounting import rdp

    fed = _federation()
    server = FederationServer(fed)
    for round_index in range(2):
        report = _run(fed, server, _omegas(4, seed=round_index))
        assert report is not None and report.published
    entries = fed.privacy_ledger().entries()
    assert [e.accountant for e in entries] == ["skellam-rdp"] * 2
    assert {(e.sampling, e.sample_rate) for e in entries} == {("none", 1.0)}
    assert fed.privacy_ledger().summary()["mechanism"] == "distributed_skellam"
    assert fed.privacy_ledger().summary()["neighbouring_relation"] == "zero-out"
    assert "distributed skellam: z " in fed.status().format()
    assert ", no subsampling (zero-out)" in fed.status().format()
    mechanism = fed.privacy.mechanism()
    per_round = skellam_rdp(
        SKELLAM_ORDERS,
        mechanism.central_variance,
        mechanism.l1_sensitivity,
        mechanism.l2_sensitivity,
    )
    expected, _ = rdp.rdp_privacy_accountant.compute_epsilon(
        [float(a) for a in SKELLAM_ORDERS], [float(2 * r) for r in per_round], 1e-5
    )
    assert entries[-1].epsilon == pytest.approx(expected, rel=1e-12)
    assert fed.privacy_spent() == (pytest.approx(expected, rel=1e-12), 1e-5)
    # At this step the Skellam bound is the Gaussian mechanism's epsilon for z = 1 within 0.1%
    # (no subsampling), never below it.
    gaussian = rdp.RdpAccountant([float(a) for a in SKELLAM_ORDERS])
    gaussian.compose(dp_event.GaussianDpEvent(float(mechanism.noise_multiplier)), 2)
    assert expected >= gaussian.get_epsilon(1e-5)
    assert expected <= 1.001 * gaussian.get_epsilon(1e-5)


def test_privacy_is_spent_before_the_sum_is_published(monkeypatch) -> None:
    """A crash between accounting and staging: the ledger holds the round, nothing is published;
    the restarted server publishes that very accounted payload and spends nothing more."""
    fed = _federation()
    server = FederationServer(fed)

    def crash(*args, **kwargs):
        raise RuntimeError("crash between accounting and publishing")

    monkeypatch.setattr(server._store, "stage_broadcast", crash)
    with pytest.raises(RuntimeError, match="crash between"):
        _run(fed, server, _omegas(4))
    assert fed.latest_broadcast() is None
    (entry,) = fed.privacy_ledger().entries()
    spent = fed.privacy_spent()[0]
    assert entry.round == 0 and spent == entry.epsilon > 0
    monkeypatch.undo()
    restarted = FederationServer(fed)
    assert restarted.open_round == 1 or restarted.step() is not None
    broadcast = fed.latest_broadcast()
    assert broadcast is not None and broadcast.round == 0
    (stored,) = [b for b in fed.store.broadcasts() if b.state == TrialState.COMPLETE]
    assert text_digest(stored.payload) == entry.payload  # the accounted payload, no other
    assert fed.privacy_spent()[0] == spent and len(fed.privacy_ledger().entries()) == 1


def test_a_round_with_fewer_than_t_survivors_publishes_nothing_and_spends_nothing(
    monkeypatch,
) -> None:
    fed = _federation()
    server = FederationServer(fed)
    draws = []
    monkeypatch.setattr(core_dp, "secure_rng", lambda: draws.append(1) or np.random.default_rng())
    report = _run(fed, server, _omegas(4), drop_after={"c2": 2, "c3": 2})
    assert report is not None and not report.published and report.reason == "secagg-failed"
    assert fed.latest_broadcast() is None
    assert fed.privacy_ledger().entries() == [] and fed.privacy_spent()[0] == 0.0
    # The next attempt, everyone present, is the one released and accounted.
    report = _run(fed, server, {})
    assert report is not None and report.published and report.round == 0
    assert len(fed.privacy_ledger().entries()) == 1
    # c0 and c1 masked in the failed attempt too: they cannot tell whether their masked inputs
    # were unmasked, so they count it, and mask their inputs again with fresh noise (c2 and c3
    # mask theirs for the first time, with the noise drawn at their upload).
    assert len(draws) == 6
    driver = driver_of(fed.channel)
    spent = {c: p.own_ledger.releases() for c, p in driver._participants.items()}
    assert spent == {"c0": 2, "c1": 2, "c2": 1, "c3": 1}


def test_the_budget_stops_the_server_before_a_sum_is_unmasked() -> None:
    fed = _federation(epsilon_budget=5.0)  # one round spends 4.75, two 7.09
    server = FederationServer(fed)
    assert _run(fed, server, _omegas(4)).published
    report = _run(fed, server, _omegas(4, seed=1))
    assert report is not None and report.budget_exhausted and not report.published
    assert len(fed.privacy_ledger().entries()) == 1 and fed.latest_broadcast().round == 0
    setups = [k for k in Relay(fed.store).entries(1) if (parse_key(k) or (0, ""))[1] == "setup"]
    assert setups == []  # round 1's protocol never started: no sum to unmask


def test_the_published_vectors_are_the_survivors_weighted_mean_within_the_noise() -> None:
    fed = _federation()
    server = FederationServer(fed)
    omegas = _omegas(4, seed=3)
    report = _run(fed, server, omegas, drop_after={"c3": 2})  # c3 drops after its shares
    assert report is not None and report.published and report.n_recovered == 1
    broadcast = fed.latest_broadcast()
    assert broadcast.aggregation == "weighted" and broadcast.n_contributors == -1
    assert broadcast.feature_block == 0  # the shared features (the vectors are on no other)
    expected = _expected_mean(fed, omegas, ("c0", "c1", "c2"))
    # Three survivors = t: noise std z S phi_max / mass per coordinate; 6 of it is a 1e-8 tail.
    assert np.all(np.abs(broadcast.vectors - expected) <= 6 * report.noise_std)
    assert report.noise_std == pytest.approx(fed.ledger_entries()[-1].noise_std)


# --------------------------------------------------------------------------- creation
@pytest.mark.parametrize(
    ("dp", "protocol", "message"),
    [
        ({"sample_rate": 0.35}, {}, "use sample_rate=1.0"),
        ({"accountant": "pld"}, {}, "use DPConfig(accountant='rdp', sample_rate=1.0)"),
        ({"accountant": "moments"}, {}, "use DPConfig(accountant='rdp', sample_rate=1.0)"),
        ({"sampling": "fixed_size"}, {}, "use DPConfig(accountant='rdp', sample_rate=1.0)"),
        (None, {"aggregation": "weighted"}, "aggregation='weighted' without one: leave"),
    ],
)
def test_creation_refuses_what_secure_aggregation_cannot_honour(dp, protocol, message) -> None:
    storage = optuna.storages.InMemoryStorage()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Federation.create(
            "bad",
            search_space=SPACE,
            n_clients=4,
            storage=storage,
            protocol=FTSConfig(n_features=M, n_subregions=P, **protocol),
            privacy=None if dp is None else _dp(**dp),
            secure_aggregation=fb.SecureAggregation(),
        )
    assert storage.get_all_studies() == []


def test_the_distributed_configuration_is_stored_and_loads_alike(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    fed = _federation(storage=url)
    loaded = Federation.load("sdp", storage=url)
    assert isinstance(loaded.privacy, DistributedDPConfig) and loaded.privacy == fed.privacy
    assert loaded.config_hash == fed.config_hash
    assert (loaded.privacy.n_participants, loaded.privacy.threshold) == (4, 3)
    assert loaded.privacy.dimension == P * M
    fields = {k: v for k, v in fed.privacy.to_dict().items() if k != "kind"}
    with pytest.raises(ValueError, match="sample_rate 1.0"):
        DistributedDPConfig(**{**fields, "sample_rate": 0.5})


def test_the_cli_creates_dp_under_secure_aggregation_or_refuses_it_in_one_line(
    tmp_path, capsys
) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    space = json.dumps({"x": json.loads(optuna.distributions.distribution_to_json(SPACE["x"]))})
    common = ["--storage", url, "--search-space", space, "--n-clients", "5"]
    good = '{"noise_multiplier": 3, "sample_rate": 1, "clip_norm": 22, "accountant": "rdp"}'
    args = ["create", *common, "--privacy", good, "--secure-aggregation"]
    assert cli_main([*args[:1], "--name", "a", *args[1:]]) == 0
    assert Federation.load("a", url).privacy.kind == "distributed_skellam"
    bad = '{"noise_multiplier": 1, "sample_rate": 0.25, "clip_norm": 22, "accountant": "rdp"}'
    args = ["create", "--name", "b", *common, "--privacy", bad, "--secure-aggregation"]
    assert cli_main(args) == 2
    error = capsys.readouterr().err.strip()
    assert "use sample_rate=1.0" in error and len(error.splitlines()) == 1
    with pytest.raises(FederationNotFoundError):  # nothing written
        Federation.load("b", url)
