"""Tables declared once: the catalog record a pipeline writes, and what a node makes of it.

A pipeline's ``ctx.write_table`` is the source of truth for a table's topic, key
parts, separator, value format and partitioning. It records them as a ``Declared``
in the catalog topic (``kiq.catalog.CATALOG_TOPIC``, key ``table:APP/NAME``); a node
reads the catalog at start and serves what it finds there. ``[serve] tables`` is
then optional: a filter (serve only these) and serving overrides (``store``,
``standby``, ``global``). What the pipeline decides (topic, ``sep``, ``format``) may
be repeated there but must agree, or the node stops naming both sides.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from kiq import formats
from kiq.catalog import CATALOG_TOPIC, PROGRESS_TOPIC
from kiq.errors import ConfigError
from kiq.tables import checks
from kiq.tables.spec import IndexField, IndexKind, TableSpec, parse_table
from kiq.tables.versions import (
    DEFAULT_VERSION,
    catalog_records,
    internal_name,
    run_name,
    versioned_topic,
)

log = logging.getLogger(__name__)

Partitioning = Literal["key", "input"]
_PREFIX = "table:"
_STARTED = "pipeline:"
# In [serve] tables: every table the catalog holds for the application, besides the others.
EVERY_DECLARED = "*"
# A value of more fields than this is recorded without its shape (``Declared.value_fields``).
MAX_VALUE_FIELDS = 128


class ValueField(msgspec.Struct, frozen=True, kw_only=True):
    """One field of a table's JSON object value, as the pipeline's DataFrame types it: what
    readers rely on, compared at each start (``kiq.tables.compatible``)."""

    name: str
    type: str  # Spark's simpleString: bigint, string, struct<a:int>, ...
    nullable: bool = True


class IndexedField(msgspec.Struct, frozen=True, kw_only=True):
    """One secondary index as the catalog records it: ``{"field": ..., "type": ...}``."""

    field: str
    type: IndexKind

    @classmethod
    def of(cls, index: IndexField) -> IndexedField:
        return cls(field=index.field, type=index.kind)

    def spec(self) -> IndexField:
        return IndexField(self.field, self.type)


class Declared(msgspec.Struct, frozen=True, kw_only=True):
    """One table as its pipeline writes it.

    ``sep`` is None for a one-column key; ``partitioning`` is ``key`` (the first key
    part's murmur2, as the nodes look it up) or ``input`` (each row kept in its input
    record's partition, whose key is the first part). ``app`` is the application
    (``[app] name``) whose nodes serve it when ``[serve] tables`` names none.
    """

    table: str
    topic: str
    key: tuple[str, ...]
    sep: str | None = None
    format: Literal["json"] = "json"
    partitioning: Partitioning = "key"
    partitions: int = 0
    app: str = "kiq"
    pipeline: str = ""
    query: str = ""
    # Aging and order (``ctx.write_table(ttl=, window=, retention=, rank_by=)``): ``window``
    # is the DataFrame's window column, whose start and end end every key (``key`` holds
    # the parts before them); durations in milliseconds.
    ttl_ms: int | None = None
    window: str | None = None
    retention_ms: int | None = None
    rank_by: str | None = None
    # ``ctx.write_table(index=[...])``: the value fields every replica indexes, each with its
    # kind (text or number); empty in records from before indexes, and for a table without.
    index: tuple[IndexedField, ...] = ()
    # ``ctx.write_table(consistent=True)``: after each micro-batch its query marks every
    # partition of the topic (``kiq.markers``). False in records from before it was recorded.
    consistent: bool = False
    # Which version of the table this is (``kiq pipeline run --version``; kiq.tables.versions).
    version: str = DEFAULT_VERSION
    # Where the pipeline version that writes it checkpoints (``kiq retire`` deletes it once
    # no table of that version is left); "" when not recorded.
    checkpoint: str = ""
    # The dead-letter topics of the query that writes it (its inputs' too).
    dead_letters: tuple[str, ...] = ()
    # The shape readers rely on, which a restart must keep (``kiq.tables.compatible``): the
    # key parts' Spark types (as ``key``), and the value's fields when it is a JSON object,
    # else its type. Empty and None: not recorded (an older kiq's record, or too large).
    key_types: tuple[str, ...] = ()
    value_fields: tuple[ValueField, ...] | None = None
    value_type: str | None = None
    # The record's format (``kiq.formats``): absent in 0.1.0's, which is version 1.
    format_version: int = formats.CATALOG

    @property
    def name(self) -> str:
        """The name nodes keep this version under (``NAME``, ``NAME@v2``)."""
        return internal_name(self.table, self.version)

    @property
    def run(self) -> str:
        """The pipeline version that writes it (``stocks``, ``stocks@v2``)."""
        return run_name(self.pipeline, self.version)

    @property
    def catalog_key(self) -> str:
        return catalog_key(self.table, self.app, self.version)

    def encode(self) -> bytes:
        return msgspec.json.encode(self)

    def check(self, key: str) -> None:
        """Its schema (``kiq.tables.checks``): names that are never paths, bounded numbers,
        its own key, and a table a node can make of it (``spec_of``)."""
        checks.table(self.table)
        checks.version(self.version)
        checks.app(self.app)
        _table_topic(self.topic, "topic")
        checks.items(self.key, "key", 32)
        if not self.key:
            raise checks.Refused("key must name at least one column")
        for part in self.key:
            checks.name(part, "a key part", 200)
        if self.sep is not None:
            checks.sep(self.sep)
        checks.count(self.partitions, "partitions", checks.MAX_PARTITIONS)
        if self.pipeline:
            checks.pipeline(self.pipeline)
            if "@" in self.pipeline:
                raise checks.Refused("pipeline names no version (version says it)")
        checks.text(self.query, "query")
        for field, ms in (("ttl_ms", self.ttl_ms), ("retention_ms", self.retention_ms)):
            if ms is not None:
                checks.count(ms, field, checks.MAX_MS, minimum=1)
        for field, column in (("window", self.window), ("rank_by", self.rank_by)):
            if column is not None:
                checks.name(column, field, 200)
        checks.index([(i.field, i.type) for i in self.index])
        if self.window is not None and any(i.field == self.window for i in self.index):
            raise checks.Refused(f"index names the window column {self.window!r}")
        checks.text(self.checkpoint, "checkpoint", 4096)
        checks.items(self.dead_letters, "dead_letters", 64)
        for topic in self.dead_letters:
            _table_topic(topic, "dead_letters")
        checks.items(self.key_types, "key_types", 32)
        for kind in self.key_types:
            checks.name(kind, "a key type")
        if self.value_fields is not None:
            checks.items(self.value_fields, "value_fields", MAX_VALUE_FIELDS)
            for f in self.value_fields:
                checks.name(f.name, "a value field", 200)
                checks.name(f.type, "a value field's type")
        if self.value_type is not None:
            checks.name(self.value_type, "value_type")
        checks.key(key, self.catalog_key)
        try:
            spec_of(self)
        except ConfigError as exc:
            raise checks.Refused(str(exc)) from None

    def describe(self) -> str:
        """How the pipeline declared it, for messages."""
        key = (self.sep or "|").join(self.key) if self.sep else self.key[0]
        sep = f", sep={self.sep!r}" if self.sep else ""
        return f"pipeline {self.pipeline or '?'}: topic {self.topic!r}, key {key}{sep}"


def catalog_key(table: str, app: str, version: str = DEFAULT_VERSION) -> str:
    """One record per application, table and version: two applications on one Kafka cluster
    may each have a table of the same name."""
    return f"{_PREFIX}{app}/{internal_name(table, version)}"


class Started(msgspec.Struct, frozen=True, kw_only=True):
    """A pipeline's start, recorded once every table it writes is declared (key
    ``pipeline:APP/NAME``): what `kiq up` waits for before it starts the nodes."""

    pipeline: str
    tables: tuple[str, ...] = ()
    started_at_ms: int = 0
    app: str = "kiq"
    format_version: int = formats.CATALOG  # as ``Declared.format_version``

    @property
    def catalog_key(self) -> str:
        return f"{_STARTED}{self.app}/{self.pipeline}"

    def encode(self) -> bytes:
        return msgspec.json.encode(self)

    def check(self, key: str) -> None:
        """Its schema (``kiq.tables.checks``): a run name (``NAME``, ``NAME@VERSION``), its
        tables' names, a time, its own key."""
        checks.pipeline(self.pipeline)
        checks.items(self.tables, "tables", checks.MAX_ITEMS)
        for table in self.tables:
            checks.internal(table, "a table")
        checks.count(self.started_at_ms, "started_at_ms", checks.MAX_MS)
        checks.app(self.app)
        checks.key(key, self.catalog_key)


