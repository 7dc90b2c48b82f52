"""``driver-kill``: the stock pipeline's Spark driver killed again and again during a feed.

Three nodes serve the stock tables; a feed produces ticks at ``feed_rate`` and a
reader asks for quotes through every node all along. The driver (Python and its
JVM) is killed with SIGKILL ``kills`` times, each at another moment of its life,
and started again; after each start a probe tick is timed until a node serves it
(the recovery). Once the feed stops, the ticks topic is read back whole and the
quotes, day statistics and bars every node serves must equal the reference
(:mod:`kiq.bench.stock_reference`) computed from it: a symbol served otherwise
counts as a record lost (or counted twice).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

import orjson

from kiq import catalog
from kiq.bench import stock_reference as reference
from kiq.bench.cluster import start_nodes, wait_settled
from kiq.bench.probes import Prober
from kiq.bench.progress import Reporter, reporter
from kiq.bench.reader import ReaderLoad, watch_reads
from kiq.bench.stack import TickFeed, local_stack
from kiq.errors import ConfigError, KiqError
from kiq.feeds.symbols import SYMBOLS
from kiq.kafka.records import read_topic
from kiq.runtime.nodes import LocalNode

# Seconds between one start of the driver and the next kill: starting, mid-batch, idle.
_PAUSES = (4.0, 1.0, 7.0, 2.5, 5.0)


@dataclass(frozen=True)
class DriverKillConfig:
    kills: int = 5
    feed_rate: float = 500  # ticks a second
    rate: int = 200  # reader GETs a second
    symbols: int = 30
    partitions: int = 6
    trigger: str = "microbatch"
    within_s: float = 240  # give up waiting for the pipeline or the reference after this


def run_driver_kill(cfg: DriverKillConfig, progress: Reporter | None = None) -> dict[str, object]:
    if cfg.kills < 1 or cfg.feed_rate <= 0 or cfg.rate < 1:
        raise ConfigError("--kills, the feed rate and --rate must be positive")
    symbols = [listing.symbol for listing in SYMBOLS[: cfg.symbols]]
    with reporter(progress, "driver-kill") as show, local_stack(progress=show) as stack:
        show.phase(f"starting the pipeline ({cfg.trigger})")
        stack.create_stock_topics(cfg.partitions)
        pipeline = stack.add_stock_pipeline(cfg.trigger, cfg.partitions)
        show.phase("starting 3 nodes")
        nodes = start_nodes(stack, 3, stack.stock_tables())
        wait_settled(nodes, cfg.within_s)
        show.phase("waiting for a first probe (Spark starting)")
        prober = Prober(nodes[0].url, stack.bootstrap)
        asyncio.run(prober.warm_up(cfg.within_s))

        feed = TickFeed(stack.bootstrap, cfg.symbols, cfg.feed_rate, seed=5)
        show.watch("ticks", lambda: feed.producer.delivered, rate=True)
        show.phase(f"feeding until all {len(symbols)} symbols are quoted")
        _until_quoted(nodes[0].url, symbols, cfg.within_s)  # before reads count
        urls = lambda: [n.url for n in nodes]  # noqa: E731
        kills: list[dict[str, object]] = []
        with ReaderLoad(urls, catalog.STOCK_QUOTES, symbols, cfg.rate, max_s=3600) as load:
            watch_reads(show, load)
            show.watch("kills", kills.__len__)
            for n, pause_s in enumerate(itertools.islice(itertools.cycle(_PAUSES), cfg.kills)):
                show.phase(f"driver running until kill {n + 1}/{cfg.kills}", pause_s)
                time.sleep(pause_s)
                pipeline.kill()
                pipeline.start()
                show.phase(f"driver restarting after kill {n + 1}/{cfg.kills}")
                recovered_ms = asyncio.run(prober.warm_up(cfg.within_s))
                kills.append({"after_s": pause_s, "recovery_s": round(recovered_ms / 1000, 1)})
            show.phase("stopping the feed")
            feed.stop()
            show.phase("until every node serves the reference")
            settled_at = time.monotonic()
            differ = _wait_for_reference(stack.bootstrap, nodes, cfg.within_s)
            exact_after_s = round(time.monotonic() - settled_at, 1)
        stats = load.stats
        died = [n.node_id for n in nodes if not n.running]
    return {
        "scenario": "driver-kill",
        "kills": cfg.kills,
        "trigger": cfg.trigger,
        "ticks": feed.producer.delivered,
        **stats.summary(),
        "records_lost": len(differ),
        "differ_sample": differ[:5],
        "recovery_s": max((float(str(k["recovery_s"])) for k in kills), default=0.0),
        "exact_after_feed_s": exact_after_s,
        "nodes_died": died,
        "each_kill": kills,
    }


def _until_quoted(url: str, symbols: list[str], timeout_s: float) -> None:
    """Until ``url`` serves a quote for every symbol (the rarest tick last)."""
    query = urllib.parse.quote(",".join(symbols))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = _get(f"{url}/v1/stocks?symbols={query}")
        if isinstance(batch, dict) and len(batch.get("quotes") or {}) == len(symbols):
            return
        time.sleep(0.5)
    raise KiqError(f"not every one of {len(symbols)} symbols was quoted within {timeout_s:.0f}s")


def _wait_for_reference(bootstrap: str, nodes: list[LocalNode], timeout_s: float) -> list[str]:
    """Until every node serves the reference of the whole ticks topic; the symbols that differ."""
    ticks = [
        {**orjson.loads(value), "_offset": offset}
        for value, _, offset in read_topic(bootstrap, catalog.STOCK_TICKS)
    ]
    quotes, bars = reference.quotes(ticks), reference.bars(ticks)
    symbols = sorted(quotes)
    deadline = time.monotonic() + timeout_s
    while True:
        differ = sorted(
            {
                f"{node.node_id}:{s}"
                for node in nodes
                for s, served in _served(node.url, symbols).items()
                if not reference.same([quotes[s], bars.get(s, [])], served)
            }
        )
        if not differ or time.monotonic() > deadline:
            return differ
        time.sleep(2)


def _served(url: str, symbols: list[str]) -> dict[str, list[object]]:
    """Each symbol's (quote, bars) as ``url`` serves them; a batch quote that differs from
    the single one serves as None."""
    batch = _get(f"{url}/v1/stocks?symbols={urllib.parse.quote(','.join(symbols))}")
    quotes = batch.get("quotes", {}) if isinstance(batch, dict) else {}
    out: dict[str, list[object]] = {}
    for s in symbols:
        one = _get(f"{url}/v1/stocks/{urllib.parse.quote(s)}")
        bars = _get(f"{url}/v1/stocks/{urllib.parse.quote(s)}/bars")
        quote = quotes.get(s) if one == quotes.get(s) else None
        out[s] = [quote, bars.get("bars") if isinstance(bars, dict) else None]
    return out


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return orjson.loads(r.read())
    except (OSError, ValueError):
        return None
