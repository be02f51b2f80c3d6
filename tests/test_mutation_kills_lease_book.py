"""The lease book (``federation/lease_book.py``), in process: only well-formed sealed fields are
kept, a record verifies for its own participant only (a cached one too), each worker keeps its
newest record (a replay neither replaces it nor counts as seen live), the server alone reads the
sealed fields, a site is active while any worker is, and the epoch studies are read from the
lowest open epoch on, ignoring a record filed under another epoch (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from dataclasses import replace
import itertools
import logging
import time
from types import SimpleNamespace
from typing import Any

from optuna.distributions import FloatDistribution
from optuna.study import StudyDirection
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig
import optuna_fedbo.federation.lease_book as book_module
from optuna_fedbo.federation.lease_book import _checked_private
from optuna_fedbo.federation.lease_book import EPOCH_RECORD_KEY
from optuna_fedbo.federation.lease_book import LeaseBook
from optuna_fedbo.federation.lease_record import LeaseRecord
from optuna_fedbo.federation.lease_record import sign_lease
from optuna_fedbo.federation.lease_record import verify_lease

_names = itertools.count()


def _fed() -> Federation:
    fed = Federation.create(
        f"lease-book-{next(_names)}",
        search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=2,
        protocol=FTSConfig(n_features=4, n_init=1),
        seed=2,
    )
    fed.join("a")
    fed.join("b")
    return fed


def _sign(fed: Federation, client: str = "a", **fields: Any) -> str:
    private = fields.pop("private", {})
    fields = {"epoch": 1, "state": "active", "ttl": 30.0, **fields}
    return sign_lease(fed.trust, fed._participant_key(client), private=private, **fields)


def _record(fed: Federation, text: str, client: str = "a") -> LeaseRecord:
    return verify_lease(fed.trust, client, fed.public_key_of(client), text)


def _clock(monkeypatch: pytest.MonkeyPatch, wall: float | None = None) -> list[float]:
    """A monotonic clock (and, if given, a wall clock offset) the book reads; returns both."""
    now = [1000.0, time.time() if wall is None else wall]
    fake = SimpleNamespace(
        time=lambda: now[1], monotonic=lambda: now[0], sleep=lambda seconds: None
    )
    monkeypatch.setattr(book_module, "time", fake)
    return now


# ------------------------------------------------------------------------ sealed fields
def test_only_well_formed_sealed_fields_are_kept() -> None:
    good = {"host": "h" * 300, "pid": 7, "counts": {"initial": 1, 2: 0}, "trial_seconds": 3}
    assert _checked_private(good) == {
        "host": "h" * 255,
        "pid": 7,
        "counts": {"initial": 1, "2": 0},
        "trial_seconds": 3.0,
    }
    assert type(_checked_private(good)["trial_seconds"]) is float
    assert _checked_private({"trial_seconds": 0.0, "counts": {}}) == {
        "trial_seconds": 0.0,
        "counts": {},
    }
    bad: list[dict[str, Any]] = [
        {"host": 5},
        {"pid": True},
        {"pid": "7"},
        {"pid": 7.0},
        {"counts": [1]},
        {"counts": {"local": -1}},
        {"counts": {"local": True}},
        {"counts": {"local": 1.0}},
        {"counts": {"local": 1, "initial": -1}},
        {"trial_seconds": float("inf")},
        {"trial_seconds": float("nan")},
        {"trial_seconds": -0.5},
        {"trial_seconds": True},
        {"trial_seconds": "1"},
        {},
    ]
    for fields in bad:
        assert _checked_private(fields) == {}, fields


# ------------------------------------------------------------------------ verification
def test_a_record_verifies_only_for_its_own_participant_even_once_cached(
    propagate, caplog
) -> None:
    fed = _fed()
    book = LeaseBook(fed)
    text = _sign(fed)
    assert book._verify("a", text) == _record(fed, text)
    with caplog.at_level(logging.WARNING):
        assert book._verify("b", text) is None  # a's genuine record, copied under b
        assert book._verify("b", text) is None
        assert book._verify("a", ["not", "text"]) is None  # unhashable: refused, no crash
        assert book._verify("mallory", text) is None  # not enrolled
    said = [r.getMessage() for r in caplog.records if "Ignoring a lease record" in r.getMessage()]
    assert len(said) == 3  # once per participant and problem
    assert "of 'b' in federation" in said[0] and "not signed by" in said[0]
    assert "of 'mallory'" in said[2] and "not enrolled" in said[2]


def test_a_re_read_costs_no_signature_check_and_the_cache_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = _fed()
    book = LeaseBook(fed)
    checks = []
    monkeypatch.setattr(
        book_module, "verify_lease", lambda *args: checks.append(args) or verify_lease(*args)
    )
    texts = [_sign(fed) for _ in range(3)]
    first = book._verify("a", texts[0])
    assert book._verify("a", texts[0]) is first and len(checks) == 1
    monkeypatch.setattr(book_module, "_CACHE", 2)
    book._verify("a", texts[1])
    assert len(book._verified) == 2
    book._verify("a", texts[2])  # full: emptied before keeping the new one
    assert list(book._verified) == [texts[2]]


# ------------------------------------------------------------------------- newest record
def test_each_worker_keeps_its_newest_record_and_a_replay_is_not_seen_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = _fed()
    now = _clock(monkeypatch)
    live = _record(fed, _sign(fed))
    ended = _record(fed, _sign(fed, state="finished"))
    book = LeaseBook(fed)
    book._observe(ended, now[1])
    book._observe(live, now[1])  # the older, live record written back: a replay
    assert book.workers("a") == {1: ended}
    assert not book.departed(["a"])  # never seen live: half a ttl first
    book._observe(ended, now[1])  # the same record again
    assert not book.departed(["a"])
    now[0] += 10.0
    later = _record(fed, _sign(fed, state="finished"))
    book._observe(later, now[1])  # a newer record: half a ttl from now on
    now[0] = 1024.9
    assert book.workers("a") == {1: later} and not book.departed(["a"])
    now[0] = 1025.0  # exactly half the ttl since the newer record was first seen
    assert book.departed(["a"])
    other = _record(fed, _sign(fed, epoch=2))
    book._observe(other, now[1])  # another worker
    assert book.workers("a") == {1: later, 2: other} and book.live_workers("a") == 1


def test_a_worker_seen_live_departs_at_once_and_its_newer_records_replace_the_old(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = _fed()
    now = _clock(monkeypatch)
    book = LeaseBook(fed)
    book._observe(_record(fed, _sign(fed)), now[1])
    assert book.states()["a"].status == "active" and not book.departed(["a"])
    ended = _record(fed, _sign(fed, state="finished"))
    book._observe(ended, now[1])
    assert book.workers("a") == {1: ended} and book.departed(["a"])
    assert not book.departed(["a", "b"])  # b never seen


# ------------------------------------------------------------------------- sealed fields
def test_only_the_server_opens_the_sealed_fields_once_per_record(
    monkeypatch: pytest.MonkeyPatch, propagate, caplog
) -> None:
    fed = _fed()
    private = {"host": "h1", "pid": 12, "counts": {"local": 2}, "trial_seconds": 1.5}
    record = _record(fed, _sign(fed, private=private))
    book = LeaseBook(fed)
    opened = []
    real_open = book_module.open_private
    monkeypatch.setattr(
        book_module, "open_private", lambda *args: opened.append(1) or real_open(*args)
    )
    state = book.state_of(record)
    assert (state.host, state.pid, state.counts, state.trial_seconds) == (
        "h1",
        12,
        {"local": 2},
        1.5,
    )
    assert (state.client_id, state.status, state.epoch, state.workers) == ("a", "active", 1, 1)
    assert (state.heartbeat, state.ttl) == (record.time, 30.0)
    book.state_of(record)
    assert len(opened) == 1  # read once
    gone = book.state_of(record, now=record.time + 30.0)
    assert (gone.status, gone.workers) == ("lost", 0)
    # Bound to its participant and epoch: the same sealed fields in a record of another epoch
    # or participant (copied into its own signed record) cannot be opened, cached or not.
    with caplog.at_level(logging.WARNING):
        moved = book.state_of(replace(record, epoch=2))
        copied = book.state_of(replace(record, client_id="b"))
    assert moved.host is None and moved.counts is None and moved.trial_seconds is None
    assert copied.host is None and copied.pid is None
    said = [r.getMessage() for r in caplog.records if "sealed fields of" in r.getMessage()]
    assert len(said) == 2 and "cannot be opened" in said[0] and "of 'b'" in said[1]
    monkeypatch.setattr(book_module, "_CACHE", 2)
    bounded = LeaseBook(fed)
    for _ in range(3):
        bounded.state_of(_record(fed, _sign(fed)))
    assert len(bounded._opened) == 1  # full at two: emptied before keeping the third
    # A reader without the server's keys sees none of them (and opens nothing).
    reader = LeaseBook(fed)
    reader.federation = SimpleNamespace(trust=SimpleNamespace(server_keys=None))
    before = len(opened)
    assert reader._private(record) == {} and len(opened) == before


# --------------------------------------------------------------------------- a site
def test_a_site_is_active_while_any_worker_is_and_sums_its_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = _fed()
    now = _clock(monkeypatch)
    book = LeaseBook(fed)
    assert book.site_state("a") is None
    one = _record(fed, _sign(fed, private={"counts": {"initial": 1, "local": 2},
                                           "trial_seconds": 4.0}))  # fmt: skip
    two = _record(fed, _sign(fed, epoch=2, private={"counts": {"initial": 3},
                                                    "trial_seconds": 2.0}))  # fmt: skip
    done = _record(fed, _sign(fed, epoch=3, state="finished", private={"trial_seconds": 99.0}))
    for record in (one, two, done):
        book._observe(record, now[1])
    site = book.site_state("a")
    assert site.status == "active" and site.workers == 2 and site.epoch == 2
    assert site.counts == {"initial": 4, "local": 2}
    assert site.trial_seconds == 4.0  # the slowest live worker's; the finished one's is not
    assert book.states()["a"] == site
    later = now[1] + 31.0  # every lease expired: shown as the last to end
    ended = book.site_state("a", now=later)
    assert ended.status == "finished" and ended.epoch == 3 and ended.workers == 0
    assert ended.trial_seconds == 99.0
    quiet = LeaseBook(fed)
    quiet._observe(_record(fed, _sign(fed, private={"pid": 1})), now[1])
    assert quiet.site_state("a").counts is None
    assert quiet.site_state("a", now=later).status == "lost"  # at the time asked about


# ------------------------------------------------------------------------- epoch studies
def _file(fed: Federation, epoch: int, text: str | None) -> None:
    """Create the epoch study of ``a`` (as a claimer does), with ``text`` as its record."""
    book = LeaseBook(fed)
    study_id = fed.storage.create_new_study(
        [StudyDirection.MINIMIZE], book.epoch_study_name("a", epoch)
    )
    if text is not None:
        fed.storage.set_study_system_attr(study_id, EPOCH_RECORD_KEY, text)


def test_a_fresh_reader_finds_every_worker_in_its_epoch_study() -> None:
    fed = _fed()
    first, second = _sign(fed), _sign(fed, epoch=2)
    writer = LeaseBook(fed)
    assert writer.claim("a", 1, first) and writer.claim("a", 2, second)
    assert not writer.claim("a", 2, second)  # taken
    assert writer.records() == {"a": second}  # the leases study holds the newest claim too
    workers, top = LeaseBook(fed).scan("a")
    assert top == 2 and workers == {1: _record(fed, first), 2: _record(fed, second)}
    # A record under an id that is not enrolled, stored before a's: ignored, a's still read.
    leases = fed.storage.get_study_id_from_name(writer.study_name)
    attrs = fed.storage.get_study_system_attrs(leases)
    fed.storage.delete_study(leases)
    leases = fed.storage.create_new_study([StudyDirection.MINIMIZE], writer.study_name)
    for key, value in {"l:mallory": first, **attrs}.items():
        fed.storage.set_study_system_attr(leases, key, value)
    reader = LeaseBook(fed)
    assert set(reader.states()) == {"a"} and reader.workers("a") == workers
    assert LeaseBook(fed).scan("b") == ({}, 0)


def test_the_record_in_the_leases_study_counts_without_its_epoch_study() -> None:
    fed = _fed()
    first = _sign(fed)
    writer = LeaseBook(fed)
    writer.claim("a", 1, first)
    fed.storage.delete_study(fed.storage.get_study_id_from_name(writer.epoch_study_name("a", 1)))
    assert LeaseBook(fed).scan("a") == ({1: _record(fed, first)}, 0)


def test_a_record_filed_under_another_epoch_is_ignored() -> None:
    fed = _fed()
    first = _sign(fed)
    assert LeaseBook(fed).claim("a", 1, first)
    _file(fed, 2, first)  # epoch 1's genuine record in epoch 2's study
    workers, top = LeaseBook(fed).scan("a")
    assert top == 2 and workers == {1: _record(fed, first)}


def test_the_reader_looks_past_a_deleted_epoch_study_it_starts_from() -> None:
    fed = _fed()
    writer = LeaseBook(fed)
    first, second = _sign(fed), _sign(fed, epoch=2)
    writer.claim("a", 1, first)
    writer.claim("a", 2, second)
    fed.storage.delete_study(fed.storage.get_study_id_from_name(writer.epoch_study_name("a", 1)))
    workers, top = LeaseBook(fed).scan("a")
    assert top == 2 and workers == {2: _record(fed, second)}


def test_the_reader_waits_for_the_record_of_an_epoch_being_claimed(
    monkeypatch: pytest.MonkeyPatch, propagate, caplog
) -> None:
    fed = _fed()
    text = _sign(fed)
    _file(fed, 1, None)  # created, its record not written yet
    now = _clock(monkeypatch)
    book_module.time.sleep = lambda seconds: pytest.fail("waited without being asked to")
    with caplog.at_level(logging.WARNING):
        assert LeaseBook(fed).scan("a") == ({}, 1)  # not waiting: nothing yet (no problem)
    assert "Ignoring" not in caplog.text
    assert LeaseBook(fed).states() == {}
    book = LeaseBook(fed)
    polls = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        now[0] += seconds
        if len(polls) == 3:  # the claimer writes its record
            study_id = fed.storage.get_study_id_from_name(book.epoch_study_name("a", 1))
            fed.storage.set_study_system_attr(study_id, EPOCH_RECORD_KEY, text)

    book_module.time.sleep = sleep
    assert book.scan("a", wait=1.0) == ({1: _record(fed, text)}, 1)
    assert polls == [0.05] * 3
    polls.clear()
    _file(fed, 2, None)
    now[0] = 1000.0
    book_module.time.sleep = lambda seconds: (
        polls.append(seconds) or now.__setitem__(0, now[0] + 0.25)
    )
    assert book.scan("a", wait=0.5) == ({1: _record(fed, text)}, 2)  # gave up after 0.5 s
    assert len(polls) == 2 and now[0] == 1000.5


def test_the_reader_does_not_wait_when_a_later_epoch_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = _fed()
    _file(fed, 1, None)
    second = _sign(fed, epoch=2)
    _file(fed, 2, second)
    _clock(monkeypatch)
    book_module.time.sleep = lambda seconds: pytest.fail("waited for an abandoned claim")
    assert LeaseBook(fed).scan("a", wait=5.0) == ({2: _record(fed, second)}, 2)


def test_a_confirmed_ended_worker_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fed = _fed()
    writer = LeaseBook(fed)
    writer.claim("a", 1, _sign(fed))
    writer.write("a", 1, _sign(fed, state="finished"))
    second = _sign(fed, epoch=2)
    writer.claim("a", 2, second)
    book = LeaseBook(fed)
    assert book.scan("a")[1] == 2
    read = []
    real = LeaseBook._epoch_attrs
    monkeypatch.setattr(
        LeaseBook, "_epoch_attrs", lambda self, c, e: read.append(e) or real(self, c, e)
    )
    assert book.scan("a")[1] == 2
    assert read == [2, 3]  # from the live worker's epoch on: epoch 1 ended, confirmed


def test_reading_every_participant_never_waits_for_a_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = _fed()
    first = _sign(fed)
    LeaseBook(fed).claim("a", 1, first)
    _file(fed, 2, None)  # a second worker is claiming epoch 2
    _clock(monkeypatch)
    book_module.time.sleep = lambda seconds: pytest.fail("states() waited for a claim")
    book = LeaseBook(fed)
    assert book.states()["a"].epoch == 1 and book.workers("a") == {1: _record(fed, first)}


def test_each_participant_s_older_epochs_are_read_once_for_it() -> None:
    fed = _fed()
    writer = LeaseBook(fed)
    for client in ("a", "b"):  # a's records are stored first
        writer.claim(client, 1, _sign(fed, client))
        writer.claim(client, 2, _sign(fed, client, epoch=2))
    book = LeaseBook(fed)
    book.states()
    assert set(book.workers("a")) == {1, 2} and set(book.workers("b")) == {1, 2}


def test_a_live_worker_is_read_again_in_its_epoch_study() -> None:
    fed = _fed()
    writer = LeaseBook(fed)
    writer.claim("a", 1, _sign(fed))
    writer.claim("a", 2, _sign(fed, epoch=2))
    book = LeaseBook(fed)
    assert book.states()["a"].workers == 2
    writer.write("a", 1, _sign(fed, state="finished"))  # worker 1 ends ...
    writer.write("a", 2, _sign(fed, epoch=2))  # ... and worker 2 heartbeats after it
    assert book.states()["a"].workers == 1 and book.live_workers("a") == 1


def test_a_record_observed_live_at_any_time_counts_as_seen_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = _fed()
    record = _record(fed, _sign(fed))
    _clock(monkeypatch, wall=record.time + 100.0)  # the lease has expired since
    book = LeaseBook(fed)
    book._observe(record, record.time + 100.0)  # first seen expired ...
    assert not book.departed(["a"])
    book._observe(record, record.time)  # ... then the same record, at a time it was live
    assert book.departed(["a"])


def test_a_record_seen_only_in_the_leases_study_is_looked_for_in_its_epoch_study(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = _fed()
    writer = LeaseBook(fed)
    writer.claim("a", 1, _sign(fed))
    writer.claim("a", 2, _sign(fed, epoch=2))
    book = LeaseBook(fed)
    book.states()  # both confirmed in their epoch studies
    leases = fed.storage.get_study_id_from_name(writer.study_name)
    fed.storage.set_study_system_attr(leases, "l:a", _sign(fed, state="finished"))
    book.states()  # worker 1's newer record, from the leases study only
    writer.write("a", 2, _sign(fed, epoch=2))  # worker 2 heartbeats: the leases study moves on
    read = []
    real = LeaseBook._epoch_attrs
    monkeypatch.setattr(
        LeaseBook, "_epoch_attrs", lambda self, c, e: read.append(e) or real(self, c, e)
    )
    book.states()
    assert read[0] == 1  # not confirmed in epoch 1's study: looked for there again
