"""Direct tests of the privacy ledger (``ledger.PrivacyLedger``): what the server counts, when it
fails closed, and what it writes, driven in-process without servers. Each was written to kill
mutants of ``benchmarks/mutation_trust.py``."""

from __future__ import annotations

import itertools
import json
import logging
import time

from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation._chain import entry_digest
from optuna_fedbo.federation._chain import LedgerHead
from optuna_fedbo.federation._chain import RELEASE
from optuna_fedbo.federation._chain import RESTORE
from optuna_fedbo.federation.ledger import LEDGER_FORMAT
from optuna_fedbo.federation.ledger import LedgerEntry
from optuna_fedbo.federation.ledger import LedgerIntegrityError
from optuna_fedbo.federation.store import ledger_key
from optuna_fedbo.federation.trust import text_digest

SPACE = {"x": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


class _Mark:
    """A high-water mark that records what the ledger asks of it."""

    def __init__(self, refuse: bool = False) -> None:
        self.checked: list[object] = []
        self.advanced: list[LedgerHead] = []
        self.refuse = refuse

    def check(self, chain) -> None:
        self.checked.append(chain)
        if self.refuse:
            raise LedgerIntegrityError("behind the mark")

    def advance(self, head: LedgerHead) -> None:
        self.advanced.append(head)


def _fed(budget: float | None = None) -> Federation:
    return Federation.create(
        f"ledger-{next(_names)}",
        search_space=SPACE,
        n_clients=2,
        protocol=FTSConfig(n_features=4, n_init=1, aggregation="weighted"),
        privacy=DPConfig(1.0, 1.0, 5.0, accountant="rdp", epsilon_budget=budget),
    )


def _ledger_attrs(fed: Federation) -> tuple[int, dict[str, str]]:
    study_id = fed.storage.get_study_id_from_name(fed.store.ledger_study_name)
    return study_id, dict(fed.storage.get_study_system_attrs(study_id))


def _entry(**changes: object) -> LedgerEntry:
    values = dict(
        round=3, n_accounted=4, epsilon=1.5, delta=1e-5, accountant="rdp", noise_multiplier=1.1,
        sample_rate=0.5, clip_norm=2.5, sampling="poisson", noise_std=0.7, phi_max=0.9,
        accounted_at=123.0, payload="p" * 64, epoch=2, prev="q" * 64, kind=RESTORE, carried=6,
    )  # fmt: skip
    values.update(changes)
    return LedgerEntry(**values)


def test_an_entry_reads_back_field_by_field_and_a_malformed_one_is_refused() -> None:
    entry = _entry()
    record = entry.to_dict()
    assert record["format"] == LEDGER_FORMAT == 3
    assert LedgerEntry.from_dict(json.loads(json.dumps(record))) == entry
    with pytest.raises(ValueError, match="Unknown ledger record format 2"):
        LedgerEntry.from_dict({**record, "format": 2})
    for field in [k for k in record if k != "format"]:
        with pytest.raises(ValueError, match="Malformed ledger record"):
            LedgerEntry.from_dict({k: v for k, v in record.items() if k != field})
    with pytest.raises(ValueError, match="Malformed ledger record"):
        LedgerEntry.from_dict({**record, "round": "three"})


def test_accounting_chains_each_entry_to_the_head_and_moves_the_mark() -> None:
    fed = _fed()
    ledger = fed.privacy_ledger()
    mark = _Mark()
    ledger.guard(mark)
    assert len(mark.checked) == 1  # guard checks at once
    first = ledger.account(0, "payload-0", epoch=2, noise_std=0.5, phi_max=0.25, receipts=("a",))
    assert (first.round, first.n_accounted, first.prev, first.epoch) == (0, 1, "", 2)
    assert (first.kind, first.carried, first.payload) == (RELEASE, 0, text_digest("payload-0"))
    assert (first.noise_std, first.phi_max, first.delta) == (0.5, 0.25, ledger.delta)
    assert first.epsilon == ledger.curve.epsilon(1)
    privacy = ledger.privacy
    assert (first.accountant, first.noise_multiplier, first.sample_rate) == (
        privacy.accountant,
        privacy.noise_multiplier,
        privacy.sample_rate,
    )
    assert (first.clip_norm, first.sampling) == (privacy.clip_norm, privacy.sampling)
    _, attrs = _ledger_attrs(fed)
    key = ledger_key(0, text_digest("payload-0"))
    body = fed.trust.verify("ledger", attrs[key])
    assert mark.advanced == [LedgerHead(1, entry_digest(body), 0, 0)]
    second = ledger.account(1, "payload-1", epoch=2, noise_std=0.5, phi_max=0.25)
    assert (second.n_accounted, second.prev) == (2, entry_digest(body))
    assert mark.advanced[-1].releases == 2 and mark.advanced[-1].round == 1
    assert len(mark.checked) == 3  # checked before each write
    # Idempotent per payload: the stored entry, nothing written, the mark not moved.
    assert ledger.account(0, "payload-0", epoch=9, noise_std=1.0, phi_max=1.0) == first
    assert len(_ledger_attrs(fed)[1]) == len(attrs) + 1 and len(mark.advanced) == 2
    assert ledger.n_released() == ledger.n_accounted() == 2
    assert ledger.is_accounted(text_digest("payload-1"))
    assert not ledger.is_accounted(text_digest("payload-2"))
    assert [e.round for e in ledger.entries()] == [0, 1]


def test_a_ledger_behind_the_mark_is_never_written() -> None:
    fed = _fed()
    ledger = fed.privacy_ledger()
    ledger.account(0, "p0", epoch=1, noise_std=1.0, phi_max=1.0)
    ledger.guard(_Mark())
    ledger._mark.refuse = True
    before = _ledger_attrs(fed)[1]
    with pytest.raises(LedgerIntegrityError, match="behind the mark"):
        ledger.account(1, "p1", epoch=1, noise_std=1.0, phi_max=1.0)
    with pytest.raises(LedgerIntegrityError, match="behind the mark"):
        ledger.n_released()
    assert _ledger_attrs(fed)[1] == before


def test_an_entry_that_does_not_verify_makes_the_server_fail_closed(caplog) -> None:
    fed = _fed()
    ledger = fed.privacy_ledger()
    for i in range(3):
        ledger.account(i, f"p{i}", epoch=1, noise_std=1.0, phi_max=1.0)
    study_id, attrs = _ledger_attrs(fed)
    keys = sorted(attrs)
    record = json.loads(attrs[keys[0]])
    record["body"]["epsilon"] = 0.0
    fed.storage.set_study_system_attr(study_id, keys[0], json.dumps(record))
    with pytest.raises(LedgerIntegrityError, match=r"does not verify \(entry '[^']+': .*\)"):
        ledger.verified()
    fed.storage.set_study_system_attr(study_id, keys[1], "forged")
    with pytest.raises(LedgerIntegrityError, match="and 1 more"):
        ledger.n_released()
    with pytest.raises(LedgerIntegrityError):
        ledger.is_accounted(text_digest("p2"))
    # Readers leave them out, with a warning, and count what verifies.
    with caplog.at_level(logging.WARNING):
        assert ledger.n_accounted() == 1
    assert sum("does not verify" in r.getMessage() for r in caplog.records) == 2


def test_a_deleted_entry_or_one_missing_from_the_end_fails_closed() -> None:
    fed = _fed()
    ledger = fed.privacy_ledger()
    for i in range(3):
        ledger.account(i, f"p{i}", epoch=1, noise_std=1.0, phi_max=1.0)
    study_id, attrs = _ledger_attrs(fed)
    keys = sorted(attrs)
    assert ledger.standing() == (3, "ok")

    def rewritten(kept: tuple[int, ...]):  # the ledger study as an attacker leaves it
        fed.storage.delete_study(_ledger_attrs(fed)[0])
        loaded = Federation.load(fed.name, fed.storage)
        for i in kept:
            loaded.store.write_ledger_entry(keys[i], fed.trust.verify("ledger", attrs[keys[i]]))
        return loaded, loaded.privacy_ledger()

    loaded, ledger = rewritten((0, 2))  # the middle one missing: the chain is broken
    with pytest.raises(LedgerIntegrityError, match="predecessor .* round 2 is missing"):
        ledger.verified()
    assert ledger.standing() == (3, "rolled back")
    fed, ledger = rewritten((0, 1))
    assert ledger.standing() == (2, "ok")  # the last one gone: nothing in the ledger says so
    broadcast = fed.store.sign_broadcast(2, "{}", epoch=1, ledger_count=3)
    fed.store.stage_broadcast(2, broadcast)  # ... but a signed broadcast counted 3
    with pytest.raises(LedgerIntegrityError, match="holds 2 releases"):
        ledger.verified()
    assert ledger.floor() == 3 and ledger.standing() == (3, "rolled back")
    assert ledger.spent() == (ledger.curve.epsilon(3), ledger.delta)


def test_the_floor_is_the_most_the_signed_broadcasts_or_budget_record_counted() -> None:
    fed = _fed(budget=100.0)
    ledger = fed.privacy_ledger()
    assert ledger.floor() == 0 and ledger.standing() == (0, "ok")
    fed.store.stage_broadcast(0, fed.store.sign_broadcast(0, "{}", epoch=1, ledger_count=2))
    fed.store.stage_broadcast(1, fed.store.sign_broadcast(1, "{}", epoch=1, ledger_count=1))
    assert ledger.floor() == 2
    assert ledger.standing() == (2, "missing")  # no entry at all, but releases were counted
    fed.store.mark_budget_exhausted({"round": 2, "rounds_accounted": 5})
    assert ledger.floor() == 5
    fed.store.mark_budget_exhausted({"round": 2, "rounds_accounted": 1})
    assert ledger.floor() == 2
    fed.store.mark_budget_exhausted({"round": 2})
    assert ledger.floor() == 2


def test_one_more_release_would_exceed_the_budget_only_past_it() -> None:
    fed = _fed()
    assert fed.privacy_ledger().would_exceed() is False  # no budget
    probe = _fed().privacy_ledger()
    one, two = probe.curve.epsilon(1), probe.curve.epsilon(2)
    fed = _fed(budget=one)
    ledger = fed.privacy_ledger()
    assert ledger.would_exceed() is False  # epsilon(1) == budget: allowed
    ledger.account(0, "p0", epoch=1, noise_std=1.0, phi_max=1.0)
    assert ledger.would_exceed() is True
    fed = _fed(budget=(one + two) / 2)
    assert fed.privacy_ledger().would_exceed() is False
    record = fed.privacy_ledger().mark_exhausted(4)
    assert record["round"] == 4 and record["rounds_accounted"] == 0
    assert (record["epsilon"], record["epsilon_next"]) == (probe.curve.epsilon(0), one)
    assert record["epsilon_budget"] == (one + two) / 2 and record["delta"] == ledger.delta
    assert isinstance(record["at"], float)  # when (for whoever reads the storage)
    assert fed.privacy_ledger().exhausted()["rounds_accounted"] == 0


def test_a_payload_accounted_but_never_staged_is_published_not_drawn_again() -> None:
    fed = _fed()
    ledger = fed.privacy_ledger()
    ledger.account(2, "other round", epoch=1, noise_std=1.0, phi_max=1.0)
    ledger.account(1, "old", epoch=1, noise_std=1.0, phi_max=1.0, receipts=("r1",))
    ledger.account(1, "new", epoch=1, noise_std=1.0, phi_max=1.0, receipts=("r2", "r3"))
    assert ledger.unreleased(1, set()) == ("new", ("r2", "r3"))  # the newest first
    assert ledger.unreleased(1, {text_digest("new")}) == ("old", ("r1",))
    assert ledger.unreleased(1, {text_digest("new"), text_digest("old")}) is None
    assert ledger.unreleased(3, set()) is None
    study_id, attrs = _ledger_attrs(fed)
    key = ledger_key(1, text_digest("new"))
    body = fed.trust.verify("ledger", attrs[key])
    body["sealed"] = body["sealed"][:-8] + "AAAAAAA="  # cannot be opened: the next one
    fed.storage.set_study_system_attr(study_id, key, fed.trust.sign("ledger", body))
    assert ledger.unreleased(1, set()) == ("old", ("r1",))


def test_a_restore_entry_carries_the_releases_forward_and_moves_the_mark(monkeypatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1234.5)
    fed = _fed()
    ledger = fed.privacy_ledger()
    for i in range(2):
        ledger.account(i, f"p{i}", epoch=1, noise_std=1.0, phi_max=1.0)
    head = ledger.chain().head
    mark = _Mark()
    entry = ledger.carry_forward(mark, LedgerHead(5, "h" * 64, 4, 0), 6, 3)
    assert (entry.kind, entry.carried, entry.n_accounted, entry.round) == (RESTORE, 3, 5, 6)
    assert (entry.payload, entry.prev, entry.epoch) == ("h" * 64, head.digest, 0)
    assert entry.epsilon == ledger.curve.epsilon(5) and entry.noise_std == entry.phi_max == 0.0
    privacy = ledger.privacy
    assert (entry.delta, entry.accountant, entry.sampling) == (
        ledger.delta,
        privacy.accountant,
        privacy.sampling,
    )
    assert (entry.noise_multiplier, entry.sample_rate, entry.clip_norm) == (
        privacy.noise_multiplier,
        privacy.sample_rate,
        privacy.clip_norm,
    )
    assert entry.accounted_at == 1234.5
    stored = fed.trust.verify("ledger", _ledger_attrs(fed)[1][ledger_key(6, "h" * 64)])
    assert mark.advanced == [LedgerHead(5, entry_digest(stored), 6, 1)]
    assert ledger.n_released() == 5 and ledger.chain().head.restores == 1
    again = ledger.carry_forward(_Mark(), LedgerHead(0, "", -1, 0), 7, 1)
    assert again.payload == "0" * 64 and again.n_accounted == 6
    study_id, attrs = _ledger_attrs(fed)
    fed.storage.set_study_system_attr(study_id, sorted(attrs)[0], "forged")
    with pytest.raises(LedgerIntegrityError, match="does not verify in itself"):
        ledger.carry_forward(_Mark(), LedgerHead(9, "", 0, 0), 8, 1)


def test_the_chain_is_read_again_only_when_an_entry_changed() -> None:
    fed = _fed()
    ledger = fed.privacy_ledger()
    ledger.account(0, "p0", epoch=1, noise_std=1.0, phi_max=1.0)
    chain = ledger.chain()
    assert ledger.chain() is chain
    ledger.account(1, "p1", epoch=1, noise_std=1.0, phi_max=1.0)
    assert ledger.chain() is not chain and ledger.chain().head.releases == 2
    assert ledger.chain({}).head.releases == 0  # the entries given, not the stored ones


def test_a_restore_is_refused_on_a_ledger_with_an_entry_that_does_not_verify() -> None:
    fed = _fed()
    ledger = fed.privacy_ledger()
    for i in range(2):
        ledger.account(i, f"p{i}", epoch=1, noise_std=1.0, phi_max=1.0)
    study_id, attrs = _ledger_attrs(fed)
    head_key = ledger_key(1, text_digest("p1"))
    fed.storage.set_study_system_attr(study_id, head_key, "forged")  # the chain is not broken
    with pytest.raises(LedgerIntegrityError, match="does not verify in itself"):
        ledger.carry_forward(_Mark(), LedgerHead(5, "", 0, 0), 2, 3)
    assert len(_ledger_attrs(fed)[1]) == len(attrs)  # nothing written


def test_racing_servers_releases_both_count() -> None:
    fed = _fed()
    ledger = fed.privacy_ledger()
    ledger.account(0, "p0", epoch=1, noise_std=1.0, phi_max=1.0)
    _, attrs = _ledger_attrs(fed)
    body = fed.trust.verify("ledger", attrs[ledger_key(0, text_digest("p0"))])
    fork = {**body, "payload": text_digest("p0 of the other server"), "epoch": 2}
    fed.store.write_ledger_entry(ledger_key(0, fork["payload"]), fork)  # the same head extended
    chain = ledger.chain()
    assert chain.counted == 1 and chain.head.releases == 2
    assert ledger.standing() == (2, "ok") and ledger.n_released() == 2
    assert ledger.spent()[0] == ledger.curve.epsilon(2)


def test_one_release_a_signed_record_counted_and_the_ledger_lacks_is_missing() -> None:
    fed = _fed()
    fed.store.stage_broadcast(0, fed.store.sign_broadcast(0, "{}", epoch=1, ledger_count=1))
    assert fed.privacy_ledger().standing() == (1, "missing")


def test_of_two_unreleased_payloads_of_a_round_the_newest_is_published(monkeypatch) -> None:
    first = "first payload"
    # A later payload whose ledger key sorts after the first one's (keys name the digest):
    # key order would pick the first.
    later = next(
        f"later payload {i}"
        for i in range(64)
        if text_digest(f"later payload {i}") > text_digest(first)
    )
    fed = _fed()
    ledger = fed.privacy_ledger()
    monkeypatch.setattr(time, "time", lambda: 100.0)
    ledger.account(1, first, epoch=1, noise_std=1.0, phi_max=1.0)
    monkeypatch.setattr(time, "time", lambda: 200.0)
    ledger.account(1, later, epoch=1, noise_std=1.0, phi_max=1.0)
    monkeypatch.undo()
    assert ledger.unreleased(1, set())[0] == later


def test_a_budget_record_without_a_count_raises_no_floor() -> None:
    fed = _fed(budget=100.0)
    fed.store.mark_budget_exhausted({"round": 0})
    assert fed.privacy_ledger().floor() == 0


def test_the_ledger_warns_once_only_when_it_is_missing_or_rolled_back(caplog) -> None:
    fed = _fed()
    ledger = fed.privacy_ledger()
    ledger.account(0, "p0", epoch=1, noise_std=1.0, phi_max=1.0)
    with caplog.at_level(logging.WARNING):
        assert ledger.standing() == (1, "ok")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    fed.store.stage_broadcast(1, fed.store.sign_broadcast(1, "{}", epoch=1, ledger_count=3))
    with caplog.at_level(logging.WARNING):
        assert ledger.standing() == (3, "rolled back")
        assert ledger.standing() == (3, "rolled back")
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "is rolled back: it holds 1 release(s)" in warned[0]
