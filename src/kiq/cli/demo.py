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

from kiq.cli.defaults import stating, with_default
from kiq.cli.up import run_app
from kiq.settings import AppSettings, FeedSettings, PipelineSettings

# The shipped application's file (`make demo` passes the same file to `kiq up`).
APP_PACKAGE = "kiq.apps.stocks"
APP_FILE = "kiq.toml"


def app_file() -> Path:
    return Path(str(resources.files(APP_PACKAGE).joinpath(APP_FILE)))


def demo(
    feed: Annotated[bool, typer.Option(help="run the simulated tick feed")] = True,
    rate: Annotated[
        float | None,
        typer.Option(help=with_default("ticks per second of the feed", FeedSettings, "rate")),
    ] = None,
    symbols: Annotated[
        int | None,
        typer.Option(help=with_default("symbols the feed simulates", FeedSettings, "symbols")),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            help=with_default(
                "the front door; nodes 2 and 3 take the next ports", AppSettings, "port"
            )
        ),
    ] = None,
    trigger: Annotated[
        str | None,
        typer.Option(
            help=with_default("auto, microbatch or realtime", PipelineSettings, "trigger")
        ),
    ] = None,
    home: Annotated[
        Path | None,
        typer.Option(help=stating("where the demo keeps its state and logs", ".kiq/demo")),
    ] = None,
) -> None:
    """Start the local stock-price cluster, print example requests, stop on Ctrl-C."""
    run_app(app_file(), trigger=trigger, port=port, home=home, feeds=_feeds(feed, rate, symbols))


def _feeds(feed: bool, rate: float | None, symbols: int | None) -> list[list[str]] | None:
    """The demo's feed: the file's (None), none, or `kiq feed stocks` with the flags given;
    what is not given is the ``[feed]`` setting, which the feed reads as any kiq command."""
    if not feed:
        return []
    if rate is None and symbols is None:
        return None
    command = ["kiq", "feed", "stocks"]
    if rate is not None:
        command += ["--rate", f"{rate:g}"]
    if symbols is not None:
        command += ["--symbols", str(symbols)]
    return [command]
