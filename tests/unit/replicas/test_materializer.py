"""The materializer's bookkeeping of replicas, with a stand-in reader (no broker)."""

from __future__ import annotations

from kiq.kafka.reader import Fetched
from kiq.metrics import NodeMetrics
from kiq.replicas.materializer import Materializer
from kiq.replicas.state import Role
from kiq.stores import MemoryPartitionStore, PartitionStore
from kiq.tables import TableRuntime, TableSpec
from kiq.tables.codecs import JsonCodec


class StandInReader:
    def __init__(self) -> None:
        self.assigned: list[tuple[str, int, int]] = []

    def assign(self, positions: list[tuple[str, int, int]]) -> None:
        self.assigned.extend(positions)

    def unassign(self, partitions: list[tuple[str, int]]) -> None: ...

    def consume(self) -> Fetched:
        return Fetched()


def test_a_store_that_fails_to_open_is_skipped_then_retried():
    attempts: dict[int, int] = {}

    def open_store(table: str, partition: int) -> PartitionStore:
        attempts[partition] = attempts.get(partition, 0) + 1
        if partition == 2 and attempts[partition] == 1:
            raise OSError("disk hiccup")
        return MemoryPartitionStore()

    reader = StandInReader()
    spec = TableSpec(name="t", topic="topic-t")
    m = Materializer(
        reader,
        {"t": TableRuntime(spec, JsonCodec(), 4)},
        open_store,
        None,
        NodeMetrics(),  # type: ignore[arg-type]
    )
    wanted = {("t", p): Role.ACTIVE for p in range(4)}
    m.reconcile(wanted)
    m._apply_wanted()
    assert sorted(m.replicas) == [("t", 0), ("t", 1), ("t", 3)]
    assert sorted(p for _, p, _ in reader.assigned) == [0, 1, 3]
    m.reconcile(wanted)  # the view asks again on its next refresh
    m._apply_wanted()
    assert sorted(m.replicas) == [("t", p) for p in range(4)]
    assert attempts == {0: 1, 1: 1, 2: 2, 3: 1}  # opened ones are not opened again
