"""``ctx``: what a pipeline function is given to read topics and write served tables.

kiq chooses what a hand-written ``writeStream`` leaves to its author: the topics
(tables compacted, with the input's partition count), the output mode (update; append
when the query joins two streams, the only mode Spark allows there), the checkpoint
(``CHECKPOINT_ROOT/PIPELINE/QUERY``: one per query, named after the target and the
table, so a restart resumes it), the trigger, and the partitioner (composite keys go
to the partition of their first part, see ``kiq/runtime/jvm/partitioner``). Every check
runs before the query starts, so a mistake is an error, not bad records in a topic. Each
table is then declared in the table catalog (``kiq.tables.declared``), from which the
nodes learn what to serve. What it reads from and writes to is one collaborator, ``io``
(``kiq.pipelines.io``): Kafka and streaming queries, or ``kiq.testing``'s batch.

A version of the pipeline other than ``v1`` (``kiq pipeline run --version v2``) writes every
topic under a name of its own (``TOPIC.v2``: tables, dead letters, streams) and declares
its tables as that version, so it derives them anew beside the version the nodes serve;
what it reads is unchanged (``kiq.tables.versions``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kiq.errors import ConfigError
from kiq.pipelines import records
from kiq.pipelines.indexes import index_fields
from kiq.pipelines.io import KafkaIO, PipelineIO
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.plans import realtime_blockers, source_ids, stateful, streams_joined
from kiq.pipelines.realtime import local_slots, refuse_consistent, runs_in_realtime
from kiq.pipelines.tables import (
    WINDOW_PARTS,
    TableOutput,
    key_types,
    letters_records,
    table_records,
    value_shape,
    with_window_parts,
)
from kiq.tables.declared import Declared, IndexedField
from kiq.tables.durations import Duration, parse_duration
from kiq.tables.spec import IndexField
from kiq.tables.versions import DEFAULT_VERSION, check_version, versioned_topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from kiq.pipelines.records import Rejection, Schema

    Key = str | Sequence[str]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "600000",
    "min.cleanable.dirty.ratio": "0.1",
}


@dataclass
class _Read:
    """A topic read through ``ctx.read``; its dead letters leave with the first query that
    uses it, so the topic is read and parsed once per batch. ``dead_letters`` is the
    name as given (its query's name too); the topic written is the version's
    (``Context._written``)."""

    topic: str
    partitions: int
    sources: frozenset[str]
    parsed: DataFrame
    dead_letters: str | None
    realtime_args: tuple[Schema | None, tuple[Rejection, ...]]
    carried: bool = False


@dataclass
class Context:
    """The one argument of a pipeline function (docs/guides/pipelines.md)."""

    spark: SparkSession
    opts: StreamOptions
    pipeline: str
    partitions: int = 30  # of an input topic kiq creates because it is missing
    table_topics: Mapping[str, str] = field(default_factory=dict)  # [serve] tables
    partitioner_jar: Path | None = None
    queries: list[StreamingQuery] = field(default_factory=list)
    # Where reads come from and tables go (Kafka and streaming queries unless a test's).
    io: PipelineIO | None = None
    app: str = "kiq"  # [app] name: whose nodes serve the tables it declares
    declared: list[str] = field(default_factory=list)  # the tables it declared, in order
    # How each query it started runs, by name: "realtime" or "microbatch" (its progress says).
    triggers: dict[str, str] = field(default_factory=dict)
    # Which version of its tables the pipeline writes (`kiq pipeline run --version`): any
    # other than v1 writes every topic to TOPIC.VERSION, so it runs beside the one serving.
    version: str = DEFAULT_VERSION
    _reads: list[_Read] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)
    _slots_taken: int = 0  # held by this context's queries beside real-time ones
    _any_realtime: bool = False

    def __post_init__(self) -> None:
        check_version(self.version)
        if self.io is None:
            self.io = KafkaIO(self.spark, self.opts, self.partitioner_jar)

    @property
    def _io(self) -> PipelineIO:
        assert self.io is not None  # __post_init__ sets it
        return self.io

    @property
    def trigger(self) -> str:
        return self.opts.trigger

    def _written(self, topic: str) -> str:
        """The topic this version writes in place of ``topic`` (the same one for v1): two
        versions of a pipeline never write to one topic, so the old one serves meanwhile."""
        return versioned_topic(topic, self.version)

    def read(
        self,
        topic: str,
        schema: Schema | None = None,
        *,
        reject: Sequence[Rejection] = (),
        dead_letters: str | None = None,
    ) -> DataFrame:
        """A streaming DataFrame of ``topic``: the JSON value's fields as columns (with a
        ``schema``), or ``__value`` as text, beside the ``__`` metadata columns. Records
        that fail the schema or a ``reject`` condition go to ``dead_letters``
        (``TOPIC-dlq``; ``TOPIC-dlq.VERSION`` for a version other than v1) with the
        reason. ``topic`` itself is read as named, whatever the version."""
        if schema is not None:
            records.as_struct(schema)  # a bad schema fails before any topic is created
        partitions = self._io.partitions(topic)
        if partitions is None:
            self._io.create({topic: self.partitions}, {})
            partitions = self.partitions
        # Real-Time Mode reads each partition in a task of its own (no coalescing).
        raw = self._io.read(topic, realtime=self.opts.trigger != "microbatch")
        parsed = records.parse_records(raw, schema, tuple(reject))
        checked = schema is not None or bool(reject)
        letters = (dead_letters or f"{topic}-dlq") if checked else None
        if letters:
            self._letters_topic(self._written(letters))
        self._reads.append(
            _Read(topic, partitions, source_ids(raw), parsed, letters, (schema, tuple(reject)))
        )
        return records.good_records(parsed)

    def write_table(
        self,
        name: str,
        df: DataFrame,
        key: Key,
        sep: str = "|",
        value: str | None = None,
        partitions: int | None = None,
        topic: str | None = None,
        *,
        partition: str | None = None,
        dead_letters: str | None = None,
        delete: str | None = None,
        ttl: Duration | None = None,
        window: str | None = None,
        retention: Duration | None = None,
        rank_by: str | None = None,
        index: Sequence[str] | None = None,
        consistent: bool = False,
    ) -> StreamingQuery:
        """Start the query that keeps table ``name`` (topic: ``topic``, else the table's in
        the config's ``[serve] tables``, else ``name``) equal to ``df``, keyed by ``key``.

        ``delete``: a boolean column; a row where it is true deletes its key (a tombstone).
        ``ttl`` (``"7 days"``): a key not written for that long expires everywhere.
        ``window``: the column ``F.window(...)`` made; each key ends in the window's start
        and end, so a key's windows sort by time (``GET .../keys/{k}/windows``), and
        ``retention`` drops windows that ended that long before the newest one.
        ``rank_by``: a numeric column the nodes keep each partition ordered by
        (``GET /v1/tables/{name}/top``).
        ``index``: a list of up to 8 top-level fields of the JSON value (text or numeric
        columns, or fields of ``value``'s struct) every replica keeps an index of, so
        ``GET /v1/tables/{name}/by/{field}`` answers by them without a scan.
        ``consistent``: after each micro-batch, a marker of the batch goes to every
        partition of the table's topic, so readers can answer as of one whole batch
        (``kiq.pipelines.consistent``); never in Real-Time Mode.

        A version other than v1 (``kiq pipeline run --version``) writes the topic and the
        dead letters with the version appended (``TOPIC.v2``, ``TOPIC-dlq.v2``)."""
        parts = _key(key)
        if window is not None:
            df = with_window_parts(df, name, window)
            parts = (*parts, *WINDOW_PARTS)
        base = topic or self.table_topics.get(name, name)
        table = self._output(
            name,
            df,
            self._written(base),
            parts,
            sep,
            value,
            delete,
            ttl,
            window,
            retention,
            rank_by,
            index,
        )
        letters = self._written(dead_letters or f"{base}-dlq")
        return self._write_tables(
            name, df, [table], letters, None, partitions, partition, consistent
        )

    def write_tables(
        self,
        df: DataFrame,
        table: str,
        key: Key | Mapping[str, Key],
        *,
        query: str,
        sep: str | Mapping[str, str] = "|",
        value: str | Mapping[str, str | None] | None = None,
        topics: Mapping[str, str] | None = None,
        partitions: int | None = None,
        partition: str | None = None,
        dead_letters: str | None = None,
        delete: str | None = None,
        ttl: Duration | Mapping[str, Duration | None] | None = None,
        window: str | Mapping[str, str | None] | None = None,
        retention: Duration | Mapping[str, Duration | None] | None = None,
        rank_by: str | Mapping[str, str | None] | None = None,
        index: Sequence[str] | Mapping[str, Sequence[str] | None] | None = None,
        consistent: bool = False,
    ) -> StreamingQuery:
        """One query, several tables: each row goes to the table its ``table`` column names
        (one aggregation can hold several kinds of groups). ``key``, ``sep``, ``value``,
        ``ttl``, ``window``, ``retention``, ``rank_by`` and ``index`` (a list of fields) are
        one for all tables or a mapping by table name (a table a mapping leaves out has
        none), as ``write_table`` takes them; the names of ``key``'s or ``value``'s
        mapping are the tables, and a row naming another table is a dead letter. Only a
        row's own table's key parts count: a window column null on the rows of another
        table makes none of them a dead letter.
        ``consistent`` is one for the query: every table it writes gets each batch's marker."""
        if isinstance(key, Mapping):
            names = list(key)
        elif isinstance(value, Mapping):
            names = list(value)
        else:
            raise ConfigError(
                f"query {query}: name the tables in a mapping (key={{TABLE: COLUMNS}} or "
                "value={TABLE: COLUMN})"
            )
        options = {
            "ttl": ttl,
            "window": window,
            "retention": retention,
            "rank_by": rank_by,
            "index": index,
        }
        for option, given in options.items():
            if isinstance(given, Mapping) and not set(given) <= set(names):
                others = ", ".join(sorted(set(given) - set(names)))
                raise ConfigError(
                    f"query {query}: {option}= names {others}, which key= does not: the "
                    f"query writes {', '.join(names)}"
                )
        parts_of: dict[str, tuple[str, ...]] = {}  # a window column → its key parts' columns
        outputs = []
        for n in names:
            table_window = _one(window, n)
            parts = _key(key[n] if isinstance(key, Mapping) else key)
            if table_window is not None:
                if table_window not in parts_of:
                    i = len(parts_of)
                    columns = WINDOW_PARTS if i == 0 else tuple(f"{c}_{i}" for c in WINDOW_PARTS)
                    df = with_window_parts(df, n, table_window, columns)
                    parts_of[table_window] = columns
                parts = (*parts, *parts_of[table_window])
            outputs.append(
                self._output(
                    n,
                    df,
                    self._written((topics or {}).get(n) or self.table_topics.get(n, n)),
                    parts,
                    sep[n] if isinstance(sep, Mapping) else sep,
                    value.get(n) if isinstance(value, Mapping) else value,
                    delete,
                    ttl.get(n) if isinstance(ttl, Mapping) else ttl,
                    table_window,
                    retention.get(n) if isinstance(retention, Mapping) else retention,
                    _one(rank_by, n),
                    _one(index, n),
                    exclude=(table,),
                )
            )
        letters = self._written(dead_letters or f"{query}-dlq")
        return self._write_tables(
            query, df, outputs, letters, table, partitions, partition, consistent
        )

    def write_topic(
        self,
        topic: str,
        df: DataFrame,
        key: Key | None = None,
        sep: str = "|",
        value: str | None = None,
        partitions: int | None = None,
    ) -> StreamingQuery:
        """Start a query that appends ``df``'s rows to ``topic`` (a stream, not a table):
        value as for a table, key optional (no key: Kafka spreads the records). The query
        is named ``topic``; a version other than v1 writes ``TOPIC.VERSION``."""
        out = TableOutput(topic, self._written(topic), () if key is None else _key(key), sep, value)
        out.check(df.columns)
        name = self._claim(topic)
        reads = self._inputs(df)
        options = self._partitioner([out])
        letters = self._written(f"{topic}-dlq")
        self._create({out.topic: partitions or _partitions(reads, self.partitions)}, {})
        self._letters_topic(letters)
        frame = table_records(df, [out], letters)
        realtime = self._realtime(name, df, reads)
        return self._start(self._carry(frame, df, reads, realtime), df, name, options, realtime)

    def _write_tables(
        self,
        name: str,
        df: DataFrame,
        outputs: list[TableOutput],
        letters: str,
        table_column: str | None,
        partitions: int | None,
        partition: str | None,
        consistent: bool = False,
    ) -> StreamingQuery:
        columns = df.columns
        for out in outputs:
            out.check(columns)
        for column in (table_column, partition):
            if column is not None and column not in columns:
                raise ConfigError(f"query {name}: no column {column!r} in the DataFrame")
        if consistent:
            refuse_consistent(self.opts.trigger, name)  # before anything is declared
        name = self._claim(name)
        reads = self._inputs(df)
        count = partitions or _partitions(reads, self.partitions)
        if partition is not None and any(r.partitions != count for r in reads):
            raise ConfigError(
                f"query {name}: partition={partition!r} keeps each row in its input partition, "
                f"so the tables need the input's partition count, not {count}"
            )
        options = {} if partition is not None else self._partitioner(outputs)
        # Declared before their topics are made: whoever sees a table's topic finds its
        # declaration too (a node started once the topic exists serves it as declared).
        self.declared.extend(o.name for o in outputs)
        # Where this query's bad records go, its inputs' included (`kiq retire` deletes them
        # with the last table of the pipeline version).
        dead_letters = tuple(
            dict.fromkeys([letters, *(r.dead_letters for r in reads if r.dead_letters)])
        )
        # The shape readers rely on, compared with the catalog's at each start.
        shapes = {
            o.name: value_shape(df, o, (table_column,) if table_column else ()) for o in outputs
        }
        self._io.declare(
            [
                Declared(
                    table=o.name,
                    topic=o.topic,
                    key=o.declared_key,
                    sep=o.sep if o.composite else None,
                    partitioning="input" if partition is not None else "key",
                    partitions=count,
                    app=self.app,
                    pipeline=self.pipeline,
                    query=name,
                    version=self.version,
                    checkpoint=self.opts.checkpoint_root,
                    ttl_ms=o.ttl_ms,
                    window=o.window,
                    retention_ms=o.retention_ms,
                    rank_by=o.rank_by,
                    index=tuple(IndexedField.of(f) for f in o.index),
                    consistent=consistent,
                    dead_letters=dead_letters,
                    key_types=key_types(df, o),
                    value_fields=shapes[o.name][0],
                    value_type=shapes[o.name][1],
                )
                for o in outputs
            ]
        )
        self._create({o.topic: count for o in outputs}, COMPACTED)
        self._letters_topic(letters)
        frame = table_records(df, outputs, letters, table_column, partition)
        realtime = self._realtime(name, df, reads, consistent)
        markers = tuple(dict.fromkeys(o.topic for o in outputs)) if consistent else ()
        frame = self._carry(frame, df, reads, realtime)
        return self._start(frame, df, name, options, realtime, markers)

    @staticmethod
    def _output(
        name: str,
        df: DataFrame,
        topic: str,
        parts: tuple[str, ...],
        sep: str,
        value: str | None,
        delete: str | None,
        ttl: Duration | None,
        window: str | None,
        retention: Duration | None,
        rank_by: str | None,
        index: Sequence[str] | None = None,
        *,
        exclude: tuple[str, ...] = (),
    ) -> TableOutput:
        """One table's output, its aging, order and indexes checked (``parts`` already hold
        the window's start and end when ``window`` is given; ``exclude``: columns the value
        leaves out besides ``delete``, ``write_tables``' table column)."""
        if retention is not None and window is None:
            raise ConfigError(
                f"table {name}: retention applies to windowed tables (window=COLUMN); "
                "for a table of plain keys use ttl"
            )
        if rank_by is not None:
            _check_rank_by(df, name, rank_by, value)
        indexed: tuple[IndexField, ...] = ()
        if index is not None:
            indexed = index_fields(
                df.schema,
                name,
                index,
                value=value,
                window=window,
                exclude=(*exclude, *([delete] if delete else [])),
            )
        return TableOutput(
            name,
            topic,
            parts,
            sep,
            value,
            delete,
            ttl_ms=parse_duration(ttl, f"table {name}: ttl") if ttl is not None else None,
            window=window,
            retention_ms=(
                parse_duration(retention, f"table {name}: retention")
                if retention is not None
                else None
            ),
            rank_by=rank_by,
            index=indexed,
        )

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise ConfigError(
                f"pipeline {self.pipeline} writes {name!r} twice: each query needs its own "
                "name (its checkpoint directory)"
            )
        self._names.add(name)
        return name

    def _inputs(self, df: DataFrame) -> list[_Read]:
        ids = source_ids(df)
        return [r for r in self._reads if r.sources & ids]

    def _partitioner(self, outputs: Sequence[TableOutput]) -> dict[str, str]:
        """Sink options that send composite keys to their first part's partition."""
        return self._io.sink_options({o.topic: o.sep for o in outputs if o.composite})

    def _create(self, topics: Mapping[str, int], config: Mapping[str, str]) -> None:
        self._io.create(topics, config)

    def _letters_topic(self, topic: str) -> None:
        """A dead-letter topic: one partition when kiq creates it, any count when it exists."""
        if self._io.partitions(topic) is None:
            self._io.create({topic: 1}, {})

    def _realtime(
        self, name: str, df: DataFrame, reads: list[_Read], consistent: bool = False
    ) -> bool:
        """Whether the query runs in Real-Time Mode: the trigger asks for it (or ``auto``),
        Spark runs its operators so, and its tasks fit in the free slots
        (``kiq.pipelines.realtime``). A real-time query's dead letters run beside it in a
        micro-batch query of their own, whose tasks count too.

        Under ``auto`` a query that runs in micro-batches holds slots as well: a real-time
        batch starts only when every one of its tasks finds a free slot, and fails the query
        if micro-batch tasks hold them then (``CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT``).
        A ``consistent`` query runs in micro-batches (``realtime.CONSISTENT_REASON``)."""
        if self.opts.trigger == "microbatch":
            return False
        need = sum(r.partitions for r in reads)
        if stateful(df):
            need += int(self.spark.conf.get("spark.sql.shuffle.partitions") or "200")
        letters = sum(self._letters_tasks(r) for r in reads if r.dead_letters and not r.carried)
        master = self.spark.sparkContext.master or ""
        slots = local_slots(master)
        total = self.spark.sparkContext.defaultParallelism if slots is None else slots
        free = total - self._slots_taken
        chosen = runs_in_realtime(
            self.opts.trigger,
            name,
            realtime_blockers(df),
            need + letters,
            free,
            master,
            consistent=consistent,
        )
        if chosen:
            self._slots_taken += need + letters
            self._any_realtime = True
            return True
        if self._any_realtime and need > free:
            raise ConfigError(
                f"query {name} runs in micro-batches beside real-time queries and needs {need} "
                f"task slots, but master {master} has {free} left: its tasks would take the "
                "slots a real-time batch needs to start. Give Spark more task slots, or run "
                "every query in micro-batches (--trigger microbatch)"
            )
        self._slots_taken += need
        return False

    def _carry(
        self, frame: DataFrame, df: DataFrame, reads: list[_Read], realtime: bool
    ) -> DataFrame:
        """Add the dead letters of the reads ``df`` comes from that no query carries yet."""
        for r in reads:
            if r.carried or r.dead_letters is None:
                continue
            r.carried = True
            if realtime:
                self._realtime_letters(r)
            else:
                letters = records.dead_letters(r.parsed)
                frame = frame.unionByName(letters_records(letters, self._written(r.dead_letters)))
        return frame

    def _letters_tasks(self, r: _Read) -> int:
        """Tasks of the micro-batch query that carries a real-time query's dead letters."""
        return min(self.opts.input_tasks or r.partitions, r.partitions)

    def _realtime_letters(self, r: _Read) -> None:
        """Spark 4.3's Real-Time Mode runs no stateful operator before a union, nor one read
        twice in a union (the good records and the dead letters come from one read): the
        dead letters of a real-time query leave in a stateless query of their own, reading
        the topic again, in micro-batches every ``letters_interval``. In Real-Time Mode it
        took a task per input partition for the whole batch and parsed every record again
        as it arrived: CPU the tables' query needs (docs/benchmarks.md). A dead letter
        waits up to the interval; the tables do not wait for it."""
        assert r.dead_letters is not None
        raw = self._io.read(r.topic, realtime=False)
        schema, reject = r.realtime_args
        parsed = records.parse_records(raw, schema, reject)
        letters = letters_records(records.dead_letters(parsed), self._written(r.dead_letters))
        name = self._claim(r.dead_letters)
        query = self._io.start(letters, name, realtime=False, interval=self.opts.letters_interval)
        self.queries.append(query)
        self.triggers[name] = "microbatch"

    def _start(
        self,
        frame: DataFrame,
        df: DataFrame,
        name: str,
        options: Mapping[str, str],
        realtime: bool,
        markers: Sequence[str] = (),
    ) -> StreamingQuery:
        query = self._io.start(
            frame,
            name,
            realtime=realtime,
            mode="append" if streams_joined(df) else "update",
            options=options,
            markers=markers,
        )
        self.queries.append(query)
        self.triggers[name] = "realtime" if realtime else "microbatch"
        return query


def _key(key: Key) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    parts = tuple(key)
    if not parts or not all(isinstance(p, str) for p in parts):
        raise ConfigError(f"key must be a column name or a sequence of them, got {key!r}")
    return parts


def _one(option: _T | Mapping[str, _T | None] | None, table: str) -> _T | None:
    """``write_tables``' option for ``table``: the one for all, or the mapping's entry."""
    if isinstance(option, Mapping):
        return option.get(table)
    return option


def _check_rank_by(df: DataFrame, table: str, rank_by: str, value: str | None) -> None:
    """``rank_by`` is a numeric column of the value (the JSON object of the row's columns),
    or a numeric field of ``value`` when that is a struct column (written as its JSON)."""
    from pyspark.sql.types import NumericType, StructType

    if value is not None:
        kind = df.schema[value].dataType if value in df.columns else None
        fields = {f.name: f.dataType for f in kind.fields} if isinstance(kind, StructType) else {}
        if not isinstance(fields.get(rank_by), NumericType):
            raise ConfigError(
                f"table {table}: rank_by ranks by a numeric field of the JSON value; "
                f"value={value!r} is not a struct column with a numeric field {rank_by!r}: "
                "leave value out (the row's columns) or name such a struct"
            )
        return
    if rank_by not in df.columns:
        raise ConfigError(
            f"table {table}: rank_by={rank_by!r} is not a column (its columns: "
            f"{', '.join(df.columns)})"
        )
    kind = df.schema[rank_by].dataType
    if not isinstance(kind, NumericType):
        raise ConfigError(
            f"table {table}: rank_by={rank_by!r} must be numeric, not {kind.simpleString()}"
        )


def _partitions(reads: list[_Read], default: int) -> int:
    return reads[0].partitions if reads else default
