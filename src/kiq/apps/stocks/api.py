"""The stock-price API (seed 000) on top of the stock pipeline's tables.

GET /v1/stocks/{symbol}            the quote: per-exchange quotes, best bid/ask, last, day
GET /v1/stocks?symbols=A,B,...     many quotes at once (up to 500)
GET /v1/stocks?exchange=X&min_volume=N  today's symbols with at least N traded, most first,
                                   quoted on X (the day statistics' index on ``volume``)
GET /v1/stocks/{symbol}/bars       one-minute bars in time order (?from=&to=, ISO 8601)
GET /v1/stocks/top?by=volume&n=10  the most traded symbols today (UTC)
GET /v1/stocks/{symbol}/stream     the quote, then each change of it (Server-Sent Events)
GET /v1/stocks/stream?symbols=A,B  many quotes' changes in one stream (up to 100)

Answers where the cluster serves the tables ``stock-quotes``, ``stock-day-stats`` and
``stock-bars-1m`` (the last two windowed tables, keys ``SYMBOL|START|END``, the day
statistics ranked by ``volume``). A quote is a table lookup, with the same routing,
fallbacks and headers; the quote's ``day`` is added then, from ``stock-day-stats``: the
statistics of the UTC date of its last trade. Bars are one symbol's windows
(``Tables.windows``); the top is the ranked day statistics within today's window
(``Tables.top(..., window=)``); the screen reads the day statistics' index on ``volume``
(``Tables.by``), highest first, and keeps today's. The pipeline
could write them into the quote only by reading its own day statistics back, which
doubled the partitions each batch reads and the time a tick takes to be seen; here
they are one more lookup, in the quote's own partition.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from kiq import (
    MAX_RANGE_LIMIT,
    BadRequest,
    Change,
    Reply,
    Request,
    Routes,
    ServerEvent,
    Tables,
    UnknownTable,
    Watch,
    event_stream,
    json_reply,
)

QUOTES = "stock-quotes"
DAY_STATS = "stock-day-stats"
BARS = "stock-bars-1m"
MAX_SYMBOLS = 500
MAX_STREAM_SYMBOLS = 100
MAX_TOP = 1000
SCREEN_READS = 8  # index pages one screen request reads at most
TOP_BY = ("volume",)  # what the day statistics are ranked by (the pipeline's rank_by)
_SYMBOL = re.compile(r"[A-Z0-9.-]{1,12}")
_EXCHANGE = re.compile(r"[A-Za-z0-9_-]{1,20}")


def routes(app: Routes) -> None:
    app.get("/v1/stocks", quotes, QUOTES_DOC)
    app.get("/v1/stocks/", quote, NO_SYMBOL_DOC)  # the quote's 400 says what a symbol is
    app.get("/v1/stocks/top", top, TOP_DOC)  # before {symbol}, which would take "top"
    app.get("/v1/stocks/stream", streams, STREAMS_DOC)  # before {symbol}, as top
    app.get("/v1/stocks/{symbol}", quote, QUOTE_DOC)
    app.get("/v1/stocks/{symbol}/bars", bars, BARS_DOC)
    app.get("/v1/stocks/{symbol}/stream", stream, STREAM_DOC)


# -- the routes' OpenAPI operations (GET /openapi.json) ------------------------------------

_ERROR = {"$ref": "#/components/schemas/Error"}
_TEXT = {"type": "string"}
_NUMBER = {"type": "number"}
# Any ISO 8601 time is taken (a date alone, minutes, no offset); date-time is the usual one.
_TIME = {"type": "string", "format": "date-time"}


def _errors(*statuses: int) -> dict[str, Any]:
    texts = {
        400: "a malformed symbol or parameter",
        404: "unknown symbol, or the cluster does not serve the stock tables",
        503: "no replica could answer; retry shortly",
    }
    return {
        str(s): {"description": texts[s], "content": {"application/json": {"schema": _ERROR}}}
        for s in statuses
    }


def _ok(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_SYMBOL_PARAM = {
    "name": "symbol",
    "in": "path",
    "required": True,
    "description": "case-insensitive, [A-Z0-9.-]{1,12}",
    "schema": {"type": "string", "minLength": 1},
}
_QUOTE = {
    "type": "object",
    "required": ["symbol", "exchanges", "day"],
    "properties": {
        "symbol": _TEXT,
        "exchanges": {"type": "object", "additionalProperties": {"type": "object"}},
        "best_bid": {"type": ["object", "null"]},
        "best_ask": {"type": ["object", "null"]},
        "last": {"type": ["object", "null"]},
        "day": {"type": ["object", "null"], "description": "the last trade's UTC date"},
        "updated_at": {},
    },
}
QUOTE_DOC = {
    "summary": "One symbol's quote: per exchange, best bid and ask, last trade, day",
    "tags": ["stocks"],
    "parameters": [_SYMBOL_PARAM],
    "responses": {"200": _ok("the quote (X-Kiq-* headers as a lookup)", _QUOTE)}
    | _errors(400, 404, 503),
}
NO_SYMBOL_DOC = {
    "summary": "No symbol: says what one looks like",
    "tags": ["stocks"],
    "responses": _errors(400, 404),
}
QUOTES_DOC = {
    "summary": f"Many quotes at once (up to {MAX_SYMBOLS})",
    "tags": ["stocks"],
    "description": "With exchange and/or min_volume instead of symbols: today's (UTC) symbols "
    "with at least min_volume traded, most first, quoted on exchange when given "
    '({"date", "exchange", "min_volume", "stocks": [day statistics], "next_cursor"}), '
    "read through the day statistics' index on volume.",
    "parameters": [
        {
            "name": "symbols",
            "in": "query",
            "description": "AAPL,MSFT,...",
            "schema": _TEXT,
        },
        *(
            {"name": name, "in": "query", "description": text, "schema": schema}
            for name, text, schema in [
                ("exchange", "the screen: only symbols quoted on this exchange", _TEXT),
                ("min_volume", "the screen: today's volume at least this", _NUMBER),
                ("limit", f"the screen: stocks per page [100], at most {MAX_SYMBOLS}", _NUMBER),
                ("cursor", "the screen: next_cursor of the previous page", _TEXT),
            ]
        ),
    ],
    "responses": {
        "200": _ok(
            "the quotes found, and the symbols not; or the screen's page",
            {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["quotes", "missing"],
                        "properties": {
                            "quotes": {"type": "object", "additionalProperties": _QUOTE},
                            "missing": {"type": "array", "items": _TEXT},
                            "unavailable": {"type": "array", "items": _TEXT},
                        },
                    },
                    {
                        "type": "object",
                        "required": ["date", "stocks", "next_cursor"],
                        "properties": {
                            "date": _TEXT,
                            "exchange": {"type": ["string", "null"]},
                            "min_volume": _NUMBER,
                            "stocks": {"type": "array", "items": {"type": "object"}},
                            "next_cursor": {"type": ["string", "null"]},
                        },
                    },
                ]
            },
        )
    }
    | _errors(400, 404),
}
_BAR = {
    "type": "object",
    "properties": {"open": _NUMBER, "high": _NUMBER, "low": _NUMBER, "close": _NUMBER},
}
BARS_DOC = {
    "summary": "One-minute bars in time order, a page at a time",
    "tags": ["stocks"],
    "parameters": [
        _SYMBOL_PARAM,
        *(
            {"name": name, "in": "query", "description": text, "schema": schema}
            for name, text, schema in [
                ("from", "ISO 8601, inclusive (UTC unless an offset is given)", _TIME),
                ("to", "ISO 8601, exclusive", _TIME),
                ("cursor", "next_cursor of the previous page", _TEXT),
            ]
        ),
        {
            "name": "limit",
            "in": "query",
            "description": f"bars per page [{MAX_RANGE_LIMIT}]",
            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_RANGE_LIMIT},
        },
    ],
    "responses": {
        "200": _ok(
            "bars and where to go on",
            {
                "type": "object",
                "required": ["symbol", "bars", "next_cursor"],
                "properties": {
                    "symbol": _TEXT,
                    "bars": {"type": "array", "items": _BAR},
                    "next_cursor": {"type": ["string", "null"]},
                },
            },
        )
    }
    | _errors(400, 404, 503),
}

_EVENTS = {
    "description": "text/event-stream: event quote (data: the quote, as GET /v1/stocks/{symbol} "
    "answers it, day included) at first and on each change of the quote or of its day "
    "statistics; absent or delete (data: {symbol}); id: resumes with Last-Event-ID",
    "content": {"text/event-stream": {"schema": _TEXT}},
}
STREAM_DOC = {
    "summary": "The quote, then each change of it, as Server-Sent Events",
    "tags": ["stocks"],
    "parameters": [_SYMBOL_PARAM],
    "responses": {"200": _EVENTS} | _errors(400, 404, 503),
}
STREAMS_DOC = {
    "summary": "Many symbols' quotes and their changes in one stream of Server-Sent Events",
    "tags": ["stocks"],
    "parameters": [
        {
            "name": "symbols",
            "in": "query",
            "required": True,
            "description": f"comma-separated, at most {MAX_STREAM_SYMBOLS}",
            "schema": _TEXT,
        }
    ],
    "responses": {"200": _EVENTS} | _errors(400, 404, 503),
}


_DAY = {
    "type": "object",
    "required": ["symbol", "date", "volume"],
    "properties": {
        "symbol": _TEXT,
        "date": {"type": "string", "format": "date"},
        "open": _NUMBER,
        "high": _NUMBER,
        "low": _NUMBER,
        "volume": _NUMBER,
        "vwap": _NUMBER,
        "trades": {"type": "integer"},
    },
}
TOP_DOC = {
    "summary": "The most traded symbols today (UTC), across every partition",
    "tags": ["stocks"],
    "parameters": [
        {
            "name": "by",
            "in": "query",
            "description": "what to rank by [volume]; only volume",
            "schema": {"type": "string", "enum": list(TOP_BY), "default": TOP_BY[0]},
        },
        {
            "name": "n",
            "in": "query",
            "description": "how many symbols [10]",
            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TOP, "default": 10},
        },
    ],
    "responses": {
        "200": _ok(
            "today's statistics of the n most traded symbols, highest volume first, ties by symbol",
            {
                "type": "object",
                "required": ["date", "by", "stocks"],
                "properties": {
                    "date": {"type": "string", "format": "date"},
                    "by": _TEXT,
                    "stocks": {"type": "array", "items": _DAY},
                },
            },
        )
    }
    | _errors(400, 404, 503),
}


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
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC)  # overflows a day from either end of time
    except (ValueError, OverflowError) as exc:
        raise BadRequest(f"{name} must be ISO 8601 (e.g. 2026-11-20T14:30Z), got {raw!r}") from exc
    return moment.strftime("%Y-%m-%dT%H:%M")


def _served(tables: Tables, table: str) -> None:
    if not tables.serves(table):
        raise UnknownTable(
            f"this cluster does not serve {table}: run the stock pipeline "
            f"and serve --table {table}=...",
            table=table,
        )


async def quote(request: Request) -> Reply:
    tables = request.tables
    _served(tables, QUOTES)
    symbol = symbol_of(request.path_params.get("symbol", ""))

    async def with_day(found: dict[str, Any]) -> dict[str, Any]:
        await add_days([found], tables)
        return found

    return request.lookup(QUOTES, symbol, enrich=with_day)


async def quotes(request: Request) -> Reply:
    tables = request.tables
    _served(tables, QUOTES)
    params = request.query
    if "symbols" not in params and ("exchange" in params or "min_volume" in params):
        return await screen(request)
    raw = [s for s in params.get("symbols", "").split(",") if s.strip()]
    if not raw:
        raise BadRequest("give symbols=AAPL,MSFT,... (or exchange=X&min_volume=N)")
    if len(raw) > MAX_SYMBOLS:
        raise BadRequest(f"at most {MAX_SYMBOLS} symbols", count=len(raw))
    symbols = list(dict.fromkeys(symbol_of(s) for s in raw))
    many = await tables.get_many(QUOTES, symbols)
    found = many.parsed()
    await add_days(found.values(), tables)
    out: dict[str, Any] = {"quotes": found, "missing": many.missing}
    if many.unavailable:
        out["unavailable"] = many.unavailable
    return json_reply(out)


async def screen(request: Request) -> Reply:
    """Today's (UTC) symbols with a volume of at least ``min_volume``, most traded first,
    and only those quoted on ``exchange`` when given: the day statistics' index on
    ``volume`` read from the top down, today's kept, a page of ``limit`` at a time
    (``next_cursor`` goes on). At most ``SCREEN_READS`` index pages are read per request,
    so a page may come back short with a cursor to go on from."""
    tables = request.tables
    _served(tables, DAY_STATS)
    params = request.query
    exchange = params.get("exchange") or None
    if exchange is not None and not _EXCHANGE.fullmatch(exchange):
        raise BadRequest("exchange is an exchange's name, such as NYSE", exchange=exchange[:40])
    try:
        min_volume = float(params.get("min_volume") or 0)
    except ValueError:
        min_volume = math.nan
    if not math.isfinite(min_volume):
        raise BadRequest("min_volume must be a number", min_volume=params["min_volume"][:40])
    limit = request.int_param("limit", 1, MAX_SYMBOLS) or 100
    today = time.strftime("%Y-%m-%d", time.gmtime())
    cursor = params.get("cursor")
    found: list[dict[str, Any]] = []
    for _ in range(SCREEN_READS):
        wanted = limit - len(found)  # never more than the page holds: the cursor goes on
        page = await tables.by(
            DAY_STATS, "volume", low=min_volume, order="desc", limit=wanted, cursor=cursor
        )
        days = [d for d in page.parsed() if isinstance(d, dict) and d.get("date") == today]
        if days and exchange is not None:
            many = await tables.get_many(QUOTES, [d["symbol"] for d in days])
            quoted = many.parsed()
            days = [d for d in days if exchange in quoted.get(d["symbol"], {}).get("exchanges", {})]
        found.extend(days)
        cursor = page.next_cursor
        if cursor is None or len(found) >= limit:
            break
    return json_reply(
        {
            "date": today,
            "exchange": exchange,
            "min_volume": min_volume,
            "stocks": found,
            "next_cursor": cursor,
        }
    )


async def add_days(quotes: Iterable[dict[str, Any]], tables: Tables) -> None:
    """Each quote's ``day``: its symbol's statistics for the UTC date of its last trade, or
    null before a first trade (or where this cluster does not serve ``stock-day-stats``)."""
    wanted: dict[str, list[dict[str, Any]]] = {}
    for q in quotes:
        q["day"] = None
        last = q.get("last")
        if last:
            date = time.strftime("%Y-%m-%d", time.gmtime(last["ts"] // 1000))
            wanted.setdefault(day_key(q["symbol"], date), []).append(q)
    if not wanted or not tables.serves(DAY_STATS):
        return
    many = await tables.get_many(DAY_STATS, list(wanted))
    for key, stats in many.parsed().items():
        stats.pop("symbol", None)
        for q in wanted[key]:
            q["day"] = stats


def day_key(symbol: str, date: str) -> str:
    """The key of ``symbol``'s statistics for the UTC ``date`` (``YYYY-MM-DD``) in the
    windowed ``stock-day-stats``: ``SYMBOL|START|END``, the day's start and end."""
    start = datetime.fromisoformat(date).replace(tzinfo=UTC)
    return f"{symbol}|{_window_time(start)}|{_window_time(start + timedelta(days=1))}"


