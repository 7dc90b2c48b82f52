"""An independent reference for the stock pipeline: plain Python over the same ticks.

Ties on a timestamp go to the tick later in the log (its Kafka offset), as the
contract says; everything else follows the definitions in docs/getting-started.md
literally. The end-to-end tests and ``kiq bench chaos driver-kill`` judge the served tables by it.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

Tick = dict[str, Any]  # a valid tick plus "_offset"


def _date(ts: int) -> str:
    return datetime.fromtimestamp(ts / 1000, UTC).strftime("%Y-%m-%d")


def _minute(ts: int) -> str:
    return datetime.fromtimestamp(ts / 1000, UTC).strftime("%Y-%m-%dT%H:%M")


def _order(t: Tick) -> tuple[int, int]:
    return (t["ts"], t["_offset"])


def _trade_stats(trades: list[Tick]) -> dict[str, Any]:
    first = min(trades, key=_order)
    last = max(trades, key=_order)
    volume = sum(t["last_size"] for t in trades)
    return {
        "open": first["last"],
        "high": max(t["last"] for t in trades),
        "low": min(t["last"] for t in trades),
        "close": last["last"],
        "volume": volume,
        "vwap": sum(t["last"] * t["last_size"] for t in trades) / volume,
        "trades": len(trades),
    }


def quotes(ticks: list[Tick]) -> dict[str, dict[str, Any]]:
    by_symbol: dict[str, list[Tick]] = defaultdict(list)
    for t in ticks:
        by_symbol[t["symbol"]].append(t)
    out = {}
    for symbol, mine in by_symbol.items():
        latest: dict[str, Tick] = {}
        for t in mine:
            if t["exchange"] not in latest or _order(t) > _order(latest[t["exchange"]]):
                latest[t["exchange"]] = t
        best_bid = min(latest.values(), key=lambda t: (-t["bid"], -t["bid_size"], t["exchange"]))
        best_ask = min(latest.values(), key=lambda t: (t["ask"], -t["ask_size"], t["exchange"]))
        trades = [t for t in mine if t["last"] is not None]
        quote: dict[str, Any] = {
            "symbol": symbol,
            "exchanges": {
                e: {k: t[k] for k in ("bid", "ask", "bid_size", "ask_size", "ts")}
                for e, t in latest.items()
            },
            "best_bid": {
                "price": best_bid["bid"],
                "size": best_bid["bid_size"],
                "exchange": best_bid["exchange"],
            },
            "best_ask": {
                "price": best_ask["ask"],
                "size": best_ask["ask_size"],
                "exchange": best_ask["exchange"],
            },
            "last": None,
            "day": None,
            "updated_at": max(t["ts"] for t in mine),
        }
        if trades:
            last = max(trades, key=_order)
            quote["last"] = {
                "price": last["last"],
                "size": last["last_size"],
                "exchange": last["exchange"],
                "ts": last["ts"],
            }
            day = _date(last["ts"])
            stats = _trade_stats([t for t in trades if _date(t["ts"]) == day])
            stats.pop("close")
            quote["day"] = {"date": day, **stats}
        out[symbol] = quote
    return out


def bars(ticks: list[Tick]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[tuple[str, str], list[Tick]] = defaultdict(list)
    for t in ticks:
        if t["last"] is not None:
            groups[(t["symbol"], _minute(t["ts"]))].append(t)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (symbol, minute), trades in sorted(groups.items()):
        out[symbol].append({"symbol": symbol, "start": f"{minute}:00Z", **_trade_stats(trades)})
    return dict(out)


def day_stats(ticks: list[Tick]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each (symbol, UTC date)'s statistics as ``stock-day-stats`` holds them."""
    groups: dict[tuple[str, str], list[Tick]] = defaultdict(list)
    for t in ticks:
        if t["last"] is not None:
            groups[(t["symbol"], _date(t["ts"]))].append(t)
    out = {}
    for (symbol, date), trades in groups.items():
        stats = _trade_stats(trades)
        stats.pop("close")
        out[(symbol, date)] = {"symbol": symbol, "date": date, **stats}
    return out


def top_by_volume(ticks: list[Tick], date: str, n: int) -> list[dict[str, Any]]:
    """The day statistics of the ``n`` symbols with the most volume on ``date``, highest
    first, ties by key (``SYMBOL|START|END``: by ``SYMBOL|``), as ``/v1/stocks/top``
    answers them."""
    days = [stats for (_, d), stats in day_stats(ticks).items() if d == date]
    return sorted(days, key=lambda s: (-s["volume"], f"{s['symbol']}|"))[:n]


def screen(
    ticks: list[Tick], date: str, exchange: str | None, min_volume: float
) -> list[dict[str, Any]]:
    """The day statistics of ``date`` with a volume of at least ``min_volume``, of symbols
    quoted on ``exchange`` (any when None), most volume first, ties by key descending (the
    index's order read from its end), as ``/v1/stocks?exchange=&min_volume=`` answers."""
    quoted = quotes(ticks)
    days = [
        stats
        for (symbol, d), stats in day_stats(ticks).items()
        if d == date
        and stats["volume"] >= min_volume
        and (exchange is None or exchange in quoted.get(symbol, {}).get("exchanges", {}))
    ]
    return sorted(days, key=lambda s: (s["volume"], f"{s['symbol']}|"), reverse=True)


def same(expected: Any, actual: Any, rel: float = 1e-9) -> bool:
    """Equal, with floats compared to a relative tolerance (sums in another order)."""
    if isinstance(expected, float) or isinstance(actual, float):
        if not isinstance(actual, int | float) or not isinstance(expected, int | float):
            return False
        return abs(expected - actual) <= rel * max(abs(expected), abs(actual), 1.0)
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and expected.keys() == actual.keys()
            and all(same(expected[k], actual[k], rel) for k in expected)
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(same(e, a, rel) for e, a in zip(expected, actual, strict=True))
        )
    return bool(expected == actual)
