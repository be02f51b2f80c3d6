"""The Fed-PNE server's commit path (``fedpne/server.py``), in process: what a published phase
says (forced or not, receipts of the uploads it used), that the next round opens with it (and no
later one), and that the heartbeat and the report say so at once (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import itertools
import time

from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation.fedpne.channel import FedPNEChannel
from optuna_fedbo.federation.trust import text_digest

_names = itertools.count()


def _federation() -> Federation:
    fed = Federation.create(
        f"pne-commit-{next(_names)}",
        search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=3,
        protocol=FedPNEConfig(horizon=60),
        seed=2,
    )
    for i in range(3):
        fed.join(f"c{i}")
    return fed


def _upload(fed: Federation, clients: range | list[int]) -> None:
    phase = FedPNEChannel(fed).view().phase
    for i in clients:
        assert FedPNEChannel(fed).upload(f"c{i}", phase, {n.key: 0.2 * i for n in phase.nodes})


def _study_exists(fed: Federation, round_index: int) -> bool:
    try:
        fed.storage.get_study_id_from_name(fed.store.uploads_study_name(round_index))
    except KeyError:
        return False
    return True


@pytest.mark.parametrize("force", [False, True])
def test_a_published_phase_says_whether_it_was_forced_and_whose_uploads_it_used(
    force: bool,
) -> None:
    fed = _federation()
    server = FederationServer(fed, discard_uploads=False, heartbeat_interval=3600.0)
    _upload(fed, range(2) if force else range(3))
    stored = fed.store.read_uploads(0)
    before = time.time()
    report = server.step(force=force)
    assert report is not None and report.round == 0
    assert report.reason == ("forced" if force else "complete")
    assert report.phase_report.forced is force
    assert report.n_contributors == len(stored) == (2 if force else 3)
    assert before <= report.published_at <= time.time()
    (broadcast,) = fed.store.broadcasts()
    # The receipts are what each participant computed of what it sent.
    assert sorted(broadcast.receipts) == sorted(text_digest(t)[:32] for t in stored.values())
    assert FedPNEChannel(fed).view().phase.index == 2
    # The next round is open at once (its uploads study exists), no later one; and the
    # heartbeat says so now, not an interval later.
    assert _study_exists(fed, 1) and not _study_exists(fed, 2)
    assert fed.store.server_status()["open_round"] == 1