def _window_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


async def bars(request: Request) -> Reply:
    tables = request.tables
    _served(tables, BARS)
    symbol = symbol_of(request.path_params["symbol"])
    params = request.query
    # Whole minutes, as before: a bar starting in the minute of ``from`` is in.
    start = minute_key(params["from"], "from") if params.get("from") else None
    end = minute_key(params["to"], "to") if params.get("to") else None
    limit = request.int_param("limit", 1, MAX_RANGE_LIMIT) or MAX_RANGE_LIMIT
    page = await tables.windows(
        BARS, symbol, start=start, end=end, cursor=params.get("cursor"), limit=limit
    )
    return json_reply({"symbol": symbol, "bars": page.fragments(), "next_cursor": page.next_cursor})


async def top(request: Request) -> Reply:
    """Today's (UTC) most traded symbols: the day statistics ranked by volume, within the
    window of today."""
    tables = request.tables
    _served(tables, DAY_STATS)
    by = request.query.get("by") or TOP_BY[0]
    if by not in TOP_BY:
        raise BadRequest(f"by must be one of {', '.join(TOP_BY)}, got {by!r}", by=by)
    n = request.int_param("n", 1, MAX_TOP) or 10
    today = time.strftime("%Y-%m-%d", time.gmtime())
    page = await tables.top(DAY_STATS, n, window=today)
    return json_reply({"date": today, "by": by, "stocks": page.fragments()})


