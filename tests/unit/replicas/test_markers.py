"""Batch markers in a table's log (``kiq.markers``): applied where they stand, never stored
as keys, held once the replica serves, and a bad one is a dead letter."""

from __future__ import annotations

from kiq.kafka.reader import Fetched, Record
from kiq.markers import MARKER_KEY, batch_of, marker_value
from kiq.metrics import NodeMetrics
from kiq.replicas.materializer import Materializer
from kiq.replicas.state import ReplicaState, Role
from kiq.stores import MemoryPartitionStore
from kiq.tables import TableRuntime, TableSpec
from kiq.tables.codecs import JsonCodec
from tests.unit.replicas.test_materializer import (
    StandInDeadLetters,
    StandInReader,
    StandInRecord,
)


def materializer() -> tuple[Materializer, MemoryPartitionStore, StandInDeadLetters]:
    store = MemoryPartitionStore()
    letters = StandInDeadLetters()
    m = Materializer(
        StandInReader(),
        {"t": TableRuntime(TableSpec(name="t", topic="topic-t"), JsonCodec(), 1)},
        lambda table, partition: store,
        letters,  # type: ignore[arg-type]
        NodeMetrics(),
    )
    m.reconcile({("t", 0): Role.ACTIVE})
    m._apply_wanted()
    return m, store, letters


def marker(batch: int, at: int) -> StandInRecord:
    return StandInRecord(MARKER_KEY, marker_value(batch), at)


def test_a_marker_is_held_where_it_stands_and_is_not_a_key() -> None:
    m, store, letters = materializer()
    replica = m.replicas[("t", 0)]
    replica.move_to(ReplicaState.ACTIVE)
    fetch: list[Record] = [
        StandInRecord(b"a", b"1", 0),
        StandInRecord(b"b", b"2", 1),
        marker(5, 2),
        StandInRecord(b"a", b"10", 3),
        StandInRecord(b"c", b"3", 4),
        marker(6, 5),
        StandInRecord(b"b", None, 6),
    ]
    m._apply(Fetched({("topic-t", 0): fetch}))
    assert store.get(MARKER_KEY) is None and not letters.sent
    assert replica.batches.held() == [5, 6] and replica.applied_offset == 6
    five = replica.batches.view(store, 5)
    six = replica.batches.view(store, 6)
    assert five is not None and six is not None
    assert [(k, v) for k, v, _ in five.scan()] == [(b"a", b"1"), (b"b", b"2")]
    assert five.applied_offset() == 2
    assert [(k, v) for k, v, _ in six.scan()] == [(b"a", b"10"), (b"b", b"2"), (b"c", b"3")]
    assert [(k, v) for k, v, _ in store.scan()] == [(b"a", b"10"), (b"c", b"3")]


def test_markers_read_while_restoring_are_not_held() -> None:
    m, _, _ = materializer()
    replica = m.replicas[("t", 0)]
    assert replica.state is ReplicaState.RESTORING
    m._apply(Fetched({("topic-t", 0): [StandInRecord(b"a", b"1", 0), marker(1, 1)]}))
    assert replica.batches.held() == [] and replica.applied_offset == 1
    assert replica.batches.marked  # known: this replica answers no batch read until it holds one


def test_a_marker_whose_value_is_no_batch_id_is_a_dead_letter() -> None:
    m, store, letters = materializer()
    replica = m.replicas[("t", 0)]
    replica.move_to(ReplicaState.ACTIVE)
    bad: list[Record] = [
        StandInRecord(MARKER_KEY, b"-1", 0),
        StandInRecord(MARKER_KEY, None, 1),
        StandInRecord(MARKER_KEY, b"9" * 40, 2),
        StandInRecord(b"a", b"1", 3),
    ]
    m._apply(Fetched({("topic-t", 0): bad}))
    assert [offset for _, _, offset, _ in letters.sent] == [0, 1, 2]
    assert replica.batches.held() == [] and store.get(b"a") == (b"1", 3)


def test_the_marker_value_round_trips_and_refuses_what_is_not_an_id() -> None:
    assert batch_of(marker_value(0)) == 0 and batch_of(marker_value(123456)) == 123456
    for bad in (b"", b"-1", b"1.5", b"\xd9\xa3", b"9" * 19, "12", None):
        assert batch_of(bad) is None
