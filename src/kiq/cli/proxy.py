"""`kiq proxy`: a stateless front door that sends each request straight to its key's owner.

For callers that cannot use ``kiq.client``: they speak kiq's HTTP API to the proxy, as
to any node, and every lookup reaches the node that holds its key in one hop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiq.cli.context import run_or_exit
from kiq.cli.tokens import TokenOption, bearer_token
from kiq.errors import ConfigError
from kiq.proxy.limits import ProxyLimits

# The defaults the flags show, from the one place they are set.
_DEFAULTS = ProxyLimits()


def proxy(
    nodes: Annotated[
        str,
        typer.Option(envvar="KIQ_NODES", help="some of the cluster's node URLs, comma-separated"),
    ] = "http://127.0.0.1:8080",
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8000,
    token: TokenOption = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="file holding the bearer token for the proxy's own GET /v1/metadata (mode "
            "600), on a cluster with authentication; else $KIQ_PROXY_TOKEN or $KIQ_TOKEN. "
            "Callers' Authorization headers go through as they are",
        ),
    ] = None,
    cluster_secret_file: Annotated[
        Path | None,
        typer.Option(
            "--cluster-secret-file",
            envvar="KIQ_AUTH_CLUSTER_SECRET_FILE",
            help="the nodes' cluster secret (mode 600): each caller's address reaches the "
            "nodes signed, so their per-address limits count callers, not the proxy",
        ),
    ] = None,
    max_body_bytes: Annotated[
        int, typer.Option(min=1, help="largest body of a POST or PUT, refused unread past it")
    ] = _DEFAULTS.max_body_bytes,
    max_in_flight_bytes: Annotated[
        int, typer.Option(min=1, help="request bodies held at once, all callers; then 503")
    ] = _DEFAULTS.max_in_flight_bytes,
    max_requests: Annotated[
        int, typer.Option(min=1, help="requests relayed at once, watches included; then 503")
    ] = _DEFAULTS.max_requests,
    max_streams: Annotated[
        int, typer.Option(min=1, help="watches relayed at once; then 503")
    ] = _DEFAULTS.max_streams,
    max_connections: Annotated[
        int, typer.Option(min=1, help="open connections; more wait in the backlog")
    ] = _DEFAULTS.max_connections,
) -> None:
    """Serve kiq's HTTP API in front of a cluster, each lookup sent to its key's owner.

    Its own token needs no more than a read scope: it reads the cluster's map
    (``GET /v1/metadata``) and the tables list, and sends credentials only to the nodes
    given here and the members they have proven."""
    urls = [u.strip() for u in nodes.split(",") if u.strip()]
    run_or_exit(lambda: _check(urls))
    # KIQ_PROXY_TOKEN: the proxy's own name from before, kept for the setups that use it.
    bearer = run_or_exit(lambda: bearer_token(token, token_file, older_env=("KIQ_PROXY_TOKEN",)))
    import uvloop

    from kiq.proxy import CallerSeal, ProxyApp, ProxyLimits, serve_proxy

    limits = ProxyLimits(
        max_body_bytes=max_body_bytes,
        max_in_flight_bytes=max_in_flight_bytes,
        max_requests=max_requests,
        max_streams=max_streams,
        max_connections=max_connections,
    )
    callers = (
        run_or_exit(lambda: CallerSeal.from_file(cluster_secret_file))
        if cluster_secret_file is not None
        else None
    )
    app = ProxyApp(urls, token=bearer, limits=limits, callers=callers)
    uvloop.run(serve_proxy(app, host, port))


def _check(urls: list[str]) -> None:
    if not urls:
        raise ConfigError("--nodes names no node: give URLs like http://127.0.0.1:8080")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--nodes: {url!r} is not an http:// or https:// URL")
