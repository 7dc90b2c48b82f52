"""The ``stock-ticks`` contract: one quote, and maybe a trade, per record.

Key: the symbol as UTF-8. Value: a JSON object with exactly :data:`FIELDS`::

    {"symbol": "AAPL", "exchange": "NASDAQ", "ts": 1795300000123,
     "bid": 189.12, "ask": 189.14, "bid_size": 300, "ask_size": 200,
     "last": 189.13, "last_size": 100}

``ts`` is epoch milliseconds from 2000 up to 2050 (:data:`TS_RANGE_MS`; the
pipeline packs a tick's time and offset into one 64-bit order, see
``kiq.apps.stocks.pipeline``). ``last`` and ``last_size`` are both null when the
tick carries no trade. Prices are positive numbers, sizes positive integers, and
``bid <= ask``. :func:`validate` is the one place these rules are written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from kiq import catalog
from kiq.feeds.errors import InvalidTick

FIELDS = ("symbol", "exchange", "ts", "bid", "ask", "bid_size", "ask_size", "last", "last_size")
PRICE_FIELDS = ("bid", "ask", "last")
SIZE_FIELDS = ("bid_size", "ask_size", "last_size")
TRADE_FIELDS = ("last", "last_size")

# [2000-01-01, 2050-01-01) UTC in epoch milliseconds.
TS_RANGE_MS = (946_684_800_000, 2_524_608_000_000)

SYMBOL_RE = re.compile(r"[A-Z0-9.-]{1,12}")
EXCHANGE_RE = re.compile(catalog.STOCK_EXCHANGE_PATTERN)

Tick = dict[str, Any]

_FIELD_SET = frozenset(FIELDS)


def _price(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTick(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidTick(f"{name} must be positive, got {value!r}")
    return float(value)


def _size(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTick(f"{name} must be an integer, got {value!r}")
    if value <= 0:
        raise InvalidTick(f"{name} must be positive, got {value!r}")
    return value


def validate(tick: Mapping[str, Any]) -> Tick:
    """The tick with its fields in contract order, or InvalidTick saying what is wrong."""
    unknown = tick.keys() - _FIELD_SET
    if unknown:
        raise InvalidTick(f"unknown field(s): {', '.join(sorted(unknown))}")
    required = [f for f in FIELDS if f not in TRADE_FIELDS and tick.get(f) is None]
    if required:
        raise InvalidTick(f"missing field(s): {', '.join(required)}")
    symbol, exchange, ts = tick["symbol"], tick["exchange"], tick["ts"]
    if not isinstance(symbol, str) or not SYMBOL_RE.fullmatch(symbol):
        raise InvalidTick(f"symbol must match {SYMBOL_RE.pattern}, got {symbol!r}")
    if not isinstance(exchange, str) or not EXCHANGE_RE.fullmatch(exchange):
        raise InvalidTick(f"exchange must match {EXCHANGE_RE.pattern}, got {exchange!r}")
    if isinstance(ts, bool) or not isinstance(ts, int):
        raise InvalidTick(f"ts must be epoch milliseconds (an integer), got {ts!r}")
    if not TS_RANGE_MS[0] <= ts < TS_RANGE_MS[1]:
        raise InvalidTick(f"ts must fall in 2000-2049 (epoch milliseconds), got {ts!r}")
    bid, ask = _price("bid", tick["bid"]), _price("ask", tick["ask"])
    if bid > ask:
        raise InvalidTick(f"bid {bid} is above ask {ask}")
    last, last_size = tick.get("last"), tick.get("last_size")
    if (last is None) != (last_size is None):
        raise InvalidTick("last and last_size must both be set (a trade) or both null")
    return {
        "symbol": symbol,
        "exchange": exchange,
        "ts": ts,
        "bid": bid,
        "ask": ask,
        "bid_size": _size("bid_size", tick["bid_size"]),
        "ask_size": _size("ask_size", tick["ask_size"]),
        "last": None if last is None else _price("last", last),
        "last_size": None if last_size is None else _size("last_size", last_size),
    }
