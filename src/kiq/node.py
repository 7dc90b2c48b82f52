"""A serving node: its parts put together and run. Building one does no I/O.

Tables → stores (one per partition) → materializer (tails active and standby
partitions) ← cluster view (group assignment + standbys) → router → HTTP API.
``kiq.node_build.build_node`` asks the broker what a node needs to know first
and makes its parts (the materializer with its Kafka reader and dead-letter
sender, the group seat); request handlers see a node only through ``NodeView``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from kiq.cluster import ClusterView, Member, admitted, build_view
from kiq.cluster.members import decode_client_id
from kiq.cluster.view import EMPTY_VIEW, TableLayout
from kiq.errors import KafkaUnavailable
from kiq.kafka.group import GroupMemberInfo
from kiq.kafka.logs import KAFKA_LOG
from kiq.metrics import NodeMetrics
from kiq.partitioning import partition_for
from kiq.replicas import Materializer, Replica, Role
from kiq.replicas.expiry import ExpirySweeper
from kiq.replicas.replica import ReadOnlyReplica
from kiq.replicas.taps import Taps
from kiq.settings import ServeSettings
from kiq.stores import MemoryBudget, PartitionStore, open_partition_store
from kiq.tables import TableRuntime
from kiq.tables.versions import Alias, current_version, internal_name

log = logging.getLogger(__name__)

_PARTITION_CACHE_SIZE = 1_000_000

Assignments = Mapping[str, set[tuple[str, int]]]


class Group(Protocol):
    """This node's seat in the cluster group (``kiq.kafka.group.GroupMember``)."""

    @property
    def owned(self) -> frozenset[tuple[str, int]]:
        """The (topic, partition)s the group assigned to this node."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wait_joined(self, timeout_s: float) -> bool: ...

    def describe(self) -> list[GroupMemberInfo]: ...

    def set_topics(self, topics: list[str]) -> None:
        """Hold partitions of exactly these topics from now on (a table version came or went)."""
        ...


class Service(Protocol):
    """A part with a thread of its own that the node starts and stops with itself."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Node:
    """Keeps the cluster view and the local replicas in step; serves nothing itself.

    ``group_changed`` is the event the group sets when this node's assignment
    changes, so the view is rebuilt at once rather than at the next refresh.
    A node without ``group`` serves only global tables.
    """

    def __init__(
        self,
        settings: ServeSettings,
        tables: dict[str, TableRuntime],
        materializer: Materializer,
        metrics: NodeMetrics,
        group: Group | None = None,
        group_changed: threading.Event | None = None,
        sweeper: ExpirySweeper | None = None,
    ) -> None:
        self.settings = settings
        self._sweeper = sweeper
        self.node_id = settings.node_id
        self.url = settings.advertised_url
        self.metrics = metrics
        # Every table version this node serves, by the name it keeps it under (``NAME``,
        # ``NAME@v2``: kiq.tables.versions); ``current`` is what each table's own name means
        # now (its alias's version). Both are changed in place as the catalog moves (one
        # dict operation each, atomic for readers on other threads), never rebound.
        self.tables: dict[str, TableRuntime] = tables
        self.current: dict[str, TableRuntime] = {}
        self.aliases: dict[str, Alias] = {}
        for runtime in tables.values():
            self._point(runtime.spec.table)
        self.view: ClusterView = EMPTY_VIEW
        self._layouts = [_layout(t) for t in tables.values()]
        self._materializer = materializer
        self.taps = materializer.taps
        metrics.watch_replicas(lambda: materializer.replicas.values())
        self._group = group
        self._poke_event = threading.Event() if group_changed is None else group_changed
        self._stop = threading.Event()
        self._refused_members: set[str] = set()  # logged once each, while they last
        self._watcher = threading.Thread(target=self._watch, name="kiq-view", daemon=True)
        self._catalog: Service | None = None

    def follow(self, catalog: Service) -> None:
        """Follow the table catalog with ``catalog`` (``kiq.node_catalog``) while running."""
        self._catalog = catalog

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        log.info(
            "node starting node=%s url=%s tables=%s", self.node_id, self.url, ",".join(self.tables)
        )
        self._materializer.start()
        if self._sweeper is not None:
            self._sweeper.start()
        if self._group is not None:
            self._group.start()
        self._refresh_logged()
        self._watcher.start()
        if self._catalog is not None:
            self._catalog.start()

    def stop(self) -> None:
        if self._catalog is not None:
            self._catalog.stop()
        self._stop.set()
        self._poke_event.set()
        if self._group is not None:
            self._group.stop()
        if self._watcher.is_alive():
            self._watcher.join(timeout=10)
        if self._sweeper is not None:
            self._sweeper.stop()
        self._materializer.stop()
        log.info("node stopped node=%s", self.node_id)

    # -- what the node holds ------------------------------------------------------

    @property
    def replicas(self) -> Mapping[tuple[str, int], Replica]:
        """The local replicas by (table, partition): live, read-only, never rebound."""
        return self._materializer.replicas

    def replica(self, table: str, partition: int) -> Replica | None:
        return self._materializer.replica(table, partition)

    def is_ready(self) -> tuple[bool, str]:
        """Ready when in the group and every partition this node must answer for is caught up.

        "Must answer for" is what the group assigned to this node (its own word, not the
        view, which may lag behind it) plus every partition of every global table.
        """
        group = self._group
        if group is not None and not group.wait_joined(0):
            return False, "not yet a member of the cluster group"
        tables = list(self.tables.items())
        by_topic = {t.spec.topic: name for name, t in tables}
        owned = [
            (by_topic[topic], p) for topic, p in (group.owned if group else ()) if topic in by_topic
        ]
        for name, t in tables:
            if t.spec.global_:
                owned.extend((name, p) for p in range(t.partitions))
        for table, partition in owned:
            replica = self.replica(table, partition)
            if replica is None or not replica.state.serving:
                return False, f"{table}[{partition}] is restoring"
            if replica.fault is not None:
                return False, f"{table}[{partition}]: {replica.fault}"
            if replica.lag > self.settings.ready_max_lag:
                return False, f"{table}[{partition}] lags {replica.lag} records"
        return True, "ok"

    # -- versions that come and go (kiq.node_catalog follows the catalog) -----------

    def versions_of(self, table: str) -> dict[str, TableRuntime]:
        """The versions of ``table`` this node serves, by version."""
        return {t.spec.version: t for t in list(self.tables.values()) if t.spec.table == table}

    def add_table(self, runtime: TableRuntime) -> None:
        """Serve another table version (a pipeline declared it after this node started)."""
        name = runtime.spec.name
        if name in self.tables:
            return
        self.tables[name] = runtime
        self._materializer.add_table(runtime)
        if self._sweeper is not None:
            self._sweeper.add_table(runtime)
        self._layouts = [*self._layouts, _layout(runtime)]
        self._regroup()
        self._point(runtime.spec.table)
        log.info("table added table=%s topic=%s", name, runtime.spec.topic)
        self._poke_event.set()

    def drop_table(self, name: str) -> threading.Event:
        """Stop serving a table version (``kiq retire``); the event is set once its replicas
        are closed, so its stores may be deleted."""
        runtime = self.tables.get(name)
        if runtime is None:
            done = threading.Event()
            done.set()
            return done
        self._layouts = [layout for layout in self._layouts if layout.name != name]
        self._regroup(without=runtime.spec.topic)
        del self.tables[name]
        if self._sweeper is not None:
            self._sweeper.drop_table(name)
        self._point(runtime.spec.table)
        log.info("table dropped table=%s topic=%s", name, runtime.spec.topic)
        self._poke_event.set()
        return self._materializer.drop_table(name)

    def set_alias(self, table: str, alias: Alias | None) -> None:
        """Point ``table``'s own name at the alias's version (None: back to the default)."""
        if alias is None:
            self.aliases.pop(table, None)
        else:
            self.aliases[table] = alias
        before = self.current.get(table)
        self._point(table)
        after = self.current.get(table)
        if after is not None and after is not before:
            log.info("table switched table=%s version=%s", table, after.spec.version)

    def _point(self, table: str) -> None:
        versions = self.versions_of(table)
        chosen = current_version(versions, self.aliases.get(table))
        if chosen is None:
            self.current.pop(table, None)
        else:
            self.current[table] = versions[chosen]

    def _regroup(self, without: str | None = None) -> None:
        if self._group is None:
            return
        topics = [t.spec.topic for t in list(self.tables.values()) if not t.spec.global_]
        self._group.set_topics([t for t in dict.fromkeys(topics) if t != without])

    # -- keeping the view -------------------------------------------------------

    def _watch(self) -> None:
        interval = self.settings.view_refresh_ms / 1000
        while not self._stop.is_set():
            self._poke_event.wait(interval)
            self._poke_event.clear()
            if self._stop.is_set():
                break
            self._refresh_logged()

    def _refresh_logged(self) -> None:
        """A failed refresh keeps the last view: the node answers from what it has."""
        try:
            self._refresh()
        except KafkaUnavailable as exc:  # counted in the outage's summary, not one line each
            KAFKA_LOG.unreachable(f"cluster view refresh: {exc}")
        except Exception as exc:
            log.warning("cluster view refresh failed node=%s error=%s", self.node_id, exc)

    def _refresh(self) -> None:
        members: list[Member] = [Member(self.node_id, self.url)]
        assignments: Assignments = {}
        if self._group is not None:
            described: dict[Member, set[tuple[str, int]]] = {}
            for info in self._group.describe():
                member = decode_client_id(info.client_id)
                if member is not None:  # a client that is not a kiq node
                    described.setdefault(member, set()).update(info.partitions)
            members, refused = admitted(Member(self.node_id, self.url), described)
            for why in refused:
                if why not in self._refused_members:
                    log.error("group member refused: %s; its partitions are read from others", why)
            self._refused_members = set(refused)
            ids = {m.node_id for m in members}
            assignments = {m.node_id: parts for m, parts in described.items() if m.node_id in ids}
            assignments[self.node_id] = set(self._group.owned)
        view = build_view(self.view.version + 1, members, assignments, self._layouts, self.view)
        changed = view.replicas != self.view.replicas or view.members != self.view.members
        self.view = view
        if changed:
            log.info(
                "cluster view version=%d members=%s", view.version, ",".join(sorted(view.members))
            )
        # Every node owns its copy of a global table: it answers from it, never forwards.
        self._materializer.reconcile(
            {
                key: Role.ACTIVE
                if role is Role.ACTIVE or self.tables[key[0]].spec.global_
                else Role.STANDBY
                for key, role in view.roles_of(self.node_id).items()
                if key[0] in self.tables  # a version dropped since the view was built
            }
        )


