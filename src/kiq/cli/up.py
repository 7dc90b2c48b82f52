"""`kiq up`: a whole application on one machine, as its file describes it, until Ctrl-C.

Broker (unless ``[app] bootstrap`` names one) → topics (``[app] topics``, then each
table's, compacted, where missing) → one Spark driver running ``[app] pipelines`` →
``[app] nodes`` serving nodes (the first on ``[app] port``, the front door) with the
file's tables and endpoints → ``[app] feeds`` (run beside the file). `kiq up` reads
the settings once; every child is handed them, with the broker it decided on, as its
environment (``kiq.settings.child_env``), and user feeds find the broker in
``KIQ_BOOTSTRAP``; state and logs go under ``[app] home``. Ctrl-C stops it all in
reverse order.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kiq import settings
from kiq.cli.context import CliState, ConfigOption, console, run_or_exit
from kiq.cli.defaults import stating, with_default
from kiq.cli.limit_flags import (
    HeaderTimeout,
    MaxBodyBytes,
    MaxConnections,
    MaxMultigetKeys,
    RateBurst,
    RateLimit,
)
from kiq.errors import ConfigError, KiqError

if TYPE_CHECKING:
    from kiq.cli.progress_view import ProgressView
    from kiq.runtime.broker import LocalBroker
    from kiq.runtime.nodes import LocalNode
    from kiq.runtime.pipelines import LocalPipeline
    from kiq.tables import TableSpec
    from kiq.tables.declared import ServeEntry

# Spark's start and the pipelines' first checks, until they have declared their tables.
DECLARE_TIMEOUT_S = 300.0


class _StatusOnly:
    """An application without pipelines has no progress to show: its note, as a spinner."""

    def __init__(self, note: str) -> None:
        self._status = console.status(note)

    def __enter__(self) -> _StatusOnly:
        self._status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._status.stop()

    def update(self, note: str) -> None:
        if note:
            self._status.update(note)
        else:
            self._status.stop()

    def tick(self) -> None:
        pass


class _Stopped(Exception):
    """Ctrl-C during start-up: stop what has started."""


def up(
    ctx: typer.Context,
    config: ConfigOption = None,
    nodes: Annotated[
        int | None, typer.Option(help=with_default("serving nodes", settings.AppSettings, "nodes"))
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            help=with_default(
                "the front door; the other nodes take the next ports", settings.AppSettings, "port"
            )
        ),
    ] = None,
    bootstrap: Annotated[
        str | None, typer.Option(help="an existing Kafka to use instead of the local broker")
    ] = None,
    home: Annotated[Path | None, typer.Option(help=stating("state and logs", ".kiq/NAME"))] = None,
    pipeline: Annotated[
        list[str] | None, typer.Option(help="a pipeline TARGET (repeat: one Spark driver)")
    ] = None,
    endpoint: Annotated[
        list[str] | None, typer.Option(help="MODULE:FUNCTION or FILE.py:FUNCTION declaring routes")
    ] = None,
    trigger: Annotated[
        str | None,
        typer.Option(
            help=with_default("auto, microbatch or realtime", settings.PipelineSettings, "trigger")
        ),
    ] = None,
    feeds: Annotated[bool, typer.Option(help="run the file's feeds")] = True,
    max_body_bytes: MaxBodyBytes = None,
    max_multiget_keys: MaxMultigetKeys = None,
    max_connections: MaxConnections = None,
    header_timeout_s: HeaderTimeout = None,
    rate_limit: RateLimit = None,
    rate_burst: RateBurst = None,
    tls_cert: Annotated[
        Path | None, typer.Option(help="the nodes serve HTTPS with this certificate (PEM)")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="the certificate's key (PEM)")] = None,
    tls_ca: Annotated[
        Path | None, typer.Option(help="CA bundle (PEM) the nodes are verified against")
    ] = None,
) -> None:
    """Run the application its file describes: broker, topics, pipelines, nodes, feeds."""
    state: CliState = ctx.obj
    flags = {
        "nodes": nodes,
        "port": port,
        "bootstrap": bootstrap,
        "home": home,
        "pipelines": pipeline,
        "endpoints": endpoint,
    }
    if not feeds:
        flags["feeds"] = []
    limits = {
        "max_body_bytes": max_body_bytes,
        "max_multiget_keys": max_multiget_keys,
        "max_connections": max_connections,
        "header_timeout_s": header_timeout_s,
        "rate_limit": rate_limit,
        "rate_burst": rate_burst,
    }
    tls = {"cert": tls_cert, "key": tls_key, "ca": tls_ca}
    run_app(state.config_file(config), trigger=trigger, limits=limits, tls=tls, **flags)


def run_app(
    config: Path | None,
    trigger: str | None = None,
    limits: dict[str, Any] | None = None,
    tls: dict[str, Path | None] | None = None,
    **flags: Any,
) -> None:
    """`kiq up` (and `kiq demo`, on the shipped stock application's file)."""
    from kiq.runtime.reaper import ending_together
    from kiq.runtime.signals import STOP_SIGNALS

    plan = run_or_exit(lambda: Plan.load(config, trigger, limits, tls, **flags))
    stopping = threading.Event()
    # A closed terminal (SIGHUP) stops it as a Ctrl-C does: the broker, the pipelines and
    # the feeds run in sessions of their own, and would outlive it.
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: stopping.set())
    # And should it be killed outright, its watchdog ends what it started.
    with ending_together(terminate=False):
        run_or_exit(lambda: Running(plan, stopping).run())


