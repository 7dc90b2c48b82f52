"""`kiq bench SCENARIO`: measurements that start their own stack on loopback.

The scenarios (``kiq.bench``) need the ``bench`` extra; this module imports them only
inside each command, so ``kiq`` starts without it and ``kiq bench`` says how to get it.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, cast

import typer
from rich.table import Table

from kiq import settings
from kiq.cli.context import console, err_console, run_or_exit
from kiq.cli.defaults import with_default
from kiq.errors import ConfigError, SetupError

# The modules pyproject.toml's `bench` extra brings: kiq.bench imports them, the runtime does not.
BENCH_EXTRA = ("aiohttp",)

app = typer.Typer(
    # "\\[" keeps rich's markup from reading [bench] as a style
    help="Benchmarks: each starts what it needs on loopback, then stops it. "
    "Needs the bench extra: pip install 'kiq\\[bench]'.",
    no_args_is_help=True,
)


@app.callback()
def needs_the_extra() -> None:
    """Stops every scenario before it starts anything when the bench extra is not installed."""
    run_or_exit(_check_extra)


def _check_extra() -> None:
    if any(importlib.util.find_spec(module) is None for module in BENCH_EXTRA):
        raise SetupError("kiq bench needs the bench extra: pip install 'kiq[bench]'")


@app.command()
def freshness(
    rate: Annotated[float, typer.Option(help="background ticks per second")] = 10_000,
    trigger: Annotated[str, typer.Option(help="realtime, microbatch or auto")] = "realtime",
    duration: Annotated[float, typer.Option(help="seconds of measurement")] = 60,
    warmup: Annotated[
        float, typer.Option(help="seconds of load before measuring (Spark warms up)")
    ] = 60,
    symbols: Annotated[int, typer.Option(help="symbols in the background feed")] = 200,
    partitions: Annotated[int, typer.Option(help="partitions of the tick topic")] = 30,
    serving: Annotated[
        bool,
        typer.Option(
            help="no pipeline: records written straight to the quotes table's topic, "
            "the serving side's share alone"
        ),
    ] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Tick produced → visible on GET /v1/stocks/{symbol}: p50, p99, max."""
    from kiq.bench.freshness import FreshnessConfig, run_freshness

    cfg = FreshnessConfig(
        rate=rate,
        trigger=trigger,
        duration_s=duration,
        warmup_s=warmup,
        symbols=symbols,
        partitions=partitions,
        serving=serving,
    )
    what = "serving side" if serving else trigger
    _measure("freshness", f"{what}, {rate:g} ticks/s", lambda: run_freshness(cfg), json_out)


