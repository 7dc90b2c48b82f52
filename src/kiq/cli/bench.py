"""`kiq bench SCENARIO`: measurements that start their own stack on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiq.cli.context import console, run_or_exit

app = typer.Typer(
    help="Benchmarks: each starts what it needs on loopback, then stops it.", no_args_is_help=True
)


@app.command()
def freshness(
    rate: Annotated[float, typer.Option(help="background ticks per second")] = 10_000,
    trigger: Annotated[str, typer.Option(help="microbatch or realtime")] = "microbatch",
    duration: Annotated[float, typer.Option(help="seconds of measurement")] = 60,
    warmup: Annotated[float, typer.Option(help="seconds before measuring")] = 20,
    symbols: Annotated[int, typer.Option(help="symbols in the background feed")] = 200,
    partitions: Annotated[int, typer.Option(help="partitions of the tick topic")] = 30,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Tick produced → visible on GET /v1/stocks/{symbol}: p50, p99, max."""
    from kiq.bench.freshness import FreshnessConfig, run_freshness
    from kiq.bench.stats import report

    cfg = FreshnessConfig(
        rate=rate,
        trigger=trigger,
        duration_s=duration,
        warmup_s=warmup,
        symbols=symbols,
        partitions=partitions,
    )
    with console.status(f"measuring freshness ({trigger}, {rate:g} ticks/s) ..."):
        result = run_or_exit(lambda: run_freshness(cfg))
    report("freshness", result, json_out, console)
