"""The stock-price API (seed 000) on top of the stock pipeline's tables.

GET /v1/stocks/{symbol}            the quote: per-exchange quotes, best bid/ask, last, day
GET /v1/stocks?symbols=A,B,...     many quotes at once (up to 500)
GET /v1/stocks/{symbol}/bars       one-minute bars in time order (?from=&to=, ISO 8601)

Enabled on a node that serves the tables ``stock-quotes`` and ``stock-bars-1m``
(the latter with ``sep=|``). A quote lookup is a table lookup, with the same
routing, fallbacks and headers.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson

from kiq.api.asgi import Send
from kiq.api.batches import MAX_RANGE_LIMIT, Batches
from kiq.api.errors import BadRequest, UnknownTable
from kiq.api.lookups import Lookups
from kiq.api.params import encode_cursor, int_param

QUOTES = "stock-quotes"
BARS = "stock-bars-1m"
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
    def __init__(self, lookups: Lookups, batches: Batches) -> None:
        self.lookups = lookups
        self.batches = batches
        self.node = lookups.node

    @property
    def enabled(self) -> bool:
        return QUOTES in self.node.tables

    def _runtime(self, table: str):
        runtime = self.node.tables.get(table)
        if runtime is None:
            raise UnknownTable(f"this cluster does not serve {table}: run the stock pipeline "
                               f"and serve --table {table}=...", table=table)  # fmt: skip
        return runtime

    async def quote(self, scope: dict[str, Any], send: Send, raw_symbol: str) -> None:
        self._runtime(QUOTES)
        symbol = symbol_of(raw_symbol)
        await self.lookups.get(scope, send, QUOTES, symbol.encode())

    async def quotes(self, params: dict[str, str], auth: str | None) -> bytes:
        runtime = self._runtime(QUOTES)
        raw = [s for s in params.get("symbols", "").split(",") if s.strip()]
        if not raw:
            raise BadRequest("give symbols=AAPL,MSFT,...")
        if len(raw) > MAX_SYMBOLS:
            raise BadRequest(f"at most {MAX_SYMBOLS} symbols", count=len(raw))
        symbols = list(dict.fromkeys(symbol_of(s) for s in raw))
        found, missing, unavailable = await self.batches.get_many(runtime, symbols, False, auth)
        out: dict[str, Any] = {"quotes": found, "missing": missing}
        if unavailable:
            out["unavailable"] = unavailable
        return orjson.dumps(out)

    async def bars(self, raw_symbol: str, params: dict[str, str], auth: str | None) -> bytes:
        runtime = self._runtime(BARS)
        symbol = symbol_of(raw_symbol)
        prefix = f"{symbol}|"
        start = prefix + minute_key(params["from"], "from") if params.get("from") else None
        end = prefix + minute_key(params["to"], "to") if params.get("to") else None
        limit = int_param(params, "limit", 1, MAX_RANGE_LIMIT) or MAX_RANGE_LIMIT
        items, last_key = await self.batches.scan(
            runtime, prefix=prefix.encode(), start=start.encode() if start else None,
            end=end.encode() if end else None, cursor=params.get("cursor"), limit=limit, auth=auth,
        )  # fmt: skip
        return orjson.dumps(
            {
                "symbol": symbol,
                "bars": [value for _, value in items],
                "next_cursor": encode_cursor(last_key) if last_key is not None else None,
            }
        )
