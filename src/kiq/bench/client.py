"""Client and proxy: lookups/s through ``kiq.client`` (or ``kiq proxy``) against the ideal.

Three nodes serve ``keys`` quotes (table ``t``, 12 partitions). One load generator in
this process, ``tasks`` asyncio tasks each with one lookup in flight, draws random keys
for ``duration_s`` per run, every run with the same driver (httpx, the JSON value
parsed), so the runs differ only in where each request goes:

- ``local``: raw GETs, each sent to its key's active node, from a table computed before
  the run: the ideal a routing client can only approach (no forward, no routing cost);
- ``random``: raw GETs to a random node, as a plain load balancer would send them: two
  thirds are forwarded to the owner;
- ``client`` (``--via client``): ``kiq.client.AsyncClient.get``, which routes by itself;
- ``proxy`` (``--via proxy``): raw GETs to one `kiq proxy` process in front of the nodes,
  spread over as many httpx pools as there are nodes: httpcore scans a pool's connections
  on every request, so one pool holding every request in flight cost the load generator
  twice the CPU per lookup of the node ways' (py-spy, docs/benchmarks.md 2026-11-29),
  and the generator, not the proxy, set the figure.

The ways take turns, in three rounds of ``duration_s / 3`` each. Each reports its
throughput, p50/p99, the nodes' CPU per lookup and the change of their
``kiq_forwards_total``; the proxy way its own process's CPU too
(``proxy_cpu_us_per_lookup``). ``vs_owner`` is the routed way over ``local`` and
``vs_node`` over ``random``, in the same run.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from kiq.bench.cluster import actives, start_nodes, wait_applied, wait_settled
from kiq.bench.dataset import PARTITIONS, TABLE, key_of, load_quotes
from kiq.bench.progress import Reporter, reporter
from kiq.bench.stack import local_stack
from kiq.bench.stats import cpu_seconds, percentile
from kiq.client import AsyncClient
from kiq.client.core import NODE_LIMITS
from kiq.errors import ConfigError, KiqError
from kiq.partitioning import partition_for
from kiq.runtime.nodes import LocalNode
from kiq.runtime.proxies import LocalProxy

VIA = ("client", "proxy")
TOPIC = "bench-client-quotes"
ROUNDS = 3
Get = Callable[[str], Awaitable[Any]]


@dataclass(frozen=True)
class ClientBenchConfig:
    via: str = "client"
    keys: int = 100_000
    tasks: int = 32
    duration_s: float = 30.0
    warmup_s: float = 2.0
    nodes: int = 3


def run_client_bench(cfg: ClientBenchConfig, progress: Reporter | None = None) -> dict[str, object]:
    if cfg.via not in VIA:
        raise ConfigError(f"--via must be one of {', '.join(VIA)}, not {cfg.via!r}")
    if cfg.keys < 1 or cfg.tasks < 1 or cfg.duration_s <= 0 or cfg.nodes < 2:
        raise ConfigError("--keys, --tasks and --duration must be positive, --nodes at least 2")
    with reporter(progress, cfg.via) as show, local_stack(progress=show) as stack:
        keys = [key_of(i) for i in range(cfg.keys)]
        show.phase(f"loading {cfg.keys:,} keys")
        last = load_quotes(stack.bootstrap, TOPIC, keys)
        show.phase(f"starting {cfg.nodes} nodes")
        nodes = start_nodes(stack, cfg.nodes, [f"{TABLE}={TOPIC}"])
        wait_settled(nodes)
        show.phase("catching up")
        wait_applied(nodes, TABLE, last)
        urls = {n.node_id: n.url for n in nodes}
        owners = actives(nodes[0], TABLE)
        owner_url = {k: urls[owners[partition_for(k, PARTITIONS)]] for k in keys}
        node_urls = list(urls.values())
        proxy = None
        if cfg.via == "proxy":
            show.phase("starting the proxy")
            proxy = LocalProxy(node_urls, stack.home / "proxy.log").start()
        try:
            runs = _runs(cfg, nodes, keys, owner_url, node_urls, proxy, show)
        finally:
            if proxy is not None:
                proxy.stop()
    routed = runs[cfg.via]
    out: dict[str, object] = {
        "scenario": cfg.via,
        "nodes": cfg.nodes,
        "keys": cfg.keys,
        "tasks": cfg.tasks,
        "duration_s": cfg.duration_s,
    }
    for name, figures in runs.items():
        out.update({f"{name}_{k}": v for k, v in figures.items()})
    # The names: the client against each lookup sent to its owner, the proxy
    # against entering through any node (what the proxy replaces).
    out["vs_owner"] = round(routed["rps"] / runs["local"]["rps"], 3)
    out["vs_node"] = round(routed["rps"] / runs["random"]["rps"], 3)
    return out


def _any(urls: list[str]) -> Callable[[str], str]:
    return lambda _key: random.choice(urls)


def _raw(http: httpx.AsyncClient, url_of: Callable[[str], str]) -> Get:
    async def get(key: str) -> Any:
        response = await http.get(f"{url_of(key)}/v1/tables/{TABLE}/keys/{key}")
        if response.status_code != 200:
            raise KiqError(f"{key}: HTTP {response.status_code} {response.text[:200]}")
        return orjson.loads(response.content)

    return get


def _runs(
    cfg: ClientBenchConfig,
    nodes: list[LocalNode],
    keys: list[str],
    owner_url: dict[str, str],
    node_urls: list[str],
    proxy: LocalProxy | None,
    show: Reporter,
) -> dict[str, dict[str, float]]:
    """Each way warmed up, then measured in ``ROUNDS`` interleaved rounds (a busy machine's
    drift spread over all of them alike), one figure per way from all its rounds."""
    import uvloop

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    # The lookups of the run going on: its list's length, read when the line is drawn.
    current: list[list[float]] = [[]]
    show.watch("lookups", lambda: len(current[0]), rate=True)

    async def main() -> dict[str, dict[str, float]]:
        # The raw ways' httpx set up as the client's is (kiq.client.core.http_options: a
        # pool per node), so the ways differ in routing alone.
        mounts = {f"{u}/": httpx.AsyncHTTPTransport(limits=NODE_LIMITS) for u in node_urls}
        # The proxy's requests spread over as many pools as the node ways use (one a node).
        spread = [httpx.AsyncClient(timeout=10, limits=NODE_LIMITS) for _ in node_urls]
        async with (
            httpx.AsyncClient(timeout=10, limits=NODE_LIMITS, mounts=mounts) as http,
            AsyncClient(node_urls, timeout_s=10) as client,
        ):
            ways: dict[str, Get] = {
                "local": _raw(http, owner_url.__getitem__),
                "random": _raw(http, _any(node_urls)),
            }
            if proxy is None:
                ways["client"] = lambda key: client.get(TABLE, key)
            else:
                proxy_url = proxy.url
                pools = [_raw(c, lambda _key: proxy_url) for c in spread]
                ways["proxy"] = lambda key: random.choice(pools)(key)
            for name, get in ways.items():
                show.phase(f"warming up {name}", cfg.warmup_s)
                current[0] = []
                await _drive(get, keys, cfg.tasks, cfg.warmup_s, current[0])
            totals = {name: _Totals() for name in ways}
            for round_ in range(1, ROUNDS + 1):
                for name, get in ways.items():
                    show.phase(f"round {round_}/{ROUNDS}: {name}", cfg.duration_s / ROUNDS)
                    current[0] = []
                    forwards, cpu = _forwards(nodes), cpu_seconds(_pids(nodes))
                    relay = (
                        cpu_seconds([proxy.proc.pid])
                        if name == "proxy" and proxy and proxy.proc
                        else None
                    )
                    started, own = time.perf_counter(), time.process_time()
                    latencies = await _drive(
                        get, keys, cfg.tasks, cfg.duration_s / ROUNDS, current[0]
                    )
                    elapsed = time.perf_counter() - started
                    totals[name].own_cpu += time.process_time() - own
                    cpu_after = cpu_seconds(_pids(nodes))
                    total = totals[name]
                    total.latencies += latencies
                    total.elapsed += elapsed
                    if cpu is not None and cpu_after is not None:
                        total.cpu += cpu_after - cpu
                    if relay is not None and proxy is not None and proxy.proc is not None:
                        total.relay_cpu += (cpu_seconds([proxy.proc.pid]) or relay) - relay
                    total.forwards += _forwards(nodes) - forwards
                    show.set(f"{name}/s", round(len(total.latencies) / total.elapsed, 1))
            for c in spread:
                await c.aclose()
            return {name: total.figures() for name, total in totals.items()}

    return uvloop.run(main())


@dataclass
class _Totals:
    latencies: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    cpu: float = 0.0
    own_cpu: float = 0.0  # the load generator's (this process's), where the client runs
    relay_cpu: float = 0.0  # the proxy process's, for the proxy way
    forwards: float = 0.0

    def figures(self) -> dict[str, float]:
        count = len(self.latencies)
        return {
            "rps": round(count / self.elapsed, 1) if self.elapsed else 0.0,
            "p50_ms": round(percentile(self.latencies, 50) * 1000, 2),
            "p99_ms": round(percentile(self.latencies, 99) * 1000, 2),
            "node_cpu_us_per_lookup": round(self.cpu / count * 1e6, 1) if count else -1.0,
            "caller_cpu_us_per_lookup": round(self.own_cpu / count * 1e6, 1) if count else -1.0,
            "forwards": self.forwards,
        } | (
            {"cpu_us_per_lookup": round(self.relay_cpu / count * 1e6, 1)} if self.relay_cpu else {}
        )


async def _drive(
    get: Get, keys: list[str], tasks: int, duration_s: float, into: list[float] | None = None
) -> list[float]:
    """``tasks`` loops, each one lookup in flight, random keys, for ``duration_s``; the
    latencies go ``into`` a list the caller holds, if given, to be counted as they come."""
    latencies: list[float] = [] if into is None else into
    deadline = time.perf_counter() + duration_s

    async def loop(seed: int) -> None:
        rng = random.Random(seed)
        while (now := time.perf_counter()) < deadline:
            await get(rng.choice(keys))
            latencies.append(time.perf_counter() - now)

    await asyncio.gather(*(loop(i) for i in range(tasks)))
    return latencies


def _pids(nodes: list[LocalNode]) -> list[int | None]:
    return [n.proc.pid if n.proc else None for n in nodes]


def _forwards(nodes: list[LocalNode]) -> float:
    """``kiq_forwards_total`` summed over the nodes and outcomes."""
    total = 0.0
    for node in nodes:
        with urllib.request.urlopen(f"{node.url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        total += sum(
            float(v) for v in re.findall(r"^kiq_forwards_total\{[^}]*\} (\S+)$", text, re.M)
        )
    return total
