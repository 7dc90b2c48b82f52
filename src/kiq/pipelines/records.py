"""Kafka records in: the value's JSON as columns, the Kafka metadata beside them, and the
reason a record cannot be used (it then goes to a dead-letter topic as it came).

Every column kiq adds has a name starting with ``__``, and a schema may not use such
names, so the metadata can never clash with a value's fields:

- ``__key``: the record's key as text (UTF-8), null for a keyless record;
- ``__topic``, ``__partition``, ``__offset``: where it was read;
- ``__timestamp``: its Kafka timestamp (a TIMESTAMP);
- ``__value``: the value as text, only when no schema was given.

The reasons kiq gives, in this order: ``no value``; ``not JSON, or a field of the
wrong type``; ``missing or malformed field F`` for each field declared ``NOT NULL``;
then the caller's own rejections, the first that applies. One parse per record: a
record that is not JSON lands whole in one corrupt-record column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kiq.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    Schema = str | StructType
    # (condition that marks a record bad, the reason written with it): SQL text or Columns.
    Rejection = tuple[str | Column, str | Column]

PREFIX = "__"
KEY, VALUE, TOPIC, PARTITION, OFFSET, TIMESTAMP = (
    "__key",
    "__value",
    "__topic",
    "__partition",
    "__offset",
    "__timestamp",
)
METADATA = (KEY, TOPIC, PARTITION, OFFSET, TIMESTAMP)
REASON = "__reason"
RAW_KEY, RAW_VALUE = "__raw_key", "__raw_value"
_CORRUPT = "__corrupt"
_PARSED = "__parsed"
_PARSE_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
# The Kafka source's columns, as kiq names them.
_SOURCE = {
    "key": RAW_KEY,
    "value": RAW_VALUE,
    "topic": TOPIC,
    "partition": PARTITION,
    "offset": OFFSET,
    "timestamp": TIMESTAMP,
}


def as_struct(schema: Schema) -> StructType:
    """A DDL string (``"id STRING NOT NULL, n INT"``) or a StructType, checked for names
    that would clash with kiq's columns."""
    from pyspark.sql.types import StructType

    if isinstance(schema, str):
        try:
            parsed = StructType.fromDDL(schema)
        except Exception as exc:
            raise ConfigError(f"schema {schema!r} is not a valid DDL schema: {exc}") from exc
    else:
        parsed = schema
    if not isinstance(parsed, StructType):
        raise ConfigError(f"a schema must be a StructType or a DDL string, got {schema!r}")
    clashes = [f.name for f in parsed.fields if f.name.startswith(PREFIX)]
    if clashes:
        raise ConfigError(
            f"schema fields {clashes} start with {PREFIX!r}, which kiq keeps for its own "
            "columns (Kafka metadata): rename them in the schema"
        )
    return parsed


def parse_records(
    raw: DataFrame, schema: Schema | None = None, reject: Sequence[Rejection] = ()
) -> DataFrame:
    """Kafka source rows → value fields, metadata, the raw key and value, and ``__reason``
    (null: the record is good)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    present = [c for c in _SOURCE if c in raw.columns]  # a static frame may lack some
    source = [F.col(c).alias(_SOURCE[c]) for c in present]
    source.append(F.col("key").cast("string").alias(KEY))
    names = [*(_SOURCE[c] for c in present), KEY]
    if schema is None:
        frame = raw.select(*source, F.col("value").cast("string").alias(VALUE))
        checks: list[tuple[Column, Column]] = []
    else:
        struct = as_struct(schema)
        loose = StructType(
            [StructField(f.name, f.dataType, True) for f in struct.fields]
            + [StructField(_CORRUPT, StringType(), True)]
        )
        parsed = F.from_json(F.col("value").cast("string"), loose, _PARSE_OPTIONS)
        frame = raw.select(*source, parsed.alias(_PARSED)).select(
            *names,
            f"{_PARSED}.*",
            F.col(_PARSED).isNull().alias("__unparsed"),
        )
        checks = [
            (F.col(RAW_VALUE).isNull(), F.lit("no value")),
            (
                F.col("__unparsed") | F.col(_CORRUPT).isNotNull(),
                F.lit("not JSON, or a field of the wrong type"),
            ),
        ]
        checks += [
            (F.col(f"`{f.name}`").isNull(), F.lit(f"missing or malformed field {f.name}"))
            for f in struct.fields
            if not f.nullable
        ]
    for condition, reason in reject:
        checks.append(
            (
                F.expr(condition) if isinstance(condition, str) else condition,
                F.lit(reason) if isinstance(reason, str) else reason,
            )
        )
    verdict = F.lit(None).cast("string")
    if checks:
        first, *rest = checks
        verdict = F.when(*first)
        for condition, reason in rest:
            verdict = verdict.when(condition, reason)
    out = frame.withColumn(REASON, verdict)
    return out.drop(_CORRUPT, "__unparsed") if schema is not None else out


def good_records(parsed: DataFrame) -> DataFrame:
    """The records that passed: value fields and metadata, without kiq's working columns."""
    from pyspark.sql import functions as F

    return parsed.where(F.col(REASON).isNull()).drop(REASON, RAW_KEY, RAW_VALUE)


def dead_letters(parsed: DataFrame) -> DataFrame:
    """Rejected records as they came (key, value) with the reason and their origin in
    headers: ``kiq.reason``, ``kiq.source.topic``, ``.partition`` and ``.offset``."""
    from pyspark.sql import functions as F

    def header(name: str, column: str) -> Column:
        value = F.col(column).cast("string").cast("binary")
        return F.struct(F.lit(name).alias("key"), value.alias("value"))

    return parsed.where(F.col(REASON).isNotNull()).select(
        F.col(RAW_KEY).alias("key"),
        F.col(RAW_VALUE).alias("value"),
        F.array(
            header("kiq.reason", REASON),
            header("kiq.source.topic", TOPIC),
            header("kiq.source.partition", PARTITION),
            header("kiq.source.offset", OFFSET),
        ).alias("headers"),
    )