@app.command()
def lookups(
    nodes: Annotated[
        int, typer.Option(help="serving nodes; random mode forwards 1 - 1/N of the lookups")
    ] = 1,
    keys: Annotated[int, typer.Option(help="keys loaded into the table")] = 10_000,
    connections: Annotated[int, typer.Option(help="wrk connections, split over its threads")] = 64,
    duration: Annotated[float, typer.Option(help="seconds of each measured wrk run")] = 10,
    mode: Annotated[
        str,
        typer.Option(
            help="local: keys n1 owns, on n1; random: any key on any node; "
            "redirect: random with ?redirect=true"
        ),
    ] = "local",
    warmup: Annotated[float, typer.Option(help="seconds of wrk before each run (0: none)")] = 2,
    workers: Annotated[
        int,
        typer.Option(
            help="processes per node (kiq serve --workers); above 1, also measured with 1"
        ),
    ] = 1,
    auth: Annotated[
        str,
        typer.Option(help="none, or jwt: nodes check a bearer token wrk sends on every request"),
    ] = "none",
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Point lookups/s and latency with wrk, against the floor (a bare ASGI app, same stack)."""
    from kiq.bench.lookups import LookupsConfig, run_lookups

    cfg = LookupsConfig(
        nodes=nodes,
        keys=keys,
        connections=connections,
        duration_s=duration,
        mode=mode,
        warmup_s=warmup,
        auth=auth,
        workers=workers,
    )
    status = f"{nodes} node(s) x {workers} process(es), {mode}, {connections} conns, auth {auth}"
    _measure("lookups", status, lambda: run_lookups(cfg), json_out)


@app.command()
def client(
    keys: Annotated[int, typer.Option(help="keys loaded into the table")] = 100_000,
    tasks: Annotated[int, typer.Option(help="lookups in flight at once (asyncio tasks)")] = 32,
    # 9 s per way scattered 0.66-1.06 (client/local) over six runs on 2 cores; 30 s settles
    duration: Annotated[float, typer.Option(help="seconds each way is measured, in 3 rounds")] = 30,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """kiq.client's lookups/s on 3 nodes against each sent to its owner, and to any node."""
    from kiq.bench.client import ClientBenchConfig, run_client_bench

    cfg = ClientBenchConfig(via="client", keys=keys, tasks=tasks, duration_s=duration)
    _measure("client", f"{keys:,} keys, {tasks} tasks", lambda: run_client_bench(cfg), json_out)


@app.command()
def proxy(
    keys: Annotated[int, typer.Option(help="keys loaded into the table")] = 100_000,
    tasks: Annotated[int, typer.Option(help="lookups in flight at once (asyncio tasks)")] = 32,
    # 9 s per way scattered 0.66-1.06 (client/local) over six runs on 2 cores; 30 s settles
    duration: Annotated[float, typer.Option(help="seconds each way is measured, in 3 rounds")] = 30,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Lookups/s through `kiq proxy` on 3 nodes against each sent to its owner, and to any
    node."""
    from kiq.bench.client import ClientBenchConfig, run_client_bench

    cfg = ClientBenchConfig(via="proxy", keys=keys, tasks=tasks, duration_s=duration)
    _measure("proxy", f"{keys:,} keys, {tasks} tasks", lambda: run_client_bench(cfg), json_out)


@app.command()
def restore(
    keys: Annotated[int, typer.Option(help="keys in the table to restore")] = 200_000,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """A fresh node: start → ready and records/s; then a restart from its data dir."""
    from kiq.bench.restore import RestoreConfig, run_restore

    _measure("restore", f"{keys:,} keys", lambda: run_restore(RestoreConfig(keys=keys)), json_out)


@app.command()
def consistency(
    accounts: Annotated[int, typer.Option(help="accounts of the bank")] = 1_000,
    transfers: Annotated[int, typer.Option(help="transfers per micro-batch")] = 200,
    interval_s: Annotated[float, typer.Option(help="seconds between micro-batches")] = 1.0,
    rounds: Annotated[int, typer.Option(help="rounds of plain and batch reads")] = 6,
    requests: Annotated[int, typer.Option(help="reads per round, kind and mode")] = 150,
    concurrency: Annotated[int, typer.Option(help="reads in flight at once")] = 4,
    settle_s: Annotated[float, typer.Option(help="the writer's run before each RSS")] = 20.0,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """The bank: ?consistent=batch reads beside plain ones (p50, sums that are wrong, RSS)."""
    from kiq.bench.consistency import ConsistencyConfig, run_consistency

    cfg = ConsistencyConfig(
        accounts=accounts,
        transfers=transfers,
        interval_s=interval_s,
        rounds=rounds,
        requests=requests,
        concurrency=concurrency,
        settle_s=settle_s,
    )
    _measure(
        "consistency", f"{accounts:,} accounts, 3 nodes", lambda: run_consistency(cfg), json_out
    )


@app.command()
def tables(
    keys: Annotated[
        int, typer.Option(help="keys of the plain, ranked, indexed and aging tables")
    ] = 100_000,
    entities: Annotated[int, typer.Option(help="entities of the windowed table")] = 1_000,
    windows: Annotated[int, typer.Option(help="one-minute windows per entity")] = 100,
    requests: Annotated[int, typer.Option(help="GETs of each kind, through n1")] = 2_000,
    concurrency: Annotated[int, typer.Option(help="GETs in flight at once")] = 16,
    rounds: Annotated[int, typer.Option(help="passes of each kind of read, in turns")] = 3,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Rank, index and TTL cost on restore, expiry speed, top-10, window and index equality
    reads beside lookups."""
    from kiq.bench.tables import TablesConfig, run_tables

    cfg = TablesConfig(
        keys=keys,
        entities=entities,
        windows=windows,
        requests=requests,
        concurrency=concurrency,
        rounds=rounds,
    )
    _measure("tables", f"{keys:,} keys, 3 nodes", lambda: run_tables(cfg), json_out)


@app.command()
def scans(
    keys: Annotated[int, typer.Option(help="keys in the table the scans page through")] = 200_000,
    scanners: Annotated[int, typer.Option(help="clients paging through every key")] = 4,
    page: Annotated[int, typer.Option(help="items per range page (its limit)")] = 1000,
    connections: Annotated[int, typer.Option(help="wrk connections for the lookups")] = 8,
    duration: Annotated[float, typer.Option(help="seconds of each measured wrk run")] = 10,
    pin: Annotated[
        bool, typer.Option(help="the node on the last core, the load generators on the others")
    ] = True,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Lookup latency on one node alone, then while clients page through the whole table."""
    from kiq.bench.scans import ScansConfig, run_scans

    cfg = ScansConfig(
        keys=keys,
        scanners=scanners,
        page=page,
        connections=connections,
        duration_s=duration,
        pin=pin,
    )
    what = f"{keys:,} keys, {scanners} scanners of {page}, 1 node"
    _measure("scans", what, lambda: run_scans(cfg), json_out)


@app.command()
def tenants(
    quota: Annotated[float, typer.Option(help="requests/s every tenant may ask")] = 200.0,
    flood: Annotated[float, typer.Option(help="red asks this many times its quota")] = 10.0,
    blue_share: Annotated[float, typer.Option(help="blue asks this share of its quota")] = 0.5,
    background: Annotated[
        float, typer.Option(help="a third tenant's requests/s in both ways (0: none)")
    ] = 2_000.0,
    rounds: Annotated[int, typer.Option(help="rounds of blue alone, then beside the flood")] = 4,
    duration: Annotated[float, typer.Option(help="seconds of each way in each round")] = 8,
    pin: Annotated[
        bool, typer.Option(help="the node on the last core, the load generators on the others")
    ] = True,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """One tenant asking 10x its quota beside another within it: the other's p99, alone and
    beside."""
    from kiq.bench.tenants import TenantsConfig, run_tenants

    cfg = TenantsConfig(
        quota=quota,
        flood=flood,
        blue_share=blue_share,
        background=background,
        rounds=rounds,
        duration_s=duration,
        pin=pin,
    )
    what = f"quota {quota:g}/s, red at {flood:g}x, 1 node"
    _measure("tenants", what, lambda: run_tenants(cfg), json_out)


@app.command()
def watch(
    subscribers: Annotated[int, typer.Option(help="SSE connections, one key each")] = 10_000,
    keys: Annotated[
        int, typer.Option(help="keys in the table (subscriber i watches i mod keys)")
    ] = 10_000,
    rate: Annotated[float, typer.Option(help="key updates per second")] = 1_000.0,
    duration: Annotated[float, typer.Option(help="seconds of updates")] = 20.0,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """One node, many watchers: delivery latency from the write, memory per subscriber, CPU."""
    from kiq.bench.watch import WatchConfig, run_watch

    cfg = WatchConfig(subscribers=subscribers, keys=keys, rate=rate, duration_s=duration)
    _measure(
        "watch", f"{subscribers:,} subscribers, {rate:,.0f}/s", lambda: run_watch(cfg), json_out
    )


@app.command()
def failover(
    keys: Annotated[int, typer.Option(help="keys in the table")] = 5_000,
    rate: Annotated[int, typer.Option(help="reader GETs per second over the live nodes")] = 2_000,
    after: Annotated[float, typer.Option(help="seconds of reading after the kill")] = 10,
    session_timeout_ms: Annotated[
        int | None,
        typer.Option(
            help=with_default(
                "the nodes' group session timeout", settings.ServeSettings, "session_timeout_ms"
            )
        ),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Three nodes under a reader load; kill -9 one: failed requests, recovery, staleness."""
    from kiq.bench.failover import FailoverConfig, run_failover

    cfg = FailoverConfig(keys=keys, rate=rate, after_s=after, session_timeout_ms=session_timeout_ms)
    _measure("failover", f"{rate:,} reads/s", lambda: run_failover(cfg), json_out)


@app.command()
def chaos(
    scenario: Annotated[
        str,
        typer.Argument(
            help="broker-restart, sigstop, kill, rolling-restart, add-remove, disk-full, "
            "large-values, topic-recreated or driver-kill"
        ),
    ],
    restarts: Annotated[
        int, typer.Option(help="broker-restart: how many times; driver-kill: kills [5]")
    ] = 1,
    outage: Annotated[float, typer.Option(help="broker-restart: seconds the broker is down")] = 30,
    duration: Annotated[
        float,
        typer.Option(
            help="sigstop: seconds stopped; kill: reads after the kill; add-remove: seconds joined"
        ),
    ] = 10,
    rate: Annotated[
        int | None,
        typer.Option(
            help="reader GETs per second [500 broker-restart, 200 data scenarios, else 800]"
        ),
    ] = None,
    readers: Annotated[int, typer.Option(help="node scenarios: concurrent readers")] = 8,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """A failure under a reader load: failed and worst reads, records lost, recovery."""
    from kiq.bench.chaos import BrokerRestartConfig, run_broker_restart
    from kiq.bench.chaos_data import DATA_SCENARIOS, DataChaosConfig, run_data_chaos
    from kiq.bench.chaos_nodes import NODE_SCENARIOS, NodeChaosConfig, run_node_chaos
    from kiq.bench.chaos_pipeline import DriverKillConfig, run_driver_kill

    if scenario == "broker-restart":
        cfg = BrokerRestartConfig(restarts=restarts, outage_s=outage, rate=rate or 500)
        what = f"{restarts} x {outage:g} s, {cfg.rate:,} reads/s"
        _measure(scenario, what, lambda: run_broker_restart(cfg), json_out)
        return
    if scenario == "driver-kill":
        kill_cfg = DriverKillConfig(kills=restarts if restarts > 1 else 5, rate=rate or 200)
        what = f"{kill_cfg.kills} kills, {kill_cfg.feed_rate:g} ticks/s, {kill_cfg.rate:,} reads/s"
        _measure(scenario, what, lambda: run_driver_kill(kill_cfg), json_out)
        return
    if scenario in DATA_SCENARIOS:
        data_cfg = DataChaosConfig(scenario, rate=rate or 200)
        _measure(scenario, f"{data_cfg.rate:,} reads/s", lambda: run_data_chaos(data_cfg), json_out)
        return
    if scenario not in NODE_SCENARIOS:
        choices = ", ".join(("broker-restart", *NODE_SCENARIOS, *DATA_SCENARIOS, "driver-kill"))
        raise typer.BadParameter(f"{scenario!r}: choose one of {choices}")
    node_cfg = NodeChaosConfig(scenario, fault_s=duration, rate=rate or 800, readers=readers)
    what = f"{node_cfg.rate:,} reads/s, {readers} readers"
    _measure(scenario, what, lambda: run_node_chaos(node_cfg), json_out)


@app.command()
def soak(
    duration: Annotated[float, typer.Option(help="seconds of mixed load")] = 1800,
    restart_every: Annotated[float, typer.Option(help="seconds between node restarts")] = 300,
    rate: Annotated[int, typer.Option(help="reader requests per second")] = 300,
    feed_rate: Annotated[float, typer.Option(help="ticks per second")] = 2000,
    sample_every: Annotated[float, typer.Option(help="seconds between samples")] = 30,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """The stock application under mixed load, a node restarted now and then: memory, files,
    errors and freshness over time."""
    from kiq.bench.soak import SoakConfig, run_soak

    cfg = SoakConfig(
        duration_s=duration,
        restart_every_s=restart_every,
        rate=rate,
        feed_rate=feed_rate,
        sample_every_s=sample_every,
    )
    _measure("soak", f"{duration:g} s, {rate:,} reads/s", lambda: run_soak(cfg), json_out)


@app.command()
def ingest(
    duration: Annotated[float, typer.Option(help="seconds at each rate")] = 15,
    rates: Annotated[
        str, typer.Option(help="tick rates to try in turn, ticks/s")
    ] = "10000,25000,50000",
    max_p99_ms: Annotated[float, typer.Option(help="freshness p99 a rate must stay under")] = 2000,
    warmup: Annotated[float, typer.Option(help="seconds at the first rate before measuring")] = 60,
    trigger: Annotated[str, typer.Option(help="realtime, microbatch or auto")] = "realtime",
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Feed the stock pipeline at rising rates: the highest whose freshness p99 holds."""
    from kiq.bench.ingest import IngestConfig, run_ingest

    steps = run_or_exit(lambda: _rates(rates))
    cfg = IngestConfig(
        rates=steps, step_s=duration, max_p99_ms=max_p99_ms, warmup_s=warmup, trigger=trigger
    )
    from kiq.bench.stats import machine_load, report

    _announce("ingest", f"at {rates} ticks/s")
    with machine_load() as load:
        result = run_or_exit(lambda: run_ingest(cfg))
    result = {**result, **load}
    summary = {k: v for k, v in result.items() if k != "steps"}
    rows = cast(list[dict[str, object]], result["steps"])  # one row of figures per rate

    report("ingest", summary, None, console)
    table = Table(title="ingest steps")
    for column in rows[0] if rows else []:
        table.add_column(column, justify="right")
    for step in rows:
        table.add_row(*(f"{v:,.1f}" if isinstance(v, float) else str(v) for v in step.values()))
    console.print(table)
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {json_out}")


def _rates(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(r) for r in text.split(","))
    except ValueError as exc:
        raise ConfigError(f"--rates takes numbers separated by commas, not {text!r}") from exc


def _measure(
    name: str, what: str, run: Callable[[], dict[str, object]], json_out: Path | None
) -> None:
    """Run one scenario, its progress on stderr; print its figures and write them as JSON."""
    from kiq.bench.stats import machine_load, report

    _announce(name, what)
    with machine_load() as load:
        result = run_or_exit(run)
    report(name, {**result, **load}, json_out, console)


def _announce(name: str, what: str) -> None:
    """What is measured, on stderr above the scenario's own progress (kiq.bench.progress):
    stdout keeps the figures alone."""
    err_console.print(f"measuring {name} ({what})", highlight=False, markup=False)
