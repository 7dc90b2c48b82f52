"""Freshness probes: a tick produced now, then polled on the stock API until visible.

Shared by ``bench freshness`` and ``bench ingest``. Probe ticks use symbols the
simulated feed never produces, carry the wall clock as ``ts``, and count as
visible once the quote's ``updated_at`` reaches that ``ts``: the wait is the
freshness a client would see, produce to answer.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import aiohttp
import orjson

from kiq import catalog
from kiq.errors import KiqError
from kiq.feeds import TickProducer

PROBES = [f"ZZPROBE{i}" for i in range(10)]
# The background feed batches like an exchange gateway would. Its own latency is
# not measured (probes are, sent unbatched); at 10,000 ticks/s over 30 partitions
# librdkafka's default 5 ms made thousands of one-record batches a second, and the
# broker's CPU went to appending them instead of to the pipeline under test.
FEED_LINGER_MS = 50


class Prober:
    """Produces probe ticks and waits for each to be visible on the API."""

    def __init__(self, url: str, bootstrap: str, topic: str = catalog.STOCK_TICKS) -> None:
        """``topic``: the ticks (through the pipeline), or the quotes table's own topic (the
        serving side alone: the probe is a quote record whose ``updated_at`` is its ``ts``)."""
        self.url = url
        self.direct = topic != catalog.STOCK_TICKS
        self.producer = TickProducer(bootstrap, topic, linger_ms=0)
        self.samples: list[float] = []
        self.errors: list[str] = []

    def reset(self) -> None:
        """Forget the figures so far: a new step of a benchmark measures on its own."""
        self.samples = []
        self.errors = []

    def _send(self, symbol: str) -> tuple[int, float]:
        ts = int(time.time() * 1000)
        started = time.monotonic()
        self.producer.produce(
            {
                "symbol": symbol,
                "exchange": catalog.STOCK_EXCHANGES[0],
                "ts": ts,
                "bid": 10.0,
                "ask": 10.01,
                "bid_size": 100,
                "ask_size": 100,
                "last": None,
                "last_size": None,
            }
            | ({"updated_at": ts} if self.direct else {})
        )
        self.producer.flush(5)
        return ts, started

    async def _visible(
        self, session: aiohttp.ClientSession, symbol: str, ts: int, started: float, timeout_s: float
    ) -> float | None:
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            async with session.get(f"{self.url}/v1/stocks/{symbol}") as resp:
                if resp.status == 200 and orjson.loads(await resp.read())["updated_at"] >= ts:
                    return (time.monotonic() - started) * 1000
            # Poll often at first (millisecond resolution where it matters), then
            # back off: a long wait must not turn the probes into load of their own.
            waited = time.monotonic() - started
            await asyncio.sleep(min(0.05, max(0.002, waited / 50)))
        return None

    async def warm_up(self, timeout_s: float) -> float:
        """Wait until a first probe is visible: Spark has started and caught up."""
        async with aiohttp.ClientSession() as session:
            ts, started = self._send(PROBES[0])
            waited = await self._visible(session, PROBES[0], ts, started, timeout_s)
        if waited is None:
            raise KiqError(f"no probe became visible within {timeout_s:.0f}s: see the pipeline log")
        return waited

    async def measure(self, duration_s: float, every_s: float, give_up_s: float = 30) -> None:
        """A probe every ``every_s`` for ``duration_s``; one not visible after ``give_up_s`` is
        an error, not a sample, so a stalled pipeline ends the step instead of hanging it."""
        stop_at = time.monotonic() + duration_s
        sem = asyncio.Semaphore(32)
        async with aiohttp.ClientSession() as session:

            async def one(symbol: str, ts: int, started: float) -> None:
                async with sem:
                    waited = await self._visible(session, symbol, ts, started, give_up_s)
                if waited is None:
                    self.errors.append(f"{symbol}@{ts} not visible after {give_up_s:g} s")
                else:
                    self.samples.append(waited)

            tasks = []
            for i in itertools.count():
                if time.monotonic() >= stop_at:
                    break
                ts, started = self._send(PROBES[i % len(PROBES)])
                tasks.append(asyncio.create_task(one(PROBES[i % len(PROBES)], ts, started)))
                await asyncio.sleep(every_s)
            await asyncio.gather(*tasks)
