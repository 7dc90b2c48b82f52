"""A read worker's copy of its node: the same tables and view, its stores as secondaries.

A ``MirrorNode`` stands where a ``kiq.node.Node`` stands for the API (``NodeView``), so a
worker answers lookups with the node's own code: the raw path, the replica reader, the
router, the peers. Its replicas are ``MirrorReplica``s: the node's RocksDB stores opened
as secondary instances (``stores/secondary.py``), each with the state and log end the
writer last reported.

``MirrorFollower`` keeps it so: it asks the writer for a ``Snapshot`` (the writer holds the
poll until something changed, up to a second; at most one poll each ``poll_s``) and
applies it (tables, aliases, view, replicas), and catches up each store whose writer
moved on, then wakes the reads parked for that offset (read-your-writes works across
processes). A worker that hears nothing from its node for ``STALE_S`` stops answering
from its copies, and after ``lost_s`` it exits. A store the writer closed or reopened is
closed here and opened anew; the reads that held it find it closed and ask the next
replica. Tables a secondary cannot answer alone are not mirrored: a memory store
(another process's memory), and a table that ages (what aged out is the writer's to
know). Their reads go to the writer, as the router's target for this node
(``Router(home=...)``).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kiq.cluster import ClusterView
from kiq.cluster.view import EMPTY_VIEW
from kiq.metrics import NodeMetrics
from kiq.replicas import ReplicaState
from kiq.replicas.aging import Aging
from kiq.replicas.replica import Positioned
from kiq.replicas.snapshots import BatchHistory
from kiq.replicas.taps import Taps
from kiq.replicas.waits import OffsetWaits
from kiq.settings import ServeSettings
from kiq.stores import MemoryBudget, table_dir
from kiq.stores.secondary import SecondaryStore
from kiq.tables import TableRuntime
from kiq.workers.state import ReplicaRow, Snapshot, runtime_of, view_of

log = logging.getLogger(__name__)

POLL_S = 0.01  # how often a worker asks its writer how far the stores are
# Without a snapshot for this long, a worker's copies stop answering (its node's reads go
# to the node, or to another replica) until one comes: nothing says how far behind they are.
STALE_S = 2.0
RETRY_S = 0.1  # between polls its node did not answer


class MirrorReplica(Positioned):
    """One store of the writer's, as this worker reads it (a ``ReadOnlyReplica``)."""

    __slots__ = (
        "end_offset",
        "opened_at",
        "partition",
        "position",
        "state",
        "store",
        "table",
        "waits",
    )

    aging: Aging | None = None  # tables that age are not mirrored
    # A mirror sees no batch markers: reads as of a batch go to a node's replica.
    batches = BatchHistory(kept=False)

    def __init__(self, row: ReplicaRow, store: SecondaryStore) -> None:
        self.table = row.table
        self.partition = row.partition
        self.opened_at = row.opened_at
        self.store = store
        self.state = ReplicaState(row.state)
        self.end_offset = row.end_offset
        self.position = store.applied_offset() + 1
        self.waits = OffsetWaits()

    def describe(self) -> dict[str, object]:
        return {
            "table": self.table,
            "partition": self.partition,
            "state": self.state.value,
            "applied_offset": self.applied_offset,
            "lag": self.lag,
        }


