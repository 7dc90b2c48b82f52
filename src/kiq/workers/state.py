"""What a node's read workers are told by its writer: the tables, the view, each replica.

The writer process (the node: Kafka, the materializer, the group) answers a worker's
poll (which carries the worker's counters, a ``Report``) with one ``Snapshot``: every
table version it serves and what each name means now, the cluster view (only when it
changed since the view the worker has), and each local replica's state, position and
log end. The worker follows the stores itself (RocksDB secondaries, ``mirror.py``);
this says how far there is to follow, and who owns what.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from kiq.cluster import ClusterView
from kiq.cluster.members import Member
from kiq.cluster.view import PartitionReplicas
from kiq.metrics import NodeMetrics, RouteStats
from kiq.replicas.replica import Replica
from kiq.tables import TableRuntime, TableSpec, codec_for

STATE_PATH = "/v1/internal/worker-state"
TOKEN_HEADER = "x-kiq-worker-token"
CLIENT_HEADER = "x-kiq-client"  # the caller's address, as the worker saw it


class ReplicaRow(msgspec.Struct, array_like=True, frozen=True):
    table: str
    partition: int
    state: str
    position: int
    end_offset: int
    opened_at: float  # which opening of the store: a reopened one is followed anew


class PartitionRow(msgspec.Struct, array_like=True, frozen=True):
    table: str
    partition: int
    active: str | None
    standbys: tuple[str, ...]
    former: tuple[str, ...]


class ViewRows(msgspec.Struct, frozen=True):
    version: int
    members: dict[str, str]  # node id → URL
    partitions: list[PartitionRow]


class TableRow(msgspec.Struct, frozen=True):
    spec: dict[str, Any]
    partitions: int


class Snapshot(msgspec.Struct, frozen=True):
    tables: dict[str, TableRow]  # internal name → the version
    current: dict[str, str]  # a table's own name → its current version's internal name
    replicas: list[ReplicaRow]
    ready: bool
    reason: str
    view: ViewRows | None = None  # None: unchanged since the worker's
    digest: int = 0  # what the worker sends back: the node answers once it differs


class Report(msgspec.Struct, frozen=True):
    """What a worker sends with each poll: its counters, for its node's /metrics."""

    worker: int
    pid: int
    routes: dict[str, tuple[dict[int, int], list[int], float]]
    hedges: list[int]


def report_of(worker: int, pid: int, metrics: NodeMetrics) -> bytes:
    routes = {
        name: (dict(stats.statuses), list(stats.buckets), stats.sum)
        for name, stats in list(metrics.routes.items())
    }
    return _ENCODER.encode(Report(worker, pid, routes, metrics.hedges.counts()))


def take_report(raw: bytes, metrics: NodeMetrics) -> None:
    """A worker's report into its node's ``metrics`` (``NodeMetrics.reported``)."""
    report = _REPORTS.decode(raw)
    routes = {}
    for name, (statuses, buckets, total) in report.routes.items():
        stats = RouteStats()
        stats.statuses, stats.buckets, stats.sum = statuses, buckets, total
        routes[name] = stats
    metrics.reported.report(report.worker, report.pid, routes, report.hedges)


def digest(
    tables: Mapping[str, TableRuntime],
    current: Mapping[str, TableRuntime],
    replicas: Mapping[tuple[str, int], Replica],
    view: ClusterView,
    ready: tuple[bool, str],
) -> int:
    """A hash of everything a snapshot says: cheap to take often, to answer only changes."""
    return hash(
        (
            tuple(tables),
            tuple((name, rt.spec.name) for name, rt in list(current.items())),
            tuple(
                (r.table, r.partition, r.state, r.position, r.end_offset, r.opened_at)
                for r in list(replicas.values())
            ),
            view.version,
            ready,
        )
    )


def snapshot(
    tables: Mapping[str, TableRuntime],
    current: Mapping[str, TableRuntime],
    replicas: Mapping[tuple[str, int], Replica],
    view: ClusterView,
    ready: tuple[bool, str],
    have_view: int,
    taken: int = 0,
) -> bytes:
    """The encoded snapshot; the view only when it is not version ``have_view``; ``taken``:
    its ``digest``."""
    rows = [
        ReplicaRow(r.table, r.partition, r.state.value, r.position, r.end_offset, r.opened_at)
        for r in list(replicas.values())
    ]
    shown = None
    if view.version != have_view:
        shown = ViewRows(
            view.version,
            {node_id: m.url for node_id, m in view.members.items()},
            [
                PartitionRow(t, p, reps.active, reps.standbys, reps.former)
                for (t, p), reps in view.replicas.items()
            ],
        )
    return _ENCODER.encode(
        Snapshot(
            {
                name: TableRow(msgspec.to_builtins(rt.spec, enc_hook=str), rt.partitions)
                for name, rt in list(tables.items())
            },
            {name: rt.spec.name for name, rt in list(current.items())},
            rows,
            ready[0],
            ready[1],
            shown,
            taken,
        )
    )


def decode(raw: bytes) -> Snapshot:
    return _DECODER.decode(raw)


def runtime_of(row: TableRow) -> TableRuntime:
    spec = msgspec.convert(row.spec, TableSpec, dec_hook=_path)
    return TableRuntime(spec, codec_for(spec), row.partitions)


def view_of(rows: ViewRows) -> ClusterView:
    return ClusterView(
        rows.version,
        {node_id: Member(node_id, url) for node_id, url in rows.members.items()},
        {
            (p.table, p.partition): PartitionReplicas(p.active, p.standbys, p.former)
            for p in rows.partitions
        },
    )


def _path(kind: type, value: Any) -> Any:
    if kind is Path:
        return Path(value)
    if kind is object:  # ``declared``'s values, as the catalog gave them
        return value
    raise NotImplementedError(kind)


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(Snapshot)
_REPORTS = msgspec.json.Decoder(Report)