def _table_topic(topic: object, what: str) -> None:
    """A topic a table may be read from or dead-lettered to: none of kiq's own or Kafka's."""
    checks.topic(topic, what)
    if topic in (CATALOG_TOPIC, PROGRESS_TOPIC) or str(topic).startswith("__"):
        raise checks.Refused(f"{what} {topic!r} is one of kiq's or Kafka's own topics")


def decode_started(records: Mapping[str, bytes], app: str | None = None) -> dict[str, Started]:
    """The pipelines' start records in a catalog read (``app``'s only, when given), by
    pipeline name."""
    started = catalog_records(records, _STARTED, Started)
    return {s.pipeline: s for s in started if app in (None, s.app)}


def decode_catalog(records: Mapping[str, bytes], app: str | None = None) -> dict[str, Declared]:
    """The tables in a catalog read (``kiq.kafka.compacted.read_latest``) of ``app`` (every
    application's, when None), by the name nodes keep them under (``Declared.name``: the
    table's own for ``v1``, ``NAME@VERSION`` for another version). A record kiq cannot
    read (written by a newer kiq, say) is skipped, not fatal."""
    declared = catalog_records(records, _PREFIX, Declared)
    return {d.name: d for d in declared if app in (None, d.app)}


@dataclass(frozen=True)
class ServeEntry:
    """One entry of ``[serve] tables`` / ``--table``: ``NAME``, ``NAME,options`` or
    ``NAME=TOPIC,options``. Only what the entry says is set; the rest comes from
    the catalog."""

    name: str
    topic: str | None
    options: frozenset[str]
    spec: TableSpec  # the entry as a table of its own, for a topic no pipeline declares
    text: str = ""  # as written, for messages

    @property
    def sep(self) -> str | None:
        return self.spec.key_separator if "sep" in self.options else None


