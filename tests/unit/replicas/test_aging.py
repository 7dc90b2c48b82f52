"""Tables that age: the cutoffs, the guarded tombstone, the read filter, windows' retention."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from kiq.kafka.reader import Fetched, Record
from kiq.metrics import NodeMetrics
from kiq.peers.wire import Outcome
from kiq.replicas.aging import EXPIRE_BELOW, Aging, guard, shift
from kiq.replicas.expiry import ExpirySweeper, Outgoing, sweep_interval_s
from kiq.replicas.materializer import Materializer
from kiq.replicas.replica import Replica
from kiq.replicas.state import ReplicaState, Role
from kiq.routing.local import LocalReplicas
from kiq.stores import MemoryPartitionStore
from kiq.tables import TableRuntime, TableSpec
from kiq.tables.codecs import JsonCodec


def window_key(entity: str, start_minute: int) -> bytes:
    """ENTITY|START|END of a one-minute window starting ``start_minute`` after 10:00."""
    start = f"2026-11-25T{10 + start_minute // 60:02d}:{start_minute % 60:02d}:00.000Z"
    return f"{entity}|{start}|{shift(start.encode(), 60_000).decode()}".encode()


# -- the cutoffs ---------------------------------------------------------------------


def test_an_entry_below_the_cutoff_has_expired_and_the_cutoff_never_moves_back():
    aging = Aging()
    assert not aging.expired(b"k", 0)  # no cutoff yet: nothing has aged
    aging.raise_below(10)
    assert aging.expired(b"k", 9) and not aging.expired(b"k", 10)
    aging.raise_below(5)  # an older answer (a slower broker) does not bring keys back
    assert aging.below == 10


def test_the_window_clock_is_the_newest_end_and_retention_counts_back_from_it():
    aging = Aging(retention_ms=10 * 60_000)
    old, mid, new = window_key("u-1", 0), window_key("u-1", 15), window_key("u-2", 30)
    assert aging.window_end(new) == b"2026-11-25T10:31:00.000Z"
    assert aging.window_end(b"not-windowed") is None
    aging.saw([(old, b"1", 0), (new, b"1", 1)])
    assert aging.newest_end == b"2026-11-25T10:31:00.000Z"
    assert aging.ends_before == b"2026-11-25T10:21:00.000Z"
    assert aging.expired(old, 5) and aging.expired(mid, 5) and not aging.expired(new, 1)
    aging.saw([(old, b"1", 2)])  # an older window: the clock stays
    assert aging.newest_end == b"2026-11-25T10:31:00.000Z"
    aging.saw([(window_key("u-3", 120), None, 3)])  # a tombstone moves no clock
    assert aging.newest_end == b"2026-11-25T10:31:00.000Z"


def test_shift_crosses_days_and_keeps_milliseconds():
    assert shift(b"2026-11-25T00:00:00.250Z", -1000) == b"2026-11-24T23:59:59.250Z"


def test_the_sweep_interval_is_a_tenth_of_the_ttl_between_one_second_and_a_minute():
    assert sweep_interval_s(10_000, None) == 1.0
    assert sweep_interval_s(100_000, None) == 10.0
    assert sweep_interval_s(7 * 86_400_000, None) == 60.0
    assert sweep_interval_s(None, 2_000, 0.0) == 1.0
    assert sweep_interval_s(10_000, None, 0.25) == 0.25  # the setting wins


# -- the guarded tombstone -------------------------------------------------------------


def test_a_guarded_tombstone_deletes_only_what_was_written_below_its_guard():
    stored = {b"old": 3, b"new": 9}
    changes = [
        (b"old", None, 20),  # guard 4: the store's entry (3) is what the sweep read
        (b"new", None, 21),  # guard 4: the store holds a write (9) made after the read
        (b"batch", b"v", 22),
        (b"batch", None, 23),  # guard 4: a write earlier in this very batch (22) wins
        (b"plain", None, 24),  # no guard: a user's delete, applied as ever
        (b"gone", None, 25),  # guard 4, nothing stored: nothing to delete
    ]
    guards = {20: 4, 21: 4, 23: 4, 25: 4}
    kept, raced = guard(changes, guards, stored.get)
    assert kept == [(b"old", None, 20), (b"batch", b"v", 22), (b"plain", None, 24)]
    assert raced == [b"new", b"batch"]


@dataclass
class Msg:
    k: bytes
    v: bytes | None
    at: int
    h: list[tuple[str, bytes | None]] | None = None

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def offset(self) -> int:
        return self.at

    def partition(self) -> int:
        return 0

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self.h


class Reader:
    def assign(self, positions: object) -> None: ...

    def unassign(self, partitions: object) -> None: ...


def materializer(spec: TableSpec, store: MemoryPartitionStore, role: Role) -> Materializer:
    m = Materializer(
        Reader(),  # type: ignore[arg-type]
        {spec.name: TableRuntime(spec, JsonCodec(), 1)},
        lambda table, partition: store,
        None,  # type: ignore[arg-type]
        NodeMetrics(),
    )
    m.reconcile({(spec.name, 0): role})
    m._apply_wanted()
    return m


def test_the_materializer_applies_a_sweeps_tombstone_only_below_its_guard():
    spec = TableSpec(name="t", topic="topic-t", ttl_ms=10_000)
    store = MemoryPartitionStore()
    m = materializer(spec, store, Role.ACTIVE)
    first: list[Record] = [Msg(b"a", b"1", 0), Msg(b"b", b"1", 1)]
    m._apply(Fetched({("topic-t", 0): first}))
    # The sweep read a@0 and b@1; b was written again (2) before its tombstone landed.
    guarded = [(EXPIRE_BELOW, b"1")]
    later: list[Record] = [
        Msg(b"b", b"2", 2),
        Msg(b"a", None, 3, guarded),
        Msg(b"b", None, 4, [(EXPIRE_BELOW, b"2")]),
    ]
    m._apply(Fetched({("topic-t", 0): later}))
    assert store.get(b"a") is None
    assert store.get(b"b") == (b"2", 2)
    replica = m.replica("t", 0)
    assert replica is not None and replica.aging is not None
    assert replica.aging.raced == [b"b"]  # the active writes b's value again
    assert store.applied_offset() == 4


def test_a_table_that_keeps_every_key_has_no_aging_and_applies_tombstones_as_ever():
    spec = TableSpec(name="t", topic="topic-t")
    store = MemoryPartitionStore()
    m = materializer(spec, store, Role.STANDBY)
    replica = m.replica("t", 0)
    assert replica is not None and replica.aging is None
    batch: list[Record] = [Msg(b"a", b"1", 0), Msg(b"a", None, 1, [(EXPIRE_BELOW, b"0")])]
    m._apply(Fetched({("topic-t", 0): batch}))
    assert store.get(b"a") == (b"1", 0)  # guards hold in every table: the log is the same


# -- the read filter ---------------------------------------------------------------------


def serving_replica(aging: Aging | None, rows: Sequence[tuple[bytes, bytes]]) -> Replica:
    store = MemoryPartitionStore()
    store.apply([(k, v, i) for i, (k, v) in enumerate(rows)], len(rows) - 1)
    replica = Replica("t", "topic-t", 0, store, Role.ACTIVE, aging)
    replica.end_offset = replica.position
    replica.mark_caught_up()
    return replica


def test_reads_treat_an_aged_entry_as_absent_lookups_multiget_and_scans():
    aging = Aging()
    rows = [(f"k{i:04d}".encode(), b"1") for i in range(2500)]
    replica = serving_replica(aging, rows)
    here = LocalReplicas("n1", {("t", 0): replica})
    aging.raise_below(2400)  # every key but the last 100 aged out
    assert here.lookup_now("t", 0, b"k0000").outcome is Outcome.MISSING  # type: ignore[union-attr]
    found = here.lookup_now("t", 0, b"k2400")
    assert found is not None and found.outcome is Outcome.FOUND
    got = asyncio.run(here.get("t", 0, [b"k0001", b"k2499"]))
    assert got is not None and [k for k, _ in got[0]] == [b"k2499"]
    # A page of 50 is filled past the 2,400 aged keys, both ways, so a short page still
    # means the range ended.
    page = asyncio.run(here.scan("t", 0, None, None, 50))
    assert page is not None and [k for k, _ in page.items] == [r[0] for r in rows[2400:2450]]
    back = asyncio.run(here.scan("t", 0, None, b"k2410", 50, reverse=True))
    assert back is not None and [k for k, _ in back.items] == [r[0] for r in rows[2409:2399:-1]]


def test_reads_drop_windows_past_retention():
    aging = Aging(retention_ms=10 * 60_000)
    keys = [window_key("u-1", m) for m in range(0, 40, 5)]
    replica = serving_replica(aging, [(k, b"1") for k in keys])
    aging.advance(b"2026-11-25T10:36:00.000Z")  # the newest end: 10:26 is the cutoff
    here = LocalReplicas("n1", {("t", 0): replica})
    page = asyncio.run(here.scan("t", 0, b"u-1|", b"u-1}", 100))
    assert page is not None  # the window ending at 10:26 ended exactly retention before
    assert [k for k, _ in page.items] == [window_key("u-1", m) for m in (25, 30, 35)]


# -- the sweeper -----------------------------------------------------------------------------


@dataclass
class Times:
    cutoff: dict[int, int]
    end: dict[int, int] = field(default_factory=dict)
    asked: list[int] = field(default_factory=list)

    def first_offsets_since(
        self, topic: str, partitions: Sequence[int], timestamp_ms: int, timeout_s: float = 5.0
    ) -> dict[int, tuple[int, int]]:
        self.asked.append(timestamp_ms)
        return {p: (self.cutoff[p], self.end.get(p, 0)) for p in partitions}

    def close(self) -> None: ...


@dataclass
class Sink:
    sent: list[Outgoing] = field(default_factory=list)

    def send_all(self, records: Sequence[Outgoing]) -> None:
        self.sent.extend(records)


def sweeper(spec: TableSpec, replica: Replica, times: Times, sink: Sink) -> ExpirySweeper:
    tables = {spec.name: TableRuntime(spec, JsonCodec(), 1)}
    return ExpirySweeper(
        tables,
        {(spec.name, 0): replica},
        times,
        sink,
        NodeMetrics(),
        chunk=100,
        pause_s=0,
        now_ms=lambda: 1_000_000,
    )


def test_the_active_sweeps_in_chunks_and_tombstones_what_aged_with_its_guard():
    spec = TableSpec(name="t", topic="topic-t", ttl_ms=10_000)
    replica = serving_replica(Aging(), [(f"k{i:04d}".encode(), b"1") for i in range(1050)])
    times, sink = Times({0: 1000}), Sink()
    sweeper(spec, replica, times, sink).sweep("t")
    assert times.asked == [990_000]  # now - ttl
    assert replica.aging is not None and replica.aging.below == 1000
    assert len(sink.sent) == 1000
    assert sink.sent[0] == ("topic-t", 0, b"k0000", None, [(EXPIRE_BELOW, b"1")])
    assert sink.sent[-1][2:4] == (b"k0999", None)


def test_a_replica_behind_the_log_end_the_cutoff_was_asked_at_is_not_swept():
    spec = TableSpec(name="t", topic="topic-t", ttl_ms=10_000)
    replica = serving_replica(Aging(), [(b"a", b"1"), (b"b", b"1")])  # applied up to 1
    sink = Sink()
    sweeper(spec, replica, Times({0: 2}, end={0: 5}), sink).sweep("t")
    # b's newer write may be at 2-4: hidden meanwhile, tombstoned once applied.
    assert replica.aging is not None and replica.aging.below == 2 and sink.sent == []
    sweeper(spec, replica, Times({0: 2}, end={0: 2}), sink).sweep("t")
    assert [k for _, _, k, _, _ in sink.sent] == [b"a", b"b"]


def test_a_standby_refreshes_its_cutoff_but_writes_nothing():
    spec = TableSpec(name="t", topic="topic-t", ttl_ms=10_000)
    replica = serving_replica(Aging(), [(b"a", b"1"), (b"b", b"1")])
    replica.set_role(Role.STANDBY)
    assert replica.state is ReplicaState.STANDBY
    sink = Sink()
    sweeper(spec, replica, Times({0: 1}), sink).sweep("t")
    assert replica.aging is not None and replica.aging.below == 1 and sink.sent == []


def test_the_sweep_learns_the_window_clock_and_drops_windows_past_retention():
    spec = TableSpec(
        name="w", topic="topic-w", windowed=True, retention_ms=10 * 60_000, key_separator="|"
    )
    keys = [window_key(u, m) for u in ("u-1", "u-2") for m in range(0, 40, 5)]
    keys.append(window_key("u-3", 60))  # the newest window: 11:00-11:01
    replica = serving_replica(Aging(retention_ms=spec.retention_ms), [(k, b"1") for k in keys])
    sink = Sink()
    sweeper(spec, replica, Times({}), sink).sweep("w")
    assert replica.aging is not None
    assert replica.aging.newest_end == b"2026-11-25T11:01:00.000Z"
    assert {k for _, _, k, _, _ in sink.sent} == set(keys) - {window_key("u-3", 60)}


def test_a_raced_key_is_written_again_by_the_active():
    spec = TableSpec(name="t", topic="topic-t", ttl_ms=10_000)
    aging = Aging()
    replica = serving_replica(aging, [(b"a", b'{"n":2}')])
    aging.raced.append(b"a")
    sink = Sink()
    sweeper(spec, replica, Times({0: 0}), sink).sweep("t")
    assert sink.sent == [("topic-t", 0, b"a", b'{"n":2}', None)]


@pytest.mark.parametrize("state", [ReplicaState.REVOKED])
def test_a_revoked_replica_is_not_swept(state: ReplicaState):
    spec = TableSpec(name="t", topic="topic-t", ttl_ms=10_000)
    replica = serving_replica(Aging(), [(b"a", b"1")])
    replica.move_to(state)
    sink, times = Sink(), Times({0: 5})
    sweeper(spec, replica, times, sink).sweep("t")
    assert sink.sent == [] and times.asked == []
