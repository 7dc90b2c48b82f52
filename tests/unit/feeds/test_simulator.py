from __future__ import annotations

import collections
import random
import statistics

import pytest

from kiq.feeds import FIELDS, SYMBOLS, TickSimulator, validate
from kiq.feeds.ticks import SYMBOL_RE

EXCHANGES = ["NYSE", "NASDAQ", "ARCA", "BATS", "IEX"]
COUNT = 10_000


def run(seed: int = 42, count: int = COUNT, **kwargs) -> list[dict]:
    return list(
        TickSimulator(100, EXCHANGES, seed, start_ms=1_795_300_000_000, **kwargs).ticks(count)
    )


@pytest.fixture(scope="module")
def ticks() -> list[dict]:
    return run()


def test_same_seed_same_ticks_other_seed_other_ticks(ticks):
    assert run(count=2000) == ticks[:2000]
    assert run(seed=43, count=2000) != ticks[:2000]


def test_wall_clock_timestamps_do_not_change_the_ticks():
    a = TickSimulator(20, EXCHANGES, 7)
    b = TickSimulator(20, EXCHANGES, 7)
    strip = lambda t: {k: v for k, v in t.items() if k != "ts"}  # noqa: E731
    assert [strip(a.next_tick(1000 + i)) for i in range(500)] == [
        strip(b.next_tick()) for _ in range(500)
    ]


def test_every_tick_follows_the_contract(ticks):
    for tick in ticks:
        assert list(tick) == list(FIELDS)
        assert validate(tick) == tick
        assert SYMBOL_RE.fullmatch(tick["symbol"])
        assert tick["exchange"] in EXCHANGES
        assert 0 < tick["bid"] <= tick["ask"]
        for price in ("bid", "ask", "last"):
            if tick[price] is not None:
                assert round(tick[price], 2) == tick[price]  # whole cents
        for size in ("bid_size", "ask_size"):
            assert isinstance(tick[size], int) and 100 <= tick[size] <= 5000
            assert tick[size] % 100 == 0
        if tick["last"] is None:
            assert tick["last_size"] is None
        else:
            assert tick["bid"] <= tick["last"] <= tick["ask"]
            assert isinstance(tick["last_size"], int) and tick["last_size"] > 0


def test_timestamps_never_go_backwards(ticks):
    stamps = [t["ts"] for t in ticks]
    assert stamps == sorted(stamps)
    assert stamps[0] == 1_795_300_000_000
    sim = TickSimulator(5, EXCHANGES, 1)
    assert [sim.next_tick(ms)["ts"] for ms in (10, 5, 20, 15)] == [10, 10, 20, 20]


@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.8, 1.0])
def test_trade_ratio_is_respected(ratio):
    trades = sum(t["last"] is not None for t in run(trade_ratio=ratio, count=5000))
    assert abs(trades / 5000 - ratio) < 0.03


def test_popular_symbols_tick_more_often_than_the_median(ticks):
    counts = collections.Counter(t["symbol"] for t in ticks)
    assert counts.most_common(1)[0][0] in ("AAPL", "MSFT", "NVDA")
    assert counts["AAPL"] > 5 * statistics.median(counts.values())
    assert len(counts) > 90  # yet nearly every symbol ticks
    exchanges = collections.Counter(t["exchange"] for t in ticks)
    assert set(exchanges) == set(EXCHANGES)
    assert exchanges["NYSE"] > exchanges["IEX"]


def test_prices_stay_near_their_start(ticks):
    start = dict(SYMBOLS)
    last_mid = {t["symbol"]: (t["bid"] + t["ask"]) / 2 for t in ticks}
    for symbol, mid in last_mid.items():
        assert 0.5 < mid / start[symbol] < 2.0, symbol


def test_spreads_differ_by_exchange(ticks):
    spreads = collections.defaultdict(list)
    for t in ticks:
        if t["symbol"] == "AAPL":
            spreads[t["exchange"]].append(round(t["ask"] - t["bid"], 2))
    assert len({statistics.mean(v) for v in spreads.values()}) > 1
    assert all(0.01 <= s <= 0.25 for v in spreads.values() for s in v)


