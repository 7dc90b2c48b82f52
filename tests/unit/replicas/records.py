"""Stand-ins for the materializer's unit tests: records as the reader hands them on, a dead-letter
topic that keeps what it is sent, and a materializer over memory stores (no broker)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kiq.kafka.reader import Fetched
from kiq.metrics import NodeMetrics
from kiq.replicas.materializer import Materializer
from kiq.replicas.state import Role
from kiq.stores import MemoryPartitionStore
from kiq.stores.base import Change
from kiq.tables import TableRuntime, TableSpec
from kiq.tables.codecs import JsonCodec, ValueCodec


@dataclass
class Msg:
    """One record: what ``kiq.kafka.reader.Record`` promises, headers as the test likes them
    (``headers`` raising stands for a header name confluent-kafka cannot decode)."""

    k: Any
    v: Any
    at: int
    h: Any = None
    p: int = 0
    headers_raise: bool = False

    def key(self) -> Any:
        return self.k

    def value(self) -> Any:
        return self.v

    def offset(self) -> int:
        return self.at

    def partition(self) -> int:
        return self.p

    def headers(self) -> Any:
        if self.headers_raise:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        return self.h


class Letters:
    """The dead-letter topic: (topic, partition, offset, reason) of each record sent.

    ``refuse`` makes ``send`` raise for a record carrying a value (too large to copy), or
    for every record when ``refuse_all``.
    """

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, int, str]] = []
        self.refuse = False
        self.refuse_all = False

    def send(
        self, topic: str, partition: int, offset: int, key: object, value: object, reason: str
    ) -> None:
        if self.refuse_all or (self.refuse and value is not None):
            raise RuntimeError("Broker: Message size too large")
        self.sent.append((topic, partition, offset, reason))

    def flush(self, timeout_s: float = 10.0) -> None: ...


class Reader:
    """Records come from the test; ``unassigned`` says which partitions stopped being read."""

    def __init__(self) -> None:
        self.assigned: list[tuple[str, int, int]] = []
        self.unassigned: list[tuple[str, int]] = []

    def assign(self, positions: list[tuple[str, int, int]]) -> None:
        self.assigned.extend(positions)

    def unassign(self, partitions: list[tuple[str, int]]) -> None:
        self.unassigned.extend(partitions)

    def consume(self) -> Fetched:
        return Fetched()

    def end_offset(self, topic: str, partition: int, **_: object) -> int:
        return -1


class DiskStore(MemoryPartitionStore):
    """A memory store whose data outlives ``close``, as a store on disk does: a faulted
    replica's store is closed and opened again, and finds what it held. ``written``: the
    offsets of every change it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.written: set[int] = set()
        self.closes = 0

    def apply(self, batch: Sequence[Change], applied_offset: int) -> None:
        super().apply(batch, applied_offset)
        self.written.update(offset for _, _, offset in batch)

    def close(self) -> None:
        self.closes += 1


@dataclass
class Rig:
    """A materializer serving ``tables`` (name -> spec), every partition active, in memory."""

    materializer: Materializer
    stores: dict[tuple[str, int], DiskStore]
    letters: Letters
    reader: Reader

    def store(self, table: str, partition: int = 0) -> DiskStore:
        return self.stores[(table, partition)]


def rig(
    specs: list[TableSpec],
    partitions: int = 1,
    codec: Callable[[TableSpec], ValueCodec] = lambda spec: JsonCodec(),
) -> Rig:
    stores: dict[tuple[str, int], DiskStore] = {}

    def open_store(table: str, partition: int) -> DiskStore:
        return stores.setdefault((table, partition), DiskStore())

    letters = Letters()
    reader = Reader()
    m = Materializer(
        reader,  # type: ignore[arg-type]
        {s.name: TableRuntime(s, codec(s), partitions) for s in specs},
        open_store,
        letters,  # type: ignore[arg-type]
        NodeMetrics(),
        retry_s=0.0,
    )
    m.reconcile({(s.name, p): Role.ACTIVE for s in specs for p in range(partitions)})
    m._apply_wanted()
    return Rig(m, stores, letters, reader)
