"""Rows of a DataFrame → the Kafka records of served tables: key, JSON value, topic,
and the dead letters of rows that cannot be keyed.

A key is the text of one column, or the texts of several joined by ``sep`` (a
composite key, ``customer|2026-11-22T10:31``). Key columns of other types are cast to
text (Spark's ``CAST(... AS STRING)``: ``42``, ``2026-11-22 10:31:00`` in UTC), so for
range queries prefer parts that sort as text (zero-padded numbers, ISO times). A row
whose key part is null, or contains ``sep`` (its key would be ambiguous and could land
in another entity's partition), goes to the dead-letter topic with the reason in a
``kiq.reason`` header; the query goes on.

A record whose value is null is a tombstone: the serving nodes delete its key. A row
becomes one when its ``value`` column is null, or when its table's ``delete`` column (a
boolean) is true; a null or false ``delete`` keeps the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kiq.errors import ConfigError
from kiq.pipelines.records import PREFIX
from kiq.tables.declared import MAX_VALUE_FIELDS, ValueField
from kiq.tables.spec import IndexField

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

HEADERS = "ARRAY<STRUCT<key: STRING, value: BINARY>>"
# A windowed table's last two key parts: its window's start and end, ISO 8601 in UTC to the
# millisecond (fixed width, so an entity's windows sort by time as bytes).
WINDOW_PARTS = ("__kiq_window_start", "__kiq_window_end")
WINDOW_TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
_KEY, _VALUE, _TOPIC, _REASON = "__out_key", "__out_value", "__out_topic", "__out_reason"


@dataclass(frozen=True)
class TableOutput:
    """One table a query writes: its name, topic, key columns, separator, value column
    (None: a JSON object of every column but kiq's ``__`` ones and ``delete``) and
    ``delete`` column (a boolean: true writes a tombstone, the key's value null)."""

    name: str
    topic: str
    key: tuple[str, ...]
    sep: str = "|"
    value: str | None = None
    delete: str | None = None
    # How the table ages, orders and is indexed (``ctx.write_table``'s ttl, window,
    # retention, rank_by, index): recorded in the catalog for the nodes, not used to write
    # the records.
    ttl_ms: int | None = None
    window: str | None = None
    retention_ms: int | None = None
    rank_by: str | None = None
    index: tuple[IndexField, ...] = ()

    @property
    def declared_key(self) -> tuple[str, ...]:
        """The key parts as the pipeline named them: without the window's start and end."""
        return self.key[: len(self.key) - len(WINDOW_PARTS)] if self.window else self.key

    @property
    def composite(self) -> bool:
        return len(self.key) > 1

    def check(self, columns: Sequence[str]) -> None:
        """Clear errors before a query starts: missing columns, a bad separator."""
        named = (*self.key, *(c for c in (self.value, self.delete) if c))
        missing = [c for c in named if c not in columns]
        if missing:
            raise ConfigError(
                f"table {self.name}: no column {', '.join(map(repr, missing))} in the DataFrame "
                f"(its columns: {', '.join(columns)})"
            )
        if self.composite and (not isinstance(self.sep, str) or len(self.sep) != 1):
            raise ConfigError(
                f"table {self.name}: sep must be one character (the serving node splits keys "
                f"on it), got {self.sep!r}"
            )


def with_window_parts(
    df: DataFrame, table: str, window: str, parts: tuple[str, ...] = WINDOW_PARTS
) -> DataFrame:
    """``df`` with its ``window`` column's start and end as text key parts (columns
    ``parts``, by default ``WINDOW_PARTS``; ``write_tables`` names others for a second
    window column); a ``ConfigError`` unless ``window`` is Spark's window struct. A row
    whose window is null (a row of another table) gets null parts."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, TimestampNTZType, TimestampType

    if window not in df.columns:
        raise ConfigError(
            f"table {table}: no window column {window!r} in the DataFrame (its columns: "
            f"{', '.join(df.columns)}); name the column F.window(...) made"
        )
    kind = df.schema[window].dataType
    fields = {f.name: f.dataType for f in kind.fields} if isinstance(kind, StructType) else {}
    times = (TimestampType, TimestampNTZType)
    if not all(isinstance(fields.get(part), times) for part in ("start", "end")):
        raise ConfigError(
            f"table {table}: window={window!r} must be a window struct (start and end "
            f"timestamps, as F.window or F.session_window make), not {kind.simpleString()}"
        )
    if df.schema[window].metadata.get("spark.sessionWindow"):
        raise ConfigError(
            f"table {table}: window={window!r} is a session window, which Spark aggregates "
            "in append mode only, and a table is written in update mode: use F.window "
            "(tumbling or sliding)"
        )
    start, end = parts
    return df.withColumn(
        start, F.date_format(F.col(f"`{window}`.start"), WINDOW_TIME_FORMAT)
    ).withColumn(end, F.date_format(F.col(f"`{window}`.end"), WINDOW_TIME_FORMAT))


def key_of(df: DataFrame, table: TableOutput) -> tuple[Column, Column]:
    """The key's text, and the reason the row cannot be keyed (null: it can)."""
    from pyspark.sql import functions as F

    if not table.key:  # a stream's record without a key
        return F.lit(None).cast("string"), F.lit(None).cast("string")
    parts = [F.col(f"`{c}`").cast("string") for c in table.key]
    reason = F.lit(None).cast("string")
    checks = [
        (p.isNull(), f"key column {c} is null") for p, c in zip(parts, table.key, strict=True)
    ]
    if table.composite:
        checks += [
            (F.instr(p, table.sep) > 0, f"key column {c} contains the separator {table.sep!r}")
            for p, c in zip(parts, table.key, strict=True)
        ]
    for condition, text in reversed(checks):
        reason = F.when(condition, F.lit(text)).otherwise(reason)
    key = parts[0] if not table.composite else F.concat_ws(table.sep, *parts)
    return key, reason


def value_of(df: DataFrame, table: TableOutput, exclude: Sequence[str] = ()) -> Column:
    """The value as text: the ``value`` column (JSON if it is not text), else every column
    but kiq's, ``exclude`` and ``delete`` as one JSON object, nulls kept; null (a tombstone)
    where ``delete`` is true."""
    from pyspark.sql import functions as F

    value = _value(df, table, exclude)
    if table.delete is None:
        return value
    from pyspark.sql.types import BooleanType

    kind = df.schema[table.delete].dataType
    if not isinstance(kind, BooleanType):
        raise ConfigError(
            f"table {table.name}: delete={table.delete!r} must name a boolean column (true: "
            f"delete the row's key), not a {kind.simpleString()} one"
        )
    return F.when(F.col(f"`{table.delete}`"), F.lit(None).cast("string")).otherwise(value)


def _value(df: DataFrame, table: TableOutput, exclude: Sequence[str]) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StringType, StructType

    if table.value is None:
        left_out = {*exclude, *([table.delete] if table.delete else [])}
        names = [c for c in df.columns if not c.startswith(PREFIX) and c not in left_out]
        return F.to_json(F.struct(*(F.col(f"`{c}`") for c in names)), {"ignoreNullFields": "false"})
    kind = df.schema[table.value].dataType
    column = F.col(f"`{table.value}`")
    if isinstance(kind, StringType):
        return column
    if isinstance(kind, (StructType, MapType, ArrayType)):
        return F.to_json(column, {"ignoreNullFields": "false"})
    return column.cast("string")


def key_types(df: DataFrame, table: TableOutput) -> tuple[str, ...]:
    """The Spark types of the key parts the pipeline named, for its declaration (empty when
    one is too long to record)."""
    kinds = tuple(df.schema[c].dataType.simpleString() for c in table.declared_key)
    return kinds if all(_recordable(k) for k in kinds) else ()


def value_shape(
    df: DataFrame, table: TableOutput, exclude: Sequence[str] = ()
) -> tuple[tuple[ValueField, ...] | None, str | None]:
    """The value's shape as ``value_of`` writes it, for its declaration: its fields when it is
    a JSON object (every column but kiq's, ``exclude`` and ``delete``, or ``value``'s
    struct), else its type (``string`` for text written as it is). (None, None) when it is
    too large to record (``MAX_VALUE_FIELDS``)."""
    from pyspark.sql.types import StructType

    if table.value is None:
        left_out = {*exclude, *([table.delete] if table.delete else [])}
        fields = [f for f in df.schema.fields if not f.name.startswith(PREFIX)]
        fields = [f for f in fields if f.name not in left_out]
    else:
        kind = df.schema[table.value].dataType
        if not isinstance(kind, StructType):
            name = kind.simpleString()
            return (None, name) if _recordable(name) else (None, None)
        fields = list(kind.fields)
    shape = tuple(
        ValueField(name=f.name, type=f.dataType.simpleString(), nullable=f.nullable) for f in fields
    )
    if len(shape) > MAX_VALUE_FIELDS or not all(
        _recordable(f.type) and _recordable(f.name, 200) for f in shape
    ):
        return None, None
    return shape, None


def _recordable(text: str, limit: int = 1_000) -> bool:
    """Whether the catalog's schema (``Declared.check``) takes ``text`` as a name or type."""
    return 0 < len(text) <= limit and text.isprintable()


def table_records(
    df: DataFrame,
    tables: Sequence[TableOutput],
    dead_letters: str,
    table_column: str | None = None,
    partition: str | None = None,
) -> DataFrame:
    """(topic, key, value, partition, headers) for the Kafka sink: each row as a record of
    its table (the one table, or the one its ``table_column`` names), or as a dead letter.

    ``partition``: a column holding each row's partition (the input's, when the input is
    keyed by the same entity); None leaves it to the sink's partitioner."""
    from pyspark.sql import functions as F

    if table_column is None:
        (only,) = tables
        key, reason = key_of(df, only)
        value = value_of(df, only)
        topic = F.lit(only.topic)
        table_name: Column = F.lit(only.name)
    else:
        which = F.col(f"`{table_column}`")
        table_name = which.cast("string")
        parts = [(t, *key_of(df, t), value_of(df, t, exclude=(table_column,))) for t in tables]
        key = _switch(which, [(t.name, k) for t, k, _, _ in parts])
        value = _switch(which, [(t.name, v) for t, _, _, v in parts])
        topic = _switch(which, [(t.name, F.lit(t.topic)) for t, *_ in parts])
        unknown = F.concat(F.lit("no table named "), F.coalesce(table_name, F.lit("null")))
        reason = _switch(which, [(t.name, r) for t, _, r, _ in parts]).otherwise(unknown)
    staged = df.select(
        key.alias(_KEY),
        value.alias(_VALUE),
        topic.alias(_TOPIC),
        reason.alias(_REASON),
        table_name.alias("__out_table"),
        (F.col(f"`{partition}`").cast("int") if partition else F.lit(None).cast("int")).alias(
            "__out_partition"
        ),
    )
    ok = F.col(_REASON).isNull()

    def header(name: str, column: str) -> Column:
        value = F.col(column).cast("string").cast("binary")
        return F.struct(F.lit(name).alias("key"), value.alias("value"))

    return staged.select(
        F.when(ok, F.col(_TOPIC)).otherwise(F.lit(dead_letters)).alias("topic"),
        F.col(_KEY).cast("binary").alias("key"),
        F.col(_VALUE).cast("binary").alias("value"),
        F.when(ok, F.col("__out_partition")).alias("partition"),
        F.when(
            ~ok, F.array(header("kiq.reason", _REASON), header("kiq.table", "__out_table"))
        ).alias("headers"),
    )


def _switch(which: Column, cases: Sequence[tuple[str, Column]]) -> Column:
    """CASE which WHEN name THEN column ... END (null for another name)."""
    from pyspark.sql import functions as F

    (first_name, first), *rest = cases
    out = F.when(which == F.lit(first_name), first)
    for name, column in rest:
        out = out.when(which == F.lit(name), column)
    return out


def letters_records(letters: DataFrame, topic: str) -> DataFrame:
    """A read's dead letters (key, value, headers) as records of the same shape."""
    from pyspark.sql import functions as F

    return letters.select(
        F.lit(topic).alias("topic"),
        "key",
        "value",
        F.lit(None).cast("int").alias("partition"),
        F.col("headers").cast(HEADERS).alias("headers"),
    )
