"""Ingest: the highest tick rate at which the stock pipeline keeps quotes fresh.

The stock pipeline and one node run as in ``bench freshness``; once Spark has
started (a first probe visible) and settled at the first rate (``_settle``), the
feed runs at each rate of ``rates`` in turn for ``step_s`` seconds while probes
(:class:`kiq.bench.probes.Prober`) time produce → visible on the stock API. A
step holds when every probe became visible and their p99 stayed under
``max_p99_ms``. Steps stop at the first that does not hold: the backlog it
leaves would only make the next, faster ones look worse than they are, and
waiting out a stalled pipeline would cost minutes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kiq import catalog
from kiq.bench.probes import FEED_LINGER_MS, Prober
from kiq.bench.progress import Reporter, reporter
from kiq.bench.stack import local_stack
from kiq.bench.stats import percentile
from kiq.errors import ConfigError, KiqError
from kiq.feeds import RunStats, Tick, TickProducer, TickSimulator, pace


@dataclass(frozen=True)
class IngestConfig:
    rates: tuple[float, ...] = (10_000, 25_000, 50_000)
    step_s: float = 15
    warmup_s: float = 60  # at the first rate before the first step, at least (see freshness)
    settle_max_s: float = 60  # at most, waiting for a probe under max_p99_ms
    max_p99_ms: float = 2_000
    trigger: str = "realtime"
    symbols: int = 200
    partitions: int = 30
    probe_every_s: float = 0.1
    startup_timeout_s: float = 120  # until a first probe is visible: Spark has started


def run_ingest(cfg: IngestConfig, progress: Reporter | None = None) -> dict[str, object]:
    """Rising feed rates, freshness probed at each: where the pipeline stops keeping up."""
    if not cfg.rates or any(r <= 0 for r in cfg.rates):
        raise ConfigError("--rates must be positive ticks per second")
    steps: list[dict[str, object]] = []
    with reporter(progress, "ingest") as show, local_stack(progress=show) as stack:
        show.phase(f"starting the pipeline ({cfg.trigger})")
        stack.create_stock_topics(cfg.partitions)
        stack.add_stock_pipeline(cfg.trigger, cfg.partitions)
        show.phase("starting the node")
        node = stack.add_node("i1", stack.stock_tables())
        node.wait_ready(120)
        feed = TickProducer(stack.bootstrap, catalog.STOCK_TICKS, linger_ms=FEED_LINGER_MS)
        sim = TickSimulator(cfg.symbols, list(catalog.STOCK_EXCHANGES), seed=7).ticks()
        prober = Prober(node.url, stack.bootstrap)
        show.watch("ticks", lambda: feed.delivered, rate=True)
        show.watch("probes", lambda: len(prober.samples))
        show.watch("probe errors", lambda: len(prober.errors))
        show.phase("waiting for a first probe (Spark starting)")
        asyncio.run(prober.warm_up(cfg.startup_timeout_s))
        show.phase(f"settling at {cfg.rates[0]:,.0f} ticks/s", max(cfg.settle_max_s, cfg.warmup_s))
        settle_s = _settle(prober, sim, feed, cfg)
        for i, rate in enumerate(cfg.rates, 1):
            prober.reset()
            show.phase(f"step {i}/{len(cfg.rates)}: {rate:,.0f} ticks/s", cfg.step_s)
            with ThreadPoolExecutor(1) as pool:  # the feed beside the probes' event loop
                fed = pool.submit(_feed, sim, feed, rate, cfg.step_s)
                asyncio.run(prober.measure(cfg.step_s, cfg.probe_every_s, give_up_s=10))
                step = _step(rate, fed.result(60), prober, cfg.max_p99_ms)
            steps.append(step)
            if isinstance(p99 := step["p99_ms"], float):
                show.set("last p99", p99, "ms")
            if not step["held"]:
                break
            show.set("held", f"{rate:,.0f} ticks/s")
        feed.flush(10)
    held = [s for s in steps if s["held"]]
    return {
        "scenario": "ingest",
        "trigger": cfg.trigger,
        "step_s": cfg.step_s,
        "max_p99_ms": cfg.max_p99_ms,
        "settle_s": round(settle_s, 1),
        "max_rate_held": held[-1]["rate_target"] if held else 0.0,
        "max_rate_held_achieved": held[-1]["rate_achieved"] if held else 0.0,
        "steps": steps,
    }


def _settle(prober: Prober, ticks: Iterator[Tick], feed: TickProducer, cfg: IngestConfig) -> float:
    """Feed at the first rate until a probe shows up within ``max_p99_ms``, ``warmup_s`` at least.

    Spark's first batches with data (code generation, state stores opening) are
    far slower than the steady ones; measuring through them would fail the
    first step for a reason that has nothing to do with its rate. Gives up after
    ``settle_max_s`` and lets the first step tell; returns the seconds it took.
    """
    started = time.monotonic()
    deadline = started + max(cfg.settle_max_s, cfg.warmup_s)
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        pool.submit(_feed, ticks, feed, cfg.rates[0], deadline - started, stop.is_set)
        try:
            while (left := deadline - time.monotonic()) > 0:
                waited_ms = asyncio.run(prober.warm_up(left))
                if waited_ms < cfg.max_p99_ms and time.monotonic() - started >= cfg.warmup_s:
                    break
                time.sleep(0.2)
        except KiqError:
            pass  # no probe visible in the time left: the first step will say so
        finally:
            stop.set()
    return time.monotonic() - started


def _feed(
    ticks: Iterator[Tick],
    feed: TickProducer,
    rate: float,
    seconds: float,
    stop: Callable[[], bool] = lambda: False,
) -> RunStats:
    """``rate`` ticks/s for ``seconds`` or until ``stop``; given up 5 s late if it falls behind."""
    give_up = time.monotonic() + seconds + 5
    return pace(
        ticks,
        feed,
        rate=rate,
        duration_s=seconds,
        stop=lambda: stop() or time.monotonic() > give_up,
    )


def _step(rate: float, fed: RunStats, prober: Prober, max_p99_ms: float) -> dict[str, object]:
    samples = prober.samples
    p99 = percentile(samples, 99) if samples else float("inf")
    return {
        "rate_target": rate,
        "rate_achieved": round(fed.rate, 1),
        "probes": len(samples),
        "probe_errors": len(prober.errors),
        "p50_ms": round(percentile(samples, 50), 1) if samples else -1.0,
        "p99_ms": round(p99, 1) if samples else -1.0,
        "held": bool(samples) and not prober.errors and p99 < max_p99_ms,
    }
