"""A bounded reader load against loopback nodes: fixed rate, random keys, every answer checked.

Shared by the failover benchmark and the integration tests, so both judge a
failover by the same client: one that sends at a steady rate whatever the
latency (no coordinated omission), spreads requests over whatever ``urls()``
returns at that moment (a load balancer's rotation) and keeps every answer.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from kiq.bench.progress import Reporter
from kiq.bench.stats import percentile


@dataclass
class LoadStats:
    sent: int = 0
    ok: int = 0
    stale: int = 0
    failures: list[tuple[float, str, int, str]] = field(default_factory=list)
    # (sent at, served_by, stale) of each answer, to see who served what when
    served: list[tuple[float, str, bool]] = field(default_factory=list)
    # (sent at, answered at, partition, stale) of each answer, to time a partition's recovery
    answered: list[tuple[float, float, int, bool]] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """The figures every chaos scenario reports about its reads."""
        latencies = [done - sent for sent, done, _, _ in self.answered]
        return {
            "reads": self.sent,
            "failed_reads": len(self.failures),
            "failures_sample": [f[1:] for f in self.failures[:5]],
            "stale_reads": self.stale,
            "p99_read_ms": round(1000 * percentile(latencies, 99), 1) if latencies else 0.0,
            "worst_read_ms": round(1000 * max(latencies, default=0.0), 1),
        }

    def merged(self, other: LoadStats) -> LoadStats:
        """These answers and ``other``'s, as one load's."""
        return LoadStats(
            self.sent + other.sent,
            self.ok + other.ok,
            self.stale + other.stale,
            self.failures + other.failures,
            self.served + other.served,
            self.answered + other.answered,
        )


class ReaderLoad:
    """GETs ``rate`` random keys a second, spread over ``urls()``, until stopped or ``max_s``."""

    def __init__(
        self,
        urls: Callable[[], Sequence[str]],
        table: str,
        keys: Sequence[str],
        rate: int = 2000,
        max_s: float = 120.0,
        concurrency: int = 64,
    ) -> None:
        self._urls = urls
        self._table = table
        self._keys = list(keys)
        self._rate = rate
        self._max_s = max_s
        self._concurrency = concurrency
        self.stats = LoadStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> ReaderLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> LoadStats:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.stats

    async def _main(self) -> None:
        rng = random.Random(7)
        sem = asyncio.Semaphore(self._concurrency)
        timeout = aiohttp.ClientTimeout(total=10)
        started = time.monotonic()
        async with aiohttp.ClientSession(timeout=timeout) as session:
            tasks: set[asyncio.Task[None]] = set()
            n = 0
            while not self._stop.is_set() and time.monotonic() - started < self._max_s:
                due = started + n / self._rate
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                urls = self._urls()
                url = f"{rng.choice(urls)}/v1/tables/{self._table}/keys/{rng.choice(self._keys)}"
                await sem.acquire()
                task = asyncio.create_task(self._one(session, url, sem))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
            if tasks:
                await asyncio.gather(*tasks)

    async def _one(self, session: aiohttp.ClientSession, url: str, sem: asyncio.Semaphore) -> None:
        self.stats.sent += 1
        now = time.monotonic()
        try:
            async with session.get(url) as resp:
                body = await resp.read()
                if resp.status == 200:
                    self.stats.ok += 1
                    stale = resp.headers.get("x-kiq-stale") == "true"
                    self.stats.stale += stale
                    self.stats.served.append((now, resp.headers.get("x-kiq-served-by", ""), stale))
                    partition = int(resp.headers.get("x-kiq-partition", "-1"))
                    self.stats.answered.append((now, time.monotonic(), partition, stale))
                else:
                    self.stats.failures.append((now, url, resp.status, body[:200].decode()))
        except Exception as exc:
            self.stats.failures.append((now, url, -1, repr(exc)))
        finally:
            sem.release()


def watch_reads(show: Reporter, *loads: ReaderLoad) -> None:
    """The reads sent (and their rate), failed and stale so far, over ``loads``: counters the
    load keeps anyway, read when the progress line is drawn."""
    show.watch("reads", lambda: sum(load.stats.sent for load in loads), rate=True)
    show.watch("failed", lambda: sum(len(load.stats.failures) for load in loads))
    show.watch("stale", lambda: sum(load.stats.stale for load in loads))
