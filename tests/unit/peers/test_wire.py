"""The node-to-node records: msgpack, compact, round-tripping, and strict about their types."""

from __future__ import annotations

import msgspec
import pytest

from kiq.peers.wire import (
    Lookup,
    LookupResult,
    Multiget,
    MultigetResult,
    NodeStatus,
    Outcome,
    ReplicaStatus,
    Scan,
    ScanResult,
    decode_lookups,
    decode_multiget,
    decode_multiget_result,
    decode_node_status,
    decode_results,
    decode_scan,
    decode_scan_result,
    encode,
)
from kiq.replicas import Replica, Role
from kiq.stores import MemoryPartitionStore


def test_lookups_round_trip_as_arrays():
    items = [Lookup("users", b"k\xc3\xa9", 5, 1234, 300), Lookup("users", b"k2")]
    body = encode(items)
    assert decode_lookups(body) == items
    # records are arrays, not maps: no field names travel
    arrays = [["users", b"k\xc3\xa9", 5, 1234, 300], ["users", b"k2", None, None, 0]]
    assert msgspec.msgpack.decode(body) == arrays
    assert b"table" not in body and b"wait_ms" not in body


def test_results_round_trip_and_a_plain_lookup_costs_little_beyond_its_value():
    found = LookupResult(Outcome.FOUND, 7, 0, False, b"n2", 123_456, b'{"v":1}')
    missing = LookupResult(Outcome.MISSING, 3, 2, True, b"n2")
    results = [found, missing, LookupResult(Outcome.MOVED, reason="no")]
    decoded = decode_results(encode(results))
    assert decoded == results
    assert all(type(r.outcome) is Outcome for r in decoded)
    overhead = len(encode([found])) - len(found.value)
    assert overhead <= 19
    assert len(encode([Lookup("users", b"K1234")])) <= 20


def test_an_outcome_travels_as_a_one_byte_int_and_an_unknown_one_is_refused():
    record = msgspec.msgpack.decode(encode(LookupResult(Outcome.UNAVAILABLE)))
    assert record == [4, -1, 0, False, b"", -1, b"", "", -1]
    traveling = [o for o in Outcome if o > 0]
    assert all(len(msgspec.msgpack.encode(int(o))) == 1 for o in Outcome)
    assert [decode_results(encode([LookupResult(o)]))[0].outcome for o in traveling] == traveling
    with pytest.raises(msgspec.ValidationError):
        decode_results(msgspec.msgpack.encode([[200]]))  # an HTTP status is no outcome


def test_a_result_of_an_older_node_decodes_without_its_applied_offset():
    older = [1, 3, 0, False, b"n2", 7, b"{}", ""]  # before ``applied`` was added
    (result,) = decode_results(msgspec.msgpack.encode([older]))
    assert (result.outcome, result.offset, result.applied) == (Outcome.FOUND, 7, -1)
    newer = LookupResult(Outcome.MISSING, 3, served_by=b"n1", applied=41)
    assert decode_results(encode([newer])) == [newer]


def test_a_short_record_takes_the_defaults_and_garbage_is_refused():
    assert decode_results(msgspec.msgpack.encode([[4]])) == [LookupResult(Outcome.UNAVAILABLE)]
    with pytest.raises(msgspec.DecodeError):
        decode_lookups(b"\x91\xc1")
    with pytest.raises(msgspec.ValidationError):
        decode_lookups(msgspec.msgpack.encode([["users", "not-bytes", None, None, 0]]))


def test_multiget_and_scan_records_round_trip_with_values_as_stored_bytes():
    ask = Multiget("t", [b"a", b"\xc3\xa9"])
    assert decode_multiget(encode(ask)) == ask
    answer = MultigetResult([(b"a", b'{"x":1}'), (b"b", b"\x00\xff")], refused=[2, 5])
    assert decode_multiget_result(encode(answer)) == answer
    assert decode_multiget_result(encode(MultigetResult())) == MultigetResult([], [])
    scan = Scan("t", 3, None, b"\xff", 10)
    assert decode_scan(encode(scan)) == scan
    page = ScanResult([(b"k1", b"v1"), (b"k2", b"")])
    assert decode_scan_result(encode(page)) == page
    with pytest.raises(msgspec.ValidationError):
        decode_scan(encode(["t", "three"]))


def test_a_node_status_carries_what_a_replica_says_of_itself():
    replica = Replica("t", "topic-t", 4, MemoryPartitionStore(), Role.STANDBY)
    described = replica.describe()
    status = NodeStatus("n2", 9, [ReplicaStatus.of(described)])
    decoded = decode_node_status(encode(status))
    assert decoded == status
    assert decoded.replicas[0].as_dict() == described  # field for field, nothing lost
    with pytest.raises(msgspec.ValidationError):  # the two drifting apart shows at once
        ReplicaStatus.of({**described, "lag": "a lot"})
