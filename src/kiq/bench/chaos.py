"""Chaos scenarios: a failure users meet, done to a local cluster under a steady reader load.

Each scenario reports, as JSON: the reads sent and failed, the worst read's latency,
the records lost (0, or the scenario failed) and how long recovery took.

Node failures (SIGSTOP, kill -9, rolling restart, a node added and removed)
are in ``chaos_nodes.py``; this module has the broker's, and the fresh writes
both check records by (``write_markers``, ``wait_markers``).

``broker-restart``: three nodes serve a table; the reader goes through all of them;
the broker is stopped (SIGTERM), left down for ``outage_s`` and started again,
``restarts`` times. After each start a fresh value is written and timed until
every node serves it. Counted too: nodes that died, and the log lines each node
wrote during each outage (librdkafka alone wrote 1,600 per node in 30 s before its
logs went through ``kiq.kafka.logs``).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import orjson

from kiq.bench.cluster import start_nodes, wait_applied, wait_settled
from kiq.bench.dataset import TABLE, key_of, load_quotes, quote
from kiq.bench.progress import Reporter, reporter
from kiq.bench.reader import ReaderLoad, watch_reads
from kiq.bench.stack import local_stack
from kiq.errors import ConfigError, KiqError
from kiq.kafka.records import JsonProducer
from kiq.runtime.nodes import LocalNode

TOPIC = "bench-chaos"


@dataclass(frozen=True)
class BrokerRestartConfig:
    restarts: int = 1
    outage_s: float = 30.0
    keys: int = 2_000
    rate: int = 500
    nodes: int = 3
    visible_within_s: float = 30.0  # give up waiting for a write after this


def run_broker_restart(
    cfg: BrokerRestartConfig, progress: Reporter | None = None
) -> dict[str, object]:
    if cfg.restarts < 1 or cfg.outage_s < 0 or cfg.nodes < 1:
        raise ConfigError("--restarts and --nodes must be positive, --outage not negative")
    with reporter(progress, "broker-restart") as show, local_stack(progress=show) as stack:
        keys = [key_of(i) for i in range(cfg.keys)]
        show.phase(f"loading {cfg.keys:,} keys")
        last = load_quotes(stack.bootstrap, TOPIC, keys)
        show.phase(f"starting {cfg.nodes} nodes")
        nodes = start_nodes(stack, cfg.nodes, [f"{TABLE}={TOPIC}"])
        wait_settled(nodes)
        show.phase("catching up")
        wait_applied(nodes, TABLE, last)
        outages: list[dict[str, object]] = []
        live = lambda: [n.url for n in nodes if n.running]  # noqa: E731
        reading_s = cfg.restarts * (
            cfg.outage_s + 180
        )  # a bound, not a duration: stopped at the end
        with ReaderLoad(live, TABLE, keys, cfg.rate, max_s=reading_s) as load:
            watch_reads(show, load)
            show.watch("nodes alive", lambda: sum(n.running for n in nodes))
            for i in range(cfg.restarts):
                marks = {n.node_id: _lines(n.log_file) for n in nodes}
                show.phase(f"broker down ({i + 1}/{cfg.restarts})", cfg.outage_s)
                stopped_at = time.monotonic()
                stack.broker.stop()
                time.sleep(cfg.outage_s)
                show.phase(f"broker starting ({i + 1}/{cfg.restarts})")
                stack.broker.start()
                started_at = time.monotonic()
                show.phase("a fresh write, until every node serves it")
                visible_s = _write_and_wait(stack.bootstrap, nodes, f"chaos-{i}", cfg)
                outages.append(
                    {
                        "broker_down_s": round(started_at - stopped_at, 1),
                        "write_visible_everywhere_s": visible_s,
                        "log_lines_per_node": {
                            n.node_id: _lines(n.log_file) - marks[n.node_id] for n in nodes
                        },
                        "nodes_alive": sum(n.running for n in nodes),
                    }
                )
        stats = load.stats
        died = [n.node_id for n in nodes if not n.running]  # before the stack stops them
    visible = [_visible_s(o) for o in outages]
    return {
        "scenario": "broker-restart",
        "restarts": cfg.restarts,
        "outage_s": cfg.outage_s,
        "nodes": cfg.nodes,
        **stats.summary(),
        "nodes_died": died,
        "records_lost": visible.count(None),
        "max_log_lines_per_node_per_outage": max(
            (c for o in outages for c in _counts(o)), default=0
        ),
        "max_write_visible_s": max(
            (v if v is not None else cfg.visible_within_s for v in visible), default=0.0
        ),
        "outages": outages,
    }


def _write_and_wait(
    bootstrap: str, nodes: list[LocalNode], marker: str, cfg: BrokerRestartConfig
) -> float | None:
    """Write a new value for one key; seconds until every live node serves it (None: never)."""
    written_at = time.monotonic()
    write_markers(bootstrap, TOPIC, [key_of(0)], marker, cfg.visible_within_s)
    lost = wait_markers([n for n in nodes if n.running], [key_of(0)], marker, cfg.visible_within_s)
    return None if lost else round(time.monotonic() - written_at, 3)


def write_markers(
    bootstrap: str, topic: str, keys: list[str], marker: str, timeout_s: float
) -> None:
    """A fresh value for each key: its quote with ``"marker": marker``; raises if not written."""
    producer = JsonProducer(bootstrap, topic, key_field="symbol", linger_ms=0)
    for key in keys:
        producer.produce({**quote(key), "marker": marker})
    if producer.flush(timeout_s) or producer.failed:
        raise KiqError(f"the broker did not take the writes: {producer.last_error}")


def wait_markers(nodes: list[LocalNode], keys: list[str], marker: str, timeout_s: float) -> int:
    """Polls every node for every key until all serve ``marker``; the keys some never did."""
    deadline = time.monotonic() + timeout_s
    waiting = [(n, k) for n in nodes for k in keys]
    while waiting and time.monotonic() < deadline:
        waiting = [(n, k) for n, k in waiting if _served(n, k) != marker]
        if waiting:
            time.sleep(0.05)
    return len({k for _, k in waiting})


def _served(node: LocalNode, key: str) -> str | None:
    try:
        with urllib.request.urlopen(f"{node.url}/v1/tables/{TABLE}/keys/{key}", timeout=2) as r:
            marker = orjson.loads(r.read()).get("marker")
            return marker if isinstance(marker, str) else None
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as f:
        return sum(1 for _ in f)


def _visible_s(outage: dict[str, object]) -> float | None:
    value = outage["write_visible_everywhere_s"]
    return value if isinstance(value, float) else None


def _counts(outage: dict[str, object]) -> list[int]:
    counts = outage["log_lines_per_node"]
    return list(counts.values()) if isinstance(counts, dict) else []
