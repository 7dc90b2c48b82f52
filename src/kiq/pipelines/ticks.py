"""The stock-tick input contract, parsed and checked in Spark SQL.

A tick is valid when it is JSON with every field, its key is its symbol, the
symbol matches ``[A-Z0-9.-]{1,12}``, ``ts`` falls in 2000-2049, prices and
sizes are positive, bid <= ask, ``last``/``last_size`` are both set or both
null, and the exchange is one the pipeline knows. Anything else goes to the
dead-letter topic with the first reason that applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kiq.feeds.ticks import TS_RANGE_MS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

TICK_SCHEMA = (
    "symbol STRING, exchange STRING, ts BIGINT, bid DOUBLE, ask DOUBLE, "
    "bid_size BIGINT, ask_size BIGINT, last DOUBLE, last_size BIGINT, _corrupt STRING"
)
# One parse per tick: what is not JSON lands whole in ``_corrupt``.
_PARSE_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}
SYMBOL_PATTERN = r"^[A-Z0-9.-]{1,12}$"
REQUIRED = ("symbol", "exchange", "ts", "bid", "ask", "bid_size", "ask_size")


def _reason_sql(exchanges: Sequence[str]) -> str:
    known = ", ".join(f"'{e}'" for e in exchanges)
    missing = "\n".join(
        f"WHEN t.{f} IS NULL THEN 'missing or malformed field {f}'" for f in REQUIRED
    )
    return f"""
    CASE
      WHEN value IS NULL THEN 'no value'
      WHEN t._corrupt IS NOT NULL THEN 'not JSON, or a field of the wrong type'
      {missing}
      WHEN t.ts < {TS_RANGE_MS[0]} OR t.ts >= {TS_RANGE_MS[1]} THEN 'ts outside 2000-2049'
      WHEN key IS NULL OR CAST(key AS STRING) != t.symbol THEN 'key is not the symbol'
      WHEN NOT regexp_like(t.symbol, '{SYMBOL_PATTERN}') THEN 'symbol not [A-Z0-9.-]{{1,12}}'
      WHEN t.exchange NOT IN ({known}) THEN concat('unknown exchange ', t.exchange)
      WHEN t.bid <= 0 OR t.ask <= 0 THEN 'non-positive price'
      WHEN t.bid_size <= 0 OR t.ask_size <= 0 THEN 'non-positive size'
      WHEN t.bid > t.ask THEN 'bid > ask'
      WHEN (t.last IS NULL) != (t.last_size IS NULL) THEN 'last and last_size must come together'
      WHEN t.last IS NOT NULL AND (t.last <= 0 OR t.last_size <= 0) THEN 'non-positive trade'
      ELSE NULL
    END"""


def parse_ticks(raw: DataFrame, exchanges: Sequence[str]) -> DataFrame:
    """Kafka rows → the parsed tick ``t``, the source position and ``reason`` (null: valid)."""
    from pyspark.sql import functions as F

    parsed = raw.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        F.from_json(F.col("value").cast("string"), TICK_SCHEMA, _PARSE_OPTIONS).alias("t"),
    )
    return parsed.withColumn("reason", F.expr(_reason_sql(exchanges)))


def valid_ticks(parsed: DataFrame) -> DataFrame:
    """Valid ticks as flat columns plus ``partition`` and ``offset`` (the log order)."""
    return parsed.where("reason IS NULL").select("t.*", "partition", "offset").drop("_corrupt")


def dead_letters(parsed: DataFrame) -> DataFrame:
    """Invalid ticks as they came, with the reason and their origin in headers."""
    from pyspark.sql import functions as F

    def header(name: str, column: Column) -> Column:
        return F.struct(F.lit(name).alias("key"), column.cast("binary").alias("value"))

    return parsed.where("reason IS NOT NULL").select(
        "key",
        "value",
        F.array(
            header("kiq.reason", F.col("reason")),
            header("kiq.source.topic", F.col("topic")),
            header("kiq.source.partition", F.col("partition").cast("string")),
            header("kiq.source.offset", F.col("offset").cast("string")),
        ).alias("headers"),
    )
