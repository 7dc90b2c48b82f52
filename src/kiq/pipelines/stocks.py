"""The stock pipeline: ticks → quotes, day statistics and one-minute bars.

Four streaming queries over the same Kafka input, each with its own checkpoint
(Spark does not chain aggregations in update mode):

- ``ticks-dlq``: invalid ticks → the dead-letter topic (stateless: Real-Time Mode).
- ``day-stats``: trades grouped by (symbol, UTC date) → ``stock-day-stats``,
  key ``SYMBOL|YYYY-MM-DD``.
- ``bars-1m``: trades grouped by (symbol, minute) → ``stock-bars-1m``, key
  ``SYMBOL|YYYY-MM-DDTHH:MM``.
- ``quotes``: ticks and day statistics grouped by symbol → ``stock-quotes``.

Every "latest" is a ``max`` over a struct that starts with (ts, offset): the
tick with the greatest timestamp wins whatever order ticks arrive in, and a tie
goes to the one later in the log, so replays give the same answer. Composite
keys are written to their symbol's partition: the tick's own partition, since
ticks are keyed by symbol with Kafka's default partitioner and every topic of
the pipeline has the input's partition count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kiq.pipelines.kafka_io import StreamOptions, read_topics, write_topic
from kiq.pipelines.ticks import dead_letters, parse_ticks, valid_ticks

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

DEFAULT_EXCHANGES = ("NYSE", "NASDAQ", "ARCA", "BATS", "IEX")


@dataclass(frozen=True)
class StockTopics:
    ticks: str = "stock-ticks"
    dead_letters: str = "stock-ticks-dlq"
    quotes: str = "stock-quotes"
    day_stats: str = "stock-day-stats"
    bars: str = "stock-bars-1m"
    exchanges: tuple[str, ...] = field(default=DEFAULT_EXCHANGES)


def start_stock_pipeline(
    spark: SparkSession, opts: StreamOptions, topics: StockTopics = StockTopics()
) -> list[StreamingQuery]:
    parsed = parse_ticks(read_topics(spark, opts, topics.ticks), topics.exchanges)
    queries = [
        write_topic(dead_letters(parsed), opts, topics.dead_letters, "ticks-dlq", stateful=False),
        write_topic(day_stats(valid_ticks(parsed)), opts, topics.day_stats, "day-stats", True),
        write_topic(bars_1m(valid_ticks(parsed)), opts, topics.bars, "bars-1m", True),
    ]
    both = read_topics(spark, opts, topics.ticks, topics.day_stats)
    queries.append(write_topic(quotes(both, topics), opts, topics.quotes, "quotes", stateful=True))
    return queries


def _trade_stats(trades: DataFrame, *group: str) -> DataFrame:
    """OHLC, volume, VWAP and count of trades per group; open/close by (ts, offset)."""
    from pyspark.sql import functions as F

    order = F.struct("ts", "offset", F.col("last").alias("price"))
    return trades.groupBy(*group).agg(
        F.min(order)["price"].alias("open"),
        F.max("last").alias("high"),
        F.min("last").alias("low"),
        F.max(order)["price"].alias("close"),
        F.sum("last_size").alias("volume"),
        F.sum(F.col("last") * F.col("last_size")).alias("notional"),
        F.count(F.lit(1)).alias("trades"),
    )


def day_stats(ticks: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    trades = ticks.where("last IS NOT NULL").withColumn(
        "date", F.date_format(F.timestamp_millis("ts"), "yyyy-MM-dd")
    )
    stats = _trade_stats(trades, "symbol", "partition", "date")
    value = F.struct(
        "symbol", "date", "open", "high", "low", "volume",
        (F.col("notional") / F.col("volume")).alias("vwap"), "trades",
    )  # fmt: skip
    return stats.select(
        F.concat_ws("|", "symbol", "date").alias("key"),
        F.to_json(value).alias("value"),
        "partition",
    )


def bars_1m(ticks: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    trades = ticks.where("last IS NOT NULL").withColumn(
        "start_ms", F.col("ts") - F.col("ts") % 60_000
    )
    stats = _trade_stats(trades, "symbol", "partition", "start_ms")
    start = F.date_format(F.timestamp_millis("start_ms"), "yyyy-MM-dd'T'HH:mm")
    value = F.struct(
        "symbol", F.concat(start, F.lit(":00Z")).alias("start"), "open", "high", "low", "close",
        "volume", (F.col("notional") / F.col("volume")).alias("vwap"), "trades",
    )  # fmt: skip
    return stats.select(
        F.concat_ws("|", "symbol", start).alias("key"), F.to_json(value).alias("value"), "partition"
    )


def quotes(both: DataFrame, topics: StockTopics) -> DataFrame:
    """One aggregation per symbol over ticks and the day-stats topic."""
    from pyspark.sql import functions as F

    is_tick = F.col("topic") == topics.ticks
    ticks = valid_ticks(parse_ticks(both.where(is_tick), topics.exchanges)).select(
        "symbol", "partition", "offset", "exchange", "ts", "bid", "ask", "bid_size", "ask_size",
        "last", "last_size", F.lit(None).cast(_DAY_TYPE).alias("day"),
    )  # fmt: skip
    days = both.where(~is_tick).select(
        F.split(F.col("key").cast("string"), r"\|")[0].alias("symbol"),
        "partition", "offset",
        *(F.lit(None).cast(kind).alias(name) for name, kind in _TICK_COLUMNS),
        F.from_json(F.col("value").cast("string"), _DAY_TYPE).alias("day"),
    )  # fmt: skip
    rows = ticks.unionByName(days, allowMissingColumns=False)

    def latest_quote(exchange: str):
        quote = F.struct("ts", "offset", "bid", "ask", "bid_size", "ask_size")
        return F.max(F.when(F.col("exchange") == exchange, quote)).alias(f"q_{exchange}")

    agg = rows.groupBy("symbol", "partition").agg(
        *(latest_quote(e) for e in topics.exchanges),
        F.max(F.when(F.col("last").isNotNull(),
                     F.struct("ts", "offset", "last", "last_size", "exchange"))).alias("trade"),
        F.max("ts").alias("updated_at"),
        # The latest date's statistics: (date, trades) grows with every update of a day.
        F.max(F.when(F.col("day").isNotNull(),
                     F.struct(F.col("day.date").alias("d"), F.col("day.trades").alias("n"),
                              F.col("day").alias("day")))).alias("latest_day"),
    )  # fmt: skip
    return agg.where("updated_at IS NOT NULL").select(
        F.col("symbol").alias("key"),
        F.to_json(F.expr(_quote_sql(topics.exchanges)), _KEEP_NULLS).alias("value"),
        "partition",
    )


_KEEP_NULLS = {"ignoreNullFields": "false"}  # "last": null, not a missing field
_TICK_COLUMNS = (
    ("exchange", "string"), ("ts", "bigint"), ("bid", "double"), ("ask", "double"),
    ("bid_size", "bigint"), ("ask_size", "bigint"), ("last", "double"), ("last_size", "bigint"),
)  # fmt: skip
_DAY_TYPE = (
    "STRUCT<symbol: STRING, date: STRING, open: DOUBLE, high: DOUBLE, low: DOUBLE, "
    "volume: BIGINT, vwap: DOUBLE, trades: BIGINT>"
)


def _quote_sql(exchanges: Sequence[str]) -> str:
    """The served quote: per-exchange quotes, best bid and ask, last trade, the day."""
    entries = ", ".join(f"named_struct('exchange', '{e}', 'q', q_{e})" for e in exchanges)
    quotes = f"filter(array({entries}), x -> x.q IS NOT NULL)"
    best_bid = (
        f"array_sort({quotes}, (l, r) -> CASE "
        "WHEN l.q.bid > r.q.bid THEN -1 WHEN l.q.bid < r.q.bid THEN 1 "
        "WHEN l.q.bid_size > r.q.bid_size THEN -1 WHEN l.q.bid_size < r.q.bid_size THEN 1 "
        "WHEN l.exchange < r.exchange THEN -1 WHEN l.exchange > r.exchange THEN 1 ELSE 0 END)[0]"
    )
    best_ask = (
        f"array_sort({quotes}, (l, r) -> CASE "
        "WHEN l.q.ask < r.q.ask THEN -1 WHEN l.q.ask > r.q.ask THEN 1 "
        "WHEN l.q.ask_size > r.q.ask_size THEN -1 WHEN l.q.ask_size < r.q.ask_size THEN 1 "
        "WHEN l.exchange < r.exchange THEN -1 WHEN l.exchange > r.exchange THEN 1 ELSE 0 END)[0]"
    )
    return f"""named_struct(
      'symbol', symbol,
      'exchanges', map_from_entries(transform({quotes}, x -> struct(x.exchange, named_struct(
          'bid', x.q.bid, 'ask', x.q.ask, 'bid_size', x.q.bid_size, 'ask_size', x.q.ask_size,
          'ts', x.q.ts)))),
      'best_bid', named_struct('price', {best_bid}.q.bid, 'size', {best_bid}.q.bid_size,
                               'exchange', {best_bid}.exchange),
      'best_ask', named_struct('price', {best_ask}.q.ask, 'size', {best_ask}.q.ask_size,
                               'exchange', {best_ask}.exchange),
      'last', CASE WHEN trade IS NULL THEN NULL ELSE named_struct('price', trade.last,
              'size', trade.last_size, 'exchange', trade.exchange, 'ts', trade.ts) END,
      'day', CASE WHEN latest_day IS NULL THEN NULL ELSE named_struct(
              'date', latest_day.day.date, 'open', latest_day.day.open,
              'high', latest_day.day.high, 'low', latest_day.day.low,
              'volume', latest_day.day.volume, 'vwap', latest_day.day.vwap,
              'trades', latest_day.day.trades) END,
      'updated_at', updated_at
    )"""
