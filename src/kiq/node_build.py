"""The composition root of a serving node: every part of it, made from its settings alone.

``build_node`` is given the ``NodeSettings`` ``kiq serve`` read at the edge and reads
nothing else. It first checks what needs no network (tables, authentication, TLS,
the application's routes), so a mistake there never waits on Kafka; then it asks
the broker each table's partition count, creates the dead-letter topic, and makes
the parts: one Kafka security and one RocksDB memory budget for the node, handed
to every client that connects and to the store opener; the Kafka reader,
dead-letter sender and group seat; the materializer; the ``Node`` (which does no
I/O of its own, so tests build one from stand-ins); the writer and the ASGI app.
Nothing is kept in the process: two nodes built in one keep their own.
"""

from __future__ import annotations

import dataclasses
import logging
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kiq.app.endpoints import Declare
from kiq.app.targets import resolve
from kiq.catalog import CATALOG_TOPIC
from kiq.cluster.members import encode_client_id
from kiq.errors import ConfigError, WriteFailed
from kiq.kafka import KafkaSecurity, compacted, create_topics, topic_partitions
from kiq.kafka.dlq import DeadLetters
from kiq.kafka.group import GroupMember
from kiq.kafka.reader import PartitionReader
from kiq.kafka.times import LogTimes
from kiq.kafka.writer import AsyncProducer, ProduceFailed
from kiq.metrics import NodeMetrics
from kiq.node import Node, store_opener
from kiq.node_catalog import CatalogWriter, NodeCatalog
from kiq.progress import ProgressMetrics, ProgressReader
from kiq.replicas import Materializer
from kiq.replicas.expiry import ExpirySweeper, Outgoing
from kiq.security import Security, security_for
from kiq.security import tls as tls_contexts
from kiq.server import KiqApp, create_app
from kiq.settings import NodeSettings, ServeSettings, TlsSettings
from kiq.stores import MemoryBudget, private_dir
from kiq.tables import TableRuntime, TableSpec, codec_for
from kiq.tables.declared import ServeEntry, decode_catalog, parse_serve_tables, resolve_tables
from kiq.tables.versions import Alias, decode_aliases

log = logging.getLogger(__name__)

# How long a node with nothing to serve waits for a pipeline to declare its tables.
CATALOG_WAIT_S = 60.0


@dataclass(frozen=True)
class BuiltNode:
    """A node and its app, ready to serve: what ``kiq serve`` runs, and how.

    ``settings`` are those given, ``serve`` holding the URL peers use (its scheme
    the one the node serves); ``kafka`` and ``budget`` are the node's own.
    """

    settings: NodeSettings
    node: Node
    app: KiqApp
    security: Security
    server_tls: tuple[Path, Path] | None
    kafka: KafkaSecurity
    budget: MemoryBudget


def build_node(settings: NodeSettings) -> BuiltNode:
    """Every part of the node ``settings`` describe; ``ConfigError`` names what to fix."""
    # Who may ask first: a node that would listen unprotected says so before anything else.
    security = security_for(settings.auth, settings.serve.host)
    served = served_tables(settings.serve)
    serve = tls_contexts.advertised(settings.serve, settings.tls)
    server_tls = tls_contexts.server_files(settings.tls)
    peer_context = peer_ssl(settings.tls)
    endpoints = app_endpoints(settings)
    kafka = KafkaSecurity.from_settings(settings.kafka)  # reads the password file now
    budget = MemoryBudget.of_mib(serve.store_memory_mb)
    # The node's stores and files, readable by its own user alone.
    private_dir(serve.data_dir)
    private_dir(serve.data_dir / "tables", own=True)
    tables, aliases = catalog_tables(serve, served, settings.app.name, kafka)
    writer = LogWriter(serve.bootstrap, kafka)
    node = _node(serve, tables, kafka, budget, writer)
    for alias in aliases.values():  # what each name means from the first request on
        node.set_alias(alias.table, alias)
    # The catalog followed while the node runs: versions, aliases, retirements.
    follower = NodeCatalog(
        node,
        serve.bootstrap,
        settings.app.name,
        served,
        parse_serve_tables(serve.tables)[1],
        serve.data_dir,
        security=kafka,
        default_standby=serve.standby_replicas,
    )
    node.follow(follower)
    # The application's queries, as their drivers publish them: GET /v1/pipelines, /metrics.
    progress = ProgressReader(serve.bootstrap, settings.app.name, security=kafka)
    node.metrics.registry.register(ProgressMetrics(progress))
    app = create_app(
        node,
        writer,
        endpoints=endpoints,
        limits=settings.limits,
        security=security,
        peer_ssl=peer_context,
        progress=progress,
        catalog=CatalogWriter(settings.app.name, writer, follower, serve.bootstrap, security=kafka),
    )
    return BuiltNode(
        dataclasses.replace(settings, serve=serve),
        node,
        app,
        security,
        server_tls,
        kafka,
        budget,
    )


