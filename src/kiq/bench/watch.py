"""Watches at scale: one node, many Server-Sent Events subscribers, keys updated under them.

One node serves a table of ``keys`` keys. ``subscribers`` SSE connections open to it, each
watching one key (subscriber i watches key i mod ``keys``); once every snapshot arrived,
a producer updates random keys at ``rate`` per second for ``duration_s``, each value
stamped with when it was produced. Figures:

- delivery: from the produce call to the event read by the subscriber, p50/p99/max, and
  how many updates of watched keys were delivered against those produced (the last
  value of every watched key must arrive: coalescing may skip intermediate ones);
- memory: the node's RSS with every subscriber connected, less before, per subscriber;
- CPU: the node's CPU seconds over the update phase, per second (cores) and per event;
- the same node's CPU for the same rate with no subscriber: the cost of the watches alone.

The subscribers live in this process (aiohttp, one event loop); the producer in a thread.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from kiq.bench.cluster import start_nodes, wait_applied
from kiq.bench.dataset import key_of, load_quotes
from kiq.bench.progress import Reporter, reporter, rss_mb
from kiq.bench.stack import local_stack
from kiq.bench.stats import cpu_seconds, percentile
from kiq.errors import ConfigError, KiqError
from kiq.kafka.records import JsonProducer

_PAGE = 4096
CONNECTS_AT_ONCE = 200


@dataclass(frozen=True)
class WatchConfig:
    subscribers: int = 10_000
    keys: int = 10_000
    rate: float = 1_000.0
    duration_s: float = 20.0


def run_watch(cfg: WatchConfig, progress: Reporter | None = None) -> dict[str, object]:
    if min(cfg.subscribers, cfg.keys) < 1 or cfg.rate <= 0 or cfg.duration_s <= 0:
        raise ConfigError("--subscribers, --keys, --rate and --duration must be positive")
    out: dict[str, object] = {
        "scenario": "watch",
        "subscribers": cfg.subscribers,
        "keys": cfg.keys,
        "rate_per_s": cfg.rate,
    }
    with reporter(progress, "watch") as show, local_stack(progress=show) as stack:
        keys = [key_of(i) for i in range(cfg.keys)]
        show.phase(f"loading {cfg.keys:,} keys")
        last = load_quotes(stack.bootstrap, "bench-watch", keys)
        show.phase("starting the node")
        # Every subscriber is one caller (this process's address), and a stream holds a
        # request slot all its life (api/holds.py): the caller's caps are theirs.
        env = {
            "KIQ_LIMITS_MAX_CONNECTIONS": str(cfg.subscribers + 256),
            "KIQ_LIMITS_MAX_WATCHES_PER_CALLER": str(cfg.subscribers),
            "KIQ_LIMITS_MAX_REQUESTS_PER_CALLER": str(cfg.subscribers + 128),
        }
        (node,) = start_nodes(stack, 1, ["watched=bench-watch"], env=env)
        node.wait_ready(120)
        wait_applied([node], "watched", last)
        pid = node.proc.pid if node.proc is not None else None
        # From /proc: the node's memory, and its CPU seconds whose rate is the cores it uses
        show.watch("node RSS", lambda: rss_mb(pid), "MB")
        show.watch("node CPU", lambda: cpu_seconds([pid]), "s", rate=True)
        # The same updates with nobody watching: what the node spends on ingest alone.
        show.phase("updates, nobody watching", cfg.duration_s / 2)
        before = cpu_seconds([pid])
        _produce(stack.bootstrap, keys, cfg.rate, cfg.duration_s / 2, show)
        idle_cpu = cpu_seconds([pid])
        if before is not None and idle_cpu is not None:
            out["node_cores_without_watches"] = round((idle_cpu - before) / (cfg.duration_s / 2), 3)
        out |= asyncio.run(_watched(node.url, pid, stack.bootstrap, keys, cfg, show))
        with_watches, without = (
            out.get("node_cores_with_watches"),
            out.get("node_cores_without_watches"),
        )
        events = out.get("events_delivered")
        if isinstance(with_watches, float) and isinstance(without, float) and events:
            extra = (with_watches - without) * cfg.duration_s / float(str(events))
            out["node_cpu_us_per_event_beyond_ingest"] = round(extra * 1e6, 1)
    return out


async def _watched(
    url: str, pid: int | None, bootstrap: str, keys: list[str], cfg: WatchConfig, show: Reporter
) -> dict[str, object]:
    rss_before = _rss(pid)
    delays: list[float] = []
    last_seen: dict[int, float] = {}  # subscriber → the stamp of the last value it got
    snapshots = 0
    failed = 0
    opened = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    gate = asyncio.Semaphore(CONNECTS_AT_ONCE)

    async def subscriber(i: int, session: aiohttp.ClientSession) -> None:
        nonlocal snapshots, failed
        key = keys[i % len(keys)]
        try:
            async with gate:
                resp = await session.get(f"{url}/v1/tables/watched/keys/{key}/watch")
            async with resp:
                if resp.status != 200:
                    failed += 1
                    return
                async for line in resp.content:
                    if not line.startswith(b"data: "):
                        continue
                    event = orjson.loads(line[6:])
                    if event["snapshot"]:
                        snapshots += 1
                        if snapshots + failed == cfg.subscribers:
                            opened.set()
                        continue
                    stamp = event["value"].get("t")
                    if stamp is not None:
                        delays.append(time.time() - stamp)
                        last_seen[i] = stamp
        except (aiohttp.ClientError, OSError):
            failed += 1
            if snapshots + failed == cfg.subscribers:
                opened.set()

    show.watch("subscribed", lambda: snapshots)
    show.watch("subscribers failed", lambda: failed)
    show.watch("events", delays.__len__, rate=True)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        show.phase(f"connecting {cfg.subscribers:,} subscribers")
        started = time.monotonic()
        tasks = [asyncio.create_task(subscriber(i, session)) for i in range(cfg.subscribers)]
        try:
            async with asyncio.timeout(300):
                await opened.wait()
        except TimeoutError as exc:
            raise KiqError(
                f"only {snapshots} of {cfg.subscribers} subscribers got their snapshot in 300 s"
            ) from exc
        connect_s = time.monotonic() - started
        # The load generator's own 10,000 connections are long-lived objects: kept out of its
        # garbage collector's full passes, whose pauses would count as delivery time.
        gc.collect()
        gc.freeze()
        await asyncio.sleep(1.0)
        rss_with = _rss(pid)
        show.phase(f"updates, {cfg.subscribers:,} watching", cfg.duration_s)
        cpu_before = cpu_seconds([pid])
        sent = await asyncio.to_thread(_produce, bootstrap, keys, cfg.rate, cfg.duration_s, show)
        cpu_after = cpu_seconds([pid])
        show.phase("the last events in flight", 2.0)
        await asyncio.sleep(2.0)  # the last events in flight
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    watched = {keys[i % len(keys)] for i in range(cfg.subscribers)}
    final_missing = sum(
        1
        for i in range(cfg.subscribers)
        if (stamp := sent.get(keys[i % len(keys)])) is not None and last_seen.get(i) != stamp
    )
    updates_of_watched = sum(1 for k in sent if k in watched)
    ms = [d * 1000 for d in delays]
    out: dict[str, object] = {
        "connect_and_snapshot_s": round(connect_s, 2),
        "subscribers_failed": failed,
        "events_delivered": len(ms),
        "keys_updated": len(sent),
        "watched_keys_updated": updates_of_watched,  # at least once
        "final_values_missing": final_missing,
        "delivery_p50_ms": round(percentile(ms, 50), 2),
        "delivery_p99_ms": round(percentile(ms, 99), 2),
        "delivery_max_ms": round(max(ms), 2) if ms else float("nan"),
    }
    if rss_before and rss_with:
        out["node_rss_mb"] = round(rss_with / 2**20, 1)
        out["rss_per_subscriber_kb"] = round((rss_with - rss_before) / cfg.subscribers / 1024, 2)
    if cpu_before is not None and cpu_after is not None:
        cores = (cpu_after - cpu_before) / cfg.duration_s
        out["node_cores_with_watches"] = round(cores, 3)
        if ms:
            out["node_cpu_us_per_event"] = round((cpu_after - cpu_before) / len(ms) * 1e6, 1)
    return out


def _produce(
    bootstrap: str, keys: list[str], rate: float, duration_s: float, show: Reporter
) -> dict[str, float]:
    """Random keys at ``rate`` per second for ``duration_s``; each key's last stamp."""
    producer = JsonProducer(bootstrap, "bench-watch", key_field="symbol", linger_ms=1)
    # Connected, its producer id acquired: the first stamped record must not wait for that.
    producer.produce({"symbol": "warm-up", "t": None})
    producer.flush(30)
    rng = random.Random(7)
    last: dict[str, float] = {}
    start = time.monotonic()
    n = 0
    while True:
        due = start + n / rate
        now = time.monotonic()
        if now - start >= duration_s:
            break
        if due > now:
            time.sleep(min(due - now, 0.01))
            continue
        key = keys[rng.randrange(len(keys))]
        stamp = time.time()
        producer.produce({"symbol": key, "t": stamp, "n": n})
        last[key] = stamp
        n += 1
        if n % 100 == 0:
            producer.poll(0)
            show.set("updates", n)
    producer.flush(30)
    show.set("updates", n)
    return last


def _rss(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except OSError:
        return None
