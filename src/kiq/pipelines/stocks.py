"""The stock pipeline: ticks → quotes, day statistics and one-minute bars.

Two streaming queries over the same Kafka input, each with its own checkpoint:

- ``ticks-dlq``: invalid ticks → the dead-letter topic (stateless: Real-Time Mode;
  in micro-batches every ``side_interval``, so it takes little from the tables).
- ``stock-tables``: one aggregation that derives all three tables, and writes each
  row to its table's topic (a ``topic`` column):

  - ``stock-day-stats``: trades grouped by (symbol, UTC date), key ``SYMBOL|YYYY-MM-DD``;
  - ``stock-bars-1m``: trades grouped by (symbol, minute), key ``SYMBOL|YYYY-MM-DDTHH:MM``;
  - ``stock-quotes``: ticks and day statistics grouped by symbol, key ``SYMBOL``.

Why one query rather than one per table: Spark does not chain aggregations in
update mode, but one aggregation can hold several kinds of groups. Each trade
becomes a day row and a bar row beside its quote row, grouped by (symbol, kind,
bucket). Every query costs a plan, tasks, offset and commit files and a state
store commit per batch whatever its size; on a small driver those fixed costs,
not the rows, were the batch time. A quote carries its symbol's latest day
statistics: the query reads them back from the day-stats topic it writes (a
quote shows a day's figures one batch after the day row is written).

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
from kiq.pipelines.ticks import dead_letters, parse_ticks

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

DEFAULT_EXCHANGES = ("NYSE", "NASDAQ", "ARCA", "BATS", "IEX")

# The kinds of groups in the one aggregation.
QUOTE, DAY, BAR = "q", "d", "b"


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
    """Start the dead-letter query and the one query that derives the three tables."""
    realtime = opts.trigger == "realtime"  # only the stateless dead-letter query runs so
    ticks = read_topics(spark, opts, topics.ticks, realtime=realtime)
    parsed = parse_ticks(ticks, topics.exchanges)
    both = read_topics(spark, opts, topics.ticks, topics.day_stats)
    letters = dead_letters(parsed)
    return [
        write_topic(letters, opts, topics.dead_letters, "ticks-dlq", False, opts.side_interval),
        write_topic(stock_tables(both, topics), opts, None, "stock-tables", stateful=True),
    ]


def stock_tables(both: DataFrame, topics: StockTopics) -> DataFrame:
    """Kafka rows of the tick and day-stats topics → (topic, key, value, partition) of all three
    tables, in one aggregation grouped by (symbol, partition, kind, bucket)."""
    from pyspark.sql import functions as F

    # One scan of the input: each Kafka row becomes the rows it counts in, by kind. A
    # union of per-kind selections would read and parse every record once per branch.
    parsed = parse_ticks(both, topics.exchanges)
    tick = (F.col("topic") == topics.ticks) & F.col("reason").isNull()
    trade = tick & F.col("t.last").isNotNull()
    is_day = F.col("topic") == topics.day_stats
    t = {name: F.col(f"t.{name}") for name, _ in _QUOTE_ONLY}
    none = {name: F.lit(None).cast(kind) for name, kind in _QUOTE_ONLY}
    minute = F.date_format(F.timestamp_millis("t.ts"), "yyyy-MM-dd'T'HH:mm")
    candidates = F.array(
        F.when(tick, _row(F.col("t.symbol"), QUOTE, F.lit(""), F.col("t.ts"), t)),
        F.when(is_day, _row(
            F.split(F.col("key").cast("string"), r"\|")[0], QUOTE, F.lit(""),
            F.lit(None).cast("bigint"), none,
            day=F.from_json(F.col("value").cast("string"), _DAY_TYPE),
        )),
        F.when(trade, _row(F.col("t.symbol"), DAY, F.substring(minute, 1, 10), F.col("t.ts"), none,
                           price=F.col("t.last"), size=F.col("t.last_size"))),
        F.when(trade, _row(F.col("t.symbol"), BAR, minute, F.col("t.ts"), none,
                           price=F.col("t.last"), size=F.col("t.last_size"))),
    )  # fmt: skip
    rows = (
        parsed.select("partition", F.explode(candidates).alias("r"))
        .where("r IS NOT NULL")
        .select("partition", "r.*")
    )
    agg = rows.groupBy("symbol", "partition", "kind", "bucket").agg(
        *_quote_aggregates(topics.exchanges), *_trade_aggregates()
    )
    kind = F.col("kind")
    best_bid, best_ask = _best_sql(topics.exchanges)
    out = agg.where((kind != QUOTE) | F.col("updated_at").isNotNull())
    # Best bid and ask once per row, in a projection of their own: the quote reads each thrice.
    out = out.select("*", F.expr(best_bid).alias("bb"), F.expr(best_ask).alias("ba"))
    return out.select(
        F.when(kind == QUOTE, topics.quotes)
        .when(kind == DAY, topics.day_stats)
        .otherwise(topics.bars)
        .alias("topic"),
        F.when(kind == QUOTE, F.col("symbol"))
        .otherwise(F.concat_ws("|", "symbol", "bucket"))
        .alias("key"),
        F.when(kind == QUOTE, F.to_json(F.expr(_quote_sql(topics.exchanges)), _KEEP_NULLS))
        .when(kind == DAY, F.to_json(_day_value()))
        .otherwise(F.to_json(_bar_value()))
        .alias("value"),
        "partition",
    )


def _row(
    symbol: Column, kind: str, bucket: Column, ts: Column, quote: dict[str, Column],
    day: Column | None = None, price: Column | None = None, size: Column | None = None,
) -> Column:  # fmt: skip
    """One row of the aggregation's input; every kind has the same fields, null where unused."""
    from pyspark.sql import functions as F

    return F.struct(
        symbol.alias("symbol"), F.lit(kind).alias("kind"), bucket.alias("bucket"),
        ts.alias("ts"), F.col("offset"), *(c.alias(name) for name, c in quote.items()),
        (day if day is not None else F.lit(None).cast(_DAY_TYPE)).alias("day"),
        (price if price is not None else F.lit(None).cast("double")).alias("price"),
        (size if size is not None else F.lit(None).cast("bigint")).alias("size"),
    )  # fmt: skip


