"""proxy.json_parse gives what json.loads gives, value for value and error for error."""

from __future__ import annotations

import json

import pytest

from proxy import json_parse

SAME = [
    b'{"model": "gpt-5.4", "input": [{"role": "user", "content": "h\\u00e9llo \xe2\x9c\x93"}]}',
    b'{"a": 1, "a": 2}',
    b"[0.1, 1.7976931348623157e308, 5e-324, -0.0, 1e-7]",
    b"[123456789012345678901234567890, -9223372036854775809, 9223372036854775807]",
    b"[NaN, Infinity, -Infinity, 1e400]",
    b'["\\ud800", "\\udfff"]',
    "[1, 2]".encode("utf-16"),
    '{"text": "lone \ud800 surrogate"}',
    '{"text": "a str"}',
]
REFUSED = [b"", b"{", b'{"a": 1,}', b"[1] [2]", b"\xff\xfe\x00", b"[" * 100_000]


@pytest.mark.parametrize("text", SAME)
def test_the_same_value_as_json_loads(text):
    expected = json.loads(text)
    found = json_parse.loads(text)

    assert repr(found) == repr(expected)  # repr: nan == nan is False, and 1 == 1.0 is True


@pytest.mark.parametrize("text", REFUSED)
def test_the_same_refusal_as_json_loads(text):
    with pytest.raises((ValueError, RecursionError)) as expected:
        json.loads(text)
    with pytest.raises(type(expected.value)):
        json_parse.loads(text)
