"""Stale records and damage (issue 26, items 5 and 6), on real SQLite files: uploads written ahead
of their round never count, a deleted uploads study is recreated and the round goes on, a deleted
main study or configuration is one line naming what is missing, and two servers never share an
epoch whatever is deleted."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import numpy as np
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.fts.messages import encode_upload

M = 6
SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _federation(tmp_path: Path, n_clients: int = 2) -> Federation:
    fed = Federation.create(
        f"damage-{next(_names)}",
        search_space=SPACE,
        n_clients=n_clients,
        storage=f"sqlite:///{tmp_path / 'fed.db'}",
        protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted"),
        seed=4,
        key_dir=tmp_path / "keys",
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def _omega(i: int) -> np.ndarray:
    return np.linspace(-1.0, 1.0, M) * (i + 1)


def _upload(fed: Federation, client: str, i: int) -> int:
    return fed.upload(client, _omega(i), n_observations=3, iteration=1)


def _payload(fed: Federation, client: str, round_index: int) -> str:
    return encode_upload(
        config_hash=fed.config_hash,
        round_index=round_index,
        client_id=client,
        omega=_omega(7),
        n_observations=3,
        iteration=round_index,
    )


# ------------------------------------------------------------------- uploads ahead of time
def test_an_upload_written_ahead_of_its_round_never_counts(tmp_path: Path, caplog) -> None:
    fed = _federation(tmp_path)
    server = FederationServer(fed, discard_uploads=False)
    for i in range(2):
        _upload(fed, f"c{i}", i)
    assert server.step().round == 0  # round 1 is open
    # Someone with the URL creates round 2's uploads study ahead of time ...
    fed.store.open_uploads(2)
    # ... the participant's own client refuses to send there, and says why ...
    with pytest.raises(ValueError, match="Round 2 of federation .* is not open yet"):
        fed.send_upload("c0", 2, _payload(fed, "c0", 2))
    # ... and c0, signing its own upload for round 2 by hand (bound to the opening it can see,
    # round 1's), writes it there anyway.
    key = fed._participant_key("c0")
    opening = fed.store.latest()["digest"]
    ahead = fed.trust.seal_upload(key, 2, 1, _payload(fed, "c0", 2), opening)
    fed.store.write_upload(2, "c0", ahead)
    for i in range(2):
        _upload(fed, f"c{i}", i)
    assert server.step().round == 1  # round 2 opens with c0's early upload in it
    assert "c0" in fed.store.read_uploads(2)
    _upload(fed, "c1", 1)
    with caplog.at_level(logging.WARNING):
        report = server.step(force=True)
    assert report.round == 2 and report.contributors == ("c1",)
    assert "written before round 2 opened" in dict(report.rejected)["c0"]
    # The participant re-sends through its client, into the open round: that one counts.
    assert _upload(fed, "c0", 0) == 3
    _upload(fed, "c1", 1)
    assert server.step().contributors == ("c0", "c1")


def test_an_upload_to_a_closed_round_is_refused_by_the_client(tmp_path: Path) -> None:
    fed = _federation(tmp_path)
    server = FederationServer(fed)
    for i in range(2):
        _upload(fed, f"c{i}", i)
    server.step()
    with pytest.raises(KeyError, match="Round 0 of .* is closed"):
        fed.send_upload("c0", 0, _payload(fed, "c0", 0))