def parse_served(text: str, default_standby: int = 1) -> ServeEntry:
    """``--table`` with the topic optional: ``NAME`` alone takes it from the catalog.

    (``*``, every table the catalog holds for the application, is the caller's.)"""
    head, _, rest = text.partition(",")
    name, eq, topic = head.partition("=")
    full = text if eq else f"{name}={name.strip()}" + (f",{rest}" if rest else "")
    spec = parse_table(full, default_standby=default_standby)
    options = frozenset(part.split("=", 1)[0].strip() for part in rest.split(",") if part.strip())
    return ServeEntry(spec.name, topic.strip() if eq else None, options, spec, text.strip())


def parse_serve_tables(
    entries: Sequence[str], default_standby: int = 1
) -> tuple[list[ServeEntry], bool]:
    """``[serve] tables``: its entries, and whether ``*`` asks for every declared table too."""
    served = [parse_served(e, default_standby) for e in entries if e.strip() != EVERY_DECLARED]
    if len({s.name for s in served}) != len(served):
        raise ConfigError("[serve] tables names a table twice: each table needs its own name")
    return served, any(e.strip() == EVERY_DECLARED for e in entries)


def resolve_tables(
    served: Sequence[ServeEntry],
    catalog: Mapping[str, Declared],
    *,
    app: str,
    default_standby: int = 1,
    every_declared: bool = False,
) -> list[TableSpec]:
    """The tables a node serves: ``served``, completed from the catalog, each version of a
    table a table of its own (``Declared.name``).

    Without ``served`` (or with ``every_declared``, ``*`` in ``[serve] tables``), every
    table the catalog holds for ``app`` too. A served entry the catalog lacks needs its
    topic (``NAME=TOPIC``): a topic no pipeline writes, a producer's own. A served entry
    that no declared version of its table agrees with is a ``ConfigError`` naming both (the
    entry is at fault); a declaration the node cannot serve (one that disagrees while
    another version agrees, one whose topic a table before it takes) is logged and left
    out: a catalog record never stops a node.
    """
    tables: dict[str, TableSpec] = {}
    if every_declared or not served:
        for d in sorted(catalog.values(), key=lambda d: d.name):
            if d.app == app:
                try:
                    tables[d.name] = _from_catalog(d, None, default_standby)
                except ConfigError as exc:
                    _not_served(d, str(exc))
    for entry in served:
        versions = [d for d in catalog.values() if d.table == entry.name and d.app == app]
        if not versions:
            if entry.topic is None:
                raise ConfigError(
                    f"table {entry.name} is not in the table catalog (no pipeline has written "
                    f"it yet) and [serve] tables gives no topic: start the pipeline that "
                    f"writes it first, or declare it as {entry.name}=TOPIC"
                )
            tables[entry.name] = entry.spec
            continue
        clashes: list[ConfigError] = []
        for declared in sorted(versions, key=lambda d: d.name):
            try:
                _check_agrees(entry, declared)
                tables[declared.name] = _from_catalog(declared, entry, default_standby)
            except ConfigError as exc:
                clashes.append(exc)
                tables.pop(declared.name, None)
                _not_served(declared, str(exc))
        if len(clashes) == len(versions):
            raise clashes[0]
    named = {entry.name for entry in served}
    return _own_topics(list(tables.values()), named)


