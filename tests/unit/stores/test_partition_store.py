"""The PartitionStore contract, run against every implementation."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq.errors import StoreClosedError
from kiq.stores import MemoryBudget, MemoryPartitionStore, PartitionStore, RocksDBPartitionStore


@pytest.fixture(params=["rocksdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PartitionStore]:
    s: PartitionStore
    if request.param == "rocksdb":
        s = RocksDBPartitionStore(tmp_path / "p0", MemoryBudget())
    else:
        s = MemoryPartitionStore()
    yield s
    s.close()


def test_starts_empty(store: PartitionStore):
    assert store.applied_offset() == -1
    assert store.get(b"k") is None
    assert store.scan() == []
    assert store.count() == 0


def test_put_overwrite_delete(store: PartitionStore):
    store.apply([(b"a", b'{"x":1}', 10), (b"b", b"", 11)], 11)
    assert store.get(b"a") == (b'{"x":1}', 10)
    assert store.get(b"b") == (b"", 11)  # empty value is not a delete

    store.apply([(b"a", b'{"x":2}', 12), (b"b", None, 13), (b"zz", None, 14)], 14)
    assert store.get(b"a") == (b'{"x":2}', 12)
    assert store.get(b"b") is None
    assert store.get(b"zz") is None
    assert store.applied_offset() == 14


def test_later_item_in_a_batch_wins(store: PartitionStore):
    store.apply([(b"k", b"1", 1), (b"k", b"2", 2), (b"j", b"x", 3), (b"j", None, 4)], 4)
    assert store.get(b"k") == (b"2", 2)
    assert store.get(b"j") is None


def test_empty_batch_advances_offset(store: PartitionStore):
    store.apply([(b"a", b"1", 3)], 3)
    store.apply([], 9)
    assert store.applied_offset() == 9
    assert store.get(b"a") == (b"1", 3)


def test_large_offsets_round_trip(store: PartitionStore):
    big = 2**63 - 1
    store.apply([(b"a", b"v", big)], big)
    assert store.get(b"a") == (b"v", big)
    assert store.applied_offset() == big


KEYS = [b"", b"a", b"a\x00", b"ab", b"abc", b"b", b"z", "é".encode(), "東京".encode(), b"\xff"]


def _fill(store: PartitionStore) -> None:
    # Applied shuffled, so any ordering the test sees comes from the store.
    shuffled = KEYS[::2] + KEYS[1::2]
    store.apply([(k, b"v" + k, i) for i, k in enumerate(shuffled)], len(shuffled))


def test_scan_is_in_byte_order(store: PartitionStore):
    _fill(store)
    got = store.scan()
    assert [k for k, _, _ in got] == sorted(KEYS)
    # "é" is c3 a9 and "東" is e6 9d b1: multi-byte UTF-8 sorts by bytes, after ASCII.
    assert [k for k, _, _ in got][-3:] == ["é".encode(), "東京".encode(), b"\xff"]
    assert all(v == b"v" + k for k, v, _ in got)


def test_scan_prefix_range(store: PartitionStore):
    _fill(store)
    assert [k for k, _, _ in store.scan(b"a", b"b")] == [b"a", b"a\x00", b"ab", b"abc"]
    assert [k for k, _, _ in store.scan(b"ab", b"ab\xff")] == [b"ab", b"abc"]


def test_scan_start_inclusive_end_exclusive_limit(store: PartitionStore):
    _fill(store)
    assert [k for k, _, _ in store.scan(start=b"ab")][:2] == [b"ab", b"abc"]
    assert [k for k, _, _ in store.scan(end=b"a\x00")] == [b"", b"a"]
    assert [k for k, _, _ in store.scan(start=b"aa", end=b"z")] == [b"ab", b"abc", b"b"]
    assert [k for k, _, _ in store.scan(limit=3)] == [b"", b"a", b"a\x00"]
    assert store.scan(start=b"b", end=b"a") == []
    assert store.scan(limit=0) == []


def test_scan_returns_offsets(store: PartitionStore):
    store.apply([(b"x", b"1", 40), (b"y", b"2", 41)], 41)
    assert store.scan() == [(b"x", b"1", 40), (b"y", b"2", 41)]


def test_offset_never_shows_in_scans(store: PartitionStore):
    store.apply([], 5)
    assert store.scan() == []
    store.apply([(b"k", b"v", 6)], 6)
    assert store.scan() == [(b"k", b"v", 6)]
    assert store.count() == 1


def test_count_and_size(store: PartitionStore):
    store.apply([(b"k%04d" % i, b"x" * 100, i) for i in range(500)], 499)
    assert store.count() == 500
    assert store.size_bytes() > 0


def test_wipe_clears_data_and_offset(store: PartitionStore):
    _fill(store)
    store.wipe()
    assert store.applied_offset() == -1
    assert store.scan() == []
    assert all(store.get(k) is None for k in KEYS)
    assert store.count() == 0
    # still usable
    store.apply([(b"\xff\xff", b"again", 0)], 0)
    assert store.scan() == [(b"\xff\xff", b"again", 0)]
    assert store.applied_offset() == 0


def test_closed_store_refuses_calls(store: PartitionStore):
    store.apply([(b"k", b"v", 0)], 0)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreClosedError):
        store.get(b"k")
    with pytest.raises(StoreClosedError):
        store.scan()
    with pytest.raises(StoreClosedError):
        store.apply([(b"k", b"w", 1)], 1)


def test_reads_during_writes(store: PartitionStore):
    n, batch_size = 20_000, 500
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for start in range(0, n, batch_size):
                batch = [(b"k%06d" % i, b"v%d" % i, i) for i in range(start, start + batch_size)]
                store.apply(batch, start + batch_size - 1)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def reader() -> None:
        try:
            i = 0
            while not done.is_set():
                key = b"k%06d" % (i % n)
                got = store.get(key)
                assert got is None or got == (b"v%d" % (i % n), i % n)
                page = store.scan(start=key, limit=50)
                assert [k for k, _, _ in page] == sorted(k for k, _, _ in page)
                i += 7919
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert store.applied_offset() == n - 1
    assert store.count() == n
    everything = store.scan(limit=n + 1)
    assert len(everything) == n
    assert everything[0] == (b"k000000", b"v0", 0)
    assert everything[-1] == (b"k%06d" % (n - 1), b"v%d" % (n - 1), n - 1)
