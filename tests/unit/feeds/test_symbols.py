from __future__ import annotations

from kiq.feeds import SYMBOLS
from kiq.feeds.ticks import SYMBOL_RE


def test_about_five_hundred_distinct_symbols_in_the_contract_format():
    names = [listing.symbol for listing in SYMBOLS]
    assert 450 <= len(names) <= 650
    assert len(set(names)) == len(names)
    assert all(SYMBOL_RE.fullmatch(name) for name in names)
    assert names[:3] == ["AAPL", "MSFT", "NVDA"]
    assert "BRK.B" in names


def test_starting_prices_are_plausible():
    prices = dict(SYMBOLS)
    assert all(0 < p < 1_000_000 for p in prices.values())
    assert 100 < prices["AAPL"] < 1000
    assert prices["BKNG"] > 1000 > prices["F"]
