"""`kiq demo`: a local cluster to try kiq on. For now, the broker the rest builds on."""

from __future__ import annotations

import typer

from kiq import settings
from kiq.cli.context import CliState, console, run_or_exit
from kiq.runtime import LocalBroker


def demo(ctx: typer.Context) -> None:
    """Start the local demo cluster and say how to use and stop it."""
    state: CliState = ctx.obj
    broker = LocalBroker(run_or_exit(lambda: settings.load(settings.BrokerSettings, state.config)))
    with console.status(f"starting the broker on {broker.bootstrap} ..."):
        status = run_or_exit(broker.start)
    console.print(
        f"[green]kiq demo is up[/]: Kafka broker on {status.bootstrap} (pid {status.pid}), "
        f"logs in {status.log_file}\n"
        "stop it with:  make stop   (or: .venv/bin/kiq broker stop)",
        highlight=False,
    )
