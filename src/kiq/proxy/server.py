"""The proxy under granian, as a node is served (``kiq.cli.serve``): until SIGINT/SIGTERM.

granian holds a permit per open connection (``backpressure``): ``ProxyLimits.max_connections``
at once, the rest wait in the backlog; the app refuses requests past its own limits
(``limits.py``) with 503 and ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kiq.proxy.app import ProxyApp
from kiq.runtime.signals import STOP_SIGNALS

log = logging.getLogger(__name__)


async def serve_proxy(app: ProxyApp, host: str, port: int, backlog: int = 2048) -> None:
    from granian.constants import Interfaces
    from granian.server.embed import Server

    logging.getLogger("granian").setLevel(logging.ERROR)  # "embedded is experimental" noise
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per relayed request
    server = Server(
        app,
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        log_enabled=False,
        backlog=backlog,
        backpressure=app.limits.max_connections,
    )
    stop_server: Callable[[], None] = server.stop  # granian's method is untyped

    def stop() -> None:
        app.end_streams()  # relayed watches never end by themselves
        stop_server()

    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop)
    log.info(
        "proxy on http://%s:%d for %s callers_sealed=%s",
        host,
        port,
        ", ".join(app.router.seeds),
        app.seals_callers,
    )
    await server.serve()
