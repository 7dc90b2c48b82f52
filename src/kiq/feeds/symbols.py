"""US tickers the simulated feed quotes, each with a rough starting price.

Hand-written: S&P 500 and NASDAQ-100 names, a few big ETFs and popular
non-index names, in ``kiq.catalog.STOCK_LISTINGS`` (a layer below the feeds, so
that the ``[feed] symbols`` setting is bounded by their number). Prices are
ballpark (the order of magnitude is what matters); the simulator walks them from
there. The order is roughly by popularity, and the simulator's skew follows it:
the first symbols tick the most.
"""

from __future__ import annotations

from typing import NamedTuple

from kiq import catalog


class Listing(NamedTuple):
    symbol: str
    price: float


def _parse(table: str) -> tuple[Listing, ...]:
    words = table.split()
    return tuple(
        Listing(symbol, float(price)) for symbol, price in zip(words[::2], words[1::2], strict=True)
    )


SYMBOLS: tuple[Listing, ...] = _parse(catalog.STOCK_LISTINGS)
