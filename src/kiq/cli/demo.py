"""`kiq demo`: the whole stock-price system on one machine, until Ctrl-C.

Broker → topics → one Spark driver running the stock and word-count pipelines
→ three serving nodes (the first on the front-door port) → the tick feed.
Everything lives under ``.kiq/demo`` and logs to files there; Ctrl-C stops it
all in reverse order.
"""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from kiq import catalog, settings
from kiq.cli.context import CliState, console, run_or_exit
from kiq.errors import KiqError
from kiq.kafka import create_topics
from kiq.pipelines.runner import COMPACTED
from kiq.runtime import LocalBroker, LocalNode, LocalPipeline

PARTITIONS = 30


def demo(
    ctx: typer.Context,
    feed: Annotated[bool, typer.Option(help="run the simulated tick feed")] = True,
    rate: Annotated[float, typer.Option(help="ticks per second of the feed")] = 500,
    symbols: Annotated[int, typer.Option(help="symbols the feed simulates")] = 100,
    port: Annotated[
        int, typer.Option(help="the front door; nodes 2 and 3 take the next ports")
    ] = 8080,
    trigger: Annotated[str, typer.Option(help="microbatch or realtime")] = "microbatch",
    home: Annotated[Path, typer.Option(help="where the demo keeps its state and logs")] = Path(
        ".kiq/demo"
    ),
) -> None:
    """Start the local stock-price cluster, print example requests, stop on Ctrl-C."""
    state: CliState = ctx.obj
    broker = LocalBroker(run_or_exit(lambda: settings.load(settings.BrokerSettings, state.config)))
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    pipeline = LocalPipeline(
        (catalog.STOCKS_PIPELINE, catalog.WORDCOUNT_PIPELINE),
        broker.bootstrap,
        home / "checkpoints",
        home / "pipeline.log",
        trigger=trigger,
        partitions=PARTITIONS,
    )
    tables = [*catalog.STOCK_TABLES, *catalog.WORD_TABLES]
    nodes = [
        LocalNode(
            f"n{i}",
            broker.bootstrap,
            tables,
            home / f"n{i}",
            home / f"n{i}.log",
            port=port + i - 1,
            extra_args=["--cluster", "kiq-demo"],
        )
        for i in (1, 2, 3)
    ]
    feeder: subprocess.Popen[bytes] | None = None
    broker_was_running = broker.status().running
    try:
        with console.status("starting the Kafka broker ..."):
            status = run_or_exit(broker.start)
        console.print(f"[green]✓[/] Kafka broker on {status.bootstrap}", highlight=False)
        run_or_exit(lambda: _create_topics(broker.bootstrap))
        pipeline.start()
        console.print(
            f"[green]✓[/] Spark pipelines starting (log: {pipeline.log_file})", highlight=False
        )
        for node in nodes:
            node.start()
        with console.status("waiting for the serving nodes ..."):
            for node in nodes:
                run_or_exit(functools.partial(node.wait_ready, 120))
        console.print("[green]✓[/] serving nodes: " + ", ".join(n.url for n in nodes))
        if feed:
            log = (home / "feed.log").open("ab")
            cmd = [sys.executable, "-m", "kiq", "feed", "stocks", "--bootstrap", broker.bootstrap]
            cmd += ["--rate", str(rate), "--symbols", str(symbols)]
            feeder = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            console.print(f"[green]✓[/] tick feed: {rate:g} ticks/s over {symbols} symbols")
        _print_examples(f"http://127.0.0.1:{port}")
        while not stopping.wait(1.0):
            if not pipeline.running:
                raise KiqError(f"the Spark pipelines stopped; see {pipeline.log_file}")
    finally:
        console.print("stopping ...")
        if feeder is not None:
            feeder.terminate()
            feeder.wait(10)
        for node in nodes:
            node.stop()
        pipeline.stop()
        if not broker_was_running:
            broker.stop()
        console.print("kiq demo stopped")


def _create_topics(bootstrap: str) -> None:
    create_topics(bootstrap, dict.fromkeys((catalog.STOCK_TICKS, catalog.WORDS), PARTITIONS))
    compacted = (*catalog.STOCK_TABLE_TOPICS, catalog.WORD_COUNTS)
    create_topics(bootstrap, dict.fromkeys(compacted, PARTITIONS), config=COMPACTED)
    create_topics(bootstrap, {catalog.STOCK_TICKS_DLQ: 1})


def _print_examples(url: str) -> None:
    console.print(
        f"""
[bold]kiq demo is up[/] — the front door is {url} (any node answers any key).
Quotes appear once Spark's first batches are done (a minute or two on a laptop).

  curl -i {url}/v1/stocks/AAPL
  curl -s '{url}/v1/stocks?symbols=AAPL,MSFT,NVDA'
  curl -s '{url}/v1/stocks/AAPL/bars?from=2020-01-01T00:00Z'
  curl -s -XPOST {url}/v1/words -d '{{"text": "the quick brown fox jumps over the lazy dog"}}'
  curl -s {url}/v1/words/the
  curl -s {url}/v1/metadata?cluster=true
  curl -s {url}/metrics | grep kiq_

Ctrl-C stops everything.""",
        highlight=False,
    )
