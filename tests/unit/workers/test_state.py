"""What a node tells its read workers: tables, aliases, the view (when it changed), replicas."""

from __future__ import annotations

from kiq.cluster import ClusterView, Member, PartitionReplicas
from kiq.replicas import Replica, ReplicaState, Role
from kiq.stores import MemoryPartitionStore
from kiq.tables import TableRuntime, TableSpec, codec_for
from kiq.tables.spec import IndexField
from kiq.workers.state import decode, runtime_of, snapshot, view_of


def _runtime(spec: TableSpec, partitions: int = 4) -> TableRuntime:
    return TableRuntime(spec, codec_for(spec), partitions)


VIEW = ClusterView(
    7,
    {"n1": Member("n1", "http://a:1"), "n2": Member("n2", "http://b:2")},
    {("quotes", 0): PartitionReplicas("n1", ("n2",), ("n3",))},
)


def test_a_snapshot_carries_each_table_version_and_what_names_mean():
    indexed = (IndexField("symbol", "text"), IndexField("price", "number"))
    v1 = _runtime(TableSpec("quotes", "t-quotes", rank_by="price", ttl_ms=5000, index=indexed))
    declared = {"keys": ["symbol"], "pipeline": "stocks"}
    v2 = _runtime(TableSpec("quotes@v2", "t-quotes.v2", key_separator="|", declared=declared))
    replica = Replica("quotes", "t-quotes", 0, MemoryPartitionStore(), Role.ACTIVE)
    replica.state, replica.end_offset, replica.position = ReplicaState.ACTIVE, 42, 40
    raw = snapshot(
        {"quotes": v1, "quotes@v2": v2},
        {"quotes": v2},
        {("quotes", 0): replica},
        VIEW,
        (True, "ready"),
        have_view=-1,
    )
    snap = decode(raw)
    assert snap.current == {"quotes": "quotes@v2"}
    assert runtime_of(snap.tables["quotes"]).spec == v1.spec
    assert runtime_of(snap.tables["quotes"]).spec.index == indexed
    again = runtime_of(snap.tables["quotes@v2"])
    assert again.spec == v2.spec and again.spec.declared == declared
    assert again.partitions == 4
    (row,) = snap.replicas
    got = (row.table, row.partition, row.state, row.position, row.end_offset)
    assert got == ("quotes", 0, "active", 40, 42)
    assert row.opened_at == replica.opened_at
    assert snap.view is not None and view_of(snap.view) == VIEW
    assert (snap.ready, snap.reason) == (True, "ready")


def test_the_view_is_left_out_when_the_worker_has_it():
    raw = snapshot({}, {}, {}, VIEW, (False, "joining"), have_view=7)
    assert decode(raw).view is None


def test_the_digest_moves_with_what_a_worker_follows_and_only_then():
    from kiq.workers.state import digest

    runtime = _runtime(TableSpec("quotes", "t-quotes"))
    replica = Replica("quotes", "t-quotes", 0, MemoryPartitionStore(), Role.ACTIVE)
    replica.state = ReplicaState.ACTIVE

    def taken() -> int:
        tables = {"quotes": runtime}
        return digest(tables, tables, {("quotes", 0): replica}, VIEW, (True, "ready"))

    first = taken()
    assert taken() == first
    replica.position += 1
    moved = taken()
    assert moved != first
    replica.end_offset = 99
    assert taken() != moved
