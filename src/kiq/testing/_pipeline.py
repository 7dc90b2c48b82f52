"""``run_pipeline``: a pipeline function run over rows given in Python, in one Spark batch.

The pipeline is given the same ``Context`` as under ``kiq pipeline run`` (the same keys,
separators, values, rejections and dead-letter reasons), with a ``PipelineIO`` of its own,
``BatchIO``: a read is a batch DataFrame shaped as Spark's Kafka source gives a topic
(key, value, topic, partition, offset, timestamp, timestampType), made from the rows;
a query's start collects the records it would write (topic, key, value, partition,
headers) instead of starting a stream. No broker, no checkpoint, no stream.

What the batch computes is what the stream converges to once it has read the same
records, with these exceptions (docs/api.md, "Testing: kiq.testing"): watermarks drop
nothing (a batch has no late rows), a join of two streams matches every pair (the stream
only pairs rows its watermarks and time bounds keep), and where the stream's order is
not fixed (several input partitions feeding one key, several topics unioned) the batch
takes the rows in the order given.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import orjson

from kiq.errors import ConfigError
from kiq.partitioning import partition_for
from kiq.pipelines.context import Context
from kiq.pipelines.io import Mode
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.targets import resolve
from kiq.tables.declared import Declared
from kiq.testing._session import local_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

REASON = "kiq.reason"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Message:
    """One input record given in full: ``value`` as a row is (a dict or list is its JSON,
    ``str``/``bytes`` the raw value, None a tombstone), its ``key``, and its Kafka
    ``timestamp`` (a ``datetime``, or epoch milliseconds; default: the run's start, a
    millisecond apart per record in the order given)."""

    value: Any
    key: str | bytes | None = None
    timestamp: datetime | int | None = None


@dataclass(frozen=True)
class Record:
    """One record a pipeline wrote: to a table's topic, a ``write_topic`` stream or a
    dead-letter topic. ``partition`` is the one Kafka's sink would give it (the ``partition``
    column's, else murmur2 of the key, or of a composite key's first part, over the
    topic's partitions; None for a keyless record, which Kafka spreads)."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def reason(self) -> str | None:
        """Why a dead letter was rejected (its ``kiq.reason`` header); None for any other."""
        return self.headers.get(REASON)

    def text(self) -> str | None:
        """The value as text (UTF-8), None for a tombstone."""
        return None if self.value is None else self.value.decode()

    def json(self) -> Any:
        """The value parsed as JSON."""
        if self.value is None:
            raise ValueError(f"a record of {self.topic} has no value (a tombstone)")
        return orjson.loads(self.value)


@dataclass(frozen=True)
class Run:
    """What ``run_pipeline`` found the pipeline writes."""

    records: tuple[Record, ...]  # every record, in the order the queries wrote them
    declared: tuple[Declared, ...]  # the table catalog records, one per table written
    queries: tuple[str, ...]  # the queries started, in order

    @cached_property
    def topics(self) -> dict[str, list[Record]]:
        """Every topic written (streams, tables' topics, dead letters): its records in order."""
        out: dict[str, list[Record]] = {}
        for record in self.records:
            out.setdefault(record.topic, []).append(record)
        return out

    @cached_property
    def tables(self) -> dict[str, dict[str, Any]]:
        """Each table declared, by name: its final state, ``{key: parsed value}`` (the last
        record per key in the order written; a tombstone removes its key). A value that
        is not JSON (a ``value=`` column of text) is its text."""
        topics = self.topics
        out: dict[str, dict[str, Any]] = {}
        for table in self.declared:
            state: dict[str, Any] = {}
            for record in topics.get(table.topic, []):
                if record.key is None or record.reason is not None:
                    continue
                key = record.key.decode()
                if record.value is None:
                    state.pop(key, None)
                else:
                    state[key] = _parsed(record.value)
            out[table.table] = state
        return out

    @cached_property
    def dead_letters(self) -> list[Record]:
        """Every rejected record (a ``kiq.reason`` header), in order: an input record as it
        came (``kiq.source.topic``/``.partition``/``.offset``), or a row its table could
        not key, as the JSON it would have been (``kiq.table``)."""
        return [r for r in self.records if r.reason is not None]


def run_pipeline(
    build: Callable[[Context], object] | str,
    inputs: Mapping[str, Iterable[Any]],
    *,
    partitions: int = 1,
    spark: SparkSession | None = None,
    app: str = "kiq",
    table_topics: Mapping[str, str] | None = None,
) -> Run:
    """Run ``build`` (a function taking ``ctx``, or a target ``file.py:function`` /
    ``module:function``) over ``inputs``, rows per topic, in a local Spark batch.

    A row is a dict (or list: its JSON is the value, the key None), a ``(key, value)``
    tuple, a ``str`` or ``bytes`` (the raw value, JSON or not), None (a tombstone) or a
    ``Message``. Each topic has ``partitions`` partitions; a keyed row goes to
    murmur2(key) % partitions as Kafka's producers place it, a keyless one to 0, and the
    offsets count from 0 per partition in the order given. ``spark``: a session to run in
    (default: a local one made on first use, in UTC as kiq's runs); ``app`` and
    ``table_topics`` as ``[app] name`` and ``[serve] tables`` give them to
    ``kiq pipeline run``.
    """
    if partitions < 1:
        raise ConfigError(f"partitions must be at least 1, got {partitions}")
    if isinstance(build, str):
        target = resolve(build)
        function: Callable[[Any], object] = target.function
        name = target.name
    else:
        function = build
        module = getattr(build, "__module__", None) or "pipeline"
        name = _UNSAFE.sub("_", f"{module}.{getattr(build, '__name__', 'build')}")
    session = spark if spark is not None else local_session()
    io = BatchIO(session, inputs, partitions)
    opts = StreamOptions(bootstrap="kiq.testing:0", checkpoint_root="", trigger="microbatch")
    ctx = Context(session, opts, name, partitions, dict(table_topics or {}), io=io, app=app)
    function(ctx)
    if not io.queries:
        raise ConfigError(
            f"pipeline {name} started no query: call ctx.write_table, ctx.write_tables or "
            "ctx.write_topic"
        )
    return Run(tuple(io.records), tuple(io.declared), tuple(io.queries))


