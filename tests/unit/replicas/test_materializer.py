"""The materializer's bookkeeping of replicas, with a stand-in reader (no broker)."""

from __future__ import annotations

from dataclasses import dataclass

from kiq.kafka.reader import Fetched, Record
from kiq.metrics import NodeMetrics
from kiq.replicas.materializer import Materializer
from kiq.replicas.state import ReplicaState, Role
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


@dataclass
class StandInRecord:
    """A record with only what ``Record`` promises: the materializer needs no more."""

    k: bytes | None
    v: bytes | None
    at: int

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def offset(self) -> int:
        return self.at

    def partition(self) -> int:
        return 0

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return None


class StandInDeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int, int, str]] = []

    def send(
        self, topic: str, partition: int, offset: int, key: object, value: object, reason: str
    ) -> None:
        self.sent.append((topic, partition, offset, reason))


def test_records_are_decoded_and_applied_and_bad_ones_become_dead_letters():
    store = MemoryPartitionStore()
    letters = StandInDeadLetters()
    spec = TableSpec(name="t", topic="topic-t")
    m = Materializer(
        StandInReader(),
        {"t": TableRuntime(spec, JsonCodec(), 1)},
        lambda table, partition: store,
        letters,  # type: ignore[arg-type]
        NodeMetrics(),
    )
    m.reconcile({("t", 0): Role.ACTIVE})
    m._apply_wanted()
    good: list[Record] = [StandInRecord(b"a", b'{"n": 1}', 0), StandInRecord(b"b", b"[2]", 1)]
    m._apply(Fetched({("topic-t", 0): good}))
    assert store.get(b"a") == (b'{"n": 1}', 0) and store.get(b"b") == (b"[2]", 1)
    bad: list[Record] = [
        StandInRecord(b"a", None, 2),  # a tombstone deletes the key
        StandInRecord(None, b"{}", 3),
        StandInRecord(b"\xff", b"{}", 4),
        StandInRecord(b"c", b"not json", 5),
        StandInRecord(b"d", b"4", 6),
    ]
    m._apply(Fetched({("topic-t", 0): bad}))
    assert store.get(b"a") is None and store.get(b"d") == (b"4", 6)
    assert [(topic, offset) for topic, _, offset, _ in letters.sent] == [
        ("topic-t", 3),
        ("topic-t", 4),
        ("topic-t", 5),
    ]
    assert "no key" in letters.sent[0][3] and "UTF-8" in letters.sent[1][3]
    assert store.applied_offset() == 6


