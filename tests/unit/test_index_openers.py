"""A table's declared index reaches the stores that keep it (issue 41): the node's store opener
and a read worker's secondary stores are opened with the indexed fields' names, after
``rank_by``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from kiq import node as node_module
from kiq.settings import ServeSettings
from kiq.stores import MemoryBudget, MemoryPartitionStore
from kiq.tables import TableRuntime, TableSpec, codec_for
from kiq.tables.spec import IndexField
from kiq.workers import mirror as mirror_module
from kiq.workers.mirror import MirrorFollower, MirrorNode
from kiq.workers.state import ReplicaRow

INDEXED = TableSpec(
    "bookings",
    "t-bookings",
    rank_by="price",
    index=(IndexField("hotel", "text"), IndexField("price", "number")),
)
PLAIN = TableSpec("plain", "t-plain")


def _runtimes() -> dict[str, TableRuntime]:
    return {s.name: TableRuntime(s, codec_for(s), 2) for s in (INDEXED, PLAIN)}


def test_the_node_opens_each_partition_store_with_its_tables_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    opened: ClassVar[list[tuple[Any, ...]]] = []

    def open_partition_store(*args: Any) -> MemoryPartitionStore:
        opened.append(args)
        return MemoryPartitionStore()

    monkeypatch.setattr(node_module, "open_partition_store", open_partition_store)
    open_store = node_module.store_opener(_runtimes(), tmp_path)
    open_store("bookings", 1)
    open_store("plain", 0)
    (kind, data_dir, table, partition, _budget, rank_by, index), plain = opened
    assert (kind, data_dir, table, partition) == ("rocksdb", tmp_path, "bookings", 1)
    assert (rank_by, index) == ("price", ("hotel", "price"))
    assert plain[-2:] == (None, ())


class _Secondary:
    """A ``SecondaryStore`` that says how it was opened."""

    opened: ClassVar[list[tuple[Any, ...]]] = []

    def __init__(self, *args: Any) -> None:
        self.opened.append(args)

    def catch_up(self) -> int:
        return -1

    def applied_offset(self) -> int:
        return -1


def test_a_read_worker_opens_its_secondary_stores_with_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(mirror_module, "SecondaryStore", _Secondary)
    node = MirrorNode(ServeSettings(node_id="n1", data_dir=tmp_path / "node"))
    node.tables.update(_runtimes())
    follower = MirrorFollower(
        node, lambda *_: None, tmp_path / "own", MemoryBudget.of_mib(16), lambda: None
    )
    assert follower._open(ReplicaRow("bookings", 0, "active", 0, 0, 1.0)) is not None
    assert follower._open(ReplicaRow("plain", 0, "active", 0, 0, 1.0)) is not None
    indexed, plain = _Secondary.opened
    assert indexed[-2:] == ("price", ("hotel", "price"))
    assert plain[-2:] == (None, ())
