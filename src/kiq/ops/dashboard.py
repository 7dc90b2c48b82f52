"""What the dashboard at /ui reads besides /v1/metadata: its files, this node's figures, and
the pipelines' progress.

The page (``ui/``: one HTML, one script, one style sheet, shipped in the package, no
build step, nothing fetched from elsewhere) is open to anyone, as any static file;
the data it reads is not: ``/v1/status`` and ``/v1/pipelines`` ask the admin scope,
as ``/v1/metadata`` does, and the page sends the token it is given. ``status`` gives
counters and histogram buckets, not rates: the page divides the difference of two
polls by the time between them, so every figure covers the last few seconds.
"""

from __future__ import annotations

import time
from functools import cache
from importlib.resources import files
from typing import Any, Protocol

import orjson
from prometheus_client import Counter

from kiq.http_errors import NoRoute
from kiq.metrics import LATENCY_BUCKETS, RouteStats
from kiq.node import NodeView

# The page's files: name → media type. Only these are served.
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}
INDEX = "index.html"
# What the page may load and who may frame it: its own files, and its own origin's data
# (fetch and EventSource), no inline script or style, no plug-ins, never in a frame (a page
# elsewhere cannot dress it up to click for an admin whose token this tab holds).
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "img-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
# The page is small and changes with kiq: a browser asks again rather than keeping it.
HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",  # frame-ancestors, for browsers that predate it
    "X-Content-Type-Options": "nosniff",
}
_BOUNDS_MS = [round(b * 1000, 3) for b in LATENCY_BUCKETS]


class PipelineProgress(Protocol):
    """Where the pipelines' progress is read (``kiq.pipelines.progress.ProgressReader``: the
    topic their drivers publish it to)."""

    def summary(self) -> dict[str, Any]:
        """Each query's latest progress and whether it is stale; blocks while it reads."""
        ...


@cache
def asset(name: str) -> tuple[bytes, str]:
    """One of the page's files and its media type; ``NotFound`` for any other name."""
    if name == "":
        name = INDEX
    media = ASSETS.get(name)
    if media is None:
        raise NoRoute(f"no file {name!r} in /ui/ (the dashboard's are {', '.join(ASSETS)})")
    return (files("kiq.ops") / "ui" / name).read_bytes(), media


def quantile(counts: list[int], q: float) -> float | None:
    """The ``q`` quantile, in ms, of a latency histogram's per-bucket ``counts`` (the bounds
    are ``LATENCY_BUCKETS``, then +Inf), interpolated within its bucket as Prometheus'
    ``histogram_quantile`` does; None when it counted nothing. Above the last bound: it."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    below = 0
    for i, count in enumerate(counts):
        if count and below + count >= rank:
            if i >= len(_BOUNDS_MS):
                return _BOUNDS_MS[-1]
            lower = _BOUNDS_MS[i - 1] if i > 0 else 0.0
            return round(lower + (_BOUNDS_MS[i] - lower) * (rank - below) / count, 3)
        below += count
    return _BOUNDS_MS[-1]


def route_summary(stats: RouteStats) -> dict[str, Any]:
    buckets = list(stats.buckets)
    return {
        "requests": sum(stats.statuses.values()),
        "statuses": {str(s): n for s, n in sorted(stats.statuses.items())},
        "buckets": buckets,
        "sum_s": stats.sum,
        "p50_ms": quantile(buckets, 0.5),
        "p99_ms": quantile(buckets, 0.99),
    }


def _by_table(counter: Counter) -> dict[str, float]:
    """A counter labelled by table, as table → count."""
    found: dict[str, float] = {}
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                found[sample.labels["table"]] = sample.value
    return found


def status(node: NodeView) -> dict[str, Any]:
    """This node's figures: requests and their latency by route (each by its declared
    pattern, its read workers' included, as /metrics), and per table its replicas
    here (by state), how far behind they are, records applied and dead letters."""
    metrics = node.metrics
    applied = _by_table(metrics.records_applied)
    letters = _by_table(metrics.dead_letters)
    tables: dict[str, dict[str, Any]] = {}
    for name, runtime in node.tables.items():
        states: dict[str, int] = {}
        lags = []
        for p in range(runtime.partitions):
            replica = node.replica(name, p)
            if replica is None:
                continue
            states[replica.state.value] = states.get(replica.state.value, 0) + 1
            lags.append(replica.lag)
        tables[name] = {
            "partitions": runtime.partitions,
            "replicas": states,
            "max_lag": max(lags) if lags else None,
            "lag": sum(lags),
            "applied": applied.get(name, 0),
            "dead_letters": letters.get(name, 0),
        }
    return {
        "node": node.node_id,
        "time_ms": int(time.time() * 1000),
        "bounds_ms": _BOUNDS_MS,
        "routes": {name: route_summary(s) for name, s in sorted(metrics.route_totals().items())},
        "tables": tables,
    }


def status_json(node: NodeView) -> bytes:
    return orjson.dumps(status(node))


def pipelines_json(progress: PipelineProgress | None) -> bytes:
    """GET /v1/pipelines: the queries' progress; none on a node not given where to read it."""
    if progress is None:
        return orjson.dumps({"queries": [], "error": "this node does not read pipeline progress"})
    return orjson.dumps(progress.summary())
