"""The rank order a ranked store keeps (``rank_by``), against both stores, and its encoding."""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from kiq.errors import StoreClosedError
from kiq.stores import (
    MemoryBudget,
    MemoryPartitionStore,
    PartitionStore,
    RocksDBPartitionStore,
    open_partition_store,
)
from kiq.stores.index import number_of
from kiq.stores.rank import decode_score, encode_score, merge_heads, score_of, scorer_of

BUDGET = MemoryBudget()


def _value(count: object, **more: object) -> bytes:
    return json.dumps({"count": count, **more}).encode()


@pytest.fixture(params=["rocksdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PartitionStore]:
    s: PartitionStore
    if request.param == "rocksdb":
        s = RocksDBPartitionStore(tmp_path / "p0", BUDGET, rank_by="count")
    else:
        s = MemoryPartitionStore(rank_by="count")
    yield s
    s.close()


def _keys(store: PartitionStore, n: int = 100, prefix: bytes | None = None) -> list[bytes]:
    return [key for key, _, _ in store.top(n, prefix)]


def test_highest_first_ties_by_key(store: PartitionStore):
    assert store.rank_by == "count"
    store.apply(
        [
            (b"b", _value(5), 1),
            (b"a", _value(5), 2),
            (b"c", _value(7.5), 3),
            (b"d", _value(-2), 4),
            (b"e", _value(0), 5),
            (b"f", _value(-0.0), 6),
            (b"g", _value(-10), 7),
        ],
        7,
    )
    assert _keys(store) == [b"c", b"a", b"b", b"e", b"f", b"d", b"g"]
    assert store.top(2) == [(b"c", _value(7.5), 3), (b"a", _value(5), 2)]
    assert store.top(0) == []


def test_updates_move_keys_and_tombstones_remove_them(store: PartitionStore):
    store.apply([(b"a", _value(1), 1), (b"b", _value(2), 2), (b"c", _value(3), 3)], 3)
    assert _keys(store) == [b"c", b"b", b"a"]
    store.apply([(b"a", _value(10), 4)], 4)
    assert _keys(store) == [b"a", b"c", b"b"]
    assert store.top(1) == [(b"a", _value(10), 4)]
    store.apply([(b"c", None, 5), (b"zz", None, 6)], 6)
    assert _keys(store) == [b"a", b"b"]
    # Several changes of one key in one batch: only the last one counts.
    store.apply([(b"b", _value(50), 7), (b"b", _value(0), 8), (b"d", _value(4), 9)], 9)
    assert _keys(store) == [b"a", b"d", b"b"]
    store.apply([(b"e", _value(99), 10), (b"e", None, 11)], 11)
    assert _keys(store) == [b"a", b"d", b"b"]
    assert store.get(b"e") is None


def test_a_first_batch_with_keys_twice_and_values_not_ranked(store: PartitionStore):
    # A store with nothing ranked yet takes a batch of new keys as puts alone: not when a
    # key comes twice (its first entry would stay in the order), and never for a tombstone
    # or a value that is not ranked.
    store.apply(
        [
            (b"a", _value(5), 1),
            (b"b", _value(9), 2),
            (b"c", _value("x"), 3),
            (b"a", _value(1), 4),
            (b"d", None, 5),
            (b"e", _value(3), 6),
        ],
        6,
    )
    assert _keys(store) == [b"b", b"e", b"a"]
    store.apply([(b"f", _value(4), 7), (b"g", None, 8), (b"h", _value([]), 9)], 9)
    assert _keys(store) == [b"b", b"f", b"e", b"a"]
    store.apply([(b"b", _value(0), 10)], 10)
    assert _keys(store) == [b"f", b"e", b"a", b"b"]


def test_values_that_are_not_ranked(store: PartitionStore):
    store.apply(
        [
            (b"ok", _value(1), 1),
            (b"missing", json.dumps({"other": 3}).encode(), 2),
            (b"text", _value("12"), 3),
            (b"bool", _value(True), 4),
            (b"null", _value(None), 5),
            (b"list", b"[1, 2]", 6),
            (b"notjson", b"\xff{", 7),
            (b"huge", b'{"count": 1e400}', 8),
        ],
        8,
    )
    assert _keys(store) == [b"ok"]
    assert store.get(b"text") == (_value("12"), 3)  # stored and served all the same
    # A ranked key whose new value is not ranked leaves the order; back again later.
    store.apply([(b"ok", _value("x"), 9)], 9)
    assert _keys(store) == []
    store.apply([(b"ok", _value(2), 10), (b"bool", _value(3), 11)], 11)
    assert _keys(store) == [b"bool", b"ok"]


def test_prefix(store: PartitionStore):
    store.apply(
        [
            (b"ab|1", _value(1), 1),
            (b"ab|2", _value(9), 2),
            (b"b|1", _value(8), 3),
            (b"ab|3", _value(5), 4),
            (b"a", _value(100), 5),
        ],
        5,
    )
    assert _keys(store, prefix=b"ab|") == [b"ab|2", b"ab|3", b"ab|1"]
    assert _keys(store, 2, prefix=b"ab|") == [b"ab|2", b"ab|3"]
    assert _keys(store, prefix=b"a") == [b"a", b"ab|2", b"ab|3", b"ab|1"]
    assert _keys(store, prefix=b"zz") == []
    assert _keys(store, prefix=b"") == [b"a", b"ab|2", b"b|1", b"ab|3", b"ab|1"]


def test_wipe_empties_the_order(store: PartitionStore):
    store.apply([(b"a", _value(1), 1), (b"b", _value(2), 2)], 2)
    store.wipe()
    assert store.top(10) == []
    store.apply([(b"a", _value(3), 3)], 3)
    assert store.top(10) == [(b"a", _value(3), 3)]


def test_against_a_reference(store: PartitionStore):
    rng = random.Random(7)
    reference: dict[bytes, float] = {}
    values: dict[bytes, bytes] = {}
    offset = 0
    for _ in range(30):
        batch: list[tuple[bytes, bytes | None, int]] = []
        for _ in range(40):
            offset += 1
            key = f"k{rng.randrange(200):03d}".encode()
            if rng.random() < 0.15:
                batch.append((key, None, offset))
                reference.pop(key, None)
                values.pop(key, None)
            else:
                score = rng.choice([rng.randrange(-5, 20), rng.uniform(-1e6, 1e6)])
                value = _value(score, word=key.decode())
                batch.append((key, value, offset))
                reference[key] = float(score)
                values[key] = value
        store.apply(batch, offset)
        expected = sorted(reference, key=lambda k: (-reference[k], k))[:25]
        got = store.top(25)
        assert [k for k, _, _ in got] == expected
        assert all(v == values[k] for k, v, _ in got)


def test_an_unranked_store_has_no_order(tmp_path: Path):
    for unranked in (RocksDBPartitionStore(tmp_path / "u", BUDGET), MemoryPartitionStore()):
        unranked.apply([(b"a", _value(1), 1)], 1)
        assert unranked.rank_by is None
        assert unranked.top(10) == []
        unranked.close()


def test_top_of_a_closed_store_raises(store: PartitionStore):
    store.apply([(b"a", _value(1), 1)], 1)
    store.close()
    with pytest.raises(StoreClosedError):
        store.top(1)


def test_rocksdb_keeps_small_heads_until_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    store = RocksDBPartitionStore(tmp_path / "s", BUDGET, rank_by="count")
    store.apply([(f"k{i}".encode(), _value(i), i) for i in range(20)], 19)
    reads: list[int] = []
    read = store._top
    monkeypatch.setattr(store, "_top", lambda n, p, w: reads.append(n) or read(n, p, w))
    first = store.top(3)
    assert [k for k, _, _ in first] == [b"k19", b"k18", b"k17"]
    assert store.top(3) == first and store.top(3, b"k1") == store.top(3, b"k1")
    assert reads == [3, 3]  # the second of each answered from what the first kept
    store.top(3).clear()  # a caller's list is its own
    assert store.top(3) == first
    # A write, even one that moves no score, and the next read reads the order again.
    store.apply([(b"k19", _value(19, more=1), 20), (b"k0", _value(99), 21)], 21)
    assert store.top(3) == [(b"k0", _value(99), 21), (b"k19", _value(19, more=1), 20), first[1]]
    assert reads == [3, 3, 3]
    store.apply([(b"k0", None, 22)], 22)
    assert [k for k, _, _ in store.top(3)] == [b"k19", b"k18", b"k17"]
    store.wipe()
    assert store.top(3) == []
    # Larger heads are read each time.
    store.apply([(f"k{i}".encode(), _value(i), i) for i in range(200)], 199)
    reads.clear()
    store.top(150)
    store.top(150)
    assert reads == [150, 150]
    store.close()
    with pytest.raises(StoreClosedError):
        store.top(3)


def test_rocksdb_order_survives_a_reopen(tmp_path: Path):
    path = tmp_path / "p"
    store = RocksDBPartitionStore(path, BUDGET, rank_by="count")
    store.apply([(b"a", _value(1), 1), (b"b", _value(3), 2), (b"c", _value(2), 3)], 3)
    store.apply([(b"a", _value(4), 4), (b"c", None, 5)], 5)
    store.close()
    again = RocksDBPartitionStore(path, BUDGET, rank_by="count")
    try:
        assert again.top(10) == [(b"a", _value(4), 4), (b"b", _value(3), 2)]
        assert again.applied_offset() == 5
        again.apply([(b"b", _value(9), 6)], 6)
        assert _keys(again) == [b"b", b"a"]
    finally:
        again.close()


def test_rocksdb_index_follows_the_field_it_is_opened_with(tmp_path: Path):
    path = tmp_path / "p"
    rows = [(b"a", _value(1, other=30), 1), (b"b", _value(3, other=10), 2)]
    unranked = RocksDBPartitionStore(path, BUDGET)
    unranked.apply(rows, 2)
    unranked.close()
    # Ranked later: the index is built from the data already there.
    by_count = RocksDBPartitionStore(path, BUDGET, rank_by="count")
    assert _keys(by_count) == [b"b", b"a"]
    by_count.close()
    by_other = RocksDBPartitionStore(path, BUDGET, rank_by="other")
    assert _keys(by_other) == [b"a", b"b"]
    by_other.close()
    # Unranked again: the index is dropped, and the store opens without its families.
    plain = RocksDBPartitionStore(path, BUDGET)
    assert plain.top(10) == [] and plain.get(b"a") == (rows[0][1], 1)
    plain.close()
    assert "kiq-rank" not in __import__("rocksdict").Rdict.list_cf(str(path))


def test_rocksdb_rebuild_spans_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("kiq.stores.rocksdb._REINDEX_BATCH", 7)
    path = tmp_path / "p"
    plain = RocksDBPartitionStore(path, BUDGET)
    plain.apply([(f"k{i:02d}".encode(), _value(i % 10), i) for i in range(50)], 49)
    plain.close()
    ranked = RocksDBPartitionStore(path, BUDGET, rank_by="count")
    try:
        expected = sorted(
            (f"k{i:02d}".encode() for i in range(50)), key=lambda k: -(int(k[1:]) % 10)
        )
        assert _keys(ranked, 50) == expected
    finally:
        ranked.close()


def test_opener_gives_the_rank_field(tmp_path: Path):
    rocks = open_partition_store("rocksdb", tmp_path, "t", 0, BUDGET, rank_by="count")
    memory = open_partition_store("memory", tmp_path, "t", 0, BUDGET, rank_by="count")
    try:
        assert rocks.rank_by == "count" and memory.rank_by == "count"
    finally:
        rocks.close()
        memory.close()


# -- the encoding and the merge -------------------------------------------------------------


def test_score_bytes_order_is_descending_score():
    scores = [float("inf"), 1e300, 2.5, 1.0, 5e-324, 0.0, -5e-324, -1.0, -2.5, -1e300]
    scores.append(float("-inf"))
    encoded = [encode_score(s) for s in scores]
    assert encoded == sorted(encoded)
    assert all(len(e) == 8 for e in encoded)
    assert [decode_score(e) for e in encoded] == scores
    assert encode_score(-0.0) == encode_score(0.0)
    # Against the 64-bit arithmetic it spells with bytes.
    rng = random.Random(7)
    for score in [*scores[1:-1], *(rng.uniform(-1e12, 1e12) for _ in range(1000))]:
        (bits,) = struct.unpack(">Q", struct.pack(">d", score + 0.0))
        flipped = bits if bits & (1 << 63) else (bits | 1 << 63) ^ (2**64 - 1)
        assert encode_score(score) == struct.pack(">Q", flipped)
    # The complement of the order-preserving double: 1.0's IEEE bits are 0x3FF0...
    assert encode_score(1.0) == struct.pack(">Q", (0x3FF0 << 48 | 1 << 63) ^ (2**64 - 1))


def test_score_of():
    assert score_of("n", b'{"n": 3}') == encode_score(3.0)
    assert score_of("n", b'{"n": -1.5}') == encode_score(-1.5)
    for value in (b'{"n": true}', b'{"n": "3"}', b'{"m": 3}', b"[3]", b"3", b"{", b'{"n": null}'):
        assert score_of("n", value) is None, value


def _parsed_score(field: str, value: bytes) -> bytes | None:
    """The score as a whole parse of the value gives it: what ``Scorer`` must agree with."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    score = number_of(doc.get(field)) if isinstance(doc, dict) else None
    return None if score is None else encode_score(score)


def test_scorer_agrees_with_a_whole_parse():
    rng = random.Random(44)
    values = [
        b'{"n": 3}',
        b'{"n": -0.0}',
        b'{"n": 0}',
        b'{"n": 1e400}',
        b'{"n": -1e400}',
        b'{"n": 123456789012345678901234567890}',
        b'{"n": 1' + b"0" * 400 + b"}",
        b'{"n": false}',
        b'{"n": {"n": 1}}',
        b'{"m": {"n": 1}, "n": 2.5}',
        b'{"n": [1]}',
        b'{"n": 1, "n": 2}',
        b'{"n": 1} x',
        b'{"n": "\\u0041"}',
        b'{"n": 1, "s": "\\ud800"}',
        b"\xef\xbb\xbf{}",
        b'  {\n"n" : 7 }  ',
        b"null",
        b"",
    ]
    for _ in range(300):
        n = rng.choice([rng.uniform(-1e9, 1e9), rng.randint(-(2**62), 2**62), rng.random()])
        values.append(orjson.dumps({"a": rng.random(), "n": n, "z": [1, {"n": "x"}]}))
    scorer = scorer_of("n")
    assert scorer.many([*values, None]) == [*(_parsed_score("n", v) for v in values), None]
    for value in values:
        assert scorer(value) == score_of("n", value) == _parsed_score("n", value), value


def test_merge_heads_is_the_exact_top():
    def item(key: str, n: float) -> tuple[bytes, bytes]:
        return key.encode(), _value(n)

    heads = [
        [item("a", 9), item("d", 5), item("e", 1)],
        [item("b", 9), item("c", 7)],
        [],
        [item("f", 5), item("g", 5)],
    ]
    merged = merge_heads(heads, 4, "count")
    assert [k for k, _ in merged] == [b"a", b"b", b"c", b"d"]
    assert [k for k, _ in merge_heads(heads, 100, "count")] == [
        b"a",
        b"b",
        b"c",
        b"d",
        b"f",
        b"g",
        b"e",
    ]
    # An item its node ranked by something else is left out, not guessed at.
    assert merge_heads([[(b"x", b'{"other": 1}')], [item("y", 0)]], 5, "count") == [item("y", 0)]


H10, H11 = "2026-11-25T10:00:00.000Z", "2026-11-25T11:00:00.000Z"


def _window(entity: str, start: str, end: str) -> bytes:
    return f"{entity}|{start}|{end}".encode()


def test_top_within_one_window_reads_on_until_n_match(store: PartitionStore):
    """Keys of other windows rank above and between: a top of one window skips them and
    reads the order on, so it still answers ``n`` keys when the window holds that many."""
    rows = [
        (_window("p1", H11, "2026-11-25T12:00:00.000Z"), _value(100)),
        (_window("p2", H11, "2026-11-25T12:00:00.000Z"), _value(90)),
        (_window("p1", H10, H11), _value(8)),
        (_window("p3", H11, "2026-11-25T12:00:00.000Z"), _value(7)),
        (_window("p2", H10, H11), _value(8)),
        (_window("p3", H10, H11), _value(1)),
        (_window("p|x", H10, H11), _value(3)),  # the entity holds the separator
        (b"short", _value(50)),  # not a windowed key: never in a window's top
    ]
    store.apply([(k, v, i) for i, (k, v) in enumerate(rows, 1)], len(rows))
    window = H10.encode()
    assert _keys_in(store, 2, window) == [_window("p1", H10, H11), _window("p2", H10, H11)]
    assert _keys_in(store, 10, window) == [
        _window("p1", H10, H11),
        _window("p2", H10, H11),
        _window("p|x", H10, H11),
        _window("p3", H10, H11),
    ]
    assert _keys_in(store, 10, window, b"p2|") == [_window("p2", H10, H11)]
    assert _keys_in(store, 10, b"2026-11-25T09:00:00.000Z") == []
    assert [k for k, _, _ in store.top(3, None, None)] == [rows[0][0], rows[1][0], b"short"]


def _keys_in(
    store: PartitionStore, n: int, window: bytes, prefix: bytes | None = None
) -> list[bytes]:
    return [key for key, _, _ in store.top(n, prefix, window)]


def test_starts_window_is_the_start_part_of_a_windowed_key():
    from kiq.stores.rank import starts_window

    assert starts_window(_window("a", H10, H11), H10.encode())
    assert not starts_window(_window("a", H10, H11), H11.encode())
    assert not starts_window(H10.encode(), H10.encode())
    assert not starts_window(b"", H10.encode())
