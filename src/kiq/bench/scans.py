"""Scans beside lookups: how much clients paging through a whole table slow point lookups.

Loads ``keys`` quotes into the benchmark topic (12 partitions), starts one node serving
it as table ``t`` and waits until it applied everything. Then wrk measures point lookups
twice on the same node, with the same script, connections and duration: alone, and
while ``scanners`` clients each page through every key with ``GET /range`` (``page``
items a page, the cursor of each page asking for the next, from the start again when
they reach the end). ``p99_vs_alone`` is the lookups' p99 with the scans over their p99
alone: what one caller's scan costs everyone else's lookups on that node.

On a machine of two cores or more the node's threads are pinned to the last core and
the load (wrk, the scanners, this process) to the others (``pinned``): on two cores
the scanners' own client work would otherwise take turns on the node's core, and the
figure would measure the machine's scheduler rather than the node.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx
import orjson

from kiq.bench.cluster import one_node
from kiq.bench.dataset import TABLE, key_of, load_quotes
from kiq.bench.progress import Reporter, reporter
from kiq.bench.stack import local_stack
from kiq.bench.stats import cpu_seconds, with_children
from kiq.bench.wrk import WrkResult, run_wrk, write_script, wrk_executable
from kiq.errors import ConfigError, KiqError

TOPIC = "bench-scans"


@dataclass(frozen=True)
class ScansConfig:
    keys: int = 200_000
    scanners: int = 4  # clients paging through every key, each on its own connection
    page: int = 1000  # range's limit
    connections: int = 8  # wrk's: few enough that the lookups do not saturate the node
    duration_s: float = 10
    warmup_s: float = 2
    pin: bool = True  # the node on a core of its own, the load on the others


@dataclass
class _Scanned:
    pages: int = 0
    items: int = 0
    passes: int = 0  # whole walks through the table
    errors: list[str] = field(default_factory=list)


def run_scans(cfg: ScansConfig, progress: Reporter | None = None) -> dict[str, object]:
    """Lookups alone, then beside ``cfg.scanners`` range pagers: both runs' figures."""
    if cfg.keys < 1 or cfg.scanners < 1 or cfg.connections < 1 or not 1 <= cfg.page <= 1000:
        raise ConfigError("--keys, --scanners and --connections must be positive, --page 1 to 1000")
    wrk_executable()
    with reporter(progress, "scans") as show, local_stack(progress=show) as stack:
        keys = [key_of(i) for i in range(cfg.keys)]
        show.phase(f"loading {cfg.keys:,} keys")
        last = load_quotes(stack.bootstrap, TOPIC, keys)
        node, pinned = one_node(stack, show, [f"{TABLE}={TOPIC}"], last, cfg.pin)
        pids = with_children([node.proc.pid if node.proc else None])
        directory = stack.home / "wrk-scans"
        directory.mkdir(parents=True, exist_ok=True)
        targets = [("127.0.0.1", node.port)]
        script = write_script(
            directory, [[f"/v1/tables/{TABLE}/keys/{k}" for k in keys]], targets, False
        )

        def lookups(label: str) -> tuple[WrkResult, float | None]:
            if cfg.warmup_s >= 1:
                show.phase(f"{label}: warming up", cfg.warmup_s)
                run_wrk(script, targets, cfg.connections, cfg.warmup_s)
            show.phase(f"{label}: measuring", cfg.duration_s)
            before = cpu_seconds(pids)
            result = run_wrk(script, targets, cfg.connections, cfg.duration_s)
            after = cpu_seconds(pids)
            show.set(f"{label} p99", result.p99_ms, "ms")
            cpu = None if before is None or after is None else after - before
            return result, cpu

        alone, alone_cpu = lookups("lookups alone")
        scanned = _Scanned()
        stop = threading.Event()
        url = f"{node.url}/v1/tables/{TABLE}/range"
        threads = [
            threading.Thread(target=_page_through, args=(url, cfg.page, stop, scanned))
            for _ in range(cfg.scanners)
        ]
        for thread in threads:
            thread.start()
        try:
            time.sleep(1)  # the scans under way before the lookups start
            started = time.monotonic()
            pages_before = scanned.pages
            beside, beside_cpu = lookups(f"lookups beside {cfg.scanners} scans")
            elapsed = time.monotonic() - started
            pages = scanned.pages - pages_before
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
        if scanned.errors:
            raise KiqError(f"a scan failed: {scanned.errors[0]}")
    return {
        "scenario": "scans",
        "pinned": pinned,
        "keys": cfg.keys,
        "scanners": cfg.scanners,
        "page": cfg.page,
        "connections": cfg.connections,
        "duration_s": cfg.duration_s,
        "alone_rps": round(alone.rps, 1),
        "alone_p50_ms": alone.p50_ms,
        "alone_p99_ms": alone.p99_ms,
        "alone_errors": alone.errors,
        "beside_scans_rps": round(beside.rps, 1),
        "beside_scans_p50_ms": beside.p50_ms,
        "beside_scans_p99_ms": beside.p99_ms,
        "beside_scans_errors": beside.errors,
        "p99_vs_alone": round(beside.p99_ms / alone.p99_ms, 2) if alone.p99_ms else None,
        "rps_vs_alone": round(beside.rps / alone.rps, 3) if alone.rps else None,
        "scan_pages_per_s": round(pages / elapsed, 1) if elapsed else None,
        "scan_items_per_s": round(pages * cfg.page / elapsed) if elapsed else None,
        "scan_passes": scanned.passes,
        "node_cpu_s_alone": None if alone_cpu is None else round(alone_cpu, 2),
        "node_cpu_s_beside_scans": None if beside_cpu is None else round(beside_cpu, 2),
    }


def _page_through(url: str, page: int, stop: threading.Event, into: _Scanned) -> None:
    """Page through the whole table again and again until ``stop``; errors recorded."""
    with httpx.Client(timeout=30) as client:
        cursor: str | None = None
        while not stop.is_set():
            params = {"limit": str(page)} | ({"cursor": cursor} if cursor else {})
            try:
                reply = client.get(url, params=params)
                reply.raise_for_status()
                cursor = _next_cursor(reply.content)
            except (httpx.HTTPError, ValueError) as exc:
                into.errors.append(f"{type(exc).__name__}: {exc}")
                return
            into.pages += 1
            if cursor is None:
                into.passes += 1


def _next_cursor(body: bytes) -> str | None:
    """The page's ``next_cursor``, read from the end of its body: the scanners share the
    machine with wrk and the node, and parsing every page whole would take a core."""
    at = body.rfind(b'"next_cursor":')
    if at < 0:
        raise ValueError(f"a range page without next_cursor: {body[:200]!r}")
    cursor = orjson.loads(body[at + len(b'"next_cursor":') :].split(b",", 1)[0].rstrip(b"}"))
    return cursor if isinstance(cursor, str) else None