def _own_topics(tables: list[TableSpec], named: set[str]) -> list[TableSpec]:
    """``tables`` less each declared one whose topic another takes first: the operator's own
    ``NAME=TOPIC`` entries, then the tables ``[serve] tables`` names, then the others in
    name order. Two tables never read one topic."""
    first = sorted(tables, key=lambda t: (t.declared is not None, t.table not in named, t.name))
    taken: dict[str, str] = {}
    dropped: set[str] = set()
    for spec in first:
        if spec.topic in taken and spec.declared is not None:
            log.warning(
                "table declaration not served table=%s topic=%s reason=%s",
                spec.name,
                spec.topic,
                f"table {taken[spec.topic]} is served from that topic",
            )
            dropped.add(spec.name)
            continue
        taken.setdefault(spec.topic, spec.name)
    return [t for t in tables if t.name not in dropped]


def _not_served(declared: Declared, reason: str) -> None:
    log.warning(
        "table declaration not served table=%s topic=%s reason=%s",
        declared.name,
        declared.topic,
        reason,
    )


def serves(
    served: Sequence[ServeEntry], every_declared: bool, declared: Declared, app: str
) -> bool:
    """Whether a node with ``[serve] tables`` ``served`` serves ``declared`` (a version a
    pipeline declared after the node started, say)."""
    if declared.app != app:
        return False
    if every_declared or not served:
        return True
    return any(entry.name == declared.table for entry in served)


def spec_for(served: Sequence[ServeEntry], declared: Declared, default_standby: int) -> TableSpec:
    """``declared`` as a node with ``[serve] tables`` ``served`` serves it."""
    entry = next((e for e in served if e.name == declared.table), None)
    if entry is not None:
        _check_agrees(entry, declared)
    return _from_catalog(declared, entry, default_standby)


def _check_agrees(entry: ServeEntry, declared: Declared) -> None:
    clashes: list[str] = []
    if entry.topic is not None and versioned_topic(entry.topic, declared.version) != declared.topic:
        clashes.append(f"topic {entry.topic!r} here, {declared.topic!r} in the pipeline")
    if "sep" in entry.options and entry.sep != declared.sep:
        theirs = repr(declared.sep) if declared.sep else "none (a one-column key)"
        clashes.append(f"sep={entry.sep!r} here, {theirs} in the pipeline")
    if "retention" in entry.options and declared.window is None:
        clashes.append("retention here, but the pipeline writes no windowed table")
    if "format" in entry.options and entry.spec.format != declared.format:
        clashes.append(f"format={entry.spec.format} here, {declared.format} in the pipeline")
    if clashes:
        raise ConfigError(
            f"table {entry.name}: [serve] tables says {entry.text!r} but the table catalog has "
            f"{declared.describe()}: {'; '.join(clashes)}. Drop those options from "
            "[serve] tables (the pipeline's declaration is enough) or make them agree"
        )


def _from_catalog(declared: Declared, entry: ServeEntry | None, default_standby: int) -> TableSpec:
    spec = entry.spec if entry is not None else None
    entry_options = entry.options if entry is not None else frozenset()
    return TableSpec(
        name=declared.name,
        topic=declared.topic,
        store=spec.store if spec is not None else "rocksdb",
        format=declared.format,
        schema_file=None,
        standby_replicas=spec.standby_replicas if spec is not None else default_standby,
        global_=spec.global_ if spec is not None else False,
        key_separator=declared.sep,
        # [serve] may age a table differently than its pipeline says: a serving choice
        ttl_ms=spec.ttl_ms if spec is not None and "ttl" in entry_options else declared.ttl_ms,
        retention_ms=(
            spec.retention_ms
            if spec is not None and "retention" in entry_options
            else declared.retention_ms
        ),
        windowed=declared.window is not None,
        rank_by=declared.rank_by,
        index=tuple(i.spec() for i in declared.index),
        declared=declared_fields(declared),
    )


def spec_of(declared: Declared) -> TableSpec:
    """The table as its declaration alone describes it (default serving options)."""
    return _from_catalog(declared, None, default_standby=1)


def declared_fields(declared: Declared) -> Mapping[str, object]:
    """What ``GET /v1/tables`` shows of a table's declaration."""
    return {
        "key": list(declared.key),
        "sep": declared.sep,
        "partitioning": declared.partitioning,
        "pipeline": declared.pipeline,
        "query": declared.query,
        "app": declared.app,
        "ttl_ms": declared.ttl_ms,
        "window": declared.window,
        "retention_ms": declared.retention_ms,
        "rank_by": declared.rank_by,
        "index": [{"field": i.field, "type": i.type} for i in declared.index],
        "consistent": declared.consistent,
        "version": declared.version,
        "checkpoint": declared.checkpoint or None,
        "dead_letters": list(declared.dead_letters),
    }
