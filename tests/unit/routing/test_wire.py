"""The internal lookup batch encoding: msgpack arrays, compact and round-tripping."""

from __future__ import annotations

import msgspec
import pytest

from kiq.routing.wire import Lookup, LookupResult, decode_lookups, decode_results, encode


def test_lookups_round_trip_as_arrays():
    items = [Lookup("users", b"k\xc3\xa9", 5, 1234, 300), Lookup("users", b"k2")]
    body = encode(items)
    assert decode_lookups(body) == items
    # records are arrays, not maps: no field names travel
    assert msgspec.msgpack.decode(body) == [["users", b"k\xc3\xa9", 5, 1234, 300],
                                            ["users", b"k2", None, None, 0]]  # fmt: skip
    assert b"table" not in body and b"wait_ms" not in body


def test_results_round_trip_and_a_plain_lookup_costs_little_beyond_its_value():
    found = LookupResult(200, 7, 0, False, b"n2", 123_456, b'{"v":1}')
    results = [found, LookupResult(404, 3, 2, True, b"n2"), LookupResult(421, reason="no")]
    assert decode_results(encode(results)) == results
    overhead = len(encode([found])) - len(found.value)
    assert overhead <= 20
    assert len(encode([Lookup("users", b"K1234")])) <= 20


def test_a_short_record_takes_the_defaults_and_garbage_is_refused():
    assert decode_results(msgspec.msgpack.encode([[503]])) == [LookupResult(503)]
    with pytest.raises(msgspec.DecodeError):
        decode_lookups(b"\x91\xc1")
    with pytest.raises(msgspec.ValidationError):
        decode_lookups(msgspec.msgpack.encode([["users", "not-bytes", None, None, 0]]))
