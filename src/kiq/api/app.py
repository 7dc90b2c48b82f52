"""The ASGI application of one node: the raw lookup path, then Starlette's router.

  GET /v1/tables/{table}/keys/{key}    point lookup (lookups.py, the hot path)

is matched first by hand, at the cost of a few string operations; every other
route is declared in routes.py, the application's own (endpoints.py) last.
Whatever a route raises ends here, in ``send_error`` (api/errors.py), as it does
inside ``Lookups.get``: one door from exceptions to responses.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterable
from typing import Any, Protocol

from kiq import catalog
from kiq.api.batches import Batches
from kiq.api.endpoints import Declare, declared_routes, endpoints_for
from kiq.api.errors import send_error
from kiq.api.lookups import Lookups
from kiq.api.routes import Endpoints
from kiq.node import Node, NodeView
from kiq.routing import HedgePolicy, Peers, Router

log = logging.getLogger(__name__)

_TABLES = "/v1/tables/"


class RecordWriter(Protocol):
    """Where the application's routes write (``kiq.node_build.LogWriter``: Kafka)."""

    async def send(self, topic: str, key: bytes, value: bytes) -> tuple[int, int]:
        """(partition, offset) once the log has the record; raises ``WriteFailed``."""
        ...

    def close(self) -> None: ...


AppRoutes = Iterable[str | Declare]


class KiqApp:
    def __init__(
        self,
        node: Node,
        writer: RecordWriter,
        peers: Peers | None = None,
        start_node: bool = True,
        endpoints: AppRoutes = catalog.SHIPPED_ENDPOINTS,
        base: str | None = None,
        peer_ssl: ssl.SSLContext | None = None,
    ) -> None:
        view = NodeView(node)
        self._node = node
        self._start_node = start_node
        self.router = Router(view.node_id)
        if peers is None:
            peers = Peers(
                view.node_id,
                self.router,
                view.forward_timeout_ms,
                hedging=HedgePolicy.of(node.settings),
                hedge_stats=view.metrics.hedges,
                ssl_context=peer_ssl,
            )
        self.peers = peers
        self.lookups = Lookups(view, self.router, peers)
        self.batches = Batches(view, self.router, peers)
        self._writer = writer
        custom = endpoints_for(declared_routes(endpoints, base), self.lookups, self.batches, writer)
        self._routes = Endpoints(view, self.lookups, self.batches, peers).router(custom)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            if scope["method"] == "GET":
                path: str = scope["path"]
                if path.startswith(_TABLES):
                    raw = scope.get("raw_path") or path.encode()
                    table, sep, key = raw[len(_TABLES) :].partition(b"/keys/")
                    if sep and b"/" not in table:
                        await self.lookups.get(scope, send, table.decode("latin-1"), key)
                        return
            try:
                await self._routes(scope, receive, send)
            except Exception as exc:
                await send_error(send, exc, scope)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    if self._start_node:
                        await asyncio.to_thread(self._node.start)
                except Exception as exc:
                    log.exception("node start failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.peers.close()
                self._writer.close()
                if self._start_node:
                    await asyncio.to_thread(self._node.stop)
                await send({"type": "lifespan.shutdown.complete"})
                return


def create_app(
    node: Node,
    writer: RecordWriter,
    peers: Peers | None = None,
    start_node: bool = True,
    endpoints: AppRoutes = catalog.SHIPPED_ENDPOINTS,
    base: str | None = None,
    peer_ssl: ssl.SSLContext | None = None,
) -> KiqApp:
    """The app serving ``node``; ``writer`` takes the application's writes.

    ``endpoints`` declare the application's routes: functions, or targets
    (``module:function``, ``file.py:function`` looked for beside ``base`` first);
    by default the shipped stock and word-count routes. ``peers`` carries requests
    to other nodes (made from the node's settings when not given); the app closes
    it and the writer, and starts and stops the node unless told not to.
    ``peer_ssl`` verifies ``https://`` peers (``kiq.security.tls.client_context``).
    """
    return KiqApp(node, writer, peers, start_node, endpoints, base, peer_ssl)
