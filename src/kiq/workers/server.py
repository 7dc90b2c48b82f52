"""The HTTP server each process of a node listens with: granian, embedded in its loop.

The writer and its read workers bind the same address and port (granian sets
SO_REUSEPORT), so each must listen with the same limits and the same certificate. The
writer's private listener is a Unix socket (``uds``, mode 0600: ``workers/home.py``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kiq.settings import LimitsSettings


def http_server(
    app: Any,
    host: str,
    port: int,
    limits: LimitsSettings,
    tls: tuple[Path, Path] | None = None,
    uds: Path | None = None,
) -> Any:
    """A granian embedded server of ``app`` (ASGI); ``await server.serve()`` runs it. With
    ``uds`` it listens on that Unix socket instead of ``host`` and ``port``."""
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings
    from granian.server.embed import Server

    logging.getLogger("granian").setLevel(logging.ERROR)  # "embedded is experimental" noise
    cert, key = tls or (None, None)
    server = Server(
        app,
        address=host,
        port=port,
        uds=uds,
        interface=Interfaces.ASGI,
        log_enabled=False,
        backlog=2048,
        # granian holds a permit per open connection: these many at once, the rest wait.
        backpressure=limits.max_connections,
        # Its HTTP/1 header timer also runs while a kept-alive connection idles.
        http1_settings=HTTP1Settings(
            header_read_timeout=max(1, round(limits.header_timeout_s * 1000))
        ),
        ssl_cert=cert,
        ssl_key=key,
    )
    if uds is not None:
        server.uds_permissions = 0o600  # granian's own setting, which its embedded form omits
    return server