class FullDiskStore(MemoryPartitionStore):
    """A store whose writes fail while ``full`` is set, as RocksDB's do on a full disk.

    Its data outlives ``close``, as a store on disk does: opening it again finds it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.full = False

    def apply(self, batch, applied_offset: int) -> None:  # type: ignore[no-untyped-def]
        if self.full:
            raise OSError("IO error: No space left on device")
        super().apply(batch, applied_offset)

    def has_room(self) -> bool:
        return not self.full

    def close(self) -> None:
        self.closes = getattr(self, "closes", 0) + 1


class TrackingReader(StandInReader):
    def __init__(self) -> None:
        super().__init__()
        self.unassigned: list[tuple[str, int]] = []
        self.end = -1

    def end_offset(
        self, topic: str, partition: int, timeout_s: float = 2.0, fresh: bool = False
    ) -> int:
        return self.end

    def unassign(self, partitions: list[tuple[str, int]]) -> None:
        self.unassigned.extend(partitions)


def test_a_refused_write_loses_nothing_and_is_retried_from_the_applied_offset():
    stores = {0: FullDiskStore(), 1: FullDiskStore()}
    reader = TrackingReader()
    spec = TableSpec(name="t", topic="topic-t")
    m = Materializer(
        reader,
        {"t": TableRuntime(spec, JsonCodec(), 2)},
        lambda table, partition: stores[partition],
        StandInDeadLetters(),  # type: ignore[arg-type]
        NodeMetrics(),
        retry_s=0.0,
    )
    m.reconcile({("t", 0): Role.ACTIVE, ("t", 1): Role.ACTIVE})
    m._apply_wanted()
    m._apply(Fetched({("topic-t", 0): [StandInRecord(b"a", b"1", 0)]}))
    stores[0].full = True
    fetched: dict[tuple[str, int], list[Record]] = {
        ("topic-t", 0): [StandInRecord(b"b", b"2", 1), StandInRecord(b"c", b"3", 2)],
        ("topic-t", 1): [StandInRecord(b"x", b"9", 0)],
    }
    m._apply(Fetched(fetched))
    failed = m.replicas[("t", 0)]
    assert failed.fault is not None and "No space left" in failed.fault
    assert failed.applied_offset == 0 and stores[0].get(b"b") is None
    assert reader.unassigned == [("topic-t", 0)]  # no longer read past what it holds
    assert stores[1].get(b"x") == (b"9", 0)  # the other partition went on
    assert m.replicas[("t", 1)].fault is None

    reader.assigned.clear()
    m._retry_faulted(now=float("inf"))  # still full: not closed, it goes on serving reads
    assert getattr(stores[0], "closes", 0) == 0 and reader.assigned == []
    assert stores[0].get(b"a") == (b"1", 0)

    stores[0].full = False
    m._retry_faulted(now=float("inf"))
    assert reader.assigned == [("topic-t", 0, 1)]  # read again from its own applied offset
    assert stores[0].closes == 1  # reopened: RocksDB refuses writes until it is
    m._apply(Fetched({("topic-t", 0): fetched[("topic-t", 0)]}))
    assert failed.fault is None
    assert stores[0].get(b"b") == (b"2", 1) and stores[0].get(b"c") == (b"3", 2)
    assert failed.applied_offset == 2


def test_a_log_that_ends_below_the_replica_is_restored_from_its_start():
    store = MemoryPartitionStore()
    reader = TrackingReader()
    spec = TableSpec(name="t", topic="topic-t")
    m = Materializer(
        reader,
        {"t": TableRuntime(spec, JsonCodec(), 1)},
        lambda table, partition: store,
        StandInDeadLetters(),  # type: ignore[arg-type]
        NodeMetrics(),
    )
    m.reconcile({("t", 0): Role.ACTIVE})
    m._apply_wanted()
    old: list[Record] = [StandInRecord(f"k{i}".encode(), b"1", i) for i in range(6)]
    m._apply(Fetched({("topic-t", 0): old}, {("topic-t", 0): 6}))
    before = m.replicas[("t", 0)]
    assert before.state is ReplicaState.ACTIVE and store.applied_offset() == 5
    reader.assigned.clear()

    m._apply(Fetched({}, {("topic-t", 0): 2}))  # an older end-of-partition: no evidence
    assert m.replicas[("t", 0)] is before and store.applied_offset() == 5
    reader.end = 2  # the broker says the log ends at 2: the topic was made again
    m._refresh_watermarks()
    after = m.replicas[("t", 0)]
    assert after is not before and before.state is ReplicaState.REVOKED
    assert after.state is ReplicaState.RESTORING and after.position == 0
    assert store.applied_offset() == -1 and store.get(b"k0") is None
    assert reader.unassigned == [("topic-t", 0)] and reader.assigned == [("topic-t", 0, 0)]
    new: list[Record] = [StandInRecord(b"n0", b"2", 0), StandInRecord(b"n1", b"2", 1)]
    m._apply(Fetched({("topic-t", 0): new}, {("topic-t", 0): 2}))
    assert store.get(b"n1") == (b"2", 1) and after.state is ReplicaState.ACTIVE


def test_a_watch_tap_hears_each_batch_and_one_that_fails_stops_nothing():
    stores = {p: MemoryPartitionStore() for p in (0, 1)}
    spec = TableSpec(name="t", topic="topic-t")
    m = Materializer(
        StandInReader(),
        {"t": TableRuntime(spec, JsonCodec(), 2)},
        lambda table, partition: stores[partition],
        StandInDeadLetters(),  # type: ignore[arg-type]
        NodeMetrics(),
    )
    m.reconcile({("t", 0): Role.ACTIVE, ("t", 1): Role.ACTIVE})
    m._apply_wanted()
    heard: list[tuple[int, list, frozenset[int]]] = []

    def failing(through: int, changes: list, expired: frozenset[int]) -> None:
        raise RuntimeError("event loop is closed")

    m.taps.set("t", 0, failing)
    m.taps.set("t", 1, lambda through, changes, expired: heard.append((through, changes, expired)))
    records: dict[tuple[str, int], list[Record]] = {
        ("topic-t", 0): [StandInRecord(b"a", b"1", 0)],
        ("topic-t", 1): [StandInRecord(b"b", b"2", 0), StandInRecord(b"c", None, 1)],
    }
    m._apply(Fetched(records))
    assert stores[1].get(b"b") == (b"2", 0) and stores[1].applied_offset() == 1
    assert heard == [(1, [(b"b", b"2", 0), (b"c", None, 1)], frozenset())]
    m.taps.remove("t", 1)
    m._apply(Fetched({("topic-t", 1): [StandInRecord(b"d", b"3", 2)]}))
    assert len(heard) == 1  # nobody watches it any more


def test_closing_lingering_replicas_gives_their_memory_back_once():
    released: list[int] = []
    stores = {p: MemoryPartitionStore() for p in range(3)}
    spec = TableSpec(name="t", topic="topic-t")
    m = Materializer(
        StandInReader(),
        {"t": TableRuntime(spec, JsonCodec(), 3)},
        lambda table, partition: stores[partition],
        StandInDeadLetters(),  # type: ignore[arg-type]
        NodeMetrics(),
        linger_s=30,
        release_memory=lambda: released.append(len(m.replicas)),
    )
    m.reconcile({("t", p): Role.ACTIVE for p in range(3)})
    m._apply_wanted()
    m.reconcile({("t", 0): Role.ACTIVE})  # partitions 1 and 2 moved away: they linger
    m._apply_wanted()
    lingering = m.replicas[("t", 1)].lingering_since
    assert lingering is not None
    m._expire_lingering(lingering + 10)
    assert released == [] and len(m.replicas) == 3  # still warm
    m._expire_lingering(lingering + 31)
    assert sorted(m.replicas) == [("t", 0)]
    assert released == [1]  # once, after both closed
    m._expire_lingering(lingering + 60)
    assert released == [1]  # nothing closed, nothing to give back


def counted(metrics: NodeMetrics) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels["table"]): s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name in ("kiq_dead_letters_total", "kiq_records_applied_total")
    }


def test_every_table_counts_its_dead_letters_and_records_from_zero():
    # A counter first seen at 1 shows no increase to Prometheus: the first dead letter of a
    # table would never raise an alert (deploy/prometheus/kiq-alerts.yml).
    metrics = NodeMetrics()
    tables = {n: TableRuntime(TableSpec(name=n, topic=f"topic-{n}"), JsonCodec(), 1) for n in "ab"}
    m = Materializer(StandInReader(), tables, lambda t, p: MemoryPartitionStore(), None, metrics)  # type: ignore[arg-type]
    names = ("kiq_dead_letters_total", "kiq_records_applied_total")
    assert counted(metrics) == {(n, t): 0.0 for n in names for t in "ab"}
    m.add_table(TableRuntime(TableSpec(name="c", topic="topic-c"), JsonCodec(), 1))
    assert counted(metrics) == {(n, t): 0.0 for n in names for t in "abc"}
