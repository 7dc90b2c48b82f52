"""Restore: how soon a node serves a table it has never seen, and a restart resumes.

A fresh node reads every partition from offset 0 into its stores before it is
ready; a restarted one (same data dir, SIGTERM before) reopens its stores, which
keep the offset they applied, and reads only the delta: here nothing. Wall
time counts from the process's start (Python and imports included), so
``restore_records_per_s`` carries the ~1-2 s a node needs to start and join its
group; ``materialize_records_per_s`` is the rate of the restore itself: records
over the longest time any replica took from being opened to its log end.

"Ready" here is ``/v1/health/ready`` answering 200 *and* ``/v1/metadata``
showing an active for every partition with each local replica serving (caught
up). The endpoint alone can answer 200 before the node's view holds the
group's assignment, while every replica is still restoring; that earlier time
is kept as ``*_ready_endpoint_s`` so the gap stays visible.
"""

from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass

from kiq.bench.cluster import restored_records, start_nodes, wait_applied
from kiq.bench.dataset import TABLE, key_of, load_quotes
from kiq.bench.progress import Reporter, peak_rss_mb, reporter, rss_mb
from kiq.bench.stack import local_stack
from kiq.errors import ConfigError, KiqError
from kiq.runtime.nodes import LocalNode

TOPIC = "bench-restore"
_POLL_S = 0.02


@dataclass(frozen=True)
class RestoreConfig:
    keys: int = 200_000
    ready_timeout_s: float = 120


def run_restore(cfg: RestoreConfig, progress: Reporter | None = None) -> dict[str, object]:
    """Fresh start, then restart from the same data dir: the two ways a node comes up."""
    if cfg.keys < 1:
        raise ConfigError("--keys must be positive")
    with reporter(progress, "restore") as show, local_stack(progress=show) as stack:
        show.phase(f"loading {cfg.keys:,} keys")
        last = load_quotes(stack.bootstrap, TOPIC, (key_of(i) for i in range(cfg.keys)))
        show.phase("restoring on a fresh node")
        started = time.monotonic()
        (node,) = start_nodes(stack, 1, [f"{TABLE}={TOPIC}"])
        # /proc, not the node's API: a figure that costs the node under test nothing
        show.watch("node RSS", lambda: rss_mb(node.proc.pid if node.proc else None), "MB")
        fresh_endpoint_s, fresh_s = until_serving(node, started, cfg.ready_timeout_s)
        show.set("fresh ready", round(fresh_s, 2), "s")
        show.set("records/s", round(cfg.keys / fresh_s))
        fresh_restored, materialize_s = restored_records(node, TABLE)
        show.phase("catching up")
        wait_applied([node], TABLE, last)  # all of it in the stores before the restart
        pid = node.proc.pid if node.proc else None
        held_mb, peak_mb = rss_mb(pid), peak_rss_mb(pid)  # holding every key, and the most
        show.set("peak RSS", peak_mb, "MB")
        show.phase("restarting from its data dir")
        node.stop()
        started = time.monotonic()
        node.start()
        restart_endpoint_s, restart_s = until_serving(node, started, cfg.ready_timeout_s)
        show.set("restart ready", round(restart_s, 2), "s")
        restart_restored, _ = restored_records(node, TABLE)
        pid = node.proc.pid if node.proc else None
        restart_peak_mb = peak_rss_mb(pid)
    return {
        "scenario": "restore",
        "keys": cfg.keys,
        "fresh_ready_s": round(fresh_s, 3),
        "restore_records_per_s": round(cfg.keys / fresh_s, 1),
        "fresh_restored_records": fresh_restored,
        "materialize_s": materialize_s,
        "materialize_records_per_s": round(fresh_restored / materialize_s, 1)
        if materialize_s > 0
        else 0.0,
        "fresh_ready_endpoint_s": round(fresh_endpoint_s, 3),
        "restart_ready_s": round(restart_s, 3),
        "restart_restored_records": restart_restored,
        "restart_ready_endpoint_s": round(restart_endpoint_s, 3),
        # resident memory of the node holding every key once restored, its peak while
        # restoring, and its peak when restarted from its data dir (/proc: VmRSS, VmHWM)
        "fresh_rss_mb": held_mb,
        "fresh_peak_rss_mb": peak_mb,
        "restart_peak_rss_mb": restart_peak_mb,
    }


def until_serving(
    node: LocalNode, started: float, timeout_s: float, table: str = TABLE
) -> tuple[float, float]:
    """Seconds from ``started`` to the ready endpoint's first 200, and to every replica of
    ``table`` serving."""
    deadline = started + timeout_s
    endpoint_s: float | None = None
    while time.monotonic() < deadline:
        if not node.running:
            raise KiqError(f"node {node.node_id} exited; see {node.log_file}:\n{node.tail()}")
        try:
            if endpoint_s is None:
                with urllib.request.urlopen(f"{node.url}/v1/health/ready", timeout=2):
                    endpoint_s = time.monotonic() - started
            if _all_serving(node, table):
                return endpoint_s, time.monotonic() - started
        except OSError:
            pass  # not listening yet, or 503 (HTTPError): still restoring
        time.sleep(_POLL_S)
    raise KiqError(f"node {node.node_id} not ready after {timeout_s:.0f}s; see {node.log_file}")


def _all_serving(node: LocalNode, table: str) -> bool:
    parts = node.metadata()["tables"][table]["partitions"]
    return all(
        p["active"] is not None
        and p["local"] is not None
        and p["local"]["state"] in ("active", "standby")
        for p in parts
    )