# -- streams: the quote, then each change, as Server-Sent Events -----------------------------


async def stream(request: Request) -> Reply:
    symbol = symbol_of(request.path_params["symbol"])
    return await _quote_stream(request, [symbol])


async def streams(request: Request) -> Reply:
    raw = [s for s in request.query.get("symbols", "").split(",") if s.strip()]
    if not raw:
        raise BadRequest("give symbols=AAPL,MSFT,...")
    if len(raw) > MAX_STREAM_SYMBOLS:
        raise BadRequest(f"at most {MAX_STREAM_SYMBOLS} symbols in one stream", count=len(raw))
    return await _quote_stream(request, list(dict.fromkeys(symbol_of(s) for s in raw)))


async def _quote_stream(request: Request, symbols: list[str]) -> Reply:
    """Whole quotes (with ``day``) as their quote or day statistics change: two watches,
    the quotes' and the day statistics' (each symbol's windows), merged. The event id joins
    both watches' cursors: Last-Event-ID resumes each."""
    tables = request.tables
    _served(tables, QUOTES)
    after = request.header("last-event-id") or ""
    quotes_after, _, days_after = after.partition("~")
    quotes = await tables.watch(QUOTES, symbols, after=quotes_after or None)
    days = None
    if tables.serves(DAY_STATS):
        try:
            days = await tables.watch(
                DAY_STATS, prefix=[f"{s}|" for s in symbols], after=days_after or None
            )
        except BaseException:
            quotes.close()
            raise
    return event_stream(_quote_events(quotes, days))


