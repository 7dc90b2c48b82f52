"""`kiq demo`: `kiq up` on the shipped stock-price application, with word count beside.

Broker → topics → one Spark driver running the stock and word-count pipelines
→ three serving nodes (the first on the front-door port) → the tick feed, as the
file ``kiq/apps/stocks/kiq.toml`` describes them. Everything lives under
``.kiq/demo`` and logs to files there; Ctrl-C stops it all in reverse order.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from kiq.cli.up import run_app

# The shipped application's file (`make demo` passes the same file to `kiq up`).
APP_PACKAGE = "kiq.apps.stocks"
APP_FILE = "kiq.toml"


def app_file() -> Path:
    return Path(str(resources.files(APP_PACKAGE).joinpath(APP_FILE)))


def demo(
    feed: Annotated[bool, typer.Option(help="run the simulated tick feed")] = True,
    rate: Annotated[float | None, typer.Option(help="ticks per second of the feed [500]")] = None,
    symbols: Annotated[int | None, typer.Option(help="symbols the feed simulates [100]")] = None,
    port: Annotated[
        int | None, typer.Option(help="the front door; nodes 2 and 3 take the next ports [8080]")
    ] = None,
    trigger: Annotated[str | None, typer.Option(help="microbatch or realtime")] = None,
    home: Annotated[
        Path | None, typer.Option(help="where the demo keeps its state and logs [.kiq/demo]")
    ] = None,
) -> None:
    """Start the local stock-price cluster, print example requests, stop on Ctrl-C."""
    feeds: list[list[str]] | None = None
    if not feed:
        feeds = []
    elif rate is not None or symbols is not None:
        feeds = [["kiq", "feed", "stocks", "--rate", f"{rate or 500:g}"]]
        feeds[0] += ["--symbols", str(symbols or 100)]
    run_app(app_file(), trigger=trigger, port=port, home=home, feeds=feeds)
