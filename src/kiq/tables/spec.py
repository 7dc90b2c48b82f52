"""What a table is: a name served over the API, the topic behind it, how it is kept.

``parse_table`` reads the CLI's ``--table`` flag; ``TableSpec`` checks itself,
so a spec from TOML or code is held to the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal, get_args

from kiq.errors import ConfigError
from kiq.tables import checks
from kiq.tables.durations import parse_duration
from kiq.tables.versions import split_internal

StoreKind = Literal["rocksdb", "memory"]
ValueFormat = Literal["json", "avro", "raw"]
IndexKind = Literal["text", "number"]

MAX_STANDBY_REPLICAS = 10
TABLE_SYNTAX = (
    "NAME=TOPIC[,store=memory][,format=avro][,schema=PATH][,standby=N][,global][,sep=C]"
    "[,ttl=DURATION][,retention=DURATION]"
)
_EXAMPLES = (
    "quotes=stock-quotes or ref=symbols,store=memory,global or ev=events,format=avro,schema=ev.avsc"
)

# A table's own name is kiq.tables.checks's rule (never a path); a node's name for another
# version of it adds "@VERSION" (kiq.tables.versions), which a name given by a user never has.
_TOPIC = checks.TOPIC_NAME


@dataclass(frozen=True)
class IndexField:
    """A field of the JSON value a table is indexed by (``ctx.write_table(..., index=)``):
    ``kind`` says how a query's values are read (a text, or a number)."""

    field: str
    kind: IndexKind


@dataclass(frozen=True)
class TableSpec:
    """One served table: ``name`` in URLs, ``topic`` its compacted source.

    ``standby_replicas`` is how many nodes besides the active one keep a warm
    copy of each partition; a ``global_`` table is held whole by every node
    (small reference data joined on every request).
    """

    name: str
    topic: str
    store: StoreKind = "rocksdb"
    format: ValueFormat = "json"
    schema_file: Path | None = None
    standby_replicas: int = 1
    global_: bool = False
    # Composite keys ("AAPL|2026-11-22T10:31"): the part before the first
    # separator picks the partition, so an entity's keys stay together and a
    # prefix scan that includes the separator reads one partition.
    key_separator: str | None = None
    # Tables that age (durations in ms): a key not written for ``ttl_ms`` expires; in a
    # windowed table a window that ended ``retention_ms`` before the partition's newest
    # window end is dropped. Either way every replica stops answering it and the
    # partition's active node writes its tombstone (``kiq.replicas.expiry``).
    ttl_ms: int | None = None
    retention_ms: int | None = None
    # A windowed table: each key ends in its window's start and end (sep-separated, ISO
    # 8601 UTC, fixed width), so an entity's windows sort by time in its partition.
    windowed: bool = False
    # A numeric field of the JSON value every replica keeps its partition's keys ordered
    # by, for GET /v1/tables/{t}/top (highest first, ties by key).
    rank_by: str | None = None
    # The fields of the JSON value every replica keeps an index of, for
    # GET /v1/tables/{t}/by/{field} (``kiq.stores.index``).
    index: tuple[IndexField, ...] = ()
    # How its pipeline declared it in the table catalog (key parts, partitioning, the
    # pipeline), shown by GET /v1/tables; None for a topic no pipeline declares.
    declared: Mapping[str, object] | None = field(default=None, compare=False, hash=False)

    @cached_property
    def table(self) -> str:
        """The table's own name, the one callers use (``name`` less any ``@VERSION``)."""
        return split_internal(self.name)[0]

    @cached_property  # every answer's version header reads it
    def version(self) -> str:
        return split_internal(self.name)[1]

    def partition_key(self, key: str) -> str:
        """The part of ``key`` that decides its partition."""
        if self.key_separator is None:
            return key
        return key.split(self.key_separator, 1)[0]

    def __post_init__(self) -> None:
        self._check_aging()
        if not checks.internal_name_ok(self.name):
            raise ConfigError(
                f"table name {self.name!r} is invalid: use 1-100 of A-Z a-z 0-9 . _ - "
                "(not . or .., no ..)"
            )
        if not isinstance(self.topic, str) or not _TOPIC.fullmatch(self.topic):
            raise ConfigError(
                f"table {self.name}: topic {self.topic!r} is not a valid Kafka topic name"
                " (1-249 of A-Z a-z 0-9 . _ -)"
            )
        if self.store not in get_args(StoreKind):
            raise ConfigError(
                f"table {self.name}: store {self.store!r} is unknown:"
                f" use one of {', '.join(get_args(StoreKind))}"
            )
        if self.format not in get_args(ValueFormat):
            raise ConfigError(
                f"table {self.name}: format {self.format!r} is unknown:"
                f" use one of {', '.join(get_args(ValueFormat))}"
            )
        self._check_schema()
        if self.key_separator is not None and (
            not isinstance(self.key_separator, str) or len(self.key_separator) != 1
        ):
            raise ConfigError(
                f"table {self.name}: the key separator must be one character,"
                f" got {self.key_separator!r}"
            )
        standby = self.standby_replicas
        if (
            isinstance(standby, bool)
            or not isinstance(standby, int)
            or not 0 <= standby <= MAX_STANDBY_REPLICAS
        ):
            raise ConfigError(
                f"table {self.name}: standby replicas must be a whole number"
                f" from 0 to {MAX_STANDBY_REPLICAS}, got {standby!r}"
            )

    def _check_aging(self) -> None:
        for what, ms in (("ttl", self.ttl_ms), ("retention", self.retention_ms)):
            if ms is not None and (isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0):
                raise ConfigError(f"table {self.name}: {what} must be a positive duration")
        if self.retention_ms is not None and not self.windowed:
            raise ConfigError(
                f"table {self.name}: retention applies to windowed tables "
                "(ctx.write_table(..., window=COLUMN)); for a table of plain keys use ttl"
            )
        if self.rank_by is not None and (not isinstance(self.rank_by, str) or not self.rank_by):
            raise ConfigError(f"table {self.name}: rank_by must name a numeric value field")
        if self.rank_by is not None and self.format != "json":
            raise ConfigError(f"table {self.name}: rank_by needs JSON values, not {self.format}")

    def _check_schema(self) -> None:
        if self.format == "avro":
            if self.schema_file is None:
                raise ConfigError(
                    f"table {self.name}: format avro needs a schema file (schema=PATH)"
                )
            if not Path(self.schema_file).is_file():
                raise ConfigError(
                    f"table {self.name}: Avro schema file {str(self.schema_file)!r} does not exist"
                )
        elif self.schema_file is not None:
            raise ConfigError(
                f"table {self.name}: a schema file only applies to format avro, not {self.format}"
            )


