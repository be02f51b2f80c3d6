"""Direct tests of the ledger read as a hash chain (``_chain.read_chain``): what a high-water mark
compares. Each was written to kill mutants of ``benchmarks/mutation_trust.py``."""

from __future__ import annotations

import hashlib

from optuna_fedbo.federation._chain import entry_digest
from optuna_fedbo.federation._chain import LedgerHead
from optuna_fedbo.federation._chain import read_chain
from optuna_fedbo.federation._chain import RESTORE


def _entry(round_index: int, n: int, prev: str, **more: object) -> dict[str, object]:
    return {"round": round_index, "n_accounted": n, "prev": prev, "kind": "release", **more}


def _linked(count: int) -> tuple[dict[str, dict[str, object]], list[str]]:
    entries, digests, prev = {}, [], ""
    for i in range(count):
        body = _entry(i, i + 1, prev)
        entries[f"r:{i}"] = body
        prev = entry_digest(body)
        digests.append(prev)
    return entries, digests


def test_an_entry_digest_is_sha256_of_its_canonical_json() -> None:
    body = {"round": 1, "a": "x"}
    expected = hashlib.sha256(b'{"a":"x","round":1}').hexdigest()
    assert entry_digest(body) == expected
    assert entry_digest({"a": "x", "round": 1}) == expected  # key order does not matter


def test_an_empty_ledger_stands_nowhere() -> None:
    chain = read_chain({}, {})
    assert chain.head == LedgerHead(0, "", -1, 0)
    assert (chain.digests, chain.broken, chain.counted) == (frozenset(), (), 0)


def test_a_linked_ledger_heads_at_its_last_entry() -> None:
    entries, digests = _linked(3)
    chain = read_chain(entries, {})
    assert chain.head == LedgerHead(3, digests[-1], 2, 0)
    assert chain.digests == frozenset(digests) and chain.broken == () and chain.counted == 3


def test_an_entry_whose_predecessor_is_missing_breaks_the_chain() -> None:
    entries, digests = _linked(3)
    del entries["r:1"]
    chain = read_chain(entries, {})
    assert chain.broken == ("the predecessor of the entry of round 2 is missing",)
    assert chain.head.releases == 2 and chain.counted == 3  # counted: the most any entry said
    del entries["r:0"]  # the first entry (no predecessor) missing too
    assert read_chain(entries, {}).broken == chain.broken


def test_the_counted_releases_are_the_most_any_entry_counted() -> None:
    entries = {"a": _entry(0, 5, ""), "b": _entry(1, 2, ""), "c": {"round": 2, "prev": ""}}
    chain = read_chain(entries, {})
    assert chain.counted == 5 and chain.head.releases == 3
    assert chain.head.digest == entry_digest(entries["a"]) and chain.head.round == 0


def test_of_two_racing_heads_the_larger_digest_wins() -> None:
    entries, digests = _linked(1)
    one, two = _entry(1, 2, digests[0], epoch=1), _entry(1, 2, digests[0], epoch=2)
    entries.update(x=one, y=two)
    chain = read_chain(entries, {})
    assert chain.head.digest == max(entry_digest(one), entry_digest(two))
    assert chain.head.releases == 3 and chain.broken == ()
    no_round = read_chain({"z": {"n_accounted": 1}}, {})
    assert no_round.head.round == -1


def test_a_restore_entry_counts_what_it_carried_and_the_head_it_carried() -> None:
    entries, digests = _linked(2)
    carried_head = "c" * 64
    restore = _entry(5, 9, digests[-1], kind=RESTORE, carried=7, payload=carried_head)
    entries["s"] = restore
    chain = read_chain(entries, {})
    assert chain.head == LedgerHead(2 + 7, entry_digest(restore), 5, 1)
    assert carried_head in chain.digests and chain.counted == 9
    bare = read_chain({"s": {"kind": RESTORE, "n_accounted": 1}}, {})
    assert bare.head.releases == 0 and bare.head.restores == 1  # nothing carried: nothing counted


def test_a_cached_digest_is_reused_only_for_the_same_body_object() -> None:
    entries, digests = _linked(2)
    cache: dict[str, tuple[dict[str, object], str]] = {}
    read_chain(entries, cache)
    assert {key: value[1] for key, value in cache.items()} == {
        "r:0": digests[0],
        "r:1": digests[1],
    }
    changed = dict(entries["r:1"], round=7)  # same key, another body (rewritten in the storage)
    chain = read_chain({**entries, "r:1": changed}, cache)
    assert chain.head.digest == entry_digest(changed) != digests[1]
    assert cache["r:1"] == (changed, entry_digest(changed))
    stale = {"r:0": (entries["r:0"], "not the digest")}  # the same object: the cache is trusted
    assert read_chain({"r:0": entries["r:0"]}, stale).head.digest == "not the digest"


def test_every_restore_entry_counts() -> None:
    entries, digests = _linked(1)
    first = _entry(1, 3, digests[0], kind=RESTORE, carried=2, payload="a" * 64)
    second = _entry(2, 6, entry_digest(first), kind=RESTORE, carried=3, payload="b" * 64)
    entries.update(s1=first, s2=second)
    chain = read_chain(entries, {})
    assert chain.head == LedgerHead(1 + 2 + 3, entry_digest(second), 2, 2)
    assert {"a" * 64, "b" * 64} <= chain.digests


def test_an_entry_that_counts_nothing_adds_nothing_to_the_count() -> None:
    chain = read_chain({"a": {"round": 0, "kind": "release"}}, {})
    assert chain.counted == 0 and chain.head.releases == 1


def test_an_entry_that_counts_nothing_is_never_the_head_of_one_that_counts() -> None:
    counting = _entry(0, 1, "")
    # An entry without a count whose digest is larger (ties are broken by the digest).
    silent = next(
        body
        for body in ({"round": 0, "kind": "release", "note": i} for i in range(64))
        if entry_digest(body) > entry_digest(counting)
    )
    chain = read_chain({"a": counting, "b": silent}, {})
    assert chain.head.digest == entry_digest(counting)
