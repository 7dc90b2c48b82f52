"""The one aggregation behind the three stock tables, on rows shaped like the Kafka source's.

The frames are what the stock pipeline's ``ctx.read`` and ``ctx.write_tables`` build
(``kiq.pipelines.records`` and ``kiq.pipelines.tables``), on a static input.
"""

from __future__ import annotations

import json

import pytest

from kiq.apps.stocks.pipeline import KEY_SEP, StockTopics, stock_rows
from kiq.apps.stocks.ticks import TICK_SCHEMA, tick_rules
from kiq.pipelines.records import dead_letters, good_records, parse_records
from kiq.pipelines.tables import (
    WINDOW_PARTS,
    TableOutput,
    letters_records,
    table_records,
    with_window_parts,
)

pytestmark = pytest.mark.spark

T = StockTopics()
MIDNIGHT = 1795305600000  # 2026-11-22T00:00:00Z
# Windowed keys: SYMBOL|START|END, ISO 8601 UTC to the millisecond.
DAY_21 = "2026-11-21T00:00:00.000Z|2026-11-22T00:00:00.000Z"
DAY_22 = "2026-11-22T00:00:00.000Z|2026-11-23T00:00:00.000Z"
MIN_2359 = "2026-11-21T23:59:00.000Z|2026-11-22T00:00:00.000Z"
MIN_0000 = "2026-11-22T00:00:00.000Z|2026-11-22T00:01:00.000Z"


def _tables(parsed, topics: StockTopics):
    """As the pipeline's ``ctx.write_tables`` writes them: days and bars windowed by the
    rows' ``window`` column, each table its own value column."""
    windowed = ("symbol", *WINDOW_PARTS)
    outputs = [
        TableOutput(topics.quotes, topics.quotes, ("symbol",), KEY_SEP, "quote"),
        TableOutput(topics.day_stats, topics.day_stats, windowed, KEY_SEP, "day", None),
        TableOutput(topics.bars, topics.bars, windowed, KEY_SEP, "bar"),
    ]
    rows = with_window_parts(stock_rows(good_records(parsed), topics), "stock-bars-1m", "window")
    return table_records(rows, outputs, "stock-tables-dlq", "table", "partition")


def stock_outputs(raw, topics: StockTopics):
    """What the pipeline's one query writes: the tables' records and the dead letters."""
    parsed = parse_records(raw, TICK_SCHEMA, tick_rules(topics.exchanges))
    letters = letters_records(dead_letters(parsed), topics.dead_letters)
    return _tables(parsed, topics).unionByName(letters)


def stock_tables(raw, topics: StockTopics):
    """The tables' records alone, key and value as text."""
    out = _tables(parse_records(raw, TICK_SCHEMA, tick_rules(topics.exchanges)), topics)
    return out.selectExpr(
        "topic", "CAST(key AS STRING) key", "CAST(value AS STRING) value", "partition"
    )


def tick(exchange: str, ts: int, bid: float, ask: float, size: int = 100, last=None) -> bytes:
    return json.dumps(
        {
            "symbol": "AAPL",
            "exchange": exchange,
            "ts": ts,
            "bid": bid,
            "ask": ask,
            "bid_size": size,
            "ask_size": size,
            "last": last,
            "last_size": 5 if last else None,
        }
    ).encode()


def test_three_tables_from_one_scan(spark):
    rows = [
        (b"AAPL", tick("NYSE", MIDNIGHT + 1000, 10.0, 10.2, last=10.1), T.ticks, 3, 1),
        (b"AAPL", tick("IEX", MIDNIGHT + 2000, 10.0, 10.2, size=300), T.ticks, 3, 2),
        (b"AAPL", tick("ARCA", MIDNIGHT - 1000, 9.0, 9.5, last=9.2), T.ticks, 3, 3),
        (b"AAPL", b"not json", T.ticks, 3, 4),
    ]
    raw = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long"
    )
    frame = stock_tables(raw, T)
    plan = frame._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("LogicalRDD") == 1, "every kind of row comes from one read of the input"

    out = {(r.topic, r.key): (r.partition, json.loads(r.value)) for r in frame.collect()}
    assert all(partition == 3 for partition, _ in out.values())
    assert sorted(out) == sorted(
        [
            (T.quotes, "AAPL"),
            (T.day_stats, f"AAPL|{DAY_21}"),
            (T.day_stats, f"AAPL|{DAY_22}"),
            (T.bars, f"AAPL|{MIN_2359}"),
            (T.bars, f"AAPL|{MIN_0000}"),
        ]
    )
    quote = out[(T.quotes, "AAPL")][1]
    # Equal bids: the larger size wins, then the exchange name; asks likewise.
    assert quote["best_bid"] == {"price": 10.0, "size": 300, "exchange": "IEX"}
    assert quote["best_ask"] == {"price": 9.5, "size": 100, "exchange": "ARCA"}
    assert sorted(quote["exchanges"]) == ["ARCA", "IEX", "NYSE"]
    assert quote["last"] == {"price": 10.1, "size": 5, "exchange": "NYSE", "ts": MIDNIGHT + 1000}
    assert quote["updated_at"] == MIDNIGHT + 2000
    assert "day" not in quote, "the API adds the day's statistics at lookup"
    today = out[(T.day_stats, f"AAPL|{DAY_22}")][1]
    assert (today["open"], today["trades"], today["vwap"]) == (10.1, 1, 10.1)
    assert today == {
        "symbol": "AAPL",
        "date": "2026-11-22",
        "open": 10.1,
        "high": 10.1,
        "low": 10.1,
        "volume": 5,
        "vwap": 10.1,
        "trades": 1,
    }, "the day's value as before the table was windowed"
    assert out[(T.bars, f"AAPL|{MIN_2359}")][1] == {
        "symbol": "AAPL",
        "start": "2026-11-21T23:59:00Z",
        "open": 9.2,
        "high": 9.2,
        "low": 9.2,
        "close": 9.2,
        "volume": 5,
        "vwap": 9.2,
        "trades": 1,
    }


def test_dead_letters_leave_with_the_tables(spark):
    rows = [
        (b"AAPL", tick("NYSE", MIDNIGHT + 1000, 10.0, 10.2, last=10.1), T.ticks, 3, 1),
        (b"AAPL", b"not json", T.ticks, 3, 2),
        (b"MSFT", tick("NYSE", MIDNIGHT + 3000, 10.0, 10.2), T.ticks, 3, 3),
    ]
    raw = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long"
    )
    out = stock_outputs(raw, T).collect()
    letters = sorted((r for r in out if r.topic == T.dead_letters), key=lambda r: r.value)
    assert [bytes(r.value) for r in letters] == [b"not json", rows[2][1]]
    headers = [{h.key: bytes(h.value).decode() for h in r.headers} for r in letters]
    assert [h["kiq.reason"] for h in headers] == [
        "not JSON, or a field of the wrong type",
        "key is not the symbol",
    ]
    assert [h["kiq.source.offset"] for h in headers] == ["2", "3"]
    assert all(r.partition is None for r in letters), "the producer picks the partition"
    tables = [r for r in out if r.topic != T.dead_letters]
    assert sorted((r.topic, bytes(r.key).decode()) for r in tables) == sorted(
        [
            (T.quotes, "AAPL"),
            (T.day_stats, f"AAPL|{DAY_22}"),
            (T.bars, f"AAPL|{MIN_0000}"),
        ]
    )
    assert all(r.headers is None and r.partition == 3 for r in tables)