def parse_table(text: str, default_standby: int = 1) -> TableSpec:
    """A ``TableSpec`` from the ``--table`` flag's ``TABLE_SYNTAX``.

    Paths cannot contain commas; ``standby`` defaults to ``default_standby``.
    """
    name, sep, rest = text.partition("=")
    parts = [part.strip() for part in rest.split(",")]
    if not sep or not name.strip() or not parts[0]:
        raise _syntax_error(text, "expected NAME=TOPIC first")
    if "@" in name:
        raise _syntax_error(text, "a table name has no '@' (versions come from the catalog)")
    options: dict[str, str | None] = {}
    for part in parts[1:]:
        key, has_value, value = (s.strip() for s in part.partition("="))
        if key in options:
            raise _syntax_error(text, f"{key!r} is given twice")
        if key == "global":
            if has_value:
                raise _syntax_error(text, "'global' takes no value")
            options[key] = None
        elif key in ("store", "format", "schema", "standby", "sep", "ttl", "retention"):
            if not value:
                raise _syntax_error(text, f"{key!r} needs a value ({key}=...)")
            options[key] = value
        else:
            raise _syntax_error(text, f"unknown option {part!r}")
    standby_text = options.get("standby")
    try:
        standby = default_standby if standby_text is None else int(standby_text)
    except ValueError:
        raise _syntax_error(text, f"standby must be a number, got {standby_text!r}") from None
    schema = options.get("schema")
    ttl, retention = options.get("ttl"), options.get("retention")
    try:
        return TableSpec(
            name=name.strip(),
            topic=parts[0],
            store=options.get("store") or "rocksdb",  # type: ignore[arg-type]
            format=options.get("format") or "json",  # type: ignore[arg-type]
            schema_file=Path(schema) if schema else None,
            standby_replicas=standby,
            global_="global" in options,
            key_separator=options.get("sep"),
            ttl_ms=parse_duration(ttl, "ttl") if ttl else None,
            retention_ms=parse_duration(retention, "retention") if retention else None,
            windowed=bool(retention),  # the catalog's record says so for a pipeline's table
        )
    except ConfigError as exc:
        raise ConfigError(f"--table {text!r}: {exc}") from None


def _syntax_error(text: str, problem: str) -> ConfigError:
    return ConfigError(f"--table {text!r}: {problem}; expected {TABLE_SYNTAX} (e.g. {_EXAMPLES})")
