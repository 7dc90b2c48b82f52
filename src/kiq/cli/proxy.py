"""`kiq proxy`: a stateless front door that sends each request straight to its key's owner.

For callers that cannot use ``kiq.client``: they speak kiq's HTTP API to the proxy, as
to any node, and every lookup reaches the node that holds its key in one hop.
"""

from __future__ import annotations

from typing import Annotated

import typer

from kiq.cli.context import run_or_exit
from kiq.errors import ConfigError


def proxy(
    nodes: Annotated[
        str,
        typer.Option(envvar="KIQ_NODES", help="some of the cluster's node URLs, comma-separated"),
    ] = "http://127.0.0.1:8080",
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="KIQ_PROXY_TOKEN",
            help="bearer token for the proxy's own GET /v1/metadata (kiq:admin on a cluster "
            "with authentication); callers' Authorization headers go through as they are",
        ),
    ] = None,
) -> None:
    """Serve kiq's HTTP API in front of a cluster, each lookup sent to its key's owner."""
    urls = [u.strip() for u in nodes.split(",") if u.strip()]
    run_or_exit(lambda: _check(urls))
    import uvloop

    from kiq.proxy import ProxyApp, serve_proxy

    uvloop.run(serve_proxy(ProxyApp(urls, token=token), host, port))


def _check(urls: list[str]) -> None:
    if not urls:
        raise ConfigError("--nodes names no node: give URLs like http://127.0.0.1:8080")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--nodes: {url!r} is not an http:// or https:// URL")