def _quote_aggregates(exchanges: Sequence[str]) -> list[Column]:
    """Per symbol: the latest quote of each exchange, the last trade, the latest day's stats.

    Null on trade rows (their quote columns are null), so day and bar groups carry
    nothing of these but ``updated_at``."""
    from pyspark.sql import functions as F

    def latest_quote(exchange: str) -> Column:
        quote = F.struct("ts", "offset", "bid", "ask", "bid_size", "ask_size")
        return F.max(F.when(F.col("exchange") == exchange, quote)).alias(f"q_{exchange}")

    return [
        *(latest_quote(e) for e in exchanges),
        F.max(F.when(F.col("last").isNotNull(),
                     F.struct("ts", "offset", "last", "last_size", "exchange"))).alias("trade"),
        F.max("ts").alias("updated_at"),
        # The latest date's statistics: (date, trades) grows with every update of a day.
        F.max(F.when(F.col("day").isNotNull(),
                     F.struct(F.col("day.date").alias("d"), F.col("day.trades").alias("n"),
                              F.col("day").alias("day")))).alias("latest_day"),
    ]  # fmt: skip


def _trade_aggregates() -> list[Column]:
    """OHLC, volume, VWAP and count of trades per group; open/close by (ts, offset).

    Only trade rows have a ``price``: quote groups get nulls and a count of 0."""
    from pyspark.sql import functions as F

    order = F.when(F.col("price").isNotNull(), F.struct("ts", "offset", "price"))
    return [
        F.min(order)["price"].alias("open"),
        F.max("price").alias("high"),
        F.min("price").alias("low"),
        F.max(order)["price"].alias("close"),
        F.sum("size").alias("volume"),
        F.sum(F.col("price") * F.col("size")).alias("notional"),
        F.count("price").alias("trades"),
    ]


