"""A participant that restarts mid-attempt, and a site of two workers, under secure aggregation.

In-process over SQLite (the key folder is the test session's): a restart is a new handle of the
federation (``Federation.load``, its own participant driver) for a participant whose first
process stops answering; a second worker is a second handle for the same participant.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import test_secagg_federation as base
from test_secagg_federation import _advance_to
from test_secagg_federation import _federation
from test_secagg_federation import _packed
from test_secagg_federation import _Round
from test_secagg_federation import M

from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secure_statistics import input_length
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation.fts.secure import driver_of
from optuna_fedbo.federation.secagg import claims
from optuna_fedbo.federation.secagg import participant as participant_module
from optuna_fedbo.federation.secagg.relay import Relay

CLIENTS = [f"c{i}" for i in range(4)]
capture_sum = base.capture_sum  # the fixture that keeps the unmasked sums


@pytest.fixture(autouse=True)
def _propagate_optuna_logs(propagate):
    """caplog sees optuna-fedbo's records at every level (the ``propagate`` fixture)."""
    yield


def _handle(fed: Federation) -> Federation:
    """Another process's handle of the federation (its own participant driver)."""
    other = Federation.load(fed.name, fed.storage)
    driver_of(other.channel).background = False
    return other


def _run(server, drivers, steps: int = 12):
    for _ in range(steps):
        for driver in drivers:
            driver.poll()
        report = server.step()
        if report is not None:
            return report
    return None


def _c_messages(fed: Federation, client: str) -> dict[str, str]:
    entries = Relay(fed.store).entries(fed.open_round(), inputs=True)
    return {k: v for k, v in entries.items() if ":msg:" in k and k.endswith(f":{client}")}


def test_a_participant_restarted_after_sharing_keys_sits_out_the_attempt_then_rejoins(
    tmp_path, caplog, capture_sum
) -> None:
    fed = _federation(f"sqlite:///{tmp_path / 'f.db'}")
    server = FederationServer(fed)
    driven = _Round(fed, server)
    inputs = driven.upload(CLIENTS)
    _advance_to(driven, "masked")  # everyone advertised keys and shared them
    sent = _c_messages(fed, "c3")
    assert sorted(k.split(":")[3] for k in sent) == ["keys", "shares"]
    del driven.driver._participants["c3"]  # its process dies; a new one starts
    restarted = _handle(fed)
    later = _packed(fed, seed=3, n=9)
    with caplog.at_level(logging.INFO, logger="optuna_fedbo"):
        restarted.upload("c3", later, n_observations=9, iteration=0)
    assert "c3: round 0 attempt 0 was joined before by this participant" in caplog.text
    assert _c_messages(fed, "c3") == sent  # no new keys, nothing overwritten
    report = driven.run()
    assert report is not None and report.published
    assert report.contributors == ("c0", "c1", "c2") and report.n_recovered == 1
    plain = sum(inputs[c] for c in ("c0", "c1", "c2"))
    assert np.max(np.abs(capture_sum[0] - plain)) <= 3 * fed.secure_aggregation.step / 2 + 1e-9
    # It offers its newest statistics for the next round.
    offered = driver_of(restarted.channel)._participants["c3"]._input
    ring = fed.secure_aggregation.ring(fed.n_clients, input_length(M))
    np.testing.assert_array_equal(decode(offered, ring), base._input(fed, later))
    # The next round: it takes part again.
    driven.upload(["c0", "c1", "c2"])
    report = _run(server, [driven.driver, driver_of(restarted.channel)])
    assert report is not None and report.published and report.round == 1
    assert report.contributors == tuple(CLIENTS)


@pytest.mark.parametrize("same_host", [True, False], ids=["one-host", "two-hosts"])
def test_two_workers_of_a_site_take_part_as_one_participant(
    tmp_path, monkeypatch, caplog, capture_sum, same_host
) -> None:
    if not same_host:  # separate key folders: nothing shared but the storage
        monkeypatch.setattr(participant_module, "claim", lambda *args: True)
    fed = _federation(f"sqlite:///{tmp_path / 'f.db'}")
    server = FederationServer(fed)
    driven = _Round(fed, server)
    inputs = driven.upload(CLIENTS)
    second = _handle(fed)  # the site's second worker uploads the site's statistics too
    second.upload("c0", _packed(fed, seed=0), n_observations=6, iteration=0)
    with caplog.at_level(logging.INFO, logger="optuna_fedbo"):
        report = _run(server, [driven.driver, driver_of(second.channel)])
    assert report is not None and report.published and report.n_contributors == 4
    assert report.contributors == tuple(CLIENTS)
    plain = sum(inputs.values())  # c0's input once
    assert np.max(np.abs(capture_sum[0] - plain)) <= 4 * fed.secure_aggregation.step / 2 + 1e-9
    first = driven.driver._participants["c0"]
    other = driver_of(second.channel)._participants["c0"]
    if same_host:  # the second worker stayed out of the attempt the first one claimed
        assert "c0: round 0 attempt 0 was joined before by this participant" in caplog.text
        assert first.masked_rounds == [(0, 0)] and other.masked_rounds == []
    else:  # both advertised; the server kept one, and the other refused the directory
        assert len(first.masked_rounds) + len(other.masked_rounds) == 1
        assert "the key directory does not carry this participant's own keys" in caplog.text


def test_a_claim_is_made_once_and_old_claims_are_cleared(tmp_path) -> None:
    fed = _federation(f"sqlite:///{tmp_path / 'f.db'}")
    assert claims.claim(fed, "c0", 0, 0) and not claims.claim(fed, "c0", 0, 0)
    assert claims.claim(fed, "c0", 0, 1) and claims.claim(fed, "c1", 0, 0)
    assert claims.claim(fed, "c0", 5, 0)  # rounds before 3 are forgotten
    assert claims.claim(fed, "c0", 0, 0)
    assert not claims.claim(_handle(fed), "c0", 5, 0)  # another process of this host
