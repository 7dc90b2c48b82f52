"""A partition's index read on this node (``LocalReplicas.by_index``) and on the wire
(``ByIndex``, ``IndexResult``): bounds, the cursor as a bound only, the count, aged keys."""

from __future__ import annotations

import asyncio

import msgspec
import orjson

from kiq.peers.wire import (
    NOT_COUNTED,
    ByIndex,
    IndexResult,
    Source,
    decode_by_index,
    decode_index_result,
    encode,
)
from kiq.replicas import Replica, ReplicaState, Role
from kiq.routing.local import LocalReplicas, past_cursor
from kiq.stores import MemoryPartitionStore
from kiq.stores.index import encode_number, range_bounds
from tests.unit.indexed_store import IndexedMemoryStore

PRICES = {f"k{i}".encode(): float(i % 4) for i in range(12)}


def here(store: MemoryPartitionStore) -> LocalReplicas:
    store.apply([(k, orjson.dumps({"price": p}), i) for i, (k, p) in enumerate(PRICES.items())], 11)
    replica = Replica("t", "topic-t", 0, store, Role.ACTIVE)
    replica.state, replica.end_offset = ReplicaState.ACTIVE, 12
    return LocalReplicas("n1", {("t", 0): replica})


def entries(low: float | None = None, high: float | None = None) -> list[bytes]:
    inside = [
        encode_number(p) + k
        for k, p in PRICES.items()
        if (low is None or p >= low) and (high is None or p <= high)
    ]
    return sorted(inside)


def read(local: LocalReplicas, asked: ByIndex) -> IndexResult | None:
    return asyncio.run(local.by_index(asked))


def test_a_page_of_the_index_in_either_order_with_its_count():
    local = here(IndexedMemoryStore(index=("price",)))
    start, end = range_bounds("number", 1, 2)
    up = read(local, ByIndex("t", 0, "price", start, end, 4, count=True))
    assert up is not None and [e for e, _, _ in up.items] == entries(1, 2)[:4]
    assert up.count == len(entries(1, 2)) and up.field == "price" and not up.reverse
    assert [k for _, k, _ in up.items] == [e[9:] for e in entries(1, 2)[:4]]
    assert up.source == Source(0, 0, False, 11, b"n1")
    down = read(local, ByIndex("t", 0, "price", start, end, 100, reverse=True))
    assert down is not None and [e for e, _, _ in down.items] == entries(1, 2)[::-1]
    assert down.reverse and down.count == NOT_COUNTED


def test_the_cursor_narrows_the_page_but_not_the_count():
    local = here(IndexedMemoryStore(index=("price",)))
    start, end = range_bounds("number", None, None)
    every = entries()
    for cut in (0, 5, len(every) - 1):
        up = read(local, ByIndex("t", 0, "price", start, end, 100, count=True, cursor=every[cut]))
        assert up is not None and [e for e, _, _ in up.items] == every[cut + 1 :]
        assert up.count == len(every)
        down = read(local, ByIndex("t", 0, "price", start, end, 100, True, cursor=every[cut]))
        assert down is not None and [e for e, _, _ in down.items] == every[:cut][::-1]


def test_a_cursor_is_only_ever_a_bound():
    assert past_cursor(b"b", b"d", None, False) == (b"b", b"d")
    assert past_cursor(b"b", b"d", b"a", False) == (b"b", b"d")  # below: the bounds stay
    assert past_cursor(b"b", b"d", b"c", False) == (b"c\x00", b"d")
    assert past_cursor(b"b", b"d", b"z", True) == (b"b", b"d")  # above, descending
    assert past_cursor(b"b", b"d", b"c", True) == (b"b", b"c")
    assert past_cursor(None, None, b"c", False) == (b"c\x00", None)
    local = here(IndexedMemoryStore(index=("price",)))
    start, end = range_bounds("number", 1, 1)
    past = read(local, ByIndex("t", 0, "price", start, end, 10, count=True, cursor=b"\xff"))
    assert past is not None and past.items == [] and past.count == len(entries(1, 1))


def test_a_replica_without_that_index_does_not_answer():
    assert read(here(MemoryPartitionStore()), ByIndex("t", 0, "price")) is None
    assert read(here(IndexedMemoryStore(index=("price",))), ByIndex("t", 0, "hotel")) is None
    assert read(here(IndexedMemoryStore(index=("price",))), ByIndex("t", 1, "price")) is None


def test_the_records_round_trip_and_an_older_ask_decodes_with_defaults():
    asked = ByIndex("t", 3, "price", b"\x02", b"\x03", 7, True, True, 5, -1, 40, b"\x02k")
    assert decode_by_index(encode(asked)) == asked
    older = msgspec.msgpack.encode(["t", 3, "price", None, None, 10, False])
    assert decode_by_index(older) == ByIndex("t", 3, "price", limit=10)
    answer = IndexResult([(b"e", b"k", b"{}")], Source(3), True, 4, "price")
    assert decode_index_result(encode(answer)) == answer
    assert msgspec.msgpack.decode(encode(answer))[3:] == [4, "price"]  # arrays: no names
