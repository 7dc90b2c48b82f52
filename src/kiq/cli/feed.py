"""`kiq feed stocks|replay`: ticks into a Kafka topic, simulated or from a file."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from kiq import settings
from kiq.cli.context import CliState, console, err_console, kafka_security, run_or_exit
from kiq.cli.defaults import stating, with_default
from kiq.errors import BrokerError, ConfigError
from kiq.feeds import (
    BadLine,
    FeedError,
    RunStats,
    StopReason,
    TickFile,
    TickProducer,
    TickSimulator,
    pace,
)
from kiq.kafka import KafkaSecurity, create_topics, ping, topic_partitions
from kiq.settings import FeedSettings

app = typer.Typer(
    help="Feed ticks into Kafka: a simulated stock market, or a file replayed.",
    no_args_is_help=True,
)

Bootstrap = Annotated[
    str | None,
    typer.Option(help=with_default("Kafka bootstrap servers", FeedSettings, "bootstrap")),
]
Topic = Annotated[
    str | None, typer.Option(help=with_default("topic to produce to", FeedSettings, "topic"))
]
CreateTopic = Annotated[
    bool | None,
    typer.Option(
        "--create-topic/--no-create-topic",
        help=with_default("create the topic when missing", FeedSettings, "create_topic"),
    ),
]
Partitions = Annotated[
    int | None,
    typer.Option(
        help=with_default("partitions of a topic kiq creates", FeedSettings, "partitions")
    ),
]

_SHOWN_BAD_LINES = 20


@app.command()
def stocks(
    ctx: typer.Context,
    bootstrap: Bootstrap = None,
    topic: Topic = None,
    symbols: Annotated[
        int | None,
        typer.Option(help=with_default("how many symbols tick", FeedSettings, "symbols")),
    ] = None,
    exchanges: Annotated[
        str | None, typer.Option(help=with_default("comma-separated", FeedSettings, "exchanges"))
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help=with_default("ticks per second", FeedSettings, "rate"))
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(help=stating("seconds to run", "until Ctrl-C"), show_default=False),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help=with_default("same seed, same ticks", FeedSettings, "seed"))
    ] = None,
    create_topic: CreateTopic = None,
    partitions: Partitions = None,
) -> None:
    """Simulate a stock market: quotes, and trades on some, for N symbols on several exchanges."""
    conf, security = _settings(
        ctx,
        bootstrap=bootstrap,
        topic=topic,
        symbols=symbols,
        exchanges=exchanges,
        rate=rate,
        seed=seed,
        create_topic=create_topic,
        partitions=partitions,
    )
    if duration is not None and duration <= 0:
        run_or_exit(_fail("--duration must be a positive number of seconds (omit it to run on)"))
    run_or_exit(lambda: _prepare_topic(conf, security))
    simulator = TickSimulator(conf.symbols, conf.exchanges, conf.seed, trade_ratio=conf.trade_ratio)
    until = f"for {duration:g} s" if duration is not None else "until Ctrl-C"
    console.print(
        f"feeding [bold]{conf.topic}[/] on {escape(conf.bootstrap)}: {conf.symbols} symbols on "
        f"{','.join(conf.exchanges)}, {conf.rate:,.0f} ticks/s {until}",
        highlight=False,
    )
    expected = int(conf.rate * duration) if duration is not None else None
    outcome = run_or_exit(
        lambda: _feed(
            simulator.ticks(),
            conf,
            security,
            rate=conf.rate,
            duration_s=duration,
            total=expected,
            completed=lambda s: s.produced,
        )
    )
    _finish(outcome, conf, "simulated")


@app.command()
def replay(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="JSON lines (.jsonl) or CSV with a header row")],
    bootstrap: Bootstrap = None,
    topic: Topic = None,
    rate: Annotated[
        float | None, typer.Option(help=stating("ticks per second", "as fast as possible"))
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="stop at the first bad line instead of skipping it")
    ] = False,
    create_topic: CreateTopic = None,
    partitions: Partitions = None,
) -> None:
    """Produce the ticks of a file in file order; bad lines are reported and skipped."""
    conf, security = _settings(
        ctx, bootstrap=bootstrap, topic=topic, create_topic=create_topic, partitions=partitions
    )
    if rate is not None and rate <= 0:
        run_or_exit(_fail("--rate must be a positive number of ticks per second"))
    source = run_or_exit(lambda: TickFile(file, strict=strict, on_bad=_BadLineReporter(file)))
    run_or_exit(lambda: _prepare_topic(conf, security))
    pacing = f"{rate:,.0f} ticks/s" if rate is not None else "as fast as possible"
    console.print(
        f"replaying {escape(str(file))} ({source.format}) into [bold]{conf.topic}[/] "
        f"on {escape(conf.bootstrap)}, {pacing}",
        highlight=False,
    )
    outcome = run_or_exit(
        lambda: _feed(
            source,
            conf,
            security,
            rate=rate,
            duration_s=None,
            total=max(source.size, 1),
            completed=lambda _: source.bytes_read,
        )
    )
    if source.bad:
        lines = ", ".join(str(b.line) for b in source.bad_lines[:10])
        more = ", ..." if source.bad > 10 else ""
        err_console.print(
            f"[yellow]skipped {source.bad:,} bad line(s)[/] of {escape(str(file))}: {lines}{more}",
            highlight=False,
        )
    _finish(outcome, conf, f"replayed {escape(str(file))}:")


def _settings(ctx: typer.Context, **flags: Any) -> tuple[FeedSettings, KafkaSecurity]:
    """The feed's settings, and the Kafka security (``[kafka]``) its clients connect with."""
    state: CliState = ctx.obj
    conf = run_or_exit(lambda: settings.load(FeedSettings, state.config, **flags))
    return conf, kafka_security(state.config)


