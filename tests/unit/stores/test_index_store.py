"""Secondary indexes kept by both stores (``index``), checked against a reference computed
here from the values with ``json`` and plain Python ordering (numbers before texts, ties
by key), never from the stores' own encoding."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

import kiq.stores.rocksdb as rocksdb
from kiq.stores import (
    MemoryBudget,
    MemoryPartitionStore,
    PartitionStore,
    RocksDBPartitionStore,
    open_partition_store,
)
from kiq.stores.index import MAX_TEXT, equal_bounds, key_of, range_bounds, value_of

BUDGET = MemoryBudget.of_mib(32)
FIELDS = ("hotel", "price")
KEYS = [f"k{i:03d}".encode() for i in range(80)]
HOTELS = ["", "Alpha", "alpha", "Beta", "Zed", "é-hotel", "a\x00b", "a"]


def _doc(rng: random.Random) -> bytes:
    """A value whose fields are indexable or not, each way a value can fail to be."""
    doc: dict[str, object] = {"guest": rng.randint(0, 9)}
    hotel = rng.random()
    if hotel < 0.7:
        doc["hotel"] = rng.choice(HOTELS)
    elif hotel < 0.8:
        doc["hotel"] = rng.choice([None, True, 3, ["x"], {"a": 1}])
    price = rng.random()
    if price < 0.7:
        doc["price"] = rng.choice([rng.randint(-5, 5), rng.uniform(-5, 5), 0, -0.0, 2.0, 2])
    elif price < 0.8:
        doc["price"] = rng.choice([None, False, "3", [1]])
    return json.dumps(doc).encode()


def _indexed(value: bytes, field: str) -> tuple[int, float | bytes] | None:
    """The reference: (0, number) or (1, UTF-8 text) of ``value``'s field, None if none."""
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    found = doc.get(field)
    if isinstance(found, str):
        raw = found.encode()
        return (1, raw) if len(raw) <= MAX_TEXT else None
    if isinstance(found, bool) or not isinstance(found, int | float):
        return None
    try:
        number = float(found)
    except OverflowError:
        return None
    return (0, number) if math.isfinite(number) else None


def _reference(state: dict[bytes, bytes], field: str) -> list[tuple[tuple[int, object], bytes]]:
    """(indexed value, key) of every key with an entry of ``field``, in index order."""
    out: list[tuple[tuple[int, object], bytes]] = []
    for key, value in state.items():
        found = _indexed(value, field)
        if found is not None:
            out.append((found, key))
    out.sort(key=lambda item: (item[0][0], item[0][1], item[1]))
    return out


def _plain(found: str | float) -> tuple[int, object]:
    return (1, found.encode()) if isinstance(found, str) else (0, float(found))


def _keys(rows: list[tuple[bytes, bytes, bytes, int]]) -> list[bytes]:
    return [key for _, key, _, _ in rows]


