"""A throwaway local stack for a benchmark: broker, pipelines and nodes on free ports.

The stack is `kiq up`'s (``kiq.runtime.stack``) in a temporary directory; this adds what
the benchmarks run on it (the stock application's topics, pipeline and tick feed).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kiq import catalog
from kiq.bench.probes import FEED_LINGER_MS
from kiq.bench.progress import Reporter
from kiq.catalog import CATALOG_TOPIC
from kiq.errors import KiqError
from kiq.feeds import TickProducer, TickSimulator, pace
from kiq.kafka import compacted, create_topics
from kiq.pipelines.runner import COMPACTED
from kiq.runtime.broker import LocalBroker
from kiq.runtime.nodes import LocalNode
from kiq.runtime.pipelines import LocalPipeline
from kiq.runtime.reaper import ending_together
from kiq.runtime.stack import LocalStack
from kiq.tables.declared import decode_catalog

CLUSTER = "kiq-bench"  # the benchmark nodes' consumer group


class TickFeed:
    """Simulated ticks into the stock pipeline's input at a steady rate, in a thread."""

    def __init__(self, bootstrap: str, symbols: int, rate: float, seed: int) -> None:
        self.producer = TickProducer(bootstrap, catalog.STOCK_TICKS, linger_ms=FEED_LINGER_MS)
        sim = TickSimulator(symbols, list(catalog.STOCK_EXCHANGES), seed=seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=lambda: pace(sim, self.producer, rate=rate, stop=self._stop.is_set),
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop producing and wait until the broker has every tick."""
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(30)


class Stack(LocalStack):
    """A benchmark's stack: its broker always its own, its nodes in one cluster."""

    broker: LocalBroker

    def add_node(self, node_id: str, tables: list[str], cluster: str = CLUSTER) -> LocalNode:
        return self.node(node_id, tables, extra_args=["--cluster", cluster]).start()

    def add_stock_pipeline(self, trigger: str, partitions: int) -> LocalPipeline:
        """The stock pipeline, started and past declaring its tables: nodes started after
        it serve them as it declares them (windowed, ranked), as `kiq up` has them."""
        pipeline = self.pipeline((catalog.STOCKS_PIPELINE,), trigger=trigger, partitions=partitions)
        pipeline.start()
        wait_declared(self.bootstrap, catalog.STOCK_TABLE_TOPICS, pipeline)
        return pipeline

    def stock_tables(self) -> list[str]:
        return list(catalog.STOCK_TABLES)

    def create_stock_topics(self, partitions: int) -> None:
        tables = dict.fromkeys(catalog.STOCK_TABLE_TOPICS, partitions)
        create_topics(self.bootstrap, {catalog.STOCK_TICKS: partitions})
        create_topics(self.bootstrap, tables, config=COMPACTED)
        create_topics(self.bootstrap, {catalog.STOCK_TICKS_DLQ: 1})


def wait_declared(
    bootstrap: str, tables: Iterable[str], pipeline: LocalPipeline, timeout_s: float = 180
) -> None:
    """Until the table catalog holds every one of ``tables`` (application ``kiq``)."""
    wanted = set(tables)
    deadline = time.monotonic() + timeout_s
    while not wanted <= set(decode_catalog(compacted.read_latest(bootstrap, CATALOG_TOPIC), "kiq")):
        if not pipeline.running:
            raise KiqError(
                f"the pipeline exited before declaring its tables; see {pipeline.log_file}"
            )
        if time.monotonic() > deadline:
            raise KiqError(f"the pipeline declared no {sorted(wanted)} in {timeout_s:.0f}s")
        time.sleep(0.5)


@contextmanager
def local_stack(keep: bool = False, progress: Reporter | None = None) -> Iterator[Stack]:
    """Broker on free loopback ports in a temporary directory; everything stops at the end.

    However the run ends: a SIGTERM (``timeout``, an operator's ``kill``) stops the stack
    as the end of a run does, and should this process die without that (a SIGKILL), its
    watchdog ends every process the run started (``kiq.runtime.reaper``).
    ``progress``: told when the broker starts and, after a run that did not fail, when
    everything stops (a failed one keeps the phase it failed in)."""
    root = Path(tempfile.mkdtemp(prefix="kiq-bench-"))
    with ending_together():
        broker = LocalBroker.on_free_ports(root / "broker")
        try:
            with Stack(root, broker) as stack:
                if progress is not None:
                    progress.phase("starting the broker")
                stack.start_broker()  # a broker that never answers is stopped too
                yield stack
                if progress is not None:
                    progress.phase("stopping the stack")
        finally:
            time.sleep(0.1)
            if not keep:
                shutil.rmtree(root, ignore_errors=True)
