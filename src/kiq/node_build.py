"""Making a node's parts from its settings: the I/O a node needs before it can start.

The broker is asked each table's partition count and gets the dead-letter topic;
the Kafka reader, dead-letter sender and group seat are made here, and the
materializer from the first two; all are handed to ``Node``, which does no I/O
of its own (so tests build one from stand-ins and real stores).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from kiq.cluster.members import encode_client_id
from kiq.errors import ConfigError, WriteFailed
from kiq.kafka import create_topics, topic_partitions
from kiq.kafka.dlq import DeadLetters
from kiq.kafka.group import GroupMember
from kiq.kafka.reader import PartitionReader
from kiq.kafka.writer import AsyncProducer, ProduceFailed
from kiq.metrics import NodeMetrics
from kiq.node import Node, store_opener
from kiq.replicas import Materializer
from kiq.settings import ServeSettings
from kiq.stores import set_memory_budget
from kiq.tables import TableRuntime, TableSpec, codec_for, parse_table


def build_node(settings: ServeSettings) -> Node:
    tables = table_specs(settings)
    set_memory_budget(settings.store_memory_mb * 1024 * 1024)
    runtimes: dict[str, TableRuntime] = {}
    for spec in tables:
        count = topic_partitions(settings.bootstrap, spec.topic)
        if count is None:
            raise ConfigError(
                f"table {spec.name}: topic {spec.topic!r} does not exist on "
                f"{settings.bootstrap}: create it (with the input's partition count) first"
            )
        runtimes[spec.name] = TableRuntime(spec, codec_for(spec), count)
    create_topics(settings.bootstrap, {settings.dead_letter_topic: 1})
    grouped = [t.topic for t in tables if not t.global_]
    group_changed = threading.Event()
    group = None
    if grouped:
        group = GroupMember(
            settings.bootstrap,
            settings.cluster,
            encode_client_id(settings.node_id, settings.advertised_url),
            grouped,
            on_change=group_changed.set,
            session_timeout_ms=settings.session_timeout_ms,
        )
    metrics = NodeMetrics()
    materializer = Materializer(
        reader=PartitionReader(settings.bootstrap, client_id=f"kiq-reader-{settings.node_id}"),
        tables=runtimes,
        open_store=store_opener(runtimes, settings.data_dir),
        dead_letters=DeadLetters(settings.bootstrap, settings.dead_letter_topic),
        metrics=metrics,
        linger_s=settings.linger_s,
    )
    return Node(settings, runtimes, materializer, metrics, group, group_changed)


def table_specs(settings: ServeSettings) -> list[TableSpec]:
    """The tables to serve, checked before anything asks the broker."""
    tables = [parse_table(t, default_standby=settings.standby_replicas) for t in settings.tables]
    check_tables(tables)
    return tables


def check_tables(tables: Sequence[TableSpec]) -> None:
    if not tables:
        raise ConfigError("no tables to serve: add --table NAME=TOPIC")
    topics = [t.topic for t in tables]
    if len(set(topics)) != len(topics) or len({t.name for t in tables}) != len(tables):
        raise ConfigError("each table needs its own name and its own topic")


class LogWriter:
    """Writes records to Kafka for the API; the producer is made at the first write.

    Most nodes never take a write, and a producer costs a thread and a connection.
    """

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._producer: AsyncProducer | None = None

    async def send(self, topic: str, key: bytes, value: bytes) -> tuple[int, int]:
        """(partition, offset) once the broker has the record; ``WriteFailed`` if it did not."""
        if self._producer is None:
            self._producer = AsyncProducer(self._bootstrap)
        try:
            return await self._producer.send(topic, key, value)
        except ProduceFailed as exc:
            raise WriteFailed(str(exc)) from exc

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
