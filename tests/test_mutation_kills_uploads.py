"""The server's upload collection (``_uploads.UploadCollector``), in process, one behaviour per
test: each stored text is opened once, replays are only older counters, a refused upload loses
its receipt and is logged once per text, receipts are the participants' own, and the round's
timeout is measured from its first valid upload (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from optuna_fedbo.federation import _uploads
from optuna_fedbo.federation._uploads import UploadCollector
from optuna_fedbo.federation._uploads import UploadRejected

#: stored text -> (counter, plaintext); any other text is refused as forged.
_STORED = {
    "sealed-a1": (1, b"a1"),
    "sealed-a2": (2, b"a2"),
    "resealed-a2": (2, b"a2'"),
    "sealed-b1": (1, b"b1"),
    "sealed-bad": (3, b"bad"),
}


def _receipt(text: str) -> str:
    """The receipt the fake opener gives a text (the participant's own, as the signed
    message's digest is)."""
    return "receipt-of-" + text


class _Opener:
    """A fake ``open_upload`` that counts how often each text is opened."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def __call__(self, client_id: str, text: str, round_index: int) -> tuple[int, bytes, str]:
        self.opened.append(text)
        if text not in _STORED:
            raise UploadRejected("bad signature")
        return (*_STORED[text], _receipt(text))


def _parse(client_id: str, plaintext: bytes, receipt: str) -> str:
    if plaintext == b"bad":
        raise UploadRejected("not a vector")
    return plaintext.decode()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_each_stored_text_is_opened_once_across_polls() -> None:
    opener = _Opener()
    collector: UploadCollector[str] = UploadCollector(opener)
    for _ in range(3):
        valid, rejected = collector.collect({"a": "sealed-a1", "b": "forged"}, 0, _parse)
        assert valid == {"a": "a1"} and rejected == (("b", "bad signature"),)
    assert sorted(opener.opened) == ["forged", "sealed-a1"]  # no decryption per poll
    # A new text under the same participant is opened (the cache is by text, per participant).
    valid, _ = collector.collect({"a": "sealed-a2", "b": "forged"}, 0, _parse)
    assert valid == {"a": "a2"} and opener.opened.count("sealed-a2") == 1


def test_only_a_refused_text_is_digested_and_once_across_polls(monkeypatch) -> None:
    """A pooled upload is several hundred kilobytes: a valid one's receipt is the opener's
    (the digest of what its participant signed), never a pass over the text; a refused one's
    digest (to log it once) is computed when its text is first seen, not at every poll."""
    digested: list[bytes] = []
    sha256 = _uploads.hashlib.sha256

    def counted(data: bytes):  # noqa: ANN202
        digested.append(data)
        return sha256(data)

    monkeypatch.setattr(_uploads, "hashlib", SimpleNamespace(sha256=counted))
    collector: UploadCollector[str] = UploadCollector(_Opener())
    for _ in range(3):
        collector.collect({"a": "sealed-a1", "b": "forged"}, 0, _parse)
    assert digested == [b"forged"]
    assert collector.receipts == {"a": _receipt("sealed-a1")}


def test_the_parser_gets_the_receipt_of_the_text_it_parses() -> None:
    """FTS names held statistics by the receipt of the upload that carried them."""
    seen: list[tuple[str, bytes, str]] = []

    def parse(client_id: str, plaintext: bytes, receipt: str) -> str:
        seen.append((client_id, plaintext, receipt))
        return plaintext.decode()

    collector: UploadCollector[str] = UploadCollector(_Opener())
    collector.collect({"a": "sealed-a1", "b": "sealed-b1"}, 0, parse)
    assert seen == [("a", b"a1", _receipt("sealed-a1")), ("b", b"b1", _receipt("sealed-b1"))]


def test_only_an_older_counter_is_a_replay() -> None:
    collector: UploadCollector[str] = UploadCollector(_Opener())
    assert collector.collect({"a": "sealed-a2"}, 0, _parse)[0] == {"a": "a2"}
    # The newest counter written again (sealed again, so another text) is the current upload.
    valid, rejected = collector.collect({"a": "resealed-a2"}, 0, _parse)
    assert valid == {"a": "a2'"} and rejected == ()
    # An older one is a replay: refused, and the participant has no valid upload.
    valid, rejected = collector.collect({"a": "sealed-a1"}, 0, _parse)
    assert valid == {} and rejected[0][0] == "a" and "replayed" in rejected[0][1]


def test_a_refused_upload_loses_its_receipt_and_receipts_are_the_participants() -> None:
    collector: UploadCollector[str] = UploadCollector(_Opener())
    collector.collect({"a": "sealed-a1", "b": "sealed-b1"}, 0, _parse)
    # The receipt is what the participant computes of what it sent (Federation.upload): the
    # opener's, untouched.
    assert collector.receipts == {"a": _receipt("sealed-a1"), "b": _receipt("sealed-b1")}
    valid, _ = collector.collect({"a": "sealed-bad", "b": "sealed-b1"}, 0, _parse)
    assert valid == {"b": "b1"}
    assert collector.receipts == {"b": _receipt("sealed-b1")}  # a's is gone


def test_each_refused_text_is_logged_once_with_its_reason(caplog) -> None:
    collector: UploadCollector[str] = UploadCollector(_Opener())
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            collector.collect({"a": "forged-1"}, 4, _parse)
        assert _warnings(caplog) == ["Rejected the upload of 'a' in round 4: bad signature."]
        collector.collect({"a": "forged-2"}, 4, _parse, " (phase 2)")  # another text: again
    assert _warnings(caplog)[1:] == [
        "Rejected the upload of 'a' in round 4 (phase 2): bad signature."
    ]


def test_the_timeout_runs_from_the_first_valid_upload(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(_uploads, "time", SimpleNamespace(monotonic=lambda: now[0]))
    collector: UploadCollector[str] = UploadCollector(_Opener())
    assert not collector.waited(0.0) and collector.first_seen is None  # nothing arrived yet
    collector.collect({"a": "forged"}, 0, _parse)
    assert collector.first_seen is None  # a refused upload starts no clock
    collector.collect({"a": "sealed-a1"}, 0, _parse)
    assert collector.first_seen == 100.0
    now[0] = 104.0
    collector.collect({"a": "sealed-a1", "b": "sealed-b1"}, 0, _parse)
    assert collector.first_seen == 100.0  # the first one, not the newest
    assert not collector.waited(5.0) and not collector.waited(None)
    now[0] = 105.0
    assert collector.waited(5.0)  # exactly the timeout: closed
