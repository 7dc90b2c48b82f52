"""Soak: the whole stock application under mixed load for a long time, one node restarted
every ``restart_every_s``; what every process holds over time, errors and freshness.

The stack is the demo's: a broker, the stock pipeline in one Spark driver, three
nodes and a tick feed at ``feed_rate``. Readers go through the nodes in the
rotation at ``rate`` requests a second, mixing quotes (``GET /v1/stocks/{symbol}``),
multigets of 20 quotes and bar windows. A node being restarted leaves the rotation
first (drained for two seconds) and comes back once ready, as behind a load
balancer; n2 and n3 take turns, and n1, never restarted, carries the freshness
probes (a tick produced, then polled until its quote shows it) and is the
plainest view of a leak.

Every ``sample_every_s`` the resident memory and open files of each process (the
Spark driver with its JVM, the broker, every node, this process with the feed and
the readers) are written down. ``growth_second_half_mb`` is each process's RSS at
the end less at half time, ``growth_last_10_min_mb`` the same over the last ten
minutes: memory that levels off shows near zero there.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from kiq import catalog
from kiq.bench.probes import Prober
from kiq.bench.progress import Reporter, reporter, rss_mb
from kiq.bench.stack import TickFeed, local_stack
from kiq.bench.stats import percentile
from kiq.errors import ConfigError
from kiq.feeds.symbols import SYMBOLS
from kiq.runtime.nodes import LocalNode

_PAGE = 4096
_DRAIN_S = 2.0  # out of the rotation this long before a restart
_LAST_S = 600  # the window of ``growth_last_10_min_mb``


@dataclass(frozen=True)
class SoakConfig:
    duration_s: float = 1800
    restart_every_s: float = 300
    rate: int = 300  # reader requests a second over the nodes in rotation
    feed_rate: float = 2000  # ticks a second
    symbols: int = 100
    partitions: int = 6
    sample_every_s: float = 30
    probe_every_s: float = 5
    startup_timeout_s: float = 300


@dataclass
class _Reads:
    sent: int = 0
    errors: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)


def run_soak(cfg: SoakConfig, progress: Reporter | None = None) -> dict[str, object]:
    if cfg.duration_s <= 0 or cfg.rate < 1 or cfg.sample_every_s <= 0:
        raise ConfigError("--duration, --rate and --sample-every must be positive")
    symbols = [listing.symbol for listing in SYMBOLS[: cfg.symbols]]
    with reporter(progress, "soak") as show, local_stack(progress=show) as stack:
        show.phase("starting the pipeline")
        stack.create_stock_topics(cfg.partitions)
        pipeline = stack.add_stock_pipeline("microbatch", cfg.partitions)
        show.phase("starting n1, n2, n3")
        nodes = [stack.add_node(f"n{i}", stack.stock_tables()) for i in (1, 2, 3)]
        for node in nodes:
            node.wait_ready(120)
        show.phase("waiting for a first probe (Spark starting)")
        prober = Prober(nodes[0].url, stack.bootstrap)
        asyncio.run(prober.warm_up(cfg.startup_timeout_s))

        stop = threading.Event()
        feed = TickFeed(stack.bootstrap, cfg.symbols, cfg.feed_rate, seed=11)
        reads = _Reads()
        _watch(show, feed, reads, prober, nodes[0])
        quoting_s = min(30.0, cfg.duration_s / 10)
        show.phase("feeding before reads count", quoting_s)
        time.sleep(quoting_s)  # every symbol quoted before reads count

        rotation = [n.url for n in nodes]
        probing = threading.Thread(
            target=lambda: asyncio.run(prober.measure(cfg.duration_s, cfg.probe_every_s)),
            daemon=True,
        )
        reading = threading.Thread(
            target=lambda: asyncio.run(_read(lambda: rotation, symbols, cfg, reads, stop)),
            daemon=True,
        )
        started = time.monotonic()
        probing.start()
        reading.start()
        show.phase("measuring", cfg.duration_s, since=started)
        samples: list[dict[str, object]] = []
        restarts: list[dict[str, object]] = []
        next_restart = started + cfg.restart_every_s
        turn = 0
        while (now := time.monotonic()) < started + cfg.duration_s:
            samples.append(
                _sample(round(now - started), stack.broker.status().pid, pipeline, nodes)
            )
            _show_sample(show, samples[-1])
            if now >= next_restart:
                victim = nodes[1 + turn % 2]
                turn += 1
                rotation = [n.url for n in nodes if n is not victim]
                show.phase(f"restart {victim.node_id}", cfg.duration_s, since=started)
                restarts.append(_restart(victim, round(now - started)))
                rotation = [n.url for n in nodes]
                show.set("restarts", len(restarts))
                show.phase("measuring", cfg.duration_s, since=started)
                next_restart += cfg.restart_every_s
            time.sleep(
                max(0.0, min(cfg.sample_every_s, started + cfg.duration_s - time.monotonic()))
            )
        end_s = round(time.monotonic() - started)
        samples.append(_sample(end_s, stack.broker.status().pid, pipeline, nodes))
        _show_sample(show, samples[-1])
        show.phase("draining the readers and the feed")
        stop.set()
        reading.join(60)
        probing.join(60)
        feed.stop()
    return {
        "scenario": "soak",
        "duration_s": cfg.duration_s,
        "reads": reads.sent,
        "read_errors": len(reads.errors),
        "read_errors_sample": reads.errors[:5],
        "read_ms": _summary(reads.latencies_ms),
        "freshness_ms": {**_summary(prober.samples), "errors": len(prober.errors)},
        "restarts": restarts,
        "growth_second_half_mb": _growth(samples, samples[len(samples) // 2]),
        "growth_last_10_min_mb": _growth(samples, _at_or_after(samples, end_s - _LAST_S)),
        "samples": samples,
    }


def _watch(show: Reporter, feed: TickFeed, reads: _Reads, prober: Prober, n1: LocalNode) -> None:
    """The running figures: counters the threads keep anyway, read when the line is drawn."""
    show.watch("reads", lambda: reads.sent, rate=True)
    show.watch("read errors", lambda: len(reads.errors))
    show.watch("probes", lambda: len(prober.samples))
    show.watch("probe errors", lambda: len(prober.errors))
    show.watch("ticks", lambda: feed.producer.delivered, rate=True)
    show.watch("n1 RSS", lambda: rss_mb(n1.proc.pid if n1.proc else None), "MB")


def _show_sample(show: Reporter, sample: dict[str, object]) -> None:
    """The processes a watched figure does not cover, as of the last sample."""
    for name in ("pipeline", "broker"):
        figures = sample.get(name)
        if isinstance(figures, dict):
            show.set(f"{name} RSS", figures["rss_mb"], "MB")


async def _read(
    urls: Callable[[], list[str]],
    symbols: list[str],
    cfg: SoakConfig,
    reads: _Reads,
    stop: threading.Event,
) -> None:
    """Mixed requests at a fixed rate over ``urls()``; any 5xx or failed request is an error."""
    rng = random.Random(3)
    sem = asyncio.Semaphore(32)
    timeout = aiohttp.ClientTimeout(total=10)
    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=timeout) as session:
        tasks: set[asyncio.Task[None]] = set()
        n = 0
        while not stop.is_set():
            delay = started + n / cfg.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            base = rng.choice(urls())
            kind = rng.random()
            symbol = rng.choice(symbols)
            body = None
            if kind < 0.7:
                url = f"{base}/v1/stocks/{symbol}"
            elif kind < 0.9:
                url = f"{base}/v1/tables/{catalog.STOCK_QUOTES}/multiget"
                body = {"keys": rng.sample(symbols, 20)}
            else:
                # A symbol's latest bars: one key's windows, newest first
                bars = f"/v1/tables/{catalog.STOCK_BARS}/keys/{symbol}/windows"
                url = f"{base}{bars}?order=desc&limit=50"
            await sem.acquire()
            task = asyncio.create_task(_one(session, url, body, reads, sem))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
        if tasks:
            await asyncio.gather(*tasks)


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, list[str]] | None,
    reads: _Reads,
    sem: asyncio.Semaphore,
) -> None:
    reads.sent += 1
    began = time.monotonic()
    at = time.strftime("%H:%M:%S")
    try:
        method = "GET" if body is None else "POST"
        async with session.request(method, url, json=body) as resp:
            answer = await resp.read()
            if resp.status >= 500 or resp.status in (400, 405):  # 404: not quoted yet
                reads.errors.append(f"{at} {resp.status} {resp.url} {answer[:200]!r}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        reads.errors.append(f"{at} {type(exc).__name__}: {exc}")
    finally:
        reads.latencies_ms.append((time.monotonic() - began) * 1000)
        sem.release()


def _restart(node: LocalNode, at_s: int) -> dict[str, object]:
    """Restarts ``node``, already out of the rotation: drained first, as a load balancer
    does, so requests sent to it a moment before are answered, not cut off."""
    time.sleep(_DRAIN_S)
    began = time.monotonic()
    node.stop()
    node.start()
    node.wait_ready(120)
    return {"node": node.node_id, "at_s": at_s, "ready_after_s": round(time.monotonic() - began, 1)}


def _sample(
    at_s: int, broker_pid: int | None, pipeline: object, nodes: list[LocalNode]
) -> dict[str, object]:
    procs: dict[str, list[int]] = {"bench": [os.getpid()]}
    if broker_pid:
        procs["broker"] = [broker_pid]
    proc = getattr(pipeline, "proc", None)
    if proc is not None:
        procs["pipeline"] = _tree(proc.pid)
    for node in nodes:
        if node.proc is not None and node.running:
            procs[node.node_id] = [node.proc.pid]
    sample: dict[str, object] = {"at_s": at_s}
    for name, pids in procs.items():
        rss = sum(_rss(p) for p in pids)
        kinds = [_fd_kinds(p) for p in pids]
        sample[name] = {
            "rss_mb": round(rss / 2**20, 1),
            "fds": sum(k[0] for k in kinds),
            "sst_files": sum(k[1] for k in kinds),  # RocksDB's table files held open
            "sockets": sum(k[2] for k in kinds),
        }
    return sample


def _tree(root: int) -> list[int]:
    """``root`` and its descendants (the Spark driver's JVM is its child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _fd_kinds(pid: int) -> tuple[int, int, int]:
    """(open descriptors, of which RocksDB table files, of which sockets)."""
    total = sst = sockets = 0
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0, 0, 0
    for name in names:
        total += 1
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.endswith(".sst"):
            sst += 1
        elif target.startswith("socket:"):
            sockets += 1
    return total, sst, sockets


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 1),
        "p99": round(percentile(values, 99), 1),
        "max": round(max(values, default=float("nan")), 1),
    }


def _at_or_after(samples: list[dict[str, object]], at_s: float) -> dict[str, object]:
    """The first sample taken at ``at_s`` or later (the first one when ``at_s`` <= 0)."""
    return next((s for s in samples if float(str(s["at_s"])) >= at_s), samples[-1])


def _growth(samples: list[dict[str, object]], since: dict[str, object]) -> dict[str, float]:
    """Per process, RSS at the end less RSS in ``since`` (restarted nodes: their last run)."""
    if len(samples) < 2:
        return {}
    last = samples[-1]
    growth = {}
    for name, end in last.items():
        mid = since.get(name)
        if isinstance(end, dict) and isinstance(mid, dict):
            growth[name] = round(float(end["rss_mb"]) - float(mid["rss_mb"]), 1)
    return growth
