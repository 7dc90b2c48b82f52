"""`kiq`: the entry point; subcommands live one module each beside this one."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated

import typer

from kiq.cli import (
    bench,
    broker,
    demo,
    feed,
    new,
    pipeline,
    proxy,
    reset,
    serve,
    setup,
    spark,
    topics,
    up,
    versions,
)
from kiq.cli.context import CliState, run_or_exit
from kiq.logs import setup_logging

app = typer.Typer(
    name="kiq",
    help="Kafka topics and Spark-derived tables, answerable by key from any node.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(broker.app, name="broker")
app.add_typer(feed.app, name="feed")
app.add_typer(pipeline.app, name="pipeline")
app.add_typer(bench.app, name="bench")
app.add_typer(spark.app, name="spark")
app.add_typer(topics.app, name="topics")
# `kiq topics reset TABLE` (kiq.cli.reset) uses kiq.cli.topics: registered here, no cycle.
topics.app.command("reset")(reset.reset)
app.command("demo")(demo.demo)
app.command("serve")(serve.serve)
app.command("proxy")(proxy.proxy)
app.command("up")(up.up)
app.command("setup")(setup.setup)
app.command("new")(new.new)
app.command("versions")(versions.versions)
app.command("diff")(versions.diff)
app.command("switch")(versions.switch)
app.command("retire")(versions.retire)


def installed_version() -> str:
    """kiq's version as its installation records it ("unknown" for a source tree never
    installed)."""
    try:
        return version("kiq")
    except PackageNotFoundError:
        return "unknown"


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"kiq {installed_version()}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="TOML file (default: $KIQ_CONFIG, else ./kiq.toml)"),
    ] = None,
    log_level: Annotated[str, typer.Option(envvar="KIQ_LOG_LEVEL", help="DEBUG, INFO, ...")] = (
        "INFO"
    ),
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print kiq's version."
        ),
    ] = False,
) -> None:
    setup_logging(log_level)
    ctx.obj = CliState(config=config)


__all__ = ["app", "run_or_exit"]
