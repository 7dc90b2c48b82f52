"""Freshness: from a tick's produce to its visibility through the stock API.

A background feed keeps the pipeline busy at ``rate`` ticks/s; meanwhile probe
ticks for symbols the feed never uses are produced with the wall clock as
``ts``, and each probe's symbol is polled on the API until its ``updated_at``
reaches the probe's ``ts``. The figure is that wait, per probe.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import msgspec

from kiq import catalog
from kiq.bench.probes import FEED_LINGER_MS, Prober
from kiq.bench.progress import Reporter, reporter
from kiq.bench.stack import local_stack
from kiq.bench.stats import percentile
from kiq.catalog import PROGRESS_TOPIC
from kiq.feeds import TickProducer, TickSimulator, pace
from kiq.kafka import compacted
from kiq.progress import QueryProgress


@dataclass(frozen=True)
class FreshnessConfig:
    rate: float = 10_000
    trigger: str = "realtime"
    duration_s: float = 60
    # Under load a new Spark driver's batches keep shrinking for about a minute (the JVM
    # compiles Spark's code as it runs): measuring earlier measures the warm-up.
    warmup_s: float = 60
    symbols: int = 200
    partitions: int = 30
    probe_every_s: float = 0.1
    startup_timeout_s: float = 300
    # The serving side alone: no pipeline; probes and load go straight to the quotes
    # table's topic, so the figure is record in the table topic → visible on a node.
    serving: bool = False


def run_freshness(cfg: FreshnessConfig, progress: Reporter | None = None) -> dict[str, object]:
    with reporter(progress, "freshness") as show, local_stack(progress=show) as stack:
        stack.create_stock_topics(cfg.partitions)
        if not cfg.serving:
            show.phase(f"starting the pipeline ({cfg.trigger})")
            stack.add_stock_pipeline(cfg.trigger, cfg.partitions)
        show.phase("starting the node")
        node = stack.add_node("f1", stack.stock_tables())
        node.wait_ready(120)
        stop = threading.Event()
        topic = catalog.STOCK_QUOTES if cfg.serving else catalog.STOCK_TICKS
        feed = TickProducer(stack.bootstrap, topic, linger_ms=FEED_LINGER_MS)
        sim = TickSimulator(cfg.symbols, list(catalog.STOCK_EXCHANGES), seed=7)
        fed = {}

        def run_feed() -> None:
            fed["stats"] = pace(sim, feed, rate=cfg.rate, stop=stop.is_set)
            feed.flush(30)

        thread = threading.Thread(target=run_feed, daemon=True)
        prober = Prober(node.url, stack.bootstrap, topic)
        show.watch("ticks", lambda: feed.delivered, rate=True)
        show.watch("probes", lambda: len(prober.samples))
        show.watch("last probe", lambda: _last(prober.samples), "ms")
        show.watch("probe errors", lambda: len(prober.errors))
        try:
            # Spark first (a probe alone), then the load, then a settling time, then measure.
            show.phase("waiting for a first probe" + ("" if cfg.serving else " (Spark starting)"))
            asyncio.run(prober.warm_up(cfg.startup_timeout_s))
            thread.start()
            show.phase(f"warming up at {cfg.rate:,.0f} ticks/s", cfg.warmup_s)
            time.sleep(cfg.warmup_s)
            show.phase("measuring", cfg.duration_s)
            before = None if cfg.serving else ended_batches(stack.bootstrap)
            asyncio.run(prober.measure(cfg.duration_s, cfg.probe_every_s))
            after = None if cfg.serving else ended_batches(stack.bootstrap)
            show.phase("stopping the feed")
        finally:
            stop.set()
            if thread.is_alive():
                thread.join(60)
        stats = fed.get("stats")
    samples = prober.samples
    out: dict[str, object] = {
        "scenario": "freshness-serving" if cfg.serving else "freshness",
        "trigger": "none" if cfg.serving else cfg.trigger,
        "rate_target": cfg.rate,
        "rate_achieved": round(stats.rate, 1) if stats else 0.0,
        "samples": len(samples),
        "p50_ms": round(percentile(samples, 50), 1),
        "p99_ms": round(percentile(samples, 99), 1),
        "max_ms": round(max(samples), 1) if samples else float("nan"),
        "errors": len(prober.errors),
    }
    if before is not None and after is not None:
        # Batches one query ended while probes were measured: the boundaries the window
        # holds (its figures show what a boundary costs only if there is one). A Real-Time
        # Mode query's, where the pipeline has one: its micro-batch queries end many.
        ended = {q: batch - before.get(q, ("", -1))[1] for q, (_, batch) in after.items()}
        realtime = [n for q, n in ended.items() if after[q][0] == "realtime"]
        out["batch_boundaries_in_window"] = max(realtime or ended.values(), default=0)
    return out


def ended_batches(bootstrap: str) -> dict[str, tuple[str, int]]:
    """Each query's trigger and last ended batch, from the pipelines' progress records."""
    batches = {}
    for key, raw in compacted.read_latest(bootstrap, PROGRESS_TOPIC, timeout_s=10).items():
        try:
            record = msgspec.json.decode(raw, type=QueryProgress)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue  # not a progress record this kiq reads: not counted
        batches[key] = (record.trigger, record.batch)
    return batches


def _last(samples: list[float]) -> float | None:
    """The latest probe's wait: a list read from another thread, never indexed when empty."""
    return round(samples[-1], 1) if samples else None
