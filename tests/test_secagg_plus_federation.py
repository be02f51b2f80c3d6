"""SecAgg+ in a federation: masks and shares only between the neighbours of a sparse graph.

In-process and deterministic, as ``test_secagg_federation.py`` (whose round driver these tests
reuse): 8 participants on the Harary graph ``H(4, 8)``, share threshold 3 (a majority of a
participant's 4 neighbours and itself), ``t = 5``.
"""

from __future__ import annotations

from dataclasses import replace
import logging
import re

import numpy as np
import pytest
import test_secagg_federation as base
from test_secagg_federation import _federation
from test_secagg_federation import _Round
from test_secagg_federation import _sign_record

import optuna_fedbo as fb
from optuna_fedbo.core.secagg import client as client_module
from optuna_fedbo.core.secagg.graph import choose_degree
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation.secagg.relay import parse_key
from optuna_fedbo.federation.secagg.relay import parse_message
from optuna_fedbo.federation.secagg.relay import record_key
from optuna_fedbo.federation.secagg.relay import Relay
from optuna_fedbo.federation.secagg.relay import round_setup

N = 8
capture_sum = base.capture_sum  # the fixture that keeps the unmasked sums
CLIENTS = [f"c{i}" for i in range(N)]


@pytest.fixture(autouse=True)
def _propagate_optuna_logs(propagate):
    """caplog sees optuna-fedbo's records at every level (the ``propagate`` fixture)."""
    yield


def _graph_round():
    fed = _federation(n_clients=N, degree=4)
    driven = _Round(fed, FederationServer(fed, discard_uploads=False))
    setup = round_setup(fed, 0, 0, tuple(CLIENTS))
    return fed, driven, setup


def _shared_to(fed) -> dict[str, set[str]]:
    """Whom each participant sealed shares to (what the server opens of step 2)."""
    found = {}
    for key, text in Relay(fed.store).entries(0, inputs=True).items():
        parsed = parse_key(key)
        if parsed is None or parsed[1] != "msg:shares":
            continue
        client = parsed[2]
        _, plaintext = fed.trust.open_upload_bytes(
            text, client_id=client, public_key=fed.public_key_of(client), round_index=0
        )
        found[client] = set(parse_message(plaintext, parsed[0], "shares", client).sealed)
    return found


def test_the_graph_round_masks_and_shares_only_with_neighbours_and_sums_right(
    monkeypatch, capture_sum
) -> None:
    fed, driven, setup = _graph_round()
    assert fed.secure_aggregation.degree == 4 and setup.share_threshold == 3
    honest = client_module.pairwise_mask
    masks: dict[str, set[str]] = {}

    def counted(key, peer_key, setup_, owner, peer):
        masks.setdefault(owner, set()).add(peer)
        return honest(key, peer_key, setup_, owner, peer)

    monkeypatch.setattr(client_module, "pairwise_mask", counted)
    inputs = driven.upload(CLIENTS)
    report = driven.run()
    assert report is not None and report.published and report.n_contributors == N
    shared = _shared_to(fed)
    for c in CLIENTS:
        neighbours = set(setup.neighbours(c))
        assert len(neighbours) == 4
        assert masks[c] == neighbours  # pairwise masks with its 4 neighbours, not all 7
        assert shared[c] == neighbours  # shares sealed to them only
    plain = sum(inputs.values())
    assert np.max(np.abs(capture_sum[0] - plain)) <= N * fed.secure_aggregation.step / 2 + 1e-9


def test_neighbours_dropping_after_sharing_are_recovered_from_the_others_shares(
    capture_sum,
) -> None:
    fed, driven, setup = _graph_round()
    x = "c0"
    y = setup.neighbours(x)[0]  # two neighbours drop: each keeps 3 live holders of 5
    inputs = driven.upload(CLIENTS)
    report = driven.run(drop_after={x: 2, y: 2})
    assert report is not None and report.published
    assert report.n_contributors == N - 2 and report.n_recovered == 2
    plain = sum(v for c, v in inputs.items() if c not in (x, y))
    step = fed.secure_aggregation.step
    assert np.max(np.abs(capture_sum[0] - plain)) <= (N - 2) * step / 2 + 1e-9


def test_a_participant_that_lost_too_many_neighbours_fails_the_round_before_any_share(
    caplog,
) -> None:
    # c0 and two of its four neighbours drop after sharing keys: 5 survivors (t = 5), but only
    # 2 holders of c0's shares survive (3 needed): its masks could never be removed.
    fed, driven, setup = _graph_round()
    lost = ("c0", *setup.neighbours("c0")[:2])
    driven.upload(CLIENTS)
    with caplog.at_level(logging.WARNING):
        report = driven.run(drop_after=dict.fromkeys(lost, 2))
    assert report is not None and not report.published and report.reason == "secagg-failed"
    # c0 for sure (a neighbour of it, or a survivor next to all three, may come first).
    named = re.search(r"'(c\d)' lost too many neighbours \(only (\d) holders", caplog.text)
    assert named is not None and int(named[2]) < 3
    alive = set(CLIENTS) - set(lost)
    assert sum(h in alive for h in setup.holders(named[1])) == int(named[2])
    assert "nothing is published" in caplog.text
    entries = Relay(fed.store).entries(0, inputs=True)
    assert record_key(0, "unmask") not in entries  # no share was asked for
    assert not [k for k in entries if ":msg:unmask:" in k]
    assert fed.latest_broadcast() is None


@pytest.mark.parametrize("degree", [2, None], ids=["sparser", "complete"])
def test_participants_refuse_a_setup_whose_graph_is_not_the_configurations(caplog, degree) -> None:
    fed, driven, setup = _graph_round()
    driven.upload(CLIENTS)
    other = replace(setup, degree=degree)  # the server's own choice of graph
    assert other.graph != setup.graph
    text = _sign_record(fed, "setup", 0, 0, {"setup": other.to_dict()})
    Relay(fed.store).write(0, record_key(0, "setup"), text)
    with caplog.at_level(logging.WARNING):
        for participant in driven.driver._participants.values():
            participant.poll()
    assert "the round's setup differs from the one the configuration gives" in caplog.text
    assert not [k for k in Relay(fed.store).entries(0, inputs=True) if ":msg:" in k]


@pytest.mark.parametrize(("n", "degree"), [(10, None), (49, None), (50, 12), (200, 32)])
def test_large_federations_get_a_sparse_graph_of_logarithmic_degree(n, degree) -> None:
    resolved = fb.SecureAggregation().resolve(n, 100)
    assert resolved.degree == degree
    if degree is not None:
        assert degree == choose_degree(n, target=2.0**-30)
    assert fb.SecureAggregation(degree=4).resolve(n, 100).degree == 4  # an explicit one stays
