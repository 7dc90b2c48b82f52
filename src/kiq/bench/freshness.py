"""Freshness: from a tick's produce to its visibility through the stock API.

A background feed keeps the pipeline busy at ``rate`` ticks/s; meanwhile probe
ticks for symbols the feed never uses are produced with the wall clock as
``ts``, and each probe's symbol is polled on the API until its ``updated_at``
reaches the probe's ``ts``. The figure is that wait, per probe.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass

import aiohttp
import orjson

from kiq.bench.stack import local_stack
from kiq.bench.stats import percentile
from kiq.errors import KiqError
from kiq.feeds import TickProducer, TickSimulator, pace
from kiq.pipelines.stocks import DEFAULT_EXCHANGES, StockTopics

PROBES = [f"ZZPROBE{i}" for i in range(10)]


@dataclass(frozen=True)
class FreshnessConfig:
    rate: float = 10_000
    trigger: str = "microbatch"
    duration_s: float = 60
    warmup_s: float = 20
    symbols: int = 200
    partitions: int = 30
    probe_every_s: float = 0.1
    startup_timeout_s: float = 300


class _Prober:
    """Produces probe ticks and waits for each to be visible on the API."""

    def __init__(self, url: str, bootstrap: str) -> None:
        self.url = url
        self.producer = TickProducer(bootstrap, StockTopics().ticks, linger_ms=0)
        self.samples: list[float] = []
        self.errors: list[str] = []

    def _send(self, symbol: str) -> tuple[int, float]:
        ts = int(time.time() * 1000)
        started = time.monotonic()
        self.producer.produce(
            {
                "symbol": symbol,
                "exchange": DEFAULT_EXCHANGES[0],
                "ts": ts,
                "bid": 10.0,
                "ask": 10.01,
                "bid_size": 100,
                "ask_size": 100,
                "last": None,
                "last_size": None,
            }
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
            await asyncio.sleep(0.005)
        return None

    async def warm_up(self, timeout_s: float) -> float:
        """Wait until a first probe is visible: Spark has started and caught up."""
        async with aiohttp.ClientSession() as session:
            ts, started = self._send(PROBES[0])
            waited = await self._visible(session, PROBES[0], ts, started, timeout_s)
        if waited is None:
            raise KiqError(f"no probe became visible within {timeout_s:.0f}s: see the pipeline log")
        return waited

    async def measure(self, duration_s: float, every_s: float) -> None:
        stop_at = time.monotonic() + duration_s
        sem = asyncio.Semaphore(32)
        async with aiohttp.ClientSession() as session:

            async def one(symbol: str, ts: int, started: float) -> None:
                async with sem:
                    waited = await self._visible(session, symbol, ts, started, 30)
                if waited is None:
                    self.errors.append(f"{symbol}@{ts} not visible after 30 s")
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


def run_freshness(cfg: FreshnessConfig) -> dict[str, object]:
    with local_stack() as stack:
        stack.create_stock_topics(cfg.partitions)
        stack.add_stock_pipeline(cfg.trigger, cfg.partitions)
        node = stack.add_node("f1", stack.stock_tables())
        node.wait_ready(120)
        stop = threading.Event()
        feed = TickProducer(stack.bootstrap, StockTopics().ticks)
        sim = TickSimulator(cfg.symbols, list(DEFAULT_EXCHANGES), seed=7)
        fed = {}

        def run_feed() -> None:
            fed["stats"] = pace(sim, feed, rate=cfg.rate, stop=stop.is_set)
            feed.flush(30)

        thread = threading.Thread(target=run_feed, daemon=True)
        prober = _Prober(node.url, stack.bootstrap)
        try:
            # Spark first (a probe alone), then the load, then a settling time, then measure.
            asyncio.run(prober.warm_up(cfg.startup_timeout_s))
            thread.start()
            time.sleep(cfg.warmup_s)
            asyncio.run(prober.measure(cfg.duration_s, cfg.probe_every_s))
        finally:
            stop.set()
            if thread.is_alive():
                thread.join(60)
        stats = fed.get("stats")
    samples = prober.samples
    return {
        "scenario": "freshness",
        "trigger": cfg.trigger,
        "rate_target": cfg.rate,
        "rate_achieved": round(stats.rate, 1) if stats else 0.0,
        "samples": len(samples),
        "p50_ms": round(percentile(samples, 50), 1),
        "p99_ms": round(percentile(samples, 99), 1),
        "max_ms": round(max(samples), 1) if samples else float("nan"),
        "errors": len(prober.errors),
    }