@dataclass(frozen=True)
class Plan:
    """Everything `kiq up` will start, read and checked before anything starts.

    ``node``, ``pipeline`` and ``feed`` are the settings its children are handed,
    each with the broker `kiq up` uses (``bootstrap``).
    """

    file: Path | None
    node: settings.NodeSettings
    served: list[ServeEntry]  # [serve] tables; the pipelines declare theirs in the catalog
    broker: settings.BrokerSettings
    pipeline: settings.PipelineSettings
    feed: settings.FeedSettings
    bootstrap: str

    @property
    def app(self) -> settings.AppSettings:
        return self.node.app

    @property
    def limits(self) -> settings.LimitsSettings:
        return self.node.limits

    @property
    def auth(self) -> settings.AuthSettings:
        return self.node.auth

    @property
    def tls(self) -> settings.TlsSettings:
        return self.node.tls

    @property
    def kafka(self) -> settings.KafkaSettings:
        return self.node.kafka

    def child_env(self) -> dict[str, str]:
        """What every child (driver, nodes, feeds) is handed: the settings, and the broker
        under the name user feeds read it by."""
        env = {**self.node.as_env(), **settings.child_env(self.pipeline, self.feed)}
        env["KIQ_BOOTSTRAP"] = self.bootstrap
        return env

    @classmethod
    def load(
        cls,
        config: Path | None,
        trigger: str | None,
        limits: dict[str, Any] | None = None,
        tls: dict[str, Path | None] | None = None,
        **flags: Any,
    ) -> Plan:
        from kiq.node_build import app_endpoints, served_tables

        file = settings.config_path(config)
        node = settings.NodeSettings.load(file, limits=limits, tls=tls, app=flags)
        served = served_tables(node.serve)
        if not served and not node.app.pipelines:
            raise ConfigError(
                "nothing to serve: give [app] pipelines (their tables are served) or "
                "[serve] tables (NAME=TOPIC)"
            )
        app_endpoints(node)  # a typo fails now, not in every node's log
        for command in node.app.feeds:
            if not command:
                raise ConfigError("[app] feeds: a feed is a command, e.g. ['kiq', 'feed', ...]")
        # The app's own broker data (HOME/broker) unless [broker] data_dir/log_dir say.
        broker = node.app.own_broker(settings.load(settings.BrokerSettings, file))
        bootstrap = node.app.bootstrap or broker.bootstrap
        on_it = {"bootstrap": bootstrap}
        pipeline = settings.load(settings.PipelineSettings, file, trigger=trigger)
        return cls(
            file.resolve() if file is not None else None,
            dataclasses.replace(node, serve=node.serve.model_copy(update=on_it)),
            served,
            broker,
            pipeline.model_copy(update=on_it),
            settings.load(settings.FeedSettings, file).model_copy(update=on_it),
            bootstrap,
        )