async def _quote_events(quotes: Watch, days: Watch | None) -> AsyncIterator[ServerEvent]:
    latest: dict[str, dict[str, Any]] = {}  # symbol → its quote as last told
    stats: dict[str, dict[str, Any]] = {}  # day key → statistics

    def cursor() -> str:
        return quotes.cursor + ("~" + days.cursor if days is not None else "")

    def told(symbol: str) -> ServerEvent:
        quote = dict(latest[symbol])
        quote["day"] = _day_of(quote, stats)
        return ServerEvent(quote, "quote", cursor())

    def took_day(change: Change) -> str | None:
        """The symbol whose day statistics ``change`` is, when they belong to its quote."""
        if change.kind == "value":
            stats[change.key] = change.parsed()
        else:
            stats.pop(change.key, None)
        symbol = change.key.split("|", 1)[0]
        return symbol if symbol in latest else None

    try:
        for change in days.ready() if days is not None else ():
            took_day(change)
        for change in quotes.ready():
            if change.kind == "value":
                latest[change.key] = change.parsed()
                yield told(change.key)
            else:
                yield ServerEvent({"symbol": change.key}, change.kind, cursor())
        async for source, change in _merged(quotes, days):
            if source is days:
                symbol = took_day(change)
                if symbol is not None:
                    yield told(symbol)
            elif change.kind == "value":
                latest[change.key] = change.parsed()
                yield told(change.key)
            else:
                latest.pop(change.key, None)
                yield ServerEvent({"symbol": change.key}, change.kind, cursor())
    finally:
        quotes.close()
        if days is not None:
            days.close()


def _day_of(quote: dict[str, Any], stats: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    last = quote.get("last")
    if not last:
        return None
    date = time.strftime("%Y-%m-%d", time.gmtime(last["ts"] // 1000))
    found = stats.get(day_key(quote["symbol"], date))
    if found is None:
        return None
    return {k: v for k, v in found.items() if k != "symbol"}


async def _merged(*watches: Watch | None) -> AsyncIterator[tuple[Watch, Change]]:
    """The changes of several watches as they come; a small queue between, so a slow client
    leaves each watch coalescing its keys rather than a queue growing."""
    queue: asyncio.Queue[tuple[Watch, Change]] = asyncio.Queue(maxsize=256)

    async def pump(watch: Watch) -> None:
        async for change in watch:
            await queue.put((watch, change))

    pumps = [asyncio.create_task(pump(w)) for w in watches if w is not None]
    try:
        while True:
            yield await queue.get()
    finally:
        for task in pumps:
            task.cancel()
