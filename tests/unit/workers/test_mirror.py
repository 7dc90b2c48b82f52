"""A read worker follows its node: stores opened as secondaries, caught up as the node moves."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest

from kiq.errors import StoreClosedError
from kiq.replicas import ReplicaState
from kiq.replicas.waits import wait_applied
from kiq.settings import ServeSettings
from kiq.stores import MemoryBudget, RocksDBPartitionStore, table_dir
from kiq.tables import TableRuntime, TableSpec, codec_for
from kiq.workers import mirror as mirror_module
from kiq.workers.mirror import MirrorFollower, MirrorNode, mirrored
from kiq.workers.state import ReplicaRow, Snapshot, TableRow


def _row(spec: TableSpec) -> TableRow:
    return TableRow(msgspec.to_builtins(spec, enc_hook=str), 2)


QUOTES = TableSpec("quotes", "t-quotes")
CACHED = TableSpec("cached", "t-cached", store="memory")


class Writer:
    """The node's side: real stores under its data dir, and the snapshots it would send."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.budget = MemoryBudget.of_mib(16)
        self.stores: dict[int, RocksDBPartitionStore] = {}
        self.opened: dict[int, float] = {}

    def open(self, partition: int, at: float = 1.0) -> RocksDBPartitionStore:
        path = table_dir(self.data_dir, "quotes") / str(partition)
        self.stores[partition] = RocksDBPartitionStore(path, self.budget)
        self.opened[partition] = at
        return self.stores[partition]

    def snap(self, state: str = "active", view: bool = False) -> Snapshot:
        rows = [ReplicaRow("cached", 0, "active", 5, 5, 1.0)]
        for p, store in self.stores.items():
            position = store.applied_offset() + 1
            rows.append(ReplicaRow("quotes", p, state, position, position, self.opened[p]))
        return Snapshot(
            {"quotes": _row(QUOTES), "cached": _row(CACHED)},
            {"quotes": "quotes", "cached": "cached"},
            rows,
            True,
            "ready",
        )

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


@pytest.fixture
def setup(tmp_path: Path):
    writer = Writer(tmp_path / "node")
    node = MirrorNode(ServeSettings(node_id="n1", data_dir=tmp_path / "node"))
    lost: list[bool] = []
    follower = MirrorFollower(
        node,
        lambda _: None,
        tmp_path / "worker",
        MemoryBudget.of_mib(16),
        lambda: lost.append(True),
    )
    yield writer, node, follower
    follower.stop()
    writer.close()


def test_follows_the_writers_stores_and_leaves_what_a_secondary_cannot_answer(setup):
    writer, node, follower = setup
    writer.open(0).apply([(b"a", b"1", 0)], 0)
    follower.apply(writer.snap())
    assert set(node.current) == {"quotes", "cached"}
    assert set(node.replicas) == {("quotes", 0)}  # the memory store is the node's alone
    assert not mirrored(TableRuntime(CACHED, codec_for(CACHED), 2))
    replica = node.replicas[("quotes", 0)]
    assert replica.state is ReplicaState.ACTIVE and replica.store.get(b"a") == (b"1", 0)
    writer.stores[0].apply([(b"a", b"2", 1)], 1)
    assert replica.store.get(b"a") == (b"1", 0)  # until the writer says it moved
    follower.apply(writer.snap())
    assert replica.store.get(b"a") == (b"2", 1) and replica.applied_offset == 1
    assert replica.lag == 0


def test_a_read_parked_for_an_offset_wakes_when_the_worker_catches_up(setup):
    writer, node, follower = setup
    writer.open(0).apply([(b"a", b"1", 0)], 0)
    follower.apply(writer.snap())
    replica = node.replicas[("quotes", 0)]

    async def scenario() -> bool:
        waiting = asyncio.create_task(wait_applied(replica, 3, 5.0))
        await asyncio.sleep(0.01)
        writer.stores[0].apply([(b"a", b"2", 3)], 3)
        await asyncio.to_thread(follower.apply, writer.snap())
        return await waiting

    assert asyncio.run(scenario()) is True


def test_a_store_the_writer_reopened_or_dropped_is_closed_here(setup):
    writer, node, follower = setup
    writer.open(0).apply([(b"a", b"1", 0)], 0)
    follower.apply(writer.snap())
    first = node.replicas[("quotes", 0)]
    writer.stores[0].close()
    writer.open(0, at=2.0)  # a revoke and a new assignment: another opening
    follower.apply(writer.snap())
    assert first.state is ReplicaState.REVOKED
    with pytest.raises(StoreClosedError):
        first.store.get(b"a")
    assert node.replicas[("quotes", 0)] is not first
    writer.stores.pop(0).close()
    follower.apply(writer.snap())
    assert node.replicas == {}


def test_a_worker_that_hears_nothing_stops_answering_then_gives_up(tmp_path, monkeypatch):
    monkeypatch.setattr(mirror_module, "STALE_S", 0.05)
    writer = Writer(tmp_path / "node")
    writer.open(0).apply([(b"a", b"1", 0)], 0)
    node = MirrorNode(ServeSettings(node_id="n1", data_dir=tmp_path / "node"))
    answers = [writer.snap()]
    lost: list[bool] = []
    follower = MirrorFollower(
        node,
        lambda _, __: answers.pop() if answers else None,
        tmp_path / "worker",
        MemoryBudget.of_mib(16),
        lambda: lost.append(True),
        lost_s=0.3,
        poll_s=0.01,
    )
    follower.start()
    try:
        assert follower.first.wait(5)
        replica = node.replicas[("quotes", 0)]
        end = time.monotonic() + 5
        while not lost and time.monotonic() < end:
            time.sleep(0.02)
        assert lost == [True]
        assert replica.state is ReplicaState.RESTORING
        assert node.is_ready()[0] is False
    finally:
        follower.stop()
        writer.close()


def test_a_closed_copy_leaves_no_files_of_the_worker_behind(setup, tmp_path):
    writer, _, follower = setup
    writer.open(0).apply([(b"a", b"1", 0)], 0)
    follower.apply(writer.snap())
    own = tmp_path / "worker" / "quotes" / "0"
    assert own.is_dir()
    writer.stores.pop(0).close()
    follower.apply(writer.snap())
    assert not own.exists()
