"""A deterministic stock-tick simulator: pure logic, no Kafka.

One reference price per symbol, which every exchange quotes around. It takes a
random walk in small relative steps, one per tick of the symbol (a geometric
walk, so it never reaches zero, with a faint pull back to where it started so
that long runs stay plausible). Each exchange sees it a little late (a lag of 0
to 3 of the symbol's ticks, fixed per exchange) and quotes its own half-spread
around what it sees (a floor of half a cent to 1.5 cents, or some basis points
of the price, whichever is wider: bid rounded down, ask up), with its own depth
of round-lot sizes. The steps are small next to the spreads, so exchanges quote
slightly different prices yet the best bid across them stays below the best ask:
a crossed or locked book is rare (well under 1% of samples), as in a real
market. A fraction of the ticks also carry a trade, at or inside the exchange's
quotes. Which symbol ticks next is Zipf-skewed by popularity (the order of
:data:`kiq.feeds.symbols.SYMBOLS`); exchanges are skewed too, more gently.

Prices are whole cents throughout (integers), so bid <= last <= ask holds
exactly and every price serializes with at most two decimals.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator, Sequence

from kiq.feeds.symbols import SYMBOLS
from kiq.feeds.ticks import EXCHANGE_RE, Tick

_BATCH = 1024  # symbol and exchange picks are drawn this many at a time
_MAX_LOTS = 50  # quote sizes are 100 .. 5000 shares
_MAX_TRADE_LOTS = 10
_LAGS = 4  # an exchange sees the reference 0 .. _LAGS - 1 of the symbol's ticks late
_RING = _LAGS - 1  # a mask: _LAGS is a power of two
_SIGMA_BP = (0.03, 0.08)  # step of the reference per tick of the symbol, basis points
_HALF_SPREAD_BP = (0.5, 1.5)  # per exchange
_REVERSION = 1e-8  # pull of log(reference / start) back to zero, per tick of the symbol


class TickSimulator:
    """Ticks for the ``symbols`` most popular listings on ``exchanges``, reproducible by seed.

    Timestamps: :meth:`next_tick` stamps the ``now_ms`` it is given; without one,
    a simulated clock that starts at ``start_ms`` and advances ``step_ms`` per
    tick, or the wall clock when ``start_ms`` is None. They never go backwards.
    Everything but wall-clock timestamps is a function of the seed.
    """

    def __init__(
        self,
        symbols: int,
        exchanges: Sequence[str],
        seed: int,
        start_ms: int | None = None,
        trade_ratio: float = 0.3,
        *,
        step_ms: int = 1,
        zipf_exponent: float = 1.0,
    ) -> None:
        if not 1 <= symbols <= len(SYMBOLS):
            raise ValueError(f"symbols must be between 1 and {len(SYMBOLS)}, got {symbols}")
        if not exchanges or len(set(exchanges)) != len(exchanges):
            raise ValueError(f"exchanges must be distinct and not empty, got {list(exchanges)}")
        bad = [e for e in exchanges if not EXCHANGE_RE.fullmatch(e)]
        if bad:
            raise ValueError(f"exchange names must match {EXCHANGE_RE.pattern}, got {bad}")
        if not 0.0 <= trade_ratio <= 1.0:
            raise ValueError(f"trade_ratio must be between 0 and 1, got {trade_ratio}")
        self.exchanges = tuple(exchanges)
        self.trade_ratio = trade_ratio
        self._rng = random.Random(seed)
        rng = self._rng
        listings = SYMBOLS[:symbols]
        self.symbols = tuple(listing.symbol for listing in listings)
        # Per symbol: start and reference price in cents, a volatility per tick, and the
        # reference's last _LAGS values (a ring, by the symbol's tick count) for late views.
        self._start = [listing.price * 100.0 for listing in listings]
        self._ref = [p * rng.uniform(0.97, 1.03) for p in self._start]
        self._sigma = [rng.uniform(*_SIGMA_BP) * 1e-4 for _ in listings]
        self._seen = [[ref] * _LAGS for ref in self._ref]
        self._steps = [0] * len(listings)
        # Per exchange: its lag, its narrowest half-spread in cents (0.5..1.5) and in
        # basis points, and its depth (the most lots it shows).
        self._lag = [rng.randrange(_LAGS) for _ in exchanges]
        self._min_half = [rng.randint(1, 3) / 2 for _ in exchanges]
        self._half_bp = [rng.uniform(*_HALF_SPREAD_BP) * 1e-4 for _ in exchanges]
        self._lots = [rng.randint(_MAX_LOTS // 2, _MAX_LOTS) for _ in exchanges]
        self._symbol_weights = _cumulative(len(listings), zipf_exponent)
        self._exchange_weights = _cumulative(len(exchanges), 0.5)
        self._picks: list[tuple[int, int]] = []
        self._clock = start_ms
        self._step_ms = step_ms
        self._last_ts = 0

    def next_tick(self, now_ms: int | None = None) -> Tick:
        """The next tick, stamped ``now_ms`` (see the class docstring when None)."""
        rng = self._rng
        if not self._picks:
            self._refill()
        s, e = self._picks.pop()

        ref = self._ref[s]
        ref *= math.exp(self._sigma[s] * rng.gauss() - _REVERSION * math.log(ref / self._start[s]))
        if ref < 1.0:
            ref = 1.0
        self._ref[s] = ref
        step = self._steps[s] + 1
        self._steps[s] = step
        seen = self._seen[s]
        seen[step & _RING] = ref
        view = seen[(step - self._lag[e]) & _RING]

        # Comparisons rather than max(): this is the hot path. half > 0, so ask > bid.
        half = view * self._half_bp[e] * (0.8 + 0.4 * rng.random())
        if half < self._min_half[e]:
            half = self._min_half[e]
        bid = math.floor(view - half)
        if bid < 1:
            bid = 1
        ask = math.ceil(view + half)
        spread = ask - bid
        lots = self._lots[e]
        bid_size = 100 * (1 + int(lots * rng.random() ** 2))
        ask_size = 100 * (1 + int(lots * rng.random() ** 2))
        last: float | None = None
        last_size: int | None = None
        if rng.random() < self.trade_ratio:
            last = (bid + int((spread + 1) * rng.random())) / 100
            last_size = 100 * (1 + int(_MAX_TRADE_LOTS * rng.random() ** 2))

        return {
            "symbol": self.symbols[s],
            "exchange": self.exchanges[e],
            "ts": self._stamp(now_ms),
            "bid": bid / 100,
            "ask": ask / 100,
            "bid_size": bid_size,
            "ask_size": ask_size,
            "last": last,
            "last_size": last_size,
        }

    def ticks(self, count: int | None = None) -> Iterator[Tick]:
        """``count`` ticks (forever when None), stamped by the simulator's clock."""
        if count is None:
            while True:
                yield self.next_tick()
        for _ in range(count):
            yield self.next_tick()

    def __iter__(self) -> Iterator[Tick]:
        return self.ticks()

    def _stamp(self, now_ms: int | None) -> int:
        if now_ms is None:
            if self._clock is None:
                now_ms = time.time_ns() // 1_000_000
            else:
                now_ms = self._clock
                self._clock += self._step_ms
        self._last_ts = max(self._last_ts, now_ms)
        return self._last_ts

    def _refill(self) -> None:
        rng = self._rng
        syms = rng.choices(range(len(self.symbols)), cum_weights=self._symbol_weights, k=_BATCH)
        exs = rng.choices(range(len(self.exchanges)), cum_weights=self._exchange_weights, k=_BATCH)
        self._picks = list(zip(syms, exs, strict=True))
        self._picks.reverse()  # pop() from the end, in draw order


def _cumulative(n: int, exponent: float) -> list[float]:
    """Cumulative Zipf weights: rank r (from 1) weighs 1 / r**exponent."""
    total = 0.0
    cumulative = []
    for rank in range(1, n + 1):
        total += 1.0 / rank**exponent
        cumulative.append(total)
    return cumulative
