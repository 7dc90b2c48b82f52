"""`kiq serve`: one serving node of a kiq cluster.

The flags, the environment and the file are read here, once, into ``NodeSettings``;
``kiq.node_build.build_node`` makes the node and its app from them alone, and this
command only runs the server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer

from kiq import settings
from kiq.cli.context import CliState, ConfigOption, run_or_exit
from kiq.cli.defaults import stating, with_default
from kiq.cli.limit_flags import (
    HeaderTimeout,
    MaxBodyBytes,
    MaxConnections,
    MaxMultigetKeys,
    RateBurst,
    RateLimit,
)

if TYPE_CHECKING:
    from kiq.node_build import BuiltNode
    from kiq.workers.home import Home

log = logging.getLogger(__name__)

SHUTDOWN_DEADLINE_S = 30.0
# How long a stopping node waits for its lookup channels' close frames to go out.
CHANNELS_CLOSE_S = 0.5


def _give_up(node_id: str) -> None:
    log.error("node=%s did not stop within %.0fs; exiting now", node_id, SHUTDOWN_DEADLINE_S)
    os._exit(1)


def serve(
    ctx: typer.Context,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            help=with_default("Kafka bootstrap servers", settings.ServeSettings, "bootstrap")
        ),
    ] = None,
    node_id: Annotated[
        str | None,
        typer.Option(
            help=with_default(
                "this node's id, unique in the cluster", settings.ServeSettings, "node_id"
            )
        ),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(help=with_default("address to listen on", settings.ServeSettings, "host")),
    ] = None,
    port: Annotated[
        int | None, typer.Option(help=with_default("HTTP port", settings.ServeSettings, "port"))
    ] = None,
    advertise: Annotated[
        str | None, typer.Option(help=stating("URL other nodes use", "http://host:port"))
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help=with_default("local stores", settings.ServeSettings, "data_dir")),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help=with_default(
                "processes answering the port, this one included; 0: one per core",
                settings.ServeSettings,
                "workers",
            )
        ),
    ] = None,
    table: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=TOPIC[,store=memory][,format=avro][,schema=PATH][,standby=N][,global][,sep=C]"
        ),
    ] = None,
    standby_replicas: Annotated[
        int | None,
        typer.Option(
            help=with_default("standbys per partition", settings.ServeSettings, "standby_replicas")
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            help=with_default(
                "cluster name (the consumer group)", settings.ServeSettings, "cluster"
            )
        ),
    ] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            help=stating(
                "MODULE:FUNCTION or FILE.py:FUNCTION declaring routes", "the shipped apps'"
            )
        ),
    ] = None,
    max_body_bytes: MaxBodyBytes = None,
    max_multiget_keys: MaxMultigetKeys = None,
    max_connections: MaxConnections = None,
    max_watches_per_caller: Annotated[
        int | None,
        typer.Option(
            help=with_default(
                "watch streams open per client, then 429",
                settings.LimitsSettings,
                "max_watches_per_caller",
            )
        ),
    ] = None,
    max_requests_per_caller: Annotated[
        int | None,
        typer.Option(
            help=with_default(
                "requests in flight per client, then 429",
                settings.LimitsSettings,
                "max_requests_per_caller",
            )
        ),
    ] = None,
    header_timeout_s: HeaderTimeout = None,
    rate_limit: RateLimit = None,
    rate_burst: RateBurst = None,
    auth: Annotated[
        str | None,
        typer.Option(
            "--auth", help="none|jwt: bearer tokens on the API (unset: none, on loopback only)"
        ),
    ] = None,
    jwt_secret_file: Annotated[
        Path | None, typer.Option(help="file holding the HS256/384/512 secret")
    ] = None,
    jwt_public_key_file: Annotated[
        Path | None, typer.Option(help="PEM public key: RS*/PS*, ES*, EdDSA tokens")
    ] = None,
    jwt_jwks_file: Annotated[
        Path | None, typer.Option(help="JWKS file, keys by kid, re-read when it changes")
    ] = None,
    jwt_audience: Annotated[str | None, typer.Option(help="the aud tokens must name")] = None,
    jwt_issuer: Annotated[str | None, typer.Option(help="the iss tokens must name")] = None,
    jwt_leeway_s: Annotated[
        float | None,
        typer.Option(
            help=with_default(
                "clock skew allowed on exp and nbf", settings.AuthSettings, "jwt_leeway_s"
            )
        ),
    ] = None,
    cluster_secret_file: Annotated[
        Path | None,
        typer.Option(help="secret shared by every node; signs node-to-node requests"),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(help="serve HTTPS with this certificate chain (PEM)")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="the certificate's key (PEM)")] = None,
    tls_ca: Annotated[
        Path | None,
        typer.Option(help=stating("CA bundle (PEM) peers are verified against", "the system's")),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Serve tables from Kafka topics; any node answers any key.

    With an application file (--config), its \\[serve] tables and \\[app] endpoints.
    """
    state: CliState = ctx.obj
    conf = run_or_exit(
        lambda: settings.NodeSettings.load(
            state.config_file(config),
            serve={
                "bootstrap": bootstrap,
                "node_id": node_id,
                "host": host,
                "port": port,
                "advertise": advertise,
                "data_dir": data_dir,
                "workers": workers,
                "tables": table or None,
                "standby_replicas": standby_replicas,
                "cluster": cluster,
            },
            limits={
                "max_body_bytes": max_body_bytes,
                "max_multiget_keys": max_multiget_keys,
                "max_connections": max_connections,
                "max_watches_per_caller": max_watches_per_caller,
                "max_requests_per_caller": max_requests_per_caller,
                "header_timeout_s": header_timeout_s,
                "rate_limit": rate_limit,
                "rate_burst": rate_burst,
            },
            auth={
                "mode": auth,
                "jwt_secret_file": jwt_secret_file,
                "jwt_public_key_file": jwt_public_key_file,
                "jwt_jwks_file": jwt_jwks_file,
                "jwt_audience": jwt_audience,
                "jwt_issuer": jwt_issuer,
                "jwt_leeway_s": jwt_leeway_s,
                "cluster_secret_file": cluster_secret_file,
            },
            tls={"cert": tls_cert, "key": tls_key, "ca": tls_ca},
            app={"endpoints": endpoint},
        )
    )
    from kiq.node_build import build_node
    from kiq.workers.home import Home

    run_or_exit(lambda: _check_port(conf.serve.host, conf.serve.port))
    home = None
    if worker_count(conf.serve.workers) > 1:  # before the app, whose limits count in it
        home = run_or_exit(lambda: Home.open(conf.limits))
    try:
        built = run_or_exit(lambda: build_node(conf))
        import uvloop

        uvloop.run(_serve(built, home))
    finally:
        if home is not None:
            home.remove()


