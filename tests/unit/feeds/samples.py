"""One valid tick with a trade, shared by the feed tests."""

TRADE = {
    "symbol": "AAPL",
    "exchange": "NASDAQ",
    "ts": 1795300000123,
    "bid": 189.12,
    "ask": 189.14,
    "bid_size": 300,
    "ask_size": 200,
    "last": 189.13,
    "last_size": 100,
}