def _node(
    serve: ServeSettings,
    tables: list[TableSpec],
    kafka: KafkaSecurity,
    budget: MemoryBudget,
    writer: LogWriter,
) -> Node:
    """The node's parts that talk to Kafka, and the node made of them."""
    runtimes: dict[str, TableRuntime] = {}
    missing: list[ConfigError] = []
    for spec in tables:
        count = None
        if spec.declared is None or spec.topic != serve.dead_letter_topic:
            count = topic_partitions(serve.bootstrap, spec.topic, security=kafka)
        if count is None:
            error = ConfigError(
                f"table {spec.name}: topic {spec.topic!r} does not exist on "
                f"{serve.bootstrap}, or kiq's Kafka user may not describe it: create it "
                "(with the input's partition count) first, or grant Describe and Read on it "
                "(docs/security.md, Kafka ACLs)"
            )
            if spec.declared is None:
                raise error  # the operator's own NAME=TOPIC
            # A declaration: served once its topic is there (NodeCatalog), never fatal.
            log.warning(
                "table declaration not served yet table=%s topic=%s reason=%s",
                spec.name,
                spec.topic,
                "no such topic" if spec.topic != serve.dead_letter_topic else "dead letters",
            )
            missing.append(error)
            continue
        runtimes[spec.name] = TableRuntime(spec, codec_for(spec), count)
    if not runtimes and missing:
        raise missing[0]
    tables = [runtimes[name].spec for name in runtimes]
    if topic_partitions(serve.bootstrap, serve.dead_letter_topic, security=kafka) is None:
        create_topics(serve.bootstrap, {serve.dead_letter_topic: 1}, security=kafka)
    grouped = [t.topic for t in tables if not t.global_]
    group_changed = threading.Event()
    group = None
    if grouped:
        group = GroupMember(
            serve.bootstrap,
            serve.cluster,
            encode_client_id(serve.node_id, serve.advertised_url),
            grouped,
            on_change=group_changed.set,
            security=kafka,
            session_timeout_ms=serve.session_timeout_ms,
        )
    metrics = NodeMetrics()
    metrics.watch_store_memory(budget.usage, budget.total_bytes)  # RocksDB's, all stores
    materializer = Materializer(
        reader=PartitionReader(
            serve.bootstrap, client_id=f"kiq-reader-{serve.node_id}", security=kafka
        ),
        tables=runtimes,
        open_store=store_opener(runtimes, serve.data_dir, budget),
        dead_letters=DeadLetters(serve.bootstrap, serve.dead_letter_topic, security=kafka),
        metrics=metrics,
        linger_s=serve.linger_s,
    )
    # Made even when no table ages yet: a version declared later may (its thread waits).
    sweeper = ExpirySweeper(
        runtimes,
        materializer.replicas,
        LogTimes(serve.bootstrap, f"kiq-expiry-{serve.node_id}", security=kafka),
        writer,
        metrics,
        interval_s=serve.expiry_sweep_s,
    )
    return Node(serve, runtimes, materializer, metrics, group, group_changed, sweeper)


def peer_ssl(tls: TlsSettings) -> ssl.SSLContext | None:
    """What ``https://`` peers are verified with: a node serving TLS calls its peers so."""
    if tls.enabled or tls.ca is not None:
        return tls_contexts.client_context(tls.ca)
    return None


def app_endpoints(settings: NodeSettings) -> list[Declare]:
    """The application's route declarations, found before the node asks Kafka anything;
    a relative ``FILE.py`` is looked for beside the application file first."""
    config = settings.config_file
    base = str(config.parent) if config is not None else None
    return [resolve(target, "[app] endpoints", base) for target in settings.app.endpoints]


def served_tables(settings: ServeSettings) -> list[ServeEntry]:
    """``[serve] tables``, checked before anything asks the broker (the catalog fills in
    what an entry leaves out)."""
    return parse_serve_tables(settings.tables, settings.standby_replicas)[0]


def catalog_tables(
    serve: ServeSettings,
    served: Sequence[ServeEntry],
    app: str,
    kafka: KafkaSecurity,
    wait_s: float = CATALOG_WAIT_S,
) -> tuple[list[TableSpec], dict[str, Alias]]:
    """The tables this node serves, every version of each: the table catalog's, filtered and
    overridden by ``served``; and the aliases that say which version each name means. With
    none to serve yet, waits ``wait_s`` for a pipeline to declare some."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        found = compacted.read_latest(serve.bootstrap, CATALOG_TOPIC, security=kafka)
        tables = resolve_tables(
            served,
            decode_catalog(found, app),
            app=app,
            default_standby=serve.standby_replicas,
            every_declared=parse_serve_tables(serve.tables)[1],
        )
        if tables:
            check_tables(tables)
            return tables, decode_aliases(found, app)
        if time.monotonic() > deadline:
            raise ConfigError(
                f"no tables to serve: [serve] tables names none and the table catalog "
                f"({CATALOG_TOPIC} on {serve.bootstrap}) holds none of application {app!r} "
                f"after {wait_s:.0f}s: start its pipeline (kiq pipeline run), check [app] name, "
                "or declare tables with --table NAME=TOPIC"
            )
        if not said:
            log.info(
                "waiting for tables: the table catalog holds none of application %s yet "
                "(start its pipeline, or declare tables with --table NAME=TOPIC)",
                app,
            )
            said = True
        time.sleep(0.5)


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

    def __init__(self, bootstrap: str, security: KafkaSecurity) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._producer: AsyncProducer | None = None
        self._making = threading.Lock()  # the event loop and the expiry sweeper both write

    def _made(self) -> AsyncProducer:
        with self._making:
            if self._producer is None:
                self._producer = AsyncProducer(self._bootstrap, security=self._security)
            return self._producer

    async def send(self, topic: str, key: bytes, value: bytes | None) -> tuple[int, int]:
        """(partition, offset) once the broker has the record; ``WriteFailed`` if it did not."""
        producer = self._producer if self._producer is not None else self._made()
        try:
            return await producer.send(topic, key, value)
        except ProduceFailed as exc:
            raise WriteFailed(str(exc)) from exc

    def send_all(self, records: Sequence[Outgoing]) -> None:
        """From a thread other than the event loop's (the expiry sweeper's): every record,
        to its own partition, once the broker has them all; ``WriteFailed`` if not."""
        try:
            self._made().send_all(records)
        except ProduceFailed as exc:
            raise WriteFailed(str(exc)) from exc

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
