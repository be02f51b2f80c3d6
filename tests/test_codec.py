from __future__ import annotations

import json

import numpy as np
import pytest

from optuna_fedbo.federation._codec import base64_text
from optuna_fedbo.federation._codec import Base64Text
from optuna_fedbo.federation._codec import binary_frame
from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation._codec import decode_array
from optuna_fedbo.federation._codec import encode_array
from optuna_fedbo.federation._codec import split_frame


def _plain(value: object) -> object:
    """``value`` with every string a plain ``str`` (what json.dumps alone would write)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, str) else value


def test_canonical_json_writes_long_base64_unscanned_but_byte_for_byte_as_json_does() -> None:
    rng = np.random.default_rng(0)
    big = encode_array(rng.standard_normal(2000))
    assert isinstance(big["f8"], Base64Text)  # long: written unscanned
    record = {
        "zeta": 'é\u2028"quoted"\\\n',
        "alpha": 1.5e-300,
        "omega": big,
        "nested": {"b": [1, 2.5, None, True], "a": {"ct": base64_text(rng.bytes(5000))}},
        "ünïcode": -3,
        "short": base64_text(b"xy"),
    }
    text = canonical_json(record)
    expected = json.dumps(_plain(record), sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert text == expected
    assert type(base64_text(b"xy")) is str  # short texts stay plain
    np.testing.assert_array_equal(decode_array(json.loads(text)["omega"]), decode_array(big))


def test_a_binary_frame_is_a_canonical_json_line_then_raw_bytes() -> None:
    values = np.array([1.5, -0.0, 1e-300, 10.0])
    tail = values.astype("<f8").tobytes() + b"\n\x00"  # a newline in the tail is data
    frame = binary_frame({"b": "x\ny", "a": [1]}, tail[:8], tail[8:])
    assert frame.startswith(b'{"a":[1],"b":"x\\ny"}\n')  # sorted keys, the newline escaped
    assert split_frame(frame) == ({"a": [1], "b": "x\ny"}, tail)
    assert split_frame(binary_frame({})) == ({}, b"")
    for bad in ('{"a":1}\n', b'{"a":1}', b"{\n", b"\xff\n"):  # text, no newline, not JSON
        with pytest.raises(ValueError):
            split_frame(bad)
