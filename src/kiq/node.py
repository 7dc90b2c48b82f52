"""A serving node: where the pieces are put together, and nothing else.

Tables → stores (one per partition) → materializer (tails active and standby
partitions) ← cluster view (group assignment + standbys) → router → HTTP API.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from kiq.cluster import ClusterView, Member, build_view
from kiq.cluster.members import decode_client_id, encode_client_id
from kiq.cluster.view import EMPTY_VIEW, TableLayout
from kiq.errors import ConfigError, KafkaUnavailable
from kiq.kafka import create_topics, topic_partitions
from kiq.kafka.dlq import DeadLetters
from kiq.kafka.group import GroupMember
from kiq.kafka.logs import KAFKA_LOG
from kiq.kafka.reader import PartitionReader
from kiq.metrics import NodeMetrics
from kiq.partitioning import partition_for
from kiq.replicas import Materializer, Replica, Role
from kiq.settings import ServeSettings
from kiq.stores import open_partition_store
from kiq.tables import TableRuntime, TableSpec, codec_for, parse_table

log = logging.getLogger(__name__)

_PARTITION_CACHE_SIZE = 1_000_000


class Node:
    def __init__(self, settings: ServeSettings, tables: list[TableSpec]) -> None:
        if not tables:
            raise ConfigError("no tables to serve: add --table NAME=TOPIC")
        topics = [t.topic for t in tables]
        if len(set(topics)) != len(topics) or len({t.name for t in tables}) != len(tables):
            raise ConfigError("each table needs its own name and its own topic")
        self.settings = settings
        self.node_id = settings.node_id
        self.url = settings.advertised_url
        self.metrics = NodeMetrics()
        self.tables: dict[str, TableRuntime] = {}
        for spec in tables:
            count = topic_partitions(settings.bootstrap, spec.topic)
            if count is None:
                raise ConfigError(
                    f"table {spec.name}: topic {spec.topic!r} does not exist on "
                    f"{settings.bootstrap}: create it (with the input's partition count) first"
                )
            self.tables[spec.name] = TableRuntime(spec, codec_for(spec), count)
        self._layouts = [
            TableLayout(t.spec.name, t.spec.topic, t.partitions, t.spec.standby_replicas,
                        t.spec.global_)
            for t in self.tables.values()
        ]  # fmt: skip
        self.view: ClusterView = EMPTY_VIEW
        self._partition_cache: dict[str, dict[str, int]] = {name: {} for name in self.tables}
        create_topics(settings.bootstrap, {settings.dead_letter_topic: 1})
        self.materializer = Materializer(
            reader=PartitionReader(settings.bootstrap, client_id=f"kiq-reader-{self.node_id}"),
            tables=self.tables,
            open_store=self._open_store,
            dead_letters=DeadLetters(settings.bootstrap, settings.dead_letter_topic),
            metrics=self.metrics,
            linger_s=settings.linger_s,
        )
        self.metrics.watch_replicas(lambda: self.materializer.replicas.values())
        grouped = [t.spec.topic for t in self.tables.values() if not t.spec.global_]
        self.group = GroupMember(
            settings.bootstrap, settings.cluster, encode_client_id(self.node_id, self.url), grouped,
            on_change=self._poke, session_timeout_ms=settings.session_timeout_ms,
        ) if grouped else None  # fmt: skip
        self._poke_event = threading.Event()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="kiq-view", daemon=True)
        self.started_at = time.time()

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        log.info(
            "node starting node=%s url=%s tables=%s", self.node_id, self.url, ",".join(self.tables)
        )
        self.materializer.start()
        if self.group is not None:
            self.group.start()
        self._refresh_logged()
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        self._poke_event.set()
        if self.group is not None:
            self.group.stop()
        self._watcher.join(timeout=10)
        self.materializer.stop()
        log.info("node stopped node=%s", self.node_id)

    # -- lookups ----------------------------------------------------------------

    def partition_of(self, runtime: TableRuntime, key: str) -> int:
        # murmur2 in Python costs microseconds; hot keys repeat, so remember them.
        cache = self._partition_cache[runtime.spec.name]
        partition = cache.get(key)
        if partition is None:
            partition = partition_for(runtime.spec.partition_key(key), runtime.partitions)
            if len(cache) >= _PARTITION_CACHE_SIZE:
                cache.clear()
            cache[key] = partition
        return partition

    def replica(self, table: str, partition: int) -> Replica | None:
        return self.materializer.replicas.get((table, partition))

    def is_ready(self) -> tuple[bool, str]:
        """Ready when in the group and every partition this node must answer for is caught up.

        "Must answer for" is what the group assigned to this node (its own word, not the
        view, which may lag behind it) plus every partition of every global table.
        """
        if self.group is not None and not self.group.wait_joined(0):
            return False, "not yet a member of the cluster group"
        by_topic = {t.spec.topic: name for name, t in self.tables.items()}
        owned = [(by_topic[topic], p) for topic, p in (self.group.owned if self.group else ())]
        owned += [
            (name, p) for name, t in self.tables.items() if t.spec.global_
            for p in range(t.partitions)
        ]  # fmt: skip
        for table, partition in owned:
            replica = self.replica(table, partition)
            if replica is None or not replica.state.serving:
                return False, f"{table}[{partition}] is restoring"
            if replica.lag > self.settings.ready_max_lag:
                return False, f"{table}[{partition}] lags {replica.lag} records"
        return True, "ok"

    # -- keeping the view -------------------------------------------------------

    def _open_store(self, table: str, partition: int):
        spec = self.tables[table].spec
        return open_partition_store(spec.store, self.settings.data_dir, table, partition)

    def _poke(self) -> None:
        self._poke_event.set()

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
        assignments: Mapping[str, set[tuple[str, int]]] = {}
        if self.group is not None:
            described: dict[Member, set[tuple[str, int]]] = {}
            for info in self.group.describe():
                member = decode_client_id(info.client_id)
                if member is not None:  # a client that is not a kiq node
                    described.setdefault(member, set()).update(info.partitions)
            members = list(described) or members
            if self.node_id not in {m.node_id for m in members}:
                members.append(Member(self.node_id, self.url))
            assignments = {m.node_id: parts for m, parts in described.items()}
            assignments[self.node_id] = set(self.group.owned)
        view = build_view(self.view.version + 1, members, assignments, self._layouts, self.view)
        changed = view.replicas != self.view.replicas or view.members != self.view.members
        self.view = view
        if changed:
            log.info(
                "cluster view version=%d members=%s", view.version, ",".join(sorted(view.members))
            )
        # Every node owns its copy of a global table: it answers from it, never forwards.
        self.materializer.reconcile(
            {
                key: Role.ACTIVE
                if role is Role.ACTIVE or self.tables[key[0]].spec.global_
                else Role.STANDBY
                for key, role in view.roles_of(self.node_id).items()
            }
        )


def node_from_settings(settings: ServeSettings) -> Node:
    tables = [parse_table(t, default_standby=settings.standby_replicas) for t in settings.tables]
    return Node(settings, tables)