def _fail(message: str) -> Callable[[], None]:
    def fail() -> None:
        raise ConfigError(message)

    return fail


def _prepare_topic(conf: FeedSettings, security: KafkaSecurity) -> int:
    """Check the broker answers and the topic exists (creating it if allowed); its partitions."""
    if not ping(conf.bootstrap, security=security):
        raise BrokerError(
            f"no Kafka broker answers at {conf.bootstrap}: start the local one with "
            "`kiq broker start`, or point --bootstrap at yours"
        )
    partitions = topic_partitions(conf.bootstrap, conf.topic, security=security)
    if partitions is not None:
        return partitions
    if not conf.create_topic:
        raise FeedError(
            f"topic {conf.topic!r} does not exist on {conf.bootstrap}: create it, "
            "or leave out --no-create-topic and kiq creates it"
        )
    create_topics(conf.bootstrap, {conf.topic: conf.partitions}, security=security)
    console.print(f"created topic {conf.topic} with {conf.partitions} partitions", highlight=False)
    return conf.partitions


@dataclass(frozen=True)
class _Outcome:
    stats: RunStats
    delivered: int
    failed: int
    pending: int
    last_error: str | None


def _feed(
    ticks: Iterable[Mapping[str, Any]],
    conf: FeedSettings,
    security: KafkaSecurity,
    *,
    rate: float | None,
    duration_s: float | None,
    total: int | None,
    completed: Callable[[RunStats], float],
) -> _Outcome:
    """Pace ``ticks`` into the topic with a live status line; flushes, even on errors."""
    producer = TickProducer(conf.bootstrap, conf.topic, linger_ms=conf.linger_ms, security=security)
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task("feeding", total=total, status="")

    def show(stats: RunStats) -> None:
        progress.update(
            task,
            completed=completed(stats),
            status=f"{stats.produced:,} produced  {stats.rate:,.0f}/s  "
            f"{stats.delivered:,} delivered  {stats.failed:,} failed",
        )

    try:
        with progress, _stop_on_signals() as stop:
            stats = pace(
                ticks,
                producer,
                rate=rate,
                duration_s=duration_s,
                stop=stop.is_set,
                on_progress=show,
            )
    finally:
        with console.status(f"flushing {producer.pending:,} ticks ..."):
            pending = producer.flush(30.0)
    return _Outcome(stats, producer.delivered, producer.failed, pending, producer.last_error)


def _finish(outcome: _Outcome, conf: FeedSettings, what: str) -> None:
    stats = outcome.stats
    note = " (interrupted)" if stats.stopped is StopReason.INTERRUPTED else ""
    console.print(
        f"[green]done[/]{note}: {what} {stats.produced:,} ticks to {conf.topic} in "
        f"{stats.elapsed_s:.2f} s ({stats.rate:,.0f} ticks/s); "
        f"delivered {outcome.delivered:,}, failed {outcome.failed:,}",
        highlight=False,
    )
    lost = outcome.failed + outcome.pending
    if lost:
        err_console.print(
            f"[bold red]error:[/] {lost:,} ticks not delivered "
            f"(last error: {escape(outcome.last_error or 'still queued after 30 s')}): "
            "check that the broker runs (`kiq broker status`) and the topic exists",
            highlight=False,
        )
        raise typer.Exit(1)


class _BadLineReporter:
    """Prints the first bad lines of a replay as they are met, then only counts."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.seen = 0

    def __call__(self, bad: BadLine) -> None:
        self.seen += 1
        if self.seen <= _SHOWN_BAD_LINES:
            err_console.print(
                f"[yellow]skipped[/] {escape(str(self.file))} {escape(str(bad))}", highlight=False
            )
        elif self.seen == _SHOWN_BAD_LINES + 1:
            err_console.print("[yellow]more bad lines: counted, not shown[/]", highlight=False)


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """Ctrl-C (or SIGTERM, or a closed terminal's SIGHUP) sets the event, so the feed stops
    cleanly; a second one aborts."""
    from kiq.runtime.signals import STOP_SIGNALS

    stop = threading.Event()

    def handle(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
