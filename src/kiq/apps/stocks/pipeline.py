"""The stock pipeline: ticks → quotes, day statistics and one-minute bars.

Built only on kiq's public pipeline API, as any application's pipeline would be.
One streaming query over the Kafka input, with its own checkpoint, named
``stock-tables``: one aggregation derives all three tables (``ctx.write_tables``:
each row names its table), and invalid ticks go to the dead-letter topic in the
same batches (``ctx.read`` with the tick contract), as they came, with the reason
in a header:

- ``stock-day-stats``: trades grouped by (symbol, UTC date), a windowed table (key
  ``SYMBOL|START|END``, the day's start and end) kept 7 days and ranked by ``volume``;
- ``stock-bars-1m``: trades grouped by (symbol, minute), a windowed table (key
  ``SYMBOL|START|END``, the minute's) kept 2 days;
- ``stock-quotes``: ticks grouped by symbol, key ``SYMBOL``;
- ``stock-ticks-dlq``: invalid ticks, key as they came.

In Real-Time Mode (``--trigger auto``, the default, or ``realtime``) the aggregation
runs as one long-running query whose tasks write each changed row as its tick arrives;
the dead letters then run beside it in a real-time query of their own,
``stock-ticks-dlq``, since Spark allows no union after an aggregation in that mode.
The aggregation needs nothing else from the mode: ``max``/``max_by`` over a packed
order, ``explode`` and projections are all operators Spark runs there.

Why one query rather than one per table: Spark does not chain aggregations in
update mode, but one aggregation can hold several kinds of groups. Each trade
becomes a day row and a bar row beside its quote row, grouped by (symbol, kind,
bucket). Every query costs a plan, tasks, offset and commit files and a state
store commit per batch whatever its size; on a small driver those fixed costs,
not the rows, were the batch time. The served quote's day statistics are added
when it is looked up (by the stock API): reading them back from the day-stats
topic here doubled the partitions every batch reads, and the batch time.

Day and bar rows carry their bucket as a window struct (start and end timestamps) for
``ctx.write_tables(..., window=)``: the windows come from the one aggregation's bucket, not
from a second, ``F.window``, aggregation.

Every "latest" is the greatest (ts, offset), packed in one long (see
ORDER_BASE_MS): the tick with the greatest timestamp wins whatever order ticks
arrive in, and a tie goes to the one later in the log, so replays give the same
answer. Composite
keys are written to their symbol's partition: the tick's own partition
(``partition="__partition"``, no hashing), since ticks are keyed by symbol with
Kafka's default partitioner and every topic of the pipeline has the input's
partition count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kiq.apps.stocks.ticks import TICK_SCHEMA, tick_rules

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from kiq import Context

# The application's names (kiq's catalog holds the same, for the API and the feeds).
DEFAULT_EXCHANGES = ("NYSE", "NASDAQ", "ARCA", "BATS", "IEX")
KEY_SEP = "|"

# The query's name, which is its checkpoint directory: renaming it starts it afresh.
TABLES_QUERY = "stock-tables"

# The kinds of groups in the one aggregation.
QUOTE, DAY, BAR = 0, 1, 2

# A tick's place in the "latest" order, (ts, offset), packed in one long: the
# milliseconds since ORDER_BASE_MS above OFFSET_BITS bits of the Kafka offset.
# Every aggregate then has a fixed-width buffer, which Spark keeps in a hash map;
# a struct order (the plain way to write "latest") made it sort every row, twice
# the CPU per tick. The contract bounds ``ts`` to 2000-2049 (TS_RANGE_MS), well
# inside the 2^40 ms either side of the base that fit. Offsets only break ties
# between ticks of one symbol and exchange with the same millisecond: those are
# a few records apart, and compare correctly unless a multiple of 2^23 lies
# between them.
ORDER_BASE_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
OFFSET_BITS = 23
MS_PER_MINUTE, MS_PER_DAY = 60_000, 86_400_000
# How long the windowed tables keep a window after the newest one of its partition ended.
DAY_RETENTION, BAR_RETENTION = "7 days", "2 days"


@dataclass(frozen=True)
class StockTopics:
    ticks: str = "stock-ticks"
    dead_letters: str = "stock-ticks-dlq"
    quotes: str = "stock-quotes"
    day_stats: str = "stock-day-stats"
    bars: str = "stock-bars-1m"
    exchanges: tuple[str, ...] = field(default=DEFAULT_EXCHANGES)


def build(ctx: Context, topics: StockTopics = StockTopics()) -> None:
    """Ticks in; quotes, day statistics and bars out, with the dead letters, as one query."""
    ticks = ctx.read(
        topics.ticks,
        TICK_SCHEMA,
        reject=tick_rules(topics.exchanges),
        dead_letters=topics.dead_letters,
    )
    days, bars = topics.day_stats, topics.bars
    ctx.write_tables(
        stock_rows(ticks, topics),
        table="table",
        key=dict.fromkeys((topics.quotes, days, bars), "symbol"),
        sep=KEY_SEP,
        value={topics.quotes: "quote", days: "day", bars: "bar"},
        window={days: "window", bars: "window"},
        retention={days: DAY_RETENTION, bars: BAR_RETENTION},
        rank_by={days: "volume"},
        index={days: ["volume"]},  # GET /v1/stocks?min_volume=N: a range of it
        partition="partition",
        query=TABLES_QUERY,
    )


def stock_rows(ticks: DataFrame, topics: StockTopics) -> DataFrame:
    """Valid ticks (``ctx.read``'s columns) → rows of all three tables, in one aggregation
    grouped by (symbol, partition, kind, bucket): ``table``, ``symbol``, the day or bar's
    ``window`` (start and end; null for a quote), each table's value (``quote`` and ``bar``
    as JSON text, ``day`` a struct, whose ``volume`` ranks it), null on the other tables'
    rows, and the input ``partition``."""
    from pyspark.sql import functions as F

    # One scan of the input: each Kafka row becomes the rows it counts in, by kind. A
    # union of per-kind selections would read and parse every record once per branch.
    trade = F.col("last").isNotNull()
    kinds = F.array(F.lit(QUOTE), F.when(trade, F.lit(DAY)), F.when(trade, F.lit(BAR)))
    exchanges = F.array(*map(F.lit, topics.exchanges))
    rows = ticks.select(
        "symbol",
        F.col("__partition").alias("partition"),
        F.explode(kinds).alias("kind"),
        "ts",
        _order("ts", "__offset").alias("order"),
        F.array_position(exchanges, F.col("exchange")).cast("int").alias("ex"),
        *_TICK_FIELDS,
    ).where("kind IS NOT NULL")
    kind = F.col("kind")
    bucket = (
        F.when(kind == DAY, F.expr(f"ts div {MS_PER_DAY}"))  # ts > 0: div is floor
        .when(kind == BAR, F.expr(f"ts div {MS_PER_MINUTE}"))
        .otherwise(F.lit(0).cast("bigint"))
    )
    agg = rows.groupBy("symbol", "partition", "kind", bucket.alias("bucket")).agg(
        *_quote_aggregates(topics.exchanges), *_trade_aggregates()
    )
    out = _unpack(agg, topics.exchanges).where((kind != QUOTE) | F.col("updated_at").isNotNull())
    best_bid, best_ask = _best_sql(topics.exchanges)
    # Best bid and ask once per row, in a projection of their own: the quote reads each thrice.
    out = out.select("*", F.expr(best_bid).alias("bb"), F.expr(best_ask).alias("ba"))
    return out.select(
        F.when(kind == QUOTE, topics.quotes)
        .when(kind == DAY, topics.day_stats)
        .otherwise(topics.bars)
        .alias("table"),
        "symbol",
        "window",
        F.when(kind == QUOTE, F.to_json(F.expr(_quote_sql(topics.exchanges)), _KEEP_NULLS)).alias(
            "quote"
        ),
        F.when(kind == DAY, _day_value()).alias("day"),  # written as JSON, nulls kept (none)
        F.when(kind == BAR, F.to_json(_bar_value())).alias("bar"),
        "partition",
    )


def _order(ts: str, offset: str) -> Column:
    """(ts, offset) as one long that sorts the same way (see ORDER_BASE_MS)."""
    from pyspark.sql import functions as F

    low = F.pmod(F.col(offset), F.lit(1 << OFFSET_BITS))
    return F.shiftleft(F.col(ts) - F.lit(ORDER_BASE_MS), OFFSET_BITS) + low


def _order_ts(order: Column) -> Column:
    from pyspark.sql import functions as F

    return F.shiftright(order, OFFSET_BITS) + F.lit(ORDER_BASE_MS)


def _quote_aggregates(exchanges: Sequence[str]) -> list[Column]:
    """Per symbol: the latest quote of each exchange, the last trade, the latest tick's time.

    Only quote rows count here: day and bar groups carry nulls."""
    from pyspark.sql import functions as F

    quote = F.col("kind") == QUOTE
    out = []
    for i, e in enumerate(exchanges, start=1):
        order = F.when(quote & (F.col("ex") == i), F.col("order"))
        out.append(F.max(order).alias(f"o_{e}"))
        out.extend(F.max_by(name, order).alias(f"{name}_{e}") for name in _QUOTE_FIELDS)
    traded = F.when(quote & F.col("last").isNotNull(), F.col("order"))
    out += [
        F.max(traded).alias("o_trade"),
        F.max_by("last", traded).alias("trade_last"),
        F.max_by("last_size", traded).alias("trade_size"),
        F.max_by("ex", traded).alias("trade_ex"),
        F.max(F.when(quote, F.col("ts"))).alias("updated_at"),
    ]
    return out


def _trade_aggregates() -> list[Column]:
    """OHLC, volume, VWAP and count of trades per day or bar group; open/close by order.

    Quote rows have no ``price``: quote groups get nulls and a count of 0."""
    from pyspark.sql import functions as F

    traded = F.col("kind") != QUOTE
    price = F.when(traded, F.col("last"))
    size = F.when(traded, F.col("last_size"))
    order = F.when(traded, F.col("order"))
    return [
        F.min_by(price, order).alias("open"),
        F.max(price).alias("high"),
        F.min(price).alias("low"),
        F.max_by(price, order).alias("close"),
        F.sum(size).alias("volume"),
        F.sum(price * size).alias("notional"),
        F.count(price).alias("trades"),
    ]


def _unpack(agg: DataFrame, exchanges: Sequence[str]) -> DataFrame:
    """The aggregates back into the shapes the values are written from: per-exchange quotes
    ``q_E``, the ``trade``, ``bucket`` as a date or minute string and the day or minute as
    a ``window`` struct (start and end timestamps)."""
    from pyspark.sql import functions as F

    def latest_quote(e: str) -> Column:
        fields = [F.col(f"{name}_{e}").alias(name) for name in _QUOTE_FIELDS]
        value = F.struct(_order_ts(F.col(f"o_{e}")).alias("ts"), *fields)
        return F.when(F.col(f"o_{e}").isNotNull(), value).alias(f"q_{e}")

    trade = F.struct(
        _order_ts(F.col("o_trade")).alias("ts"),
        F.col("trade_last").alias("last"),
        F.col("trade_size").alias("last_size"),
        F.element_at(F.array(*map(F.lit, exchanges)), F.col("trade_ex")).alias("exchange"),
    )

    def date(days: Column) -> Column:
        return F.date_format(F.date_from_unix_date(days.cast("int")), "yyyy-MM-dd")

    kind = F.col("kind")
    minute = F.timestamp_millis(F.col("bucket") * MS_PER_MINUTE)
    bucket = (
        F.when(kind == DAY, date(F.col("bucket")))
        .when(kind == BAR, F.date_format(minute, "yyyy-MM-dd'T'HH:mm"))
        .otherwise(F.lit(""))
    )

    def window(ms: int) -> Column:
        start = F.timestamp_millis(F.col("bucket") * ms)
        end = F.timestamp_millis((F.col("bucket") + 1) * ms)
        return F.struct(start.alias("start"), end.alias("end"))

    return agg.select(
        "symbol",
        "partition",
        "kind",
        bucket.alias("bucket"),
        F.when(kind == DAY, window(MS_PER_DAY))
        .when(kind == BAR, window(MS_PER_MINUTE))
        .alias("window"),
        *(latest_quote(e) for e in exchanges),
        F.when(F.col("o_trade").isNotNull(), trade).alias("trade"),
        "updated_at",
        "open",
        "high",
        "low",
        "close",
        "volume",
        "notional",
        "trades",
    )


def _day_value() -> Column:
    from pyspark.sql import functions as F

    return F.struct(
        "symbol",
        F.col("bucket").alias("date"),
        "open",
        "high",
        "low",
        "volume",
        (F.col("notional") / F.col("volume")).alias("vwap"),
        "trades",
    )


def _bar_value() -> Column:
    from pyspark.sql import functions as F

    return F.struct(
        "symbol",
        F.concat("bucket", F.lit(":00Z")).alias("start"),
        "open",
        "high",
        "low",
        "close",
        "volume",
        (F.col("notional") / F.col("volume")).alias("vwap"),
        "trades",
    )


_KEEP_NULLS = {"ignoreNullFields": "false"}  # "last": null, not a missing field
# The tick's fields every row of a tick carries.
_TICK_FIELDS = ("bid", "ask", "bid_size", "ask_size", "last", "last_size")
_QUOTE_FIELDS = ("bid", "ask", "bid_size", "ask_size")


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
    """The quote as stored: per-exchange quotes, best bid and ask (columns ``bb`` and ``ba``,
    see :func:`_best_sql`), last trade; the API adds the day's statistics."""
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
      'updated_at', updated_at
    )"""
