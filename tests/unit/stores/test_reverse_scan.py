"""``scan(..., reverse=True)``: the same keys as a forward scan, highest first, on every store."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq.errors import StoreClosedError
from kiq.stores import MemoryBudget, MemoryPartitionStore, PartitionStore, RocksDBPartitionStore

KEYS = [b"", b"a", b"a\x00", b"ab", b"abc", b"b", b"z", "é".encode(), "東京".encode(), b"\xff"]


@pytest.fixture(params=["rocksdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PartitionStore]:
    s: PartitionStore
    if request.param == "rocksdb":
        s = RocksDBPartitionStore(tmp_path / "p0", MemoryBudget())
    else:
        s = MemoryPartitionStore()
    shuffled = KEYS[::2] + KEYS[1::2]
    s.apply([(k, b"v" + k, i) for i, k in enumerate(shuffled)], len(shuffled))
    yield s
    s.close()


def keys(rows: list[tuple[bytes, bytes, int]]) -> list[bytes]:
    return [k for k, _, _ in rows]


def test_a_reverse_scan_is_in_descending_byte_order_with_values_and_offsets(store):
    got = store.scan(reverse=True)
    assert keys(got) == sorted(KEYS, reverse=True)
    assert all(v == b"v" + k for k, v, _ in got)
    assert sorted(got) == sorted(store.scan())  # the same rows, offsets included


def test_start_stays_inclusive_and_end_exclusive(store):
    assert keys(store.scan(b"a", b"b", reverse=True)) == [b"abc", b"ab", b"a\x00", b"a"]
    assert keys(store.scan(end=b"a\x00", reverse=True)) == [b"a", b""]
    high = ["é".encode(), "東京".encode(), b"\xff"]
    assert keys(store.scan(start="é".encode(), reverse=True)) == high[::-1]
    assert keys(store.scan(start=b"aa", end=b"z", reverse=True)) == [b"b", b"abc", b"ab"]
    # An end that is no key, and one past every key.
    assert keys(store.scan(end=b"ac", reverse=True))[:2] == [b"abc", b"ab"]
    assert keys(store.scan(end=b"\xff\xff", reverse=True))[0] == b"\xff"


def test_the_limit_takes_the_highest_keys(store):
    assert keys(store.scan(limit=3, reverse=True)) == [b"\xff", "東京".encode(), "é".encode()]
    assert keys(store.scan(b"a", b"b", limit=2, reverse=True)) == [b"abc", b"ab"]
    assert store.scan(limit=0, reverse=True) == []
    assert store.scan(start=b"b", end=b"a", reverse=True) == []
    assert store.scan(start=b"b", end=b"b", reverse=True) == []


def test_deleted_keys_are_not_seen_backwards(store):
    store.apply([(b"ab", None, 50), (b"z", None, 51)], 51)
    assert keys(store.scan(b"a", b"zz", reverse=True)) == [b"b", b"abc", b"a\x00", b"a"]


def test_paging_backwards_by_the_last_key_visits_every_key_once(store):
    rng = random.Random(7)
    many = {bytes(rng.randrange(97, 100) for _ in range(rng.randrange(1, 5))) for _ in range(300)}
    store.apply([(k, b"x", i) for i, k in enumerate(many)], len(many))
    everything = keys(store.scan(limit=10_000))
    seen: list[bytes] = []
    end = None
    while True:
        page = keys(store.scan(end=end, limit=7, reverse=True))
        seen += page
        if len(page) < 7:
            break
        end = page[-1]  # the next page: keys below the last one given
    assert seen == everything[::-1]


def test_a_closed_store_refuses_a_reverse_scan(store):
    store.close()
    with pytest.raises(StoreClosedError):
        store.scan(reverse=True)