def _day_value() -> Column:
    from pyspark.sql import functions as F

    return F.struct(
        "symbol", F.col("bucket").alias("date"), "open", "high", "low", "volume",
        (F.col("notional") / F.col("volume")).alias("vwap"), "trades",
    )  # fmt: skip


def _bar_value() -> Column:
    from pyspark.sql import functions as F

    return F.struct(
        "symbol", F.concat("bucket", F.lit(":00Z")).alias("start"), "open", "high", "low",
        "close", "volume", (F.col("notional") / F.col("volume")).alias("vwap"), "trades",
    )  # fmt: skip


_KEEP_NULLS = {"ignoreNullFields": "false"}  # "last": null, not a missing field
# What only quote rows from ticks carry (null on day and trade rows).
_QUOTE_ONLY = (
    ("exchange", "string"), ("bid", "double"), ("ask", "double"), ("bid_size", "bigint"),
    ("ask_size", "bigint"), ("last", "double"), ("last_size", "bigint"),
)  # fmt: skip
_DAY_TYPE = (
    "STRUCT<symbol: STRING, date: STRING, open: DOUBLE, high: DOUBLE, low: DOUBLE, "
    "volume: BIGINT, vwap: DOUBLE, trades: BIGINT>"
)


def _best_sql(exchanges: Sequence[str]) -> tuple[str, str]:
    """The best bid and ask over the exchanges' latest quotes, without sorting an array.

    ``least`` over structs compares field by field and skips nulls: the highest bid
    (smallest negated), then the largest size, then the exchange name, as the contract says."""

    def candidates(side: str, sign: str) -> str:
        return ", ".join(
            f"CASE WHEN q_{e} IS NOT NULL THEN named_struct('o', {sign}q_{e}.{side}, "
            f"'s', -q_{e}.{side}_size, 'exchange', '{e}', 'price', q_{e}.{side}, "
            f"'size', q_{e}.{side}_size) END"
            for e in exchanges
        )

    return f"least({candidates('bid', '-')})", f"least({candidates('ask', '')})"


def _quote_sql(exchanges: Sequence[str]) -> str:
    """The served quote: per-exchange quotes, best bid and ask (columns ``bb`` and ``ba``,
    see :func:`_best_sql`), last trade, the day."""
    entries = ", ".join(
        f"CASE WHEN q_{e} IS NOT NULL THEN struct('{e}', named_struct('bid', q_{e}.bid, "
        f"'ask', q_{e}.ask, 'bid_size', q_{e}.bid_size, 'ask_size', q_{e}.ask_size, "
        f"'ts', q_{e}.ts)) END"
        for e in exchanges
    )
    return f"""named_struct(
      'symbol', symbol,
      'exchanges', map_from_entries(array_compact(array({entries}))),
      'best_bid', named_struct('price', bb.price, 'size', bb.size, 'exchange', bb.exchange),
      'best_ask', named_struct('price', ba.price, 'size', ba.size, 'exchange', ba.exchange),
      'last', CASE WHEN trade IS NULL THEN NULL ELSE named_struct('price', trade.last,
              'size', trade.last_size, 'exchange', trade.exchange, 'ts', trade.ts) END,
      'day', CASE WHEN latest_day IS NULL THEN NULL ELSE named_struct(
              'date', latest_day.day.date, 'open', latest_day.day.open,
              'high', latest_day.day.high, 'low', latest_day.day.low,
              'volume', latest_day.day.volume, 'vwap', latest_day.day.vwap,
              'trades', latest_day.day.trades) END,
      'updated_at', updated_at
    )"""
