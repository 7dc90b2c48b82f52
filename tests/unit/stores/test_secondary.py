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
