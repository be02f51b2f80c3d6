"""Server epochs (``federation/_server_epochs.py``), in process: epochs are claimed in order from
``start``, past any study that exists, any epoch ``reserve`` refuses and a race lost at creation,
and each claim is signed; only a server-signed claim of that very epoch supersedes a server (an
unsigned, forged or copied one is skipped, and warned about once) (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import logging
import time

from _trust_federation import small_store
from optuna.study import StudyDirection
import pytest

from optuna_fedbo.federation.records import EPOCH_KEY
from optuna_fedbo.federation.store import FederationStore


def _store() -> FederationStore:
    return small_store("server-epochs")


def _epoch_study(store: FederationStore, epoch: int, value: str | None = None) -> None:
    """Someone with the URL creates the study of ``epoch`` (with ``value`` as its claim)."""
    study_id = store.storage.create_new_study(
        [StudyDirection.MINIMIZE], store.server_epoch_study_name(epoch)
    )
    if value is not None:
        store.storage.set_study_system_attr(study_id, EPOCH_KEY, value)


def _claim_of(store: FederationStore, epoch: int) -> dict:
    study_id = store.storage.get_study_id_from_name(store.server_epoch_study_name(epoch))
    return store._trust().verify(
        "epoch", store.storage.get_study_system_attrs(study_id)[EPOCH_KEY]
    )


def test_epochs_are_claimed_in_order_and_each_claim_is_signed() -> None:
    store = _store()
    before = time.time()
    assert not store.has_server_epoch(1)
    assert store.claim_server_epoch() == 1 and store.has_server_epoch(1)
    assert store.claim_server_epoch() == 2
    assert store.superseded(1) == 2 and store.superseded(2) is None
    claim = _claim_of(store, 2)
    assert claim["epoch"] == 2 and before <= claim["claimed_at"] <= time.time()
    _epoch_study(store, 3)  # a study someone else created
    assert store.claim_server_epoch() == 4
    assert store.claim_server_epoch(start=10) == 10 and not store.has_server_epoch(5)
    assert store.server_epoch_study_name(7) == f"{store.name}:fedbo:server:000007"


def test_an_epoch_the_reservation_refuses_or_a_race_lost_at_creation_is_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _store()
    asked = []
    assert store.claim_server_epoch(reserve=lambda e: asked.append(e) or e >= 3) == 3
    assert asked == [1, 2, 3] and not store.has_server_epoch(1)
    _epoch_study(store, 4)  # created by a racing server between the look and the create
    looks = []
    real = type(store).has_server_epoch
    monkeypatch.setattr(
        type(store),
        "has_server_epoch",
        lambda self, e: (looks.append(e) or e != 4) and real(self, e),  # 4: not there yet
    )
    assert store.claim_server_epoch(start=4) == 5  # creating 4 failed: the next one
    assert looks == [4, 5]
    assert _claim_of(store, 5)["epoch"] == 5


def test_only_a_signed_claim_of_that_very_epoch_supersedes_a_server(propagate, caplog) -> None:
    store = _store()
    assert store.claim_server_epoch() == 1
    assert store.superseded(1) is None
    _epoch_study(store, 2)  # being claimed (or abandoned): no claim in it
    assert store.superseded(1) is None and not store._signed_epoch(2)
    assert not store._signed_epoch(9)  # no such study
    signed_one = store._trust().sign("epoch", {"epoch": 1, "claimed_at": 0.0})
    _epoch_study(store, 3, signed_one)  # a genuine claim of epoch 1, copied
    _epoch_study(store, 4, '{"body": {"epoch": 4}, "sig": "AAAA"}')  # forged
    with caplog.at_level(logging.WARNING):
        assert store.superseded(1) is None
        assert store.superseded(1) is None
    said = [r.getMessage() for r in caplog.records if "Ignoring server epoch" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("Ignoring server epoch 4 of federation")
    assert store.claim_server_epoch() == 5
    assert store.superseded(1) == 5 and store.superseded(3) == 5 and store.superseded(5) is None
