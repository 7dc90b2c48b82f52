"""Request parameters: bad input is a BadRequest (400), never a crash."""

from __future__ import annotations

import pytest

from kiq.api.asgi import query
from kiq.api.errors import BadRequest
from kiq.api.params import (
    bool_param,
    check_key,
    decode_cursor,
    encode_cursor,
    int_param,
    key_from_path,
)
from kiq.stores.base import prefix_end
from kiq.tables import MAX_KEY_BYTES


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (b"user-1", b"user-1"),
        (b"a%20b", b"a b"),
        (b"a+b", b"a+b"),
        (b"a%2Fb", b"a/b"),
        (b"%25", b"%"),
        (b"%D0%BA%D0%BB%D1%8E%D1%87", "ключ".encode()),
        ("ключ".encode(), "ключ".encode()),
    ],
)
def test_key_from_path_percent_decodes(raw: bytes, key: bytes):
    assert key_from_path(raw) == key


def test_key_from_path_rejects_empty():
    with pytest.raises(BadRequest, match="empty"):
        key_from_path(b"")


def test_key_length_limit_counts_decoded_bytes():
    assert key_from_path(b"%41" * MAX_KEY_BYTES) == b"A" * MAX_KEY_BYTES
    assert key_from_path(b"x" * MAX_KEY_BYTES) == b"x" * MAX_KEY_BYTES
    with pytest.raises(BadRequest, match="longer") as info:
        key_from_path(b"x" * (MAX_KEY_BYTES + 1))
    assert info.value.status == 400
    assert info.value.details == {"length": MAX_KEY_BYTES + 1}


@pytest.mark.parametrize("raw", [b"%ff", b"a%C3", b"%C3%28", b"\xff", b"%ED%A0%80"])
def test_key_from_path_rejects_invalid_utf8(raw: bytes):
    with pytest.raises(BadRequest, match="UTF-8"):
        key_from_path(raw)


def test_check_key_passes_good_keys_through():
    assert check_key(b"k") == b"k"
    with pytest.raises(BadRequest):
        check_key(b"")


@pytest.mark.parametrize(("raw", "value"), [("0", 0), ("7", 7), ("100", 100)])
def test_int_param(raw: str, value: int):
    assert int_param({"n": raw}, "n", low=0, high=100) == value


def test_int_param_absent_or_empty_is_none():
    assert int_param({}, "n") is None
    assert int_param({"n": ""}, "n") is None
    assert int_param({"other": "5"}, "n") is None


@pytest.mark.parametrize("raw", ["-1", "101", str(2**64)])
def test_int_param_out_of_bounds(raw: str):
    with pytest.raises(BadRequest, match="between 0 and 100"):
        int_param({"n": raw}, "n", low=0, high=100)


def test_int_param_default_bounds():
    assert int_param({"n": str(2**62)}, "n") == 2**62
    with pytest.raises(BadRequest):
        int_param({"n": str(2**62 + 1)}, "n")
    with pytest.raises(BadRequest):
        int_param({"n": "-1"}, "n")


@pytest.mark.parametrize("raw", ["abc", "1.5", "1e3", "0x10", "ten", "5abc", "9" * 5000])
def test_int_param_junk(raw: str):
    with pytest.raises(BadRequest, match="n must be a whole number"):
        int_param({"n": raw}, "n")


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", "True", "yes", "Yes"])
def test_bool_param_true(raw: str):
    assert bool_param({"b": raw}, "b") is True


@pytest.mark.parametrize("raw", ["", "0", "false", "False", "no", "NO"])
def test_bool_param_false(raw: str):
    assert bool_param({"b": raw}, "b") is False


def test_bool_param_absent_is_false():
    assert bool_param({}, "b") is False


@pytest.mark.parametrize("raw", ["2", "maybe", "on", "t", " true"])
def test_bool_param_junk(raw: str):
    with pytest.raises(BadRequest, match="b must be true or false"):
        bool_param({"b": raw}, "b")


@pytest.mark.parametrize(
    "key",
    [
        b"",
        b"a",
        b"ab",
        b"abc",
        b"abcd",
        b"\xff\x00",
        b"\x00",
        b"\xff\xff\xff",
        b"\xfb\xff\xbf",  # encodes to "+/+/" in standard base64
        "ключ/🔑?&=".encode(),
        bytes(range(256)),
    ],
)
def test_cursor_round_trip(key: bytes):
    cursor = encode_cursor(key)
    assert decode_cursor(cursor) == key
    assert "=" not in cursor
    assert not set(cursor) & set("+/=?&% ")


@pytest.mark.parametrize("junk", ["!!!", "a", "abcde", "ab cd", "é", "ab==cd", "%41"])
def test_cursor_rejects_junk(junk: str):
    with pytest.raises(BadRequest, match="cursor is malformed"):
        decode_cursor(junk)


@pytest.mark.parametrize(
    ("prefix", "end"),
    [
        (b"abc", b"abd"),
        (b"a", b"b"),
        (b"a\xff", b"b"),
        (b"a\xff\xff", b"b"),
        (b"\x00", b"\x01"),
        (b"a\xfe", b"a\xff"),
        (b"\xff\xff", None),
        (b"\xff", None),
        (b"", None),
    ],
)
def test_prefix_end(prefix: bytes, end: bytes | None):
    assert prefix_end(prefix) == end


@pytest.mark.parametrize("prefix", [b"abc", b"a\xff", b"\x01\xff\x00", b"z"])
def test_prefix_end_bounds_exactly_the_keys_with_the_prefix(prefix: bytes):
    end = prefix_end(prefix)
    assert end is not None
    for suffix in (b"", b"\x00", b"\xff", b"\xff" * 8, b"zzz"):
        assert prefix <= prefix + suffix < end
    assert not end.startswith(prefix)


def test_a_query_is_parsed_once_per_request_and_again_when_it_changes():
    scope: dict = {"query_string": b"limit=5&order=desc"}
    first = query(scope)
    assert first == {"limit": "5", "order": "desc"} and query(scope) is first
    scope["query_string"] = b"limit=7"  # a scope rewritten on its way (a proxy's)
    assert query(scope) == {"limit": "7"}
    assert query({"query_string": b""}) == {}