class MirrorNode:
    """What ``NodeView`` reads of a node, kept by ``MirrorFollower`` from the writer's snapshots."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self.url = settings.advertised_url
        self.metrics = NodeMetrics()
        self.taps = Taps()  # never tapped: a worker's watches are relayed (kiq.live)
        self.tables: dict[str, TableRuntime] = {}
        self.current: dict[str, TableRuntime] = {}
        self.replicas: dict[tuple[str, int], MirrorReplica] = {}
        self.view: ClusterView = EMPTY_VIEW
        self.ready: tuple[bool, str] = (False, "this worker has no word from its node yet")

    def is_ready(self) -> tuple[bool, str]:
        return self.ready

    def versions_of(self, table: str) -> dict[str, TableRuntime]:
        return {t.spec.version: t for t in list(self.tables.values()) if t.spec.table == table}

    def start(self) -> None:
        """The writer runs the node: a worker has nothing to start."""

    def stop(self) -> None:
        """Nothing to stop: ``MirrorFollower.stop`` closes the stores."""


def mirrored(runtime: TableRuntime) -> bool:
    """Whether a worker reads this table's stores itself (see the module's docstring)."""
    spec = runtime.spec
    return spec.store == "rocksdb" and spec.ttl_ms is None and spec.retention_ms is None


class MirrorFollower:
    """Applies the writer's snapshots to ``node`` on a thread of its own.

    ``fetch(have_view, since)`` asks the writer for a snapshot unlike the one whose digest is
    ``since`` (None: it did not answer); ``own_dir`` holds this
    worker's secondary instances' files; ``lost_s``: how long without an answer before
    ``on_lost`` (the worker exits: a node's workers end with it).
    """

    def __init__(
        self,
        node: MirrorNode,
        fetch: Callable[[int, int], Snapshot | None],
        own_dir: Path,
        budget: MemoryBudget,
        on_lost: Callable[[], None],
        lost_s: float = 30.0,
        poll_s: float = POLL_S,
    ) -> None:
        self._node = node
        self._fetch = fetch
        self._own_dir = own_dir
        self._budget = budget
        self._on_lost = on_lost
        self._lost_s = lost_s
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kiq-worker-follow", daemon=True)
        self.first = threading.Event()  # set once the first snapshot is applied

    def start(self) -> None:
        shutil.rmtree(self._own_dir, ignore_errors=True)  # a predecessor's, if any
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for key in list(self._node.replicas):
            self._close(key)

    def _run(self) -> None:
        answered = time.monotonic()
        since = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                snap = self._fetch(self._node.view.version, since)
            except Exception:
                log.exception("worker poll failed")
                snap = None
            if snap is None:
                silent = time.monotonic() - answered
                if silent > STALE_S:
                    self._unserve()
                if silent > self._lost_s:
                    log.error("worker lost its node: no answer for %.0fs", self._lost_s)
                    self._on_lost()
                    return
                self._stop.wait(RETRY_S)
                continue
            answered = time.monotonic()
            since = snap.digest
            try:
                self.apply(snap)
            except Exception:
                log.exception("worker could not apply its node's snapshot")
                since = 0  # ask again for the whole of it
            self.first.set()
            # The node holds a poll until something changes: this caps how often a busy
            # node is asked (and each store caught up), not how long an idle one waits.
            self._stop.wait(max(0.0, self._poll_s - (time.monotonic() - started)))

    def _unserve(self) -> None:
        for mirror in list(self._node.replicas.values()):
            mirror.state = ReplicaState.RESTORING
        self._node.ready = (False, "this read worker has no word from its node")

    def apply(self, snap: Snapshot) -> None:
        """``snap`` into the node: tables first, the view, then the replicas."""
        node = self._node
        for name, row in snap.tables.items():
            known = node.tables.get(name)
            if known is None or known.partitions != row.partitions:
                node.tables[name] = runtime_of(row)
        for name in [n for n in node.tables if n not in snap.tables]:
            del node.tables[name]
        for table, internal in snap.current.items():
            runtime = node.tables.get(internal)
            if runtime is not None and node.current.get(table) is not runtime:
                node.current[table] = runtime
        for table in [t for t in node.current if t not in snap.current]:
            del node.current[table]
        if snap.view is not None:
            node.view = view_of(snap.view)
        node.ready = (snap.ready, snap.reason)
        seen: set[tuple[str, int]] = set()
        for replica in snap.replicas:
            key = (replica.table, replica.partition)
            seen.add(key)
            self._follow(key, replica)
        for key in [k for k in node.replicas if k not in seen]:
            self._close(key)

    def _follow(self, key: tuple[str, int], row: ReplicaRow) -> None:
        replicas = self._node.replicas
        mirror = replicas.get(key)
        if mirror is not None and mirror.opened_at != row.opened_at:
            self._close(key)
            mirror = None
        if mirror is None:
            mirror = self._open(row)
            if mirror is None:
                return
            replicas[key] = mirror
        mirror.end_offset = row.end_offset
        if row.position > mirror.position:
            applied = mirror.store.catch_up()
            mirror.position = applied + 1
            waits = mirror.waits
            if waits.lowest <= applied:
                waits.reached(applied)
        # Serving only as far as this worker's copy goes: the writer's state, once caught up
        # to where the writer was when it said so.
        state = ReplicaState(row.state)
        if state is not mirror.state:
            mirror.state = state

    def _open(self, row: ReplicaRow) -> MirrorReplica | None:
        runtime = self._node.tables.get(row.table)
        if runtime is None or not mirrored(runtime):
            return None
        if row.state not in (ReplicaState.ACTIVE.value, ReplicaState.STANDBY.value):
            return None  # restoring: the writer answers until it serves
        path = table_dir(self._node.settings.data_dir, row.table) / str(row.partition)
        own = self._own_dir / row.table / str(row.partition)
        try:
            spec = runtime.spec
            index = tuple(f.field for f in spec.index)
            store = SecondaryStore(path, own, self._budget, spec.rank_by, index)
        except Exception as exc:
            log.warning(
                "worker cannot open table=%s partition=%d error=%s", row.table, row.partition, exc
            )
            return None
        store.catch_up()
        return MirrorReplica(row, store)

    def _close(self, key: tuple[str, int]) -> None:
        mirror = self._node.replicas.pop(key, None)
        if mirror is None:
            return
        mirror.state = ReplicaState.REVOKED
        mirror.waits.close()
        mirror.store.close()
        # The secondary's own files (its info log): nothing to keep once it is closed.
        shutil.rmtree(self._own_dir / mirror.table / str(mirror.partition), ignore_errors=True)
