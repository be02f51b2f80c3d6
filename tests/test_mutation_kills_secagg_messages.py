"""Protocol messages (``core/secagg/messages.py``), in process: a malformed record is refused
naming the field at fault, never with another error; ring elements parse back exactly, up to
2^64 - 1; a message naming someone outside the round, or another party, is refused; what a
participant signs is labelled as a secure-aggregation message of its kind (written to kill mutants
of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from optuna_fedbo.core.secagg.messages import AdvertiseKeys
from optuna_fedbo.core.secagg.messages import MaskedInput
from optuna_fedbo.core.secagg.messages import Message
from optuna_fedbo.core.secagg.messages import message_from_dict
from optuna_fedbo.core.secagg.messages import message_from_header
from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.messages import ShareBundle
from optuna_fedbo.core.secagg.messages import SurvivorList
from optuna_fedbo.core.secagg.messages import UnmaskResponse
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.setup import canonical_bytes
from optuna_fedbo.core.secagg.setup import RoundSetup

SETUP = RoundSetup(
    "fed", 1, ("p0", "p1", "p2"), 2, plan_ring(n_inputs=3, bound=1.0, step=1e-3, dimension=2)
)
BASE = Message.base_of(SETUP)
ADVERT = AdvertiseKeys(
    **BASE, sender="p0", channel_key=bytes(32), mask_key=bytes([1]) * 32, signature=bytes(64)
)


@pytest.mark.parametrize(
    ("message", "field", "value", "error"),
    [
        (ADVERT, "federation", 3, "federation is not a string"),
        (ADVERT, "round", True, "round is not an integer"),
        (ADVERT, "setup", None, "setup is not a string"),
        (ADVERT, "mask_key", "#", "secagg-advertise.mask_key is not valid base64"),
        (
            SurvivorList(**BASE, survivors=("p0", "p1")),
            "survivors",
            "p0",
            "secagg-survivors.survivors is not a list",
        ),
        (
            UnmaskResponse(**BASE, sender="p0", self_mask_shares={}, mask_key_shares={}),
            "self_mask_shares",
            {"p1": "#"},
            r"secagg-reveal.self_mask_shares\[p1\] is not valid base64",
        ),
        (
            MaskedInput(**BASE, sender="p0", masked=np.zeros(2, dtype=np.uint64)),
            "masked",
            "#",
            "secagg-masked.masked is not valid base64",
        ),
    ],
)
def test_a_malformed_field_is_refused_by_name(
    message: Message, field: str, value: object, error: str
) -> None:
    with pytest.raises(MessageRejected, match=f"^{error}"):
        message_from_dict({**message.to_dict(), field: value})


def test_a_record_of_another_kind_or_no_record_is_refused_as_such() -> None:
    with pytest.raises(MessageRejected, match="not a secagg-masked message"):
        MaskedInput.from_dict(ADVERT.to_dict())
    for record in ("secagg-advertise", ["kind"], None):
        with pytest.raises(MessageRejected, match="unknown secure-aggregation message kind"):
            message_from_dict(record)


def test_ring_elements_parse_back_exactly() -> None:
    top = np.array([2**64 - 1, 2**53 + 1], dtype=np.uint64)
    parsed = message_from_dict(MaskedInput(**BASE, sender="p0", masked=top).to_dict())
    assert parsed.masked.dtype == np.uint64
    assert parsed.masked.tolist() == [2**64 - 1, 2**53 + 1]


def test_a_message_naming_another_party_is_refused() -> None:
    ADVERT.check_bound(SETUP, "p0")
    with pytest.raises(MessageRejected, match="names 'mallory', not a participant"):
        replace(ADVERT, sender="mallory").check_bound(SETUP)
    with pytest.raises(MessageRejected, match="names 'p0', expected 'p1'"):
        ADVERT.check_bound(SETUP, "p1")
    with pytest.raises(MessageRejected, match="names None, not a participant"):
        replace(ADVERT, sender="").check_bound(SETUP)
    bundle = ShareBundle(**BASE, recipient="p2", sealed={})
    with pytest.raises(MessageRejected, match="names 'p2', expected 'p1'"):
        bundle.check_bound(SETUP, "p1")


def test_what_a_participant_signs_is_labelled_with_its_kind() -> None:
    record = ADVERT.to_dict()
    del record["signature"]
    assert ADVERT.signed_payload() == canonical_bytes({"secagg": "secagg-advertise", **record})


def test_a_binary_frame_carries_ring_elements_raw_and_exactly() -> None:
    elements = np.array([0, 1, 2**63, 2**64 - 1], dtype=np.uint64)
    setup = RoundSetup(
        "fed", 1, ("p0", "p1", "p2"), 2, plan_ring(n_inputs=3, bound=1.0, step=1e-3, dimension=4)
    )
    message = MaskedInput(**Message.base_of(setup), sender="p0", masked=elements)
    header, blobs = message.to_header()
    assert header["masked"] == 32 and blobs == [elements.astype("<u8").tobytes()]
    parsed = message_from_header(header, b"".join(blobs))
    assert parsed.masked.dtype == np.uint64 and np.array_equal(parsed.masked, elements)
    assert parsed.to_dict() == message.to_dict()
    # Messages without vectors carry no bytes; one without a frame parses as before.
    header, blobs = ADVERT.to_header()
    assert blobs == [] and message_from_header(header, b"") == ADVERT
    assert header == ADVERT.to_dict()


@pytest.mark.parametrize(
    ("length", "tail", "error"),
    [
        (31, bytes(31), "not a vector of 64-bit ring elements"),
        (40, bytes(32), "not a vector of 64-bit ring elements"),
        (-8, bytes(32), "not a vector of 64-bit ring elements"),
        ("32", bytes(32), "secagg-masked.masked is not an integer"),
        (24, bytes(32), "carries 8 stray bytes"),
    ],
)
def test_a_malformed_binary_frame_is_refused(length: object, tail: bytes, error: str) -> None:
    message = MaskedInput(**BASE, sender="p0", masked=np.zeros(2, dtype=np.uint64))
    header, _ = message.to_header()
    with pytest.raises(MessageRejected, match=error):
        message_from_header({**header, "masked": length}, tail)
    with pytest.raises(MessageRejected, match="stray bytes"):
        message_from_header(ADVERT.to_header()[0], b"\0")