class Running:
    """The application's processes (a ``LocalStack``), started in order and stopped in
    reverse, with what `kiq up` shows and waits for in between."""

    def __init__(self, plan: Plan, stopping: threading.Event) -> None:
        from kiq.kafka import KafkaSecurity
        from kiq.runtime.broker import LocalBroker
        from kiq.runtime.stack import LocalStack
        from kiq.security import operator_token

        self.plan = plan
        self.stopping = stopping
        # What `kiq up` itself connects with (its children are handed [kafka] to do the same).
        self.security = KafkaSecurity.from_settings(plan.kafka)
        app = plan.app
        self.home = app.home_dir.resolve()
        broker = None if app.bootstrap else LocalBroker(plan.broker)
        self.stack = LocalStack(self.home, broker, external_bootstrap=plan.bootstrap)
        self.broker: LocalBroker | None = broker
        self.bootstrap = plan.bootstrap
        self.env = plan.child_env()
        self.pipeline: LocalPipeline | None = None
        if app.pipelines:
            self.pipeline = self.stack.pipeline(
                app.pipelines,
                trigger=plan.pipeline.trigger,
                partitions=app.table_partitions,
                env=self.env,
            )
        # With a shared secret, `kiq up` signs itself a token to watch the nodes' metadata.
        watch = operator_token(plan.auth, "kiq:admin")
        self.nodes = [
            self.stack.node(
                f"n{i}",
                (),  # the tables are in the settings it is handed
                port=app.port + i - 1,
                env=self.env,
                authorization=f"Bearer {watch}" if watch else None,
                tls=plan.tls,
                # several nodes share this machine: one process each unless [serve] workers says
                workers=plan.node.serve.workers or 1,
            )
            for i in range(1, app.nodes + 1)
        ]
        self.tables: list[TableSpec] = []  # once the pipelines declared theirs

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def run(self) -> None:
        try:
            self._start()
            self._serve()
        except _Stopped:
            pass
        finally:
            self._stop()

    # -- start ----------------------------------------------------------------------

    def _start(self) -> None:
        app = self.plan.app
        self.home.mkdir(parents=True, exist_ok=True)
        if self.broker is not None:
            with console.status("starting the Kafka broker ..."):
                self.stack.start_broker(adopt=True)
            _done(f"Kafka broker on {self.bootstrap}")
        self._check()
        self._create_topics()
        self._check()
        if self.pipeline is not None:
            since_ms = int(time.time() * 1000) - 1000
            self.pipeline.start()
            names = " ".join(app.pipelines)
            _done(f"Spark pipelines starting: {names} (log: {self.pipeline.log_file})")
            with console.status("waiting for the pipelines to declare their tables ..."):
                self._until(
                    functools.partial(self._declared, since_ms),
                    DECLARE_TIMEOUT_S,
                    "table declarations from the pipelines",
                )
        self.tables = self._resolve_tables()
        _done("tables: " + ", ".join(t.name for t in self.tables))
        for node in self.nodes:
            node.start()
        with console.status("waiting for the serving nodes ..."):
            for node in self.nodes:
                self._until(functools.partial(_ready, node), 120, f"{node.node_id} ready")
        _done("serving nodes: " + ", ".join(n.url for n in self.nodes))
        for command in app.feeds:
            self._start_feed(command)
        self._print_examples()

    def _create_topics(self) -> None:
        from kiq.kafka import create_topics, topic_partitions
        from kiq.pipelines.runner import COMPACTED

        inputs, security = self.plan.app.topics, self.security
        if inputs:
            create_topics(self.bootstrap, inputs, security=security)
        # Topics [serve] tables names itself (NAME=TOPIC); the pipelines create their tables'.
        missing = [
            t.topic
            for t in self.plan.served
            if t.topic is not None
            and t.topic not in inputs
            and topic_partitions(self.bootstrap, t.topic, security=security) is None
        ]
        if missing:
            create_topics(
                self.bootstrap,
                dict.fromkeys(missing, self.plan.app.table_partitions),
                config=COMPACTED,
                security=security,
            )
        made = [*inputs, *missing]
        _done(f"topics: {', '.join(made) if made else 'all there already'}")

    def _catalog(self) -> dict[str, bytes]:
        from kiq.catalog import CATALOG_TOPIC
        from kiq.kafka import compacted

        return compacted.read_latest(self.bootstrap, CATALOG_TOPIC, security=self.security)

    def _declared(self, since_ms: int) -> bool:
        """Whether every pipeline has declared its tables since ``since_ms``."""
        from kiq.pipelines.targets import target_name
        from kiq.tables.declared import decode_started
        from kiq.tables.versions import run_name

        started = decode_started(self._catalog(), self.plan.app.name)
        version = self.plan.pipeline.version
        return all(
            (s := started.get(run_name(target_name(p), version))) is not None
            and s.started_at_ms >= since_ms
            for p in self.plan.app.pipelines
        )

    def _resolve_tables(self) -> list[TableSpec]:
        """What the nodes will serve: [serve] tables completed from the catalog."""
        from kiq.node_build import check_tables
        from kiq.tables.declared import decode_catalog, parse_serve_tables, resolve_tables

        serve = self.plan.node.serve
        tables = resolve_tables(
            self.plan.served,
            decode_catalog(self._catalog(), self.plan.app.name),
            app=self.plan.app.name,
            default_standby=serve.standby_replicas,
            every_declared=parse_serve_tables(serve.tables)[1],
        )
        check_tables(tables)
        return tables

    def _start_feed(self, command: list[str]) -> None:
        cwd = self.plan.file.parent if self.plan.file is not None else None
        try:
            log_file = self.stack.feed(_argv(command), env=self.env, cwd=cwd)
        except OSError as exc:
            raise KiqError(f"feed {' '.join(command)!r} did not start: {exc}") from exc
        _done(f"feed: {' '.join(command)} (log: {log_file})")

    # -- running ----------------------------------------------------------------------

    def _serve(self) -> None:
        """Until Ctrl-C: watch the children, and say which tables have their first data.

        Before any has, Spark is warming up (its first batches take a while); after,
        a table still empty waits for input (the word counts, for a first POST).
        """
        started = time.monotonic()
        every = {t.table for t in self.tables}  # by name: /v1/metadata shows current versions
        waiting = set(every)
        warming = "Spark warming up" if self.pipeline is not None else "waiting for data"
        with self._progress(f"{warming} ...") as progress:
            while waiting:
                self._check()
                arrived = waiting & _tables_with_data(self.nodes)
                elapsed = time.monotonic() - started
                if arrived:
                    waiting -= arrived
                    _done(f"data in {', '.join(sorted(arrived))} ({elapsed:.0f}s)")
                if waiting:
                    what = warming if waiting == every else "waiting"
                    names = ", ".join(sorted(waiting))
                    progress.update(f"{what} ({elapsed:.0f}s): no data yet in {names}")
                    if self.stopping.wait(1.0):
                        raise _Stopped
            _done(f"every table has data ({time.monotonic() - started:.0f}s after start)")
            progress.update("")
            while not self.stopping.wait(1.0):
                self._check()
                progress.tick()

    def _progress(self, note: str) -> ProgressView | _StatusOnly:
        """Each query's progress as its driver publishes it (the nodes' /ui shows the same),
        under ``note``; without pipelines, the note alone."""
        if self.pipeline is None:
            return _StatusOnly(note)
        from kiq.cli.progress_view import ProgressView
        from kiq.progress import ProgressReader

        reader = ProgressReader(self.bootstrap, self.plan.app.name, security=self.security)
        return ProgressView(reader, console, note)

    def _check(self) -> None:
        if self.stopping.is_set():
            raise _Stopped
        pipeline = self.pipeline
        if pipeline is not None and pipeline.proc is not None and not pipeline.running:
            raise KiqError(pipeline.stopped())  # its error as the driver said it, and the log
        for node in self.nodes:
            if node.proc is not None and not node.running:
                raise KiqError(f"node {node.node_id} stopped; see {node.log_file}:\n{node.tail()}")

    def _until(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            self._check()
            if time.monotonic() > deadline:
                raise KiqError(f"no {what} after {timeout_s:.0f}s; logs are in {self.home}")
            if self.stopping.wait(0.2):
                raise _Stopped

    def _print_examples(self) -> None:
        url = self.url
        lines = [line.replace("{url}", url) for line in self.plan.app.examples]
        if not lines:
            for t in self.tables:
                lines.append(f"curl -s '{url}/v1/tables/{t.name}/range?limit=5'")
            lines.append(f"curl -i {url}/v1/tables/{self.tables[0].name}/keys/KEY")
        lines += [f"curl -s {url}/v1/metadata?cluster=true", f"curl -s {url}/metrics | grep kiq_"]
        examples = "\n".join(f"  {line}" for line in lines)
        console.print(
            f"\n[bold]{self.plan.app.name} is up[/] — the front door is {url} "
            f"(any node answers any key).\n\n{examples}\n\nCtrl-C stops everything.\n",
            highlight=False,
        )

    # -- stop -------------------------------------------------------------------------

    def _stop(self) -> None:
        console.print("stopping ...")
        self.stack.stop()
        console.print(f"{self.plan.app.name} stopped")


def _argv(command: list[str]) -> list[str]:
    """A feed's command: ``kiq ...`` is this kiq, ``python ...`` the Python it runs on."""
    if command[0] == "kiq":
        return [sys.executable, "-m", "kiq", *command[1:]]
    if command[0] == "python":
        return [sys.executable, *command[1:]]
    return command


def _done(message: str) -> None:
    console.print(f"[green]✓[/] {message}", highlight=False)


def _ready(node: LocalNode) -> bool:
    from kiq.http_client import HttpError

    try:
        return node.get("/v1/health/ready").status_code == 200
    except HttpError:
        return False


def _tables_with_data(nodes: list[LocalNode]) -> set[str]:
    """The tables some node holds a record of (a replica whose log is not empty)."""
    from kiq.http_client import HttpError

    found: set[str] = set()
    for node in nodes:
        try:
            resp = node.get("/v1/metadata")
            if not resp.is_success:
                continue
            meta = json.loads(resp.content)
        except (HttpError, ValueError):
            continue
        for name, table in meta.get("tables", {}).items():
            for part in table.get("partitions", []):
                local = part.get("local")
                if local and local.get("end_offset", 0) > 0:
                    found.add(name)
                    break
    return found