def test_cheap_stocks_never_quote_zero():
    sim = TickSimulator(500, ["NYSE"], 3)
    cheapest = min(SYMBOLS, key=lambda listing: listing.price).symbol
    for tick in sim.ticks(20_000):
        assert tick["bid"] >= 0.01
        if tick["symbol"] == cheapest:
            assert tick["ask"] > tick["bid"]


@pytest.mark.parametrize(
    ("symbols", "exchanges", "message"),
    [
        (0, EXCHANGES, "symbols must be between"),
        (len(SYMBOLS) + 1, EXCHANGES, "symbols must be between"),
        (10, [], "exchanges must be distinct"),
        (10, ["NYSE", "NYSE"], "exchanges must be distinct"),
        (10, ["nyse"], "exchange names must match"),
    ],
)
def test_bad_arguments_are_refused(symbols, exchanges, message):
    with pytest.raises(ValueError, match=message):
        TickSimulator(symbols, exchanges, 1)


# A market across exchanges: the book a consumer keeps (the latest quote per symbol and
# exchange, as the stock pipeline does), sampled after every tick.


def crossed_or_locked(quotes: dict[str, tuple[float, float]]) -> bool:
    """Whether the best bid across exchanges reaches the best ask across them."""
    return max(bid for bid, _ in quotes.values()) >= min(ask for _, ask in quotes.values())


def crossed_or_locked_share(ticks) -> tuple[float, int]:
    """The share of samples (the ticked symbol's book, once 2+ exchanges quote it) that
    are crossed or locked, and how many samples there were."""
    books: dict[str, dict[str, tuple[float, float]]] = collections.defaultdict(dict)
    bad = samples = 0
    for tick in ticks:
        quotes = books[tick["symbol"]]
        quotes[tick["exchange"]] = (tick["bid"], tick["ask"])
        if len(quotes) > 1:
            samples += 1
            bad += crossed_or_locked(quotes)
    return bad / samples, samples


def test_the_checker_sees_crossed_and_locked_books():
    # 2026-11-25: AAPL bid 188.43 on NYSE, ask 188.20 on IEX.
    assert crossed_or_locked({"NYSE": (188.43, 188.45), "IEX": (188.18, 188.20)})
    assert crossed_or_locked({"NYSE": (188.20, 188.22), "IEX": (188.18, 188.20)})
    assert not crossed_or_locked({"NYSE": (188.19, 188.22), "IEX": (188.18, 188.20)})
    # Exchanges quoting each their own walk, the old model's failure, are caught too.
    rng = random.Random(5)
    mids = {(s, e): 100.0 for s in "ABC" for e in EXCHANGES}
    walks = []
    for _ in range(5000):
        key = (rng.choice("ABC"), rng.choice(EXCHANGES))
        mids[key] *= 1 + rng.gauss(0, 5e-4)
        bid = round(mids[key] - 0.01, 2)
        walks.append({"symbol": key[0], "exchange": key[1], "bid": bid, "ask": bid + 0.02})
    assert crossed_or_locked_share(walks)[0] > 0.5


@pytest.mark.parametrize(
    ("symbols", "exchanges"),
    [(20, EXCHANGES), (100, EXCHANGES), (500, [*EXCHANGES, "EDGX", "MEMX", "PHLX"])],
)
def test_exchanges_rarely_cross_or_lock(symbols, exchanges):
    for seed in (1, 2):
        sim = TickSimulator(symbols, exchanges, seed, start_ms=1_795_300_000_000)
        share, samples = crossed_or_locked_share(sim.ticks(20_000))
        assert samples > 19_000
        assert share < 0.01, (seed, share)


def test_exchanges_quote_one_price_each_a_little_differently(ticks):
    books: dict[str, dict[str, float]] = collections.defaultdict(dict)
    full = differ = 0
    for tick in ticks:
        bids = books[tick["symbol"]]
        bids[tick["exchange"]] = tick["bid"]
        if len(bids) == len(EXCHANGES):
            full += 1
            differ += len(set(bids.values())) > 1
            # Around one price: the exchanges' bids lie within a few spreads of each other.
            assert max(bids.values()) - min(bids.values()) < 0.002 * max(bids.values())
    assert full > 5000 and differ > 0.5 * full
    aapl = [t["bid"] for t in ticks if t["symbol"] == "AAPL"]
    assert len(set(aapl)) > 5  # and the price moves (about as fast as a real one)