class BatchIO:
    """A ``PipelineIO`` over rows in memory: reads are batch frames, queries are collected."""

    def __init__(
        self, spark: SparkSession, inputs: Mapping[str, Iterable[Any]], partitions: int
    ) -> None:
        self._spark = spark
        self._rows = {topic: list(rows) for topic, rows in inputs.items()}
        self._topics: dict[str, int] = dict.fromkeys(self._rows, partitions)
        self._separators: dict[str, str] = {}  # composite-key topics: their separators
        self._clock = datetime.now(UTC).replace(microsecond=0)
        self.created: dict[str, int] = {}
        self.declared: list[Declared] = []
        self.records: list[Record] = []
        self.queries: list[str] = []

    def partitions(self, topic: str) -> int | None:
        return self._topics.get(topic)

    def create(self, topics: Mapping[str, int], config: Mapping[str, str]) -> None:
        for topic, count in topics.items():
            if topic not in self._topics:
                self._topics[topic] = count
                self.created[topic] = count

    def read(self, topic: str, *, realtime: bool) -> DataFrame:
        from pyspark.sql.types import (
            BinaryType,
            IntegerType,
            LongType,
            StringType,
            StructField,
            StructType,
            TimestampType,
        )

        schema = StructType(
            [
                StructField("key", BinaryType()),
                StructField("value", BinaryType()),
                StructField("topic", StringType()),
                StructField("partition", IntegerType()),
                StructField("offset", LongType()),
                StructField("timestamp", TimestampType()),
                StructField("timestampType", IntegerType()),
            ]
        )
        rows = _source_rows(topic, self._rows.get(topic, []), self._topics[topic], self._clock)
        return self._spark.createDataFrame(rows, schema)

    def sink_options(self, composite: Mapping[str, str]) -> dict[str, str]:
        self._separators.update(composite)
        return {}

    def declare(self, tables: Sequence[Declared]) -> None:
        self.declared.extend(tables)

    def start(
        self,
        frame: DataFrame,
        name: str,
        *,
        realtime: bool,
        mode: Mode = "update",
        options: Mapping[str, str] | None = None,
        interval: str | None = None,
        markers: Sequence[str] = (),
    ) -> StreamingQuery:
        # A consistent query's markers are left out: the run is one batch, and a test
        # asks for the tables' records, which markers are not.
        # One collect: the rows come in the order of the input's (single) pass, which is
        # the order the rows were given, so a key written twice keeps its last value.
        for row in frame.collect():
            key = None if row["key"] is None else bytes(row["key"])
            value = None if row["value"] is None else bytes(row["value"])
            headers = {h["key"]: bytes(h["value"]).decode() for h in row["headers"] or ()}
            partition = row["partition"]
            if partition is None:
                partition = self._partition_of(row["topic"], key)
            self.records.append(Record(row["topic"], key, value, partition, headers))
        self.queries.append(name)
        return cast("StreamingQuery", Finished(name))

    def _partition_of(self, topic: str, key: bytes | None) -> int | None:
        if key is None:
            return None
        sep = self._separators.get(topic)
        first = key.split(sep.encode(), 1)[0] if sep else key
        return partition_for(first, self._topics.get(topic, 1))


class Finished:
    """What a query started by ``run_pipeline`` returns in place of a ``StreamingQuery``: it
    ran to the end as a batch already."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.id = self.runId = f"kiq.testing:{name}"
        self.isActive = False
        self.recentProgress: list[Any] = []
        self.lastProgress: Any = None

    def awaitTermination(self, timeout: float | None = None) -> bool:
        return True

    def processAllAvailable(self) -> None: ...

    def stop(self) -> None: ...

    def exception(self) -> None:
        return None


def _source_rows(
    topic: str, rows: Sequence[Any], partitions: int, clock: datetime
) -> list[tuple[Any, ...]]:
    """The rows as the Kafka source's columns, in the order given."""
    offsets = [itertools.count() for _ in range(partitions)]
    out: list[tuple[Any, ...]] = []
    for index, row in enumerate(rows):
        message = _message(row)
        key = _bytes(message.key)
        partition = 0 if key is None else partition_for(key, partitions)
        stamp = message.timestamp
        if stamp is None:
            when = clock + timedelta(milliseconds=index)
        elif isinstance(stamp, datetime):
            when = stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)
        else:
            when = datetime.fromtimestamp(stamp / 1000, UTC)
        value = _value(message.value)
        out.append((key, value, topic, partition, next(offsets[partition]), when, 0))
    return out


def _message(row: Any) -> Message:
    if isinstance(row, Message):
        return row
    if isinstance(row, tuple):
        if len(row) != 2:
            raise ConfigError(f"an input row given as a tuple is (key, value), got {row!r}")
        return Message(row[1], row[0])
    return Message(row)


def _bytes(key: str | bytes | None) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    raise ConfigError(f"an input key is text, bytes or None, got {key!r}")


def _value(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return orjson.dumps(value)


def _parsed(value: bytes) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value.decode(errors="replace")
