"""A deterministic stock-tick simulator: pure logic, no Kafka.

Per symbol, the mid price takes a random walk in small relative steps (a
geometric walk, so it never reaches zero, with a faint pull back to where it
started so that long runs stay plausible). Per exchange, a spread (a few cents,
or a few basis points of the price, whichever is wider) and round-lot sizes.
A fraction of the ticks also carry a trade, at a price between bid and ask.
Which symbol ticks next is Zipf-skewed by popularity (the order of
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
_REVERSION = 1e-4  # pull of log(mid / start) back to zero, per tick of the symbol


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
        # Per symbol: start and current mid in cents, and a volatility per tick (2..8 bp).
        self._start = [listing.price * 100.0 for listing in listings]
        self._mid = [p * rng.uniform(0.97, 1.03) for p in self._start]
        self._sigma = [rng.uniform(2e-4, 8e-4) for _ in listings]
        # Per exchange: the narrowest spread in cents (1..3) and in basis points (0.3..2).
        self._min_spread = [rng.randint(1, 3) for _ in exchanges]
        self._spread_bp = [rng.uniform(0.3, 2.0) for _ in exchanges]
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

        mid = self._mid[s]
        mid *= math.exp(self._sigma[s] * rng.gauss() - _REVERSION * math.log(mid / self._start[s]))
        mid = max(mid, 1.0)
        self._mid[s] = mid

        spread = max(
            self._min_spread[e],
            round(mid * self._spread_bp[e] * 1e-4 * (0.6 + 0.8 * rng.random())),
        )
        bid = max(1, round(mid - spread / 2))
        ask = bid + spread
        bid_size = 100 * (1 + int(_MAX_LOTS * rng.random() ** 2))
        ask_size = 100 * (1 + int(_MAX_LOTS * rng.random() ** 2))
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
