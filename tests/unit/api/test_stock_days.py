"""The quote's day: the statistics of its last trade's UTC date, added at lookup."""

from __future__ import annotations

import asyncio

import orjson

from kiq.api.stocks import DAY_STATS, Stocks

MIDNIGHT = 1795305600000  # 2026-11-22T00:00:00Z
DAY = {"symbol": "AAPL", "date": "2026-11-21", "open": 1.0, "high": 2.0, "low": 0.5,
       "volume": 10, "vwap": 1.5, "trades": 3}  # fmt: skip


class FakeBatches:
    """Holds day-stats values as the node's batches would return them (the stored JSON)."""

    def __init__(self, values: dict[str, dict]) -> None:
        self.values = values
        self.asked: list[list[str]] = []

    async def get_many(self, runtime, keys, auth):
        self.asked.append(keys)
        found = {k: orjson.dumps(self.values[k]) for k in keys if k in self.values}
        return found, [k for k in keys if k not in self.values], []


def stocks(batches: FakeBatches, serves_days: bool = True) -> Stocks:
    tables = {DAY_STATS: object()} if serves_days else {}
    return Stocks(tables, None, batches)  # type: ignore[arg-type]


def quote(symbol: str, last_ts: int | None) -> dict:
    last = {"price": 1.0, "size": 1, "exchange": "NYSE", "ts": last_ts} if last_ts else None
    return {"symbol": symbol, "last": last, "updated_at": MIDNIGHT}


def test_each_quote_gets_its_last_trades_date_in_one_batch():
    batches = FakeBatches({"AAPL|2026-11-21": DAY})
    quotes = [quote("AAPL", MIDNIGHT - 1), quote("MSFT", MIDNIGHT + 5), quote("NVDA", None)]
    asyncio.run(stocks(batches)._add_days(quotes, None))
    assert batches.asked == [["AAPL|2026-11-21", "MSFT|2026-11-22"]]
    assert quotes[0]["day"] == {k: v for k, v in DAY.items() if k != "symbol"}
    assert quotes[1]["day"] is None, "no statistics for that date yet"
    assert quotes[2]["day"] is None, "no trade yet"


def test_without_day_statistics_served_the_day_is_null():
    batches = FakeBatches({"AAPL|2026-11-21": DAY})
    quotes = [quote("AAPL", MIDNIGHT - 1)]
    asyncio.run(stocks(batches, serves_days=False)._add_days(quotes, None))
    assert quotes[0]["day"] is None and batches.asked == []
