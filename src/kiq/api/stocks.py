"""The stock-price API (seed 000) on top of the stock pipeline's tables.

GET /v1/stocks/{symbol}            the quote: per-exchange quotes, best bid/ask, last, day
GET /v1/stocks?symbols=A,B,...     many quotes at once (up to 500)
GET /v1/stocks/{symbol}/bars       one-minute bars in time order (?from=&to=, ISO 8601)

Enabled on a node that serves the tables ``stock-quotes``, ``stock-day-stats`` and
``stock-bars-1m`` (the last two with ``sep=|``). A quote lookup is a table lookup,
with the same routing, fallbacks and headers; the quote's ``day`` is added then,
from ``stock-day-stats``: the statistics of the UTC date of its last trade. The
pipeline could write them into the quote only by reading its own day statistics
back, which doubled the partitions each batch reads and the time a tick takes to
be seen; here they are one more lookup, in the quote's own partition.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from kiq import catalog
from kiq.api.asgi import Send, header
from kiq.api.batches import MAX_RANGE_LIMIT, Batches, value_json
from kiq.api.errors import BadRequest, UnknownTable
from kiq.api.lookups import Lookups
from kiq.api.params import encode_cursor, int_param
from kiq.tables import TableRuntime

QUOTES = catalog.STOCK_QUOTES
DAY_STATS = catalog.STOCK_DAY_STATS
BARS = catalog.STOCK_BARS
MAX_SYMBOLS = 500
_SYMBOL = re.compile(r"[A-Z0-9.-]{1,12}")


def symbol_of(raw: str) -> str:
    """The normalised symbol (upper case), or a 400 that says what is allowed."""
    symbol = raw.strip().upper()
    if not _SYMBOL.fullmatch(symbol):
        raise BadRequest(f"symbol {raw!r} is not 1-12 of A-Z 0-9 . -", symbol=raw)
    return symbol


def minute_key(raw: str, name: str) -> str:
    """An ISO 8601 time (date, minute, seconds, offset or Z) as the bars' key suffix, UTC."""
    text = raw.strip().replace(" ", "T")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadRequest(f"{name} must be ISO 8601 (e.g. 2026-11-20T14:30Z), got {raw!r}") from exc
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M")


class Stocks:
    def __init__(
        self, tables: Mapping[str, TableRuntime], lookups: Lookups, batches: Batches
    ) -> None:
        self._tables = tables
        self.lookups = lookups
        self.batches = batches

    def _runtime(self, table: str) -> TableRuntime:
        runtime = self._tables.get(table)
        if runtime is None:
            raise UnknownTable(
                f"this cluster does not serve {table}: run the stock pipeline "
                f"and serve --table {table}=...",
                table=table,
            )
        return runtime

    async def quote(self, scope: dict[str, Any], send: Send, raw_symbol: str) -> None:
        self._runtime(QUOTES)
        symbol = symbol_of(raw_symbol)
        auth = header(scope, b"authorization")

        async def with_day(value: bytes) -> bytes:
            quote = orjson.loads(value)
            await self._add_days([quote], auth)
            return orjson.dumps(quote)

        await self.lookups.get(scope, send, QUOTES, symbol.encode(), with_day)

    async def quotes(self, params: dict[str, str], auth: str | None) -> bytes:
        runtime = self._runtime(QUOTES)
        raw = [s for s in params.get("symbols", "").split(",") if s.strip()]
        if not raw:
            raise BadRequest("give symbols=AAPL,MSFT,...")
        if len(raw) > MAX_SYMBOLS:
            raise BadRequest(f"at most {MAX_SYMBOLS} symbols", count=len(raw))
        symbols = list(dict.fromkeys(symbol_of(s) for s in raw))
        found, missing, unavailable = await self.batches.get_many(runtime, symbols, auth)
        quotes = _parsed(found)
        await self._add_days(quotes.values(), auth)
        out: dict[str, Any] = {"quotes": quotes, "missing": missing}
        if unavailable:
            out["unavailable"] = unavailable
        return orjson.dumps(out)

    async def _add_days(self, quotes: Iterable[dict[str, Any]], auth: str | None) -> None:
        """Each quote's ``day``: its symbol's statistics for the UTC date of its last trade, or
        null before a first trade (or where this cluster does not serve ``stock-day-stats``)."""
        wanted: dict[str, list[dict[str, Any]]] = {}
        for quote in quotes:
            quote["day"] = None
            last = quote.get("last")
            if last:
                date = time.strftime("%Y-%m-%d", time.gmtime(last["ts"] // 1000))
                wanted.setdefault(f"{quote['symbol']}|{date}", []).append(quote)
        runtime = self._tables.get(DAY_STATS)
        if not wanted or runtime is None:
            return
        found, _, _ = await self.batches.get_many(runtime, list(wanted), auth)
        for key, stats in _parsed(found).items():
            stats.pop("symbol", None)
            for quote in wanted[key]:
                quote["day"] = stats

    async def bars(self, raw_symbol: str, params: dict[str, str], auth: str | None) -> bytes:
        runtime = self._runtime(BARS)
        symbol = symbol_of(raw_symbol)
        prefix = f"{symbol}|"
        start = prefix + minute_key(params["from"], "from") if params.get("from") else None
        end = prefix + minute_key(params["to"], "to") if params.get("to") else None
        limit = int_param(params, "limit", 1, MAX_RANGE_LIMIT) or MAX_RANGE_LIMIT
        items, last_key = await self.batches.scan(
            runtime,
            prefix=prefix.encode(),
            start=start.encode() if start else None,
            end=end.encode() if end else None,
            cursor=params.get("cursor"),
            limit=limit,
            auth=auth,
        )
        return orjson.dumps(
            {
                "symbol": symbol,
                "bars": [value_json(runtime, value) for _, value in items],
                "next_cursor": encode_cursor(last_key) if last_key is not None else None,
            }
        )


def _parsed(found: dict[str, bytes]) -> dict[str, Any]:
    """Values as ``get_many`` gives them (the stored JSON) → parsed, for the stock routes to
    add to them."""
    return {key: orjson.loads(value) for key, value in found.items()}