def _layout(t: TableRuntime) -> TableLayout:
    return TableLayout(
        t.spec.name, t.spec.topic, t.partitions, t.spec.standby_replicas, t.spec.global_
    )


def store_opener(
    tables: Mapping[str, TableRuntime], data_dir: Path, budget: MemoryBudget | None = None
) -> Callable[[str, int], PartitionStore]:
    """Opens a table partition's store, of the table's kind, ranked by its ``rank_by`` and
    indexed by its ``index``, under ``data_dir``; every store it opens shares ``budget``
    (one of its own when not given: one per node)."""
    shared = budget if budget is not None else MemoryBudget()

    def open_store(table: str, partition: int) -> PartitionStore:
        spec = tables[table].spec
        index = tuple(f.field for f in spec.index)
        return open_partition_store(
            spec.store, data_dir, table, partition, shared, spec.rank_by, index
        )

    return open_store


class ServedNode(Protocol):
    """What the API needs of the node it serves: a ``Node``, or a read worker's copy of one
    (``kiq.workers.mirror.MirrorNode``)."""

    settings: ServeSettings
    node_id: str
    url: str
    metrics: NodeMetrics

    @property
    def tables(self) -> Mapping[str, TableRuntime]: ...

    @property
    def current(self) -> Mapping[str, TableRuntime]: ...

    @property
    def replicas(self) -> Mapping[tuple[str, int], ReadOnlyReplica]: ...

    @property
    def taps(self) -> Taps: ...

    @property
    def view(self) -> ClusterView: ...

    def is_ready(self) -> tuple[bool, str]: ...

    def versions_of(self, table: str) -> dict[str, TableRuntime]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class NodeView:
    """The node as its request handlers see it: read-only, no lifecycle, no Kafka.

    ``tables`` and ``replicas`` are the node's own live mappings, so the lookup hot
    path reads them with no call in between; ``view`` is the current cluster view.
    A replica is seen as ``ReadOnlyReplica``: its store read-only, its role and state
    not a handler's to move (reads go through ``kiq.routing.ReplicaReader``).
    """

    __slots__ = (
        "_node",
        "_partitions",
        "current",
        "forward_timeout_ms",
        "metrics",
        "node_id",
        "replicas",
        "tables",
        "taps",
        "url",
    )

    def __init__(self, node: ServedNode) -> None:
        self._node = node
        self.node_id = node.node_id
        self.url = node.url
        self.tables: Mapping[str, TableRuntime] = node.tables  # every version, by internal name
        self.current: Mapping[str, TableRuntime] = node.current  # a table's name → its version
        self.replicas: Mapping[tuple[str, int], ReadOnlyReplica] = node.replicas
        self.metrics = node.metrics
        self.taps = node.taps  # where watches hear what a local replica applied (kiq.live)
        self.forward_timeout_ms = node.settings.forward_timeout_ms
        # Each version's keys' partitions, with the runtime they were computed for: a version
        # retired and declared again (its topic made anew) may have another partition count.
        self._partitions: dict[str, tuple[TableRuntime, dict[str, int]]] = {
            name: (t, {}) for name, t in node.tables.items()
        }

    @property
    def view(self) -> ClusterView:
        return self._node.view

    def replica(self, table: str, partition: int) -> ReadOnlyReplica | None:
        return self.replicas.get((table, partition))

    def partition_of(self, runtime: TableRuntime, key: str) -> int:
        # murmur2 in Python costs microseconds; hot keys repeat, so remember them.
        entry = self._partitions.get(runtime.spec.name)
        if entry is None or entry[0] is not runtime:  # a version added since (kiq.node_catalog)
            entry = self._partitions[runtime.spec.name] = (runtime, {})
        cache = entry[1]
        partition = cache.get(key)
        if partition is None:
            partition = partition_for(runtime.spec.partition_key(key), runtime.partitions)
            if len(cache) >= _PARTITION_CACHE_SIZE:
                cache.clear()
            cache[key] = partition
        return partition

    def is_ready(self) -> tuple[bool, str]:
        return self._node.is_ready()

    def resolve(self, table: str, version: str | None = None) -> TableRuntime | None:
        """What a caller's ``table`` (and ``?version=``) names: the table's current version,
        or the one asked for; None when there is none."""
        if version is None:
            return self.current.get(table)
        runtime = self.tables.get(internal_name(table, version))
        return runtime if runtime is not None and runtime.spec.table == table else None

    def versions_of(self, table: str) -> dict[str, TableRuntime]:
        return self._node.versions_of(table)
