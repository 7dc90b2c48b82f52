"""The quote's day: the statistics of its last trade's UTC date, added at lookup."""

from __future__ import annotations

import asyncio

import orjson

from kiq import Many
from kiq.apps.stocks.api import DAY_STATS, add_days
from kiq.tables import TableRuntime, codec_for, parse_table

MIDNIGHT = 1795305600000  # 2026-11-22T00:00:00Z
# The windowed day statistics' keys: SYMBOL|START|END
AAPL_21 = "AAPL|2026-11-21T00:00:00.000Z|2026-11-22T00:00:00.000Z"
MSFT_22 = "MSFT|2026-11-22T00:00:00.000Z|2026-11-23T00:00:00.000Z"
DAY = {
    "symbol": "AAPL",
    "date": "2026-11-21",
    "open": 1.0,
    "high": 2.0,
    "low": 0.5,
    "volume": 10,
    "vwap": 1.5,
    "trades": 3,
}


class FakeTables:
    """Holds day-stats values as the tables client would find them (the stored JSON)."""

    def __init__(self, values: dict[str, dict], serves_days: bool = True) -> None:
        self.values = values
        self.serves_days = serves_days
        self.asked: list[list[str]] = []

    def serves(self, table: str) -> bool:
        return self.serves_days and table == DAY_STATS

    async def get_many(self, table, keys):
        assert table == DAY_STATS
        self.asked.append(keys)
        found = {k: orjson.dumps(self.values[k]) for k in keys if k in self.values}
        spec = parse_table(f"{DAY_STATS}={DAY_STATS}")
        runtime = TableRuntime(spec, codec_for(spec), 1)
        return Many(runtime, found, [k for k in keys if k not in self.values], [])


def quote(symbol: str, last_ts: int | None) -> dict:
    last = {"price": 1.0, "size": 1, "exchange": "NYSE", "ts": last_ts} if last_ts else None
    return {"symbol": symbol, "last": last, "updated_at": MIDNIGHT}


def test_each_quote_gets_its_last_trades_date_in_one_batch():
    tables = FakeTables({AAPL_21: DAY})
    quotes = [quote("AAPL", MIDNIGHT - 1), quote("MSFT", MIDNIGHT + 5), quote("NVDA", None)]
    asyncio.run(add_days(quotes, tables))  # type: ignore[arg-type]
    assert tables.asked == [[AAPL_21, MSFT_22]]
    assert quotes[0]["day"] == {k: v for k, v in DAY.items() if k != "symbol"}
    assert quotes[1]["day"] is None, "no statistics for that date yet"
    assert quotes[2]["day"] is None, "no trade yet"


def test_without_day_statistics_served_the_day_is_null():
    tables = FakeTables({AAPL_21: DAY}, serves_days=False)
    quotes = [quote("AAPL", MIDNIGHT - 1)]
    asyncio.run(add_days(quotes, tables))  # type: ignore[arg-type]
    assert quotes[0]["day"] is None and tables.asked == []


def test_bar_times_at_the_ends_of_time_are_a_400_not_a_500():
    import pytest

    from kiq import BadRequest
    from kiq.apps.stocks.api import minute_key

    assert minute_key("2026-11-20T14:30+01:00", "from") == "2026-11-20T13:30"
    for raw in ["0001-01-01T00:00+14:00", "9999-12-31T23:59-14:00", "yesterday"]:
        with pytest.raises(BadRequest):
            minute_key(raw, "from")
