"""Lookups: point GETs per second and their latency, against the floor of the same stack.

Loads ``keys`` quotes into a 12-partition topic, starts ``nodes`` nodes serving
it as table ``t`` and waits until every replica applied everything. Then wrk
runs against kiq, the nodes stop, and the same wrk run (same script, paths,
connections, duration) goes against the floor (:mod:`kiq.bench.floor`), one
floor process per node wrk targeted, then the floor again answering with the
headers a kiq lookup carries (``floor_kiq_headers_*``): what the server charges
for kiq's response, apart from kiq's own work. Modes:

- ``local``: one wrk thread against n1, drawing only keys whose partition n1
  is active for: no forwarding, the best case.
- ``random``: any key, one wrk run with a thread per node (thread ``i`` holds
  its share of the connections to node ``i``), so about two thirds of the
  requests on three nodes are forwarded to the owner. Before it, on the same
  cluster, the ``local`` run against n1 alone: ``vs_local`` compares the two
  throughputs, and ``forwarded_cost_vs_local`` solves the CPU per request of
  both runs for what one forwarded lookup costs, in local lookups. Then every
  node answering keys it owns, wrk spread as in the random run
  (``spread_local_*``, ``forwarded_cost_vs_spread_local``): forwarding alone,
  without what spreading the load over the processes costs.
- ``redirect``: as ``random`` with ``?redirect=true``: a node that does not own
  the key answers 307 to the owner (counted in ``redirects``, not an error;
  wrk does not follow it). The floor ignores the parameter and answers 200.

With ``auth="jwt"`` the nodes check a bearer token on every request and sign
their forwarded batches (``kiq.bench.auth``); wrk sends the token to kiq and to
the floor alike, so the ratio to the floor shows what authentication costs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kiq.bench.auth import bench_auth
from kiq.bench.cluster import actives, start_nodes, wait_applied, wait_settled
from kiq.bench.dataset import PARTITIONS, TABLE, key_of, load_quotes
from kiq.bench.floor import LocalFloor
from kiq.bench.progress import Reporter, reporter
from kiq.bench.stack import local_stack
from kiq.bench.stats import cpu_seconds, with_children
from kiq.bench.worker_lag import worker_lag
from kiq.bench.wrk import WrkResult, run_wrk, write_script, wrk_executable
from kiq.errors import ConfigError
from kiq.partitioning import partition_for
from kiq.runtime.nodes import LocalNode

MODES = ("local", "random", "redirect")
AUTH_MODES = ("none", "jwt")
TOPIC = "bench-quotes"


@dataclass(frozen=True)
class LookupsConfig:
    nodes: int = 1
    keys: int = 10_000
    connections: int = 64
    duration_s: float = 10
    mode: str = "local"
    warmup_s: float = 2  # a wrk run before each measured one: connections, caches, allocators
    missing_keys: int = 0  # never-produced keys mixed into the draw: each request a 404
    auth: str = "none"  # jwt: nodes with --auth jwt, a bearer token on every request
    # Processes answering each node's port (kiq serve --workers). Above 1, the same nodes are
    # measured again with one, in the same run: what the workers add.
    workers: int = 1


def run_lookups(cfg: LookupsConfig, progress: Reporter | None = None) -> dict[str, object]:
    """Measure kiq, then the floor, with the same wrk run; the figures of both and their ratio."""
    if cfg.mode not in MODES:
        raise ConfigError(f"--mode must be one of {', '.join(MODES)}, not {cfg.mode!r}")
    if cfg.auth not in AUTH_MODES:
        raise ConfigError(f"--auth must be one of {', '.join(AUTH_MODES)}, not {cfg.auth!r}")
    if cfg.nodes < 1 or cfg.keys < 1 or cfg.connections < 1 or cfg.workers < 1:
        raise ConfigError("--nodes, --keys, --connections and --workers must be positive")
    wrk_executable()  # fail before starting anything
    with reporter(progress, "lookups") as show, local_stack(progress=show) as stack:
        keys = [key_of(i) for i in range(cfg.keys)]
        show.phase(f"loading {cfg.keys:,} keys")
        last = load_quotes(stack.bootstrap, TOPIC, keys)
        show.phase(f"starting {cfg.nodes} node(s)")
        auth = bench_auth(stack.home / "secrets") if cfg.auth == "jwt" else None
        nodes = start_nodes(
            stack,
            cfg.nodes,
            [f"{TABLE}={TOPIC}"],
            env=auth.env if auth else None,
            authorization=auth.authorization if auth else None,
            workers=cfg.workers,
        )
        headers = [f"Authorization: {auth.authorization}"] if auth else []
        wait_settled(nodes)
        show.phase("catching up")
        wait_applied(nodes, TABLE, last)
        drawn = keys + [key_of(i) for i in range(cfg.keys, cfg.keys + cfg.missing_keys)]
        owners = actives(nodes[0], TABLE)
        owned = {
            n.node_id: [k for k in drawn if owners.get(partition_for(k, PARTITIONS)) == n.node_id]
            for n in nodes
        }
        n1_keys = owned[nodes[0].node_id]
        targets = nodes
        if cfg.mode == "local":
            targets, drawn = nodes[:1], n1_keys
        suffix = "?redirect=true" if cfg.mode == "redirect" else ""
        paths = [f"/v1/tables/{TABLE}/keys/{k}{suffix}" for k in drawn]
        pids = with_children([n.proc.pid if n.proc else None for n in nodes])
        local: dict[str, object] = {}
        if cfg.mode == "random" and cfg.nodes > 1:
            local = _local_baseline(stack.home, owned, nodes, pids, cfg, headers, show)
        ports = [n.port for n in targets]
        kiq, kiq_cpu = _measure(
            "kiq", stack.home / "wrk-kiq", [paths], ports, pids, cfg, headers, show
        )
        seen: dict[str, object] = {}
        if cfg.workers > 1:
            show.phase("how long a worker takes to see a write")
            seen = worker_lag(nodes[0].url, stack.bootstrap, TOPIC, n1_keys[0])
        show.phase("stopping the nodes")
        for node in nodes:
            node.stop()
        single: dict[str, object] = {}
        if cfg.workers > 1:
            single = _single_worker(nodes, paths, ports, cfg, headers, show, stack.home, last)
        floor_run, floor_cpu = _floor("floor", stack.home, len(targets), paths, cfg, headers, show)
        if floor_run.rps:
            show.set("ratio", round(kiq.rps / floor_run.rps, 3))
        same_run, same_cpu = _floor(
            "floor with kiq's headers", stack.home, len(targets), paths, cfg, headers, show, True
        )
    bound = _machine_bound(kiq, kiq_cpu)
    return {
        "scenario": "lookups",
        "nodes": cfg.nodes,
        "workers": cfg.workers,
        "mode": cfg.mode,
        "auth": cfg.auth,
        "keys": cfg.keys,
        "keys_drawn": len(drawn),
        "connections": cfg.connections,
        "duration_s": cfg.duration_s,
        "wrk_threads": len(targets),
        "requests": kiq.requests,
        "throughput_rps": round(kiq.rps, 1),
        "floor_rps": round(floor_run.rps, 1),
        "ratio": round(kiq.rps / floor_run.rps, 3) if floor_run.rps else 0.0,
        "p50_ms": kiq.p50_ms,
        "p75_ms": kiq.p75_ms,
        "p90_ms": kiq.p90_ms,
        "p99_ms": kiq.p99_ms,
        "p999_ms": kiq.p999_ms,
        "errors": kiq.errors,
        "non_2xx": kiq.non_2xx,
        "socket_errors": kiq.socket_errors,
        "redirects": kiq.redirects,
        "floor_p50_ms": floor_run.p50_ms,
        "floor_p99_ms": floor_run.p99_ms,
        "floor_p999_ms": floor_run.p999_ms,
        "floor_errors": floor_run.errors,
        "cpu_us_per_request": _per_request(kiq_cpu, kiq.requests),
        "floor_cpu_us_per_request": _per_request(floor_cpu, floor_run.requests),
        # the floor answering with a kiq lookup's headers: what the server charges for them
        "floor_kiq_headers_rps": round(same_run.rps, 1),
        "floor_kiq_headers_cpu_us_per_request": _per_request(same_cpu, same_run.requests),
        **bound,
        **_forwarding_figures(local, kiq.rps, _per_request(kiq_cpu, kiq.requests), cfg.nodes),
        **_worker_figures(single, kiq.rps, bound),
        **seen,
    }


def _measure(
    label: str,
    directory: Path,
    paths: Sequence[Sequence[str]],
    ports: list[int],
    pids: list[int | None],
    cfg: LookupsConfig,
    headers: list[str],
    show: Reporter,
) -> tuple[WrkResult, float | None]:
    """One measured wrk run, and the CPU seconds the server processes spent in it;
    ``paths`` as ``write_script`` takes them (one set, or one per port)."""
    result, (cpu,) = _measure_each(label, directory, paths, ports, [pids], cfg, headers, show)
    return result, cpu


def _measure_each(
    label: str,
    directory: Path,
    paths: Sequence[Sequence[str]],
    ports: list[int],
    groups: Sequence[Sequence[int | None]],
    cfg: LookupsConfig,
    headers: list[str],
    show: Reporter,
) -> tuple[WrkResult, list[float | None]]:
    """``_measure``, with the CPU seconds of each group of processes (a node's) apart."""
    pids = [pid for group in groups for pid in group]
    directory.mkdir(parents=True, exist_ok=True)
    targets = [("127.0.0.1", port) for port in ports]
    script = write_script(directory, paths, targets, count_redirects=cfg.mode == "redirect")
    # CPU seconds, and per second the cores busy serving: gone (not shown) once they stop
    show.watch("server CPU", lambda: cpu_seconds(pids), "s", rate=True)
    if cfg.warmup_s >= 1:
        show.phase(f"{label}: warming up", cfg.warmup_s)
        run_wrk(script, targets, cfg.connections, cfg.warmup_s, headers)
    show.phase(f"{label}: measuring", cfg.duration_s)
    before = [cpu_seconds(group) for group in groups]
    result = run_wrk(script, targets, cfg.connections, cfg.duration_s, headers)
    after = [cpu_seconds(group) for group in groups]
    # wrk reports at its end only: its figures, once a run
    show.set(f"{label} req/s", round(result.rps, 1))
    show.set(f"{label} p99", result.p99_ms, "ms")
    show.set(f"{label} errors", result.errors)
    used = [None if b is None or a is None else a - b for b, a in zip(before, after, strict=True)]
    return result, used


def _floor(
    label: str,
    root: Path,
    count: int,
    paths: list[str],
    cfg: LookupsConfig,
    headers: list[str],
    show: Reporter,
    kiq_headers: bool = False,
) -> tuple[WrkResult, float | None]:
    """The floor, a process per node wrk targets, measured with the same wrk run."""
    name = "floor-kiq-headers" if kiq_headers else "floor"
    floors = [LocalFloor(cfg.keys, root / f"{name}{i}.log", kiq_headers) for i in range(count)]
    try:
        show.phase(f"starting the {label}")
        for floor in floors:
            floor.start()
        return _measure(
            label,
            root / f"wrk-{name}",
            [paths],
            [f.port for f in floors],
            [f.proc.pid if f.proc else None for f in floors],
            cfg,
            headers,
            show,
        )
    finally:
        for floor in floors:
            floor.stop()


def _single_worker(
    nodes: list[LocalNode],
    paths: list[str],
    ports: list[int],
    cfg: LookupsConfig,
    headers: list[str],
    show: Reporter,
    root: Path,
    last: dict[int, int],
) -> dict[str, object]:
    """The same nodes started again from their stores with one process each, measured with
    the same wrk run: what ``--workers`` is compared with."""
    show.phase("starting the nodes with one process each")
    for node in nodes:
        node.workers = 1
        node.start()
    try:
        wait_settled(nodes)
        wait_applied(nodes, TABLE, last)
        pids = [n.proc.pid if n.proc else None for n in nodes]
        label, where = "kiq, 1 process", root / "wrk-single"
        run, cpu = _measure(label, where, [paths], ports, pids, cfg, headers, show)
    finally:
        for node in nodes:
            node.stop()
    return {
        "rps": run.rps,
        "p99_ms": run.p99_ms,
        "cpu_us": _per_request(cpu, run.requests),
        "load_cpu_us": _per_request(run.cpu_s, run.requests),
    }


def _machine_bound(run: WrkResult, server_cpu: float | None) -> dict[str, object]:
    """What this machine's cores allow at the run's CPU per request, wrk's included.

    wrk runs on the cores it measures: a run can go no faster than the cores divided by
    what a request costs the servers and wrk together, however many processes serve.
    """
    server_us = _per_request(server_cpu, run.requests)
    load_us = _per_request(run.cpu_s, run.requests)
    cores = len(os.sched_getaffinity(0))
    out: dict[str, object] = {"cores": cores, "load_cpu_us_per_request": load_us}
    if server_us is not None and load_us is not None and server_us + load_us > 0:
        out["cores_bound_rps"] = round(cores * 1e6 / (server_us + load_us), 1)
    return out


def _worker_figures(
    single: dict[str, object], rps: float, bound: dict[str, object]
) -> dict[str, object]:
    if not single:
        return {}
    single_rps = float(single["rps"])  # type: ignore[arg-type]
    out = {
        "single_process_rps": round(single_rps, 1),
        "single_process_p99_ms": single["p99_ms"],
        "single_process_cpu_us_per_request": single["cpu_us"],
        "single_process_load_cpu_us_per_request": single["load_cpu_us"],
        "workers_vs_single": round(rps / single_rps, 3) if single_rps else 0.0,
    }
    ceiling = bound.get("cores_bound_rps")
    if isinstance(ceiling, float) and single_rps:
        # the most the workers' run could have shown over one process on these cores
        out["cores_bound_vs_single"] = round(ceiling / single_rps, 3)
    cpu_us, load_us, cores = single["cpu_us"], single["load_cpu_us"], bound.get("cores")
    if isinstance(cpu_us, float) and isinstance(load_us, float) and isinstance(cores, int):
        # the same, had each request cost the workers no more than it costs one process
        best = cores * 1e6 / (cpu_us + load_us)
        out["cores_bound_at_single_cost_vs_single"] = round(best / single_rps, 3)
    return out


def _local_baseline(
    root: Path,
    owned: dict[str, list[str]],
    nodes: list[LocalNode],
    pids: list[int | None],
    cfg: LookupsConfig,
    headers: list[str],
    show: Reporter,
) -> dict[str, object]:
    """What forwarding is measured against, on the same cluster: wrk on n1 with keys n1
    owns; then wrk on every node, as in the random run, each with keys it owns; then wrk
    on n1 with keys n2 owns, every lookup forwarded.

    The second spreads the load over the nodes' processes as the random run does, so
    what it costs over the first is the spreading (each process busy a third of the
    time on two shared cores), and what the random run costs over it is forwarding.
    The third is forwarding alone, one asker and one owner, each node's CPU apart.
    """
    n1 = nodes[0]
    one = [[f"/v1/tables/{TABLE}/keys/{k}" for k in owned[n1.node_id]]]
    run, cpu = _measure("local on n1", root / "wrk-local", one, [n1.port], pids, cfg, headers, show)
    each = [[f"/v1/tables/{TABLE}/keys/{k}" for k in owned[n.node_id]] for n in nodes]
    ports = [n.port for n in nodes]
    label = "local on every node"
    spread, spread_cpu = _measure(label, root / "wrk-spread", each, ports, pids, cfg, headers, show)
    label, where = f"{n1.node_id} forwarding to {nodes[1].node_id}", root / "wrk-forward"
    groups = [with_children([n.proc.pid if n.proc else None]) for n in nodes]
    forward, used = _measure_each(label, where, each[1:2], [n1.port], groups, cfg, headers, show)
    return {
        "rps": run.rps,
        "cpu_us": _per_request(cpu, run.requests),
        "spread_rps": spread.rps,
        "spread_cpu_us": _per_request(spread_cpu, spread.requests),
        "spread_errors": spread.errors,
        "forward_rps": forward.rps,
        "forward_errors": forward.errors,
        "forward_asker_cpu_us": _per_request(used[0], forward.requests),
        "forward_owner_cpu_us": _per_request(used[1], forward.requests),
        "forward_cpu_us": _per_request(_total(used), forward.requests),
    }


def _total(cpu: Sequence[float | None]) -> float | None:
    return None if any(c is None for c in cpu) else sum(c for c in cpu if c is not None)


def _forwarding_figures(
    local: dict[str, object], rps: float, cpu_us: float | None, nodes: int
) -> dict[str, object]:
    """Random mode against local lookups on the same cluster, in the same run.

    With ``nodes`` nodes and keys drawn evenly, a share ``f = 1 - 1/nodes`` of
    the requests is forwarded, so the CPU of all nodes per request is
    ``(1 - f) * local + f * forwarded``: solved here for a forwarded lookup's
    cost, in multiples of a local one; once against n1 alone answering local
    lookups, once against every node doing so (the load spread as in random mode).
    And n1 forwarding every lookup to n2 against n1's local lookups: forwarding with
    no lookup of the run local and no node both asking and owning.
    """
    if not local:
        return {}
    local_rps, local_cpu = float(local["rps"]), local["cpu_us"]  # type: ignore[arg-type]
    spread_rps, spread_cpu = float(local["spread_rps"]), local["spread_cpu_us"]  # type: ignore[arg-type]
    out: dict[str, object] = {
        "local_rps": round(local_rps, 1),
        "vs_local": round(rps / local_rps, 3) if local_rps else 0.0,
        "local_cpu_us_per_request": local_cpu,
        "spread_local_rps": round(spread_rps, 1),
        "spread_local_cpu_us_per_request": spread_cpu,
        "spread_local_errors": local["spread_errors"],
    }
    share = 1 - 1 / nodes
    for name, base in (("local", local_cpu), ("spread_local", spread_cpu)):
        if isinstance(base, float) and cpu_us is not None and base > 0:
            forwarded = (cpu_us - (1 - share) * base) / share
            out[f"forwarded_cost_vs_{name}"] = round(forwarded / base, 2)
    forward_cpu = local["forward_cpu_us"]
    out["forward_only_rps"] = round(float(local["forward_rps"]), 1)  # type: ignore[arg-type]
    out["forward_only_errors"] = local["forward_errors"]
    out["forward_only_asker_cpu_us_per_request"] = local["forward_asker_cpu_us"]
    out["forward_only_owner_cpu_us_per_request"] = local["forward_owner_cpu_us"]
    out["forward_only_cpu_us_per_request"] = forward_cpu
    if isinstance(local_cpu, float) and isinstance(forward_cpu, float) and local_cpu > 0:
        out["forward_only_cost_vs_local"] = round(forward_cpu / local_cpu, 2)
    return out


def _per_request(cpu_s: float | None, requests: int) -> float | None:
    """CPU µs per request: unlike req/s, barely moved by what else the box runs."""
    return None if cpu_s is None or requests == 0 else round(cpu_s / requests * 1e6, 1)