def _check_port(host: str, port: int) -> None:
    """Refuse a port another process holds before joining the cluster: granian would
    fail later with a bare "address in use", and a second kiq node there would share
    the port with the first (granian sets SO_REUSEPORT) and answer half its requests."""
    from kiq.errors import KiqError
    from kiq.runtime.ports import port_taken

    if port_taken(host, port):
        raise KiqError(
            f"{host}:{port} is already in use by another process; stop it, or give this "
            "node another port (--port, KIQ_SERVE_PORT or [serve] port)"
        )


async def _serve(built: BuiltNode, home: Home | None = None) -> None:
    """Serve ``built.app`` (and start its read workers, with a ``home``) until SIGINT or
    SIGTERM."""
    from kiq.runtime.signals import STOP_SIGNALS
    from kiq.workers.home import HomeApp, Workers
    from kiq.workers.server import http_server

    conf, limits, security = built.settings.serve, built.settings.limits, built.security
    server = http_server(built.app, conf.host, conf.port, limits, built.server_tls)
    servers = [server]
    count = worker_count(conf.workers)
    if conf.workers <= 0:
        from kiq.runtime.cpus import cpu_budget

        log.info("workers=%d chosen from %s", count, cpu_budget().describe())
    workers: Workers | None = None
    if count > 1 and home is not None:
        private = HomeApp(built.app, built.node, home.token)
        servers.append(http_server(private, "", 0, limits, uds=home.socket))
        workers = Workers(count - 1, built.settings.as_env(), home)
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task[None]] = []  # the one stop under way (a second signal: none)

    def shut_down() -> None:
        log.info("stopping node=%s (signal)", conf.node_id)
        if stopping:
            return
        if workers is not None:
            workers.stop()
        stopping.append(loop.create_task(stop_servers(built.app, servers)))
        # Leaving the group and closing stores is quick when Kafka answers; when it does
        # not, an operator still expects the process to end.
        watchdog = threading.Timer(SHUTDOWN_DEADLINE_S, _give_up, args=(conf.node_id,))
        watchdog.daemon = True
        watchdog.start()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, shut_down)
    log.info(
        "serving node=%s url=%s auth=%s node-to-node=%s processes=%d",
        conf.node_id,
        conf.advertised_url,
        "jwt" if security.tokens is not None else "none",
        "signed" if security.cluster is not None else "open",
        count,
    )
    serving = asyncio.gather(*(each.serve() for each in servers))
    try:
        if workers is not None and home is not None:
            await home.listening()  # workers learn of the socket once it answers
            workers.start()
        await serving
    finally:
        if workers is not None:
            workers.stop()
            await asyncio.to_thread(workers.wait)


class Stoppable(Protocol):
    """What ``stop_servers`` ends before the servers stop: ``kiq.server.KiqApp``."""

    def end_streams(self) -> None: ...

    async def close_channels(self, timeout_s: float) -> None: ...


async def stop_servers(app: Stoppable, servers: Sequence[Any]) -> None:
    """Stops ``servers`` (granian's) gracefully, once ``app`` has ended what they would
    otherwise wait for: watch streams, and the peers' lookup channels."""
    try:
        # Watch streams never end by themselves: the server waits for open requests.
        app.end_streams()
        # Before the server stops: once it has, granian sends nothing more on a websocket,
        # and peers would wait out their timeout on batches sent over a lookup channel.
        await app.close_channels(CHANNELS_CLOSE_S)
    finally:
        for each in servers:
            stop_server: Callable[[], None] = each.stop  # granian's method is untyped
            stop_server()


def worker_count(setting: int) -> int:
    """Processes to answer the port: ``setting``, or one per CPU this process may use: its
    affinity or its cgroup's CPU quota (a container's limit), whichever is smaller."""
    if setting > 0:
        return setting
    from kiq.runtime.cpus import cpu_budget

    return cpu_budget().count