@pytest.fixture(params=["rocksdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PartitionStore]:
    s = open_partition_store(request.param, tmp_path, "t", 0, BUDGET, None, FIELDS)
    yield s
    s.close()


def _check(store: PartitionStore, state: dict[bytes, bytes], rng: random.Random) -> None:
    for field in FIELDS:
        want = _reference(state, field)
        rows = store.index_scan(field, None, None, 1000)
        assert _keys(rows) == [key for _, key in want]
        for entry, key, value, _ in rows:
            assert key_of(entry) == key and value == state[key]
            assert _plain(value_of(entry)) == next(v for v, k in want if k == key)
        assert _keys(store.index_scan(field, None, None, 1000, reverse=True)) == [
            key for _, key in reversed(want)
        ]
        assert store.index_count(field) == len(want)
        kind = "number" if field == "price" else "text"
        picks = [v for v, _ in want if v[0] == (0 if kind == "number" else 1)] or [
            (1, b"Alpha") if kind == "text" else (0, 1.0)
        ]
        for _ in range(3):
            # equality
            (_, one) = rng.choice(picks)
            plain = one.decode() if isinstance(one, bytes) else one
            start, end = equal_bounds(plain)
            same = [k for v, k in want if v == _plain(plain)]
            assert _keys(store.index_scan(field, start, end, 1000)) == same
            assert store.index_count(field, start, end) == len(same)
            # range, both ends included, one or both open
            low, high = sorted([rng.choice(picks)[1], rng.choice(picks)[1]])  # type: ignore[type-var]
            for lo, hi in ((low, high), (None, high), (low, None), (None, None)):
                plo = lo.decode() if isinstance(lo, bytes) else lo
                phi = hi.decode() if isinstance(hi, bytes) else hi
                start, end = range_bounds(kind, plo, phi)
                inside = [
                    k
                    for v, k in want
                    if v[0] == (0 if kind == "number" else 1)
                    and (lo is None or v[1] >= lo)  # type: ignore[operator]
                    and (hi is None or v[1] <= hi)  # type: ignore[operator]
                ]
                assert _keys(store.index_scan(field, start, end, 1000)) == inside
                assert _keys(store.index_scan(field, start, end, 1000, True)) == inside[::-1]
                assert store.index_count(field, start, end) == len(inside)
                for limit in (1, 3):
                    assert _keys(store.index_scan(field, start, end, limit)) == inside[:limit]
                    got = store.index_scan(field, start, end, limit, reverse=True)
                    assert _keys(got) == inside[::-1][:limit]


@pytest.mark.parametrize("seed", range(4))
def test_entries_follow_writes_updates_and_deletes(store: PartitionStore, seed: int):
    rng = random.Random(seed)
    assert store.index == FIELDS
    state: dict[bytes, bytes] = {}
    offset = 0
    for _ in range(12):
        batch = []
        for _ in range(rng.randint(1, 40)):
            key = rng.choice(KEYS)
            offset += 1
            if rng.random() < 0.2:
                batch.append((key, None, offset))
                state.pop(key, None)
            else:
                value = _doc(rng)
                batch.append((key, value, offset))
                state[key] = value
        store.apply(batch, offset)
        _check(store, state, rng)


def test_paging_by_bounds_reads_every_entry_once(store: PartitionStore):
    rows = [(b"k%03d" % i, json.dumps({"hotel": f"H{i % 7}"}).encode(), i) for i in range(50)]
    store.apply(rows, 49)
    want = _keys(store.index_scan("hotel", None, None, 1000))
    assert len(want) == 50
    for reverse in (False, True):
        seen: list[bytes] = []
        start: bytes | None = None
        end: bytes | None = None
        while True:
            page = store.index_scan("hotel", start, end, 6, reverse)
            seen.extend(_keys(page))
            if len(page) < 6:
                break
            if reverse:
                end = page[-1][0]
            else:
                start = page[-1][0] + b"\x00"
        assert seen == (want[::-1] if reverse else want)


def test_what_is_not_indexed_is_stored_and_never_found(store: PartitionStore):
    long_text = "x" * (MAX_TEXT + 1)
    values = [
        b'{"price": 1}',  # no hotel
        b'{"hotel": null}',
        b'{"hotel": true}',
        b'{"hotel": ["H"]}',
        b'{"hotel": {"H": 1}}',
        json.dumps({"hotel": long_text}).encode(),
        b'["H"]',
        b'"H"',
        b"not json",
        b'{"hotel": "H", ',
        b'{"hotel": "H"}',  # the one indexed
    ]
    store.apply([(b"k%02d" % i, v, i) for i, v in enumerate(values)], len(values))
    assert _keys(store.index_scan("hotel")) == [b"k%02d" % (len(values) - 1)]
    assert store.index_count("hotel") == 1
    assert store.get(b"k08") == (b"not json", 8)
    # a value made not indexable loses its entry
    assert store.index_count("price") == 1
    store.apply([(b"k10", b'{"hotel": false}', 20), (b"k00", b'{"price": null}', 21)], 21)
    assert store.index_count("hotel") == 0
    assert store.index_count("price") == 0
    store.apply([(b"k10", b'{"hotel": 7.5}', 22)], 22)
    assert _keys(store.index_scan("hotel", *range_bounds("number", None, None))) == [b"k10"]


def test_numbers_sort_before_texts_and_by_value(store: PartitionStore):
    hotels: list[object] = ["b", "a", 10, -3.5, 2, "", 1e300, -0.0]
    store.apply(
        [(b"k%d" % i, json.dumps({"hotel": h}).encode(), i) for i, h in enumerate(hotels)], 7
    )
    found = [value_of(e) for e, _, _, _ in store.index_scan("hotel")]
    assert found == [-3.5, 0.0, 2.0, 10.0, 1e300, "", "a", "b"]


def test_an_update_moves_its_entry_and_one_write_of_a_key_twice_keeps_the_last(
    store: PartitionStore,
):
    store.apply([(b"a", b'{"hotel": "X", "price": 1}', 0)], 0)
    store.apply(
        [
            (b"a", b'{"hotel": "Y", "price": 1}', 1),
            (b"b", b'{"hotel": "X"}', 2),
            (b"b", b'{"hotel": "Z"}', 3),
        ],
        3,
    )
    assert _keys(store.index_scan("hotel", *equal_bounds("X"))) == []
    assert _keys(store.index_scan("hotel", *equal_bounds("Y"))) == [b"a"]
    assert store.index_scan("hotel", *equal_bounds("Z"))[0][2:] == (b'{"hotel": "Z"}', 3)
    assert store.index_count("price", *equal_bounds(1)) == 1
    store.apply([(b"a", None, 4)], 4)
    assert _keys(store.index_scan("hotel")) == [b"b"]
    assert store.index_count("price") == 0


def test_an_unknown_field_and_limit_zero_find_nothing(store: PartitionStore):
    store.apply([(b"a", b'{"hotel": "X", "guest": "g"}', 0)], 0)
    assert store.index_scan("guest") == []
    assert store.index_count("guest") == 0
    assert store.index_scan("hotel", limit=0) == []


def test_wipe_empties_the_index(store: PartitionStore):
    store.apply([(b"a", b'{"hotel": "X"}', 0), (b"b", b'{"hotel": "Y"}', 1)], 1)
    store.wipe()
    assert store.index_scan("hotel") == []
    assert store.index_count("hotel") == 0
    store.apply([(b"a", b'{"hotel": "Z"}', 2)], 2)  # no stale entry of its old value
    assert [value_of(e) for e, _, _, _ in store.index_scan("hotel")] == ["Z"]


def test_a_store_without_index_keeps_none():
    store = MemoryPartitionStore()
    store.apply([(b"a", b'{"hotel": "X"}', 0)], 0)
    assert store.index == ()
    assert store.index_scan("hotel") == []


def _hotels(store: PartitionStore, field: str = "hotel") -> list[tuple[str | float, bytes]]:
    return [(value_of(e), k) for e, k, _, _ in store.index_scan(field)]


def test_reopened_with_other_fields_rebuilds_and_without_drops(tmp_path: Path):
    path = tmp_path / "p0"
    rows = [
        (b"k%02d" % i, json.dumps({"hotel": f"H{i % 3}", "price": i}).encode(), i)
        for i in range(30)
    ]
    store = RocksDBPartitionStore(path, BUDGET, None, ("hotel",))
    store.apply(rows, 29)
    assert store.index_count("hotel") == 30
    store.close()

    store = RocksDBPartitionStore(path, BUDGET, None, ("hotel",))  # the same: kept as is
    assert store.index_count("hotel") == 30
    store.apply([(b"k00", b'{"hotel": "Q", "price": -1}', 30)], 30)
    store.close()

    store = RocksDBPartitionStore(path, BUDGET, None, ("price", "hotel"))  # other: rebuilt
    try:
        assert store.index == ("price", "hotel")
        assert _hotels(store, "price")[0] == (-1.0, b"k00")
        assert store.index_count("price") == 30
        hotels = _hotels(store)
        assert hotels[-1] == ("Q", b"k00") and len(hotels) == 30
        assert hotels == sorted(hotels, key=lambda h: (str(h[0]).encode(), h[1]))
        store.apply([(b"k00", None, 31)], 31)  # the rebuilt entries are the ones removed
        assert store.index_count("price") == 29 and store.index_count("hotel") == 29
    finally:
        store.close()

    store = RocksDBPartitionStore(path, BUDGET)  # none: dropped
    assert store.index == () and store.index_scan("hotel") == []
    store.apply([(b"k01", b'{"hotel": "NEW"}', 32)], 32)
    store.close()

    store = RocksDBPartitionStore(path, BUDGET, None, ("hotel",))  # again: from the data
    try:
        assert ("NEW", b"k01") in _hotels(store)
        assert store.index_count("hotel") == 29
    finally:
        store.close()


def test_a_crash_midway_through_a_rebuild_rebuilds_again(tmp_path: Path, monkeypatch):
    path = tmp_path / "p0"
    store = RocksDBPartitionStore(path, BUDGET)
    store.apply([(b"k%d" % i, json.dumps({"hotel": f"H{i}"}).encode(), i) for i in range(5)], 4)
    store.close()

    def crash(*args: object) -> bytes:
        raise RuntimeError("crash")

    monkeypatch.setattr(rocksdb, "_REINDEX_BATCH", 1)  # entries written as it goes
    monkeypatch.setattr(rocksdb.msgspec.json, "encode", crash)  # dies recording the fields
    with pytest.raises(RuntimeError, match="crash"):
        RocksDBPartitionStore(path, BUDGET, None, ("hotel",))
    monkeypatch.undo()

    rebuilt: list[Path] = []
    rebuild = RocksDBPartitionStore._rebuild_index

    def spy(self: RocksDBPartitionStore) -> None:
        rebuilt.append(path)
        rebuild(self)

    monkeypatch.setattr(RocksDBPartitionStore, "_rebuild_index", spy)
    store = RocksDBPartitionStore(path, BUDGET, None, ("hotel",))
    try:
        assert rebuilt == [path]
        assert [k for _, k in _hotels(store)] == [b"k%d" % i for i in range(5)]
    finally:
        store.close()
    RocksDBPartitionStore(path, BUDGET, None, ("hotel",)).close()  # recorded now: kept
    assert rebuilt == [path]


def test_the_index_survives_a_reopen_with_its_entries_moved_after(tmp_path: Path):
    path = tmp_path / "p0"
    store = RocksDBPartitionStore(path, BUDGET, "price", ("hotel",))
    store.apply(
        [(b"a", b'{"hotel": "X", "price": 3}', 0), (b"b", b'{"hotel": "X", "price": 5}', 1)], 1
    )
    store.close()
    store = RocksDBPartitionStore(path, BUDGET, "price", ("hotel",))
    try:
        store.apply([(b"a", b'{"hotel": "Y", "price": 9}', 2)], 2)
        assert _hotels(store) == [("X", b"b"), ("Y", b"a")]
        assert [k for k, _, _ in store.top(2)] == [b"a", b"b"]  # the rank order beside it
    finally:
        store.close()
