"""A store read by another process: what its writer wrote, as of the last catch-up, whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiq.stores import MemoryBudget, RocksDBPartitionStore
from kiq.stores.secondary import SecondaryStore


@pytest.fixture
def budget() -> MemoryBudget:
    return MemoryBudget.of_mib(16)


def test_reads_what_the_writer_wrote_as_of_the_last_catch_up(tmp_path: Path, budget):
    primary = RocksDBPartitionStore(tmp_path / "t" / "0", budget)
    primary.apply([(b"a", b"1", 0), (b"b", b"2", 1)], 1)
    secondary = SecondaryStore(tmp_path / "t" / "0", tmp_path / "own", budget)
    try:
        assert secondary.get(b"a") == (b"1", 0)
        assert secondary.applied_offset() == 1
        primary.apply([(b"a", b"3", 2), (b"b", None, 3), (b"c", b"4", 4)], 4)
        assert secondary.get(b"a") == (b"1", 0)  # not caught up yet
        assert secondary.catch_up() == 4
        assert secondary.get(b"a") == (b"3", 2)
        assert secondary.get(b"b") is None
        assert secondary.scan() == [(b"a", b"3", 2), (b"c", b"4", 4)]
        assert secondary.scan(reverse=True, limit=1) == [(b"c", b"4", 4)]
        with pytest.raises(TypeError, match="read-only"):
            secondary.apply([(b"x", b"1", 5)], 5)
    finally:
        secondary.close()
        primary.close()


def test_a_ranked_store_reads_its_order(tmp_path: Path, budget):
    primary = RocksDBPartitionStore(tmp_path / "r" / "0", budget, rank_by="v")
    scores = [(b"a", 1), (b"b", 3), (b"c", 2)]
    primary.apply([(k, json.dumps({"v": v}).encode(), i) for i, (k, v) in enumerate(scores)], 2)
    secondary = SecondaryStore(tmp_path / "r" / "0", tmp_path / "own", budget, rank_by="v")
    try:
        assert [k for k, _, _ in secondary.top(2)] == [b"b", b"c"]
        primary.apply([(b"a", json.dumps({"v": 9}).encode(), 3)], 3)
        secondary.catch_up()
        assert [k for k, _, _ in secondary.top(1)] == [b"a"]
    finally:
        secondary.close()
        primary.close()


def test_a_closed_secondary_says_so(tmp_path: Path, budget):
    from kiq.errors import StoreClosedError

    primary = RocksDBPartitionStore(tmp_path / "t" / "0", budget)
    primary.apply([(b"a", b"1", 0)], 0)
    secondary = SecondaryStore(tmp_path / "t" / "0", tmp_path / "own", budget)
    secondary.close()
    with pytest.raises(StoreClosedError):
        secondary.get(b"a")
    with pytest.raises(StoreClosedError):
        secondary.catch_up()
    primary.close()


def _found(store: RocksDBPartitionStore, field: str) -> list[tuple[bytes, bytes]]:
    return [(key, value) for _, key, value, _ in store.index_scan(field)]


def test_an_indexed_store_reads_the_primarys_index_as_of_each_catch_up(tmp_path: Path, budget):
    from kiq.stores.index import equal_bounds

    path = tmp_path / "i" / "0"
    primary = RocksDBPartitionStore(path, budget, None, ("hotel", "price"))
    primary.apply([(b"a", b'{"hotel": "X", "price": 2}', 0), (b"b", b'{"hotel": "Y"}', 1)], 1)
    secondary = SecondaryStore(path, tmp_path / "own", budget, None, ("hotel", "price"))
    try:
        assert secondary.index == ("hotel", "price")
        assert _found(secondary, "hotel") == [
            (b"a", b'{"hotel": "X", "price": 2}'),
            (b"b", b'{"hotel": "Y"}'),
        ]
        assert secondary.index_count("price") == 1
        primary.apply([(b"a", b'{"hotel": "Z"}', 2), (b"c", b'{"hotel": "X"}', 3)], 3)
        assert secondary.index_count("hotel", *equal_bounds("X")) == 1  # not caught up yet
        secondary.catch_up()
        assert [k for k, _ in _found(secondary, "hotel")] == [b"c", b"b", b"a"]
        got = secondary.index_scan("hotel", *equal_bounds("X"), reverse=True)
        assert [(k, o) for _, k, _, o in got] == [(b"c", 3)]
        assert secondary.index_count("price") == 0
        assert secondary.index_scan("guest") == []
    finally:
        secondary.close()
        primary.close()


def test_a_secondary_answers_only_the_fields_the_primary_indexes(tmp_path: Path, budget):
    path = tmp_path / "i" / "0"
    primary = RocksDBPartitionStore(path, budget, None, ("price", "hotel"))
    primary.apply([(b"a", b'{"hotel": "X", "price": 2}', 0)], 0)
    # asked in another order, with a field the primary does not keep: its numbering rules
    secondary = SecondaryStore(path, tmp_path / "own", budget, None, ("hotel", "guest"))
    try:
        assert secondary.index == ("hotel",)
        assert [k for _, k, _, _ in secondary.index_scan("hotel")] == [b"a"]
        assert secondary.index_scan("guest") == [] and secondary.index_count("guest") == 0
    finally:
        secondary.close()
        primary.close()
    plain = RocksDBPartitionStore(tmp_path / "p" / "0", budget)
    plain.apply([(b"a", b'{"hotel": "X"}', 0)], 0)
    secondary = SecondaryStore(tmp_path / "p" / "0", tmp_path / "own2", budget, None, ("hotel",))
    try:
        assert secondary.index == () and secondary.index_scan("hotel") == []
    finally:
        secondary.close()
        plain.close()


def test_a_secondary_follows_the_primarys_fields_when_it_rebuilds(tmp_path: Path, budget):
    path = tmp_path / "i" / "0"
    primary = RocksDBPartitionStore(path, budget, None, ("hotel",))
    primary.apply([(b"a", b'{"hotel": "X", "price": 2}', 0)], 0)
    secondary = SecondaryStore(path, tmp_path / "own", budget, None, ("hotel", "price"))
    try:
        assert secondary.index == ("hotel",)
        primary.close()
        # reopened with the fields in another order: rebuilt, numbered anew
        primary = RocksDBPartitionStore(path, budget, None, ("price", "hotel"))
        primary.apply([(b"b", b'{"hotel": "Y", "price": 1}', 1)], 1)
        secondary.catch_up()
        assert secondary.index == ("hotel", "price")
        assert [k for _, k, _, _ in secondary.index_scan("hotel")] == [b"a", b"b"]
        assert [k for _, k, _, _ in secondary.index_scan("price")] == [b"b", b"a"]
    finally:
        secondary.close()
        primary.close()


def test_a_store_of_a_newer_layout_is_not_opened_by_a_reader(tmp_path: Path, budget):
    from kiq import formats
    from kiq.stores import StoreTooNew
    from kiq.stores.rocksdb import LAYOUT_FILE

    path = tmp_path / "t" / "0"
    RocksDBPartitionStore(path, budget).close()
    (path / LAYOUT_FILE).write_text(f"{formats.STORE_LAYOUT + 1}\n")
    with pytest.raises(StoreTooNew, match="newer than this kiq reads"):
        SecondaryStore(path, tmp_path / "own", budget)
    assert not (tmp_path / "own").exists()  # refused before anything was made
