"""The ASGI application of one node: the raw lookup path, then Starlette's router.

  GET /v1/tables/{table}/keys/{key}    point lookup (lookups.py, the hot path)

is matched first by hand, at the cost of a few string operations; every other
core route is declared in routes.py, and answers every path under its reserved
prefixes; the application's own routes (endpoints.py) answer the other paths, so
no pattern of theirs ever reaches a core path.
A node with authentication is a ``SecuredKiqApp``, chosen once by ``create_app``:
the same dispatch with the checks of api/auth.py in front, so a node without
pays nothing for them.
Whatever a route raises ends here, in ``send_error`` (api/errors.py), as it does
inside ``Lookups.get``: one door from exceptions to responses.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

from starlette.routing import Route

from kiq import catalog
from kiq.api import openapi
from kiq.api.asgi import Receive, Scope, Send
from kiq.api.auth import Access
from kiq.api.batches import Batches
from kiq.api.endpoints import Declare, declared_routes, endpoints_for
from kiq.api.errors import send_error
from kiq.api.limits import Asgi, Lookup, RateLimiter, limit_lookups, limit_routes
from kiq.api.lookups import Lookups
from kiq.api.routes import Endpoints, app_router, is_core
from kiq.node import Node, NodeView
from kiq.routing import HedgePolicy, Peers, Router
from kiq.security import Security
from kiq.settings import LimitsSettings

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
        limits: LimitsSettings | None = None,
        security: Security | None = None,
        peer_ssl: ssl.SSLContext | None = None,
    ) -> None:
        limits = limits if limits is not None else LimitsSettings()
        view = NodeView(node)
        self.access = (
            Access(
                security.tokens,
                security.cluster,
                view.url,
                RateLimiter.for_failures(limits) if security.tokens is not None else None,
            )
            if security is not None and security.enabled
            else None
        )
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
                cluster=security.cluster if security is not None else None,
                ssl_context=peer_ssl,
            )
        self.peers = peers
        self.lookups = Lookups(view, self.router, peers, limits)
        self.batches = Batches(view, self.router, peers, limits.max_multiget_keys)
        self._writer = writer
        declared = declared_routes(endpoints, base)
        custom = endpoints_for(declared, self.lookups, self.batches, writer, limits.max_body_bytes)
        core = Endpoints(
            view, self.lookups, self.batches, peers, limits.max_body_bytes, self.access
        )
        core_router, own_router = core.router(), app_router(custom)
        self.routers = (core_router, own_router)  # core paths, the application's (is_core)
        self.routes: list[openapi.RouteDoc] = [
            *((method, path, None) for method, path in openapi.RAW_ROUTES),
            *(
                (method, route.path, declared.docs.get((method, route.path)))
                for route in (*core_router.routes, *own_router.routes)
                if isinstance(route, Route)
                for method in sorted(route.methods or ())
            ),
        ]
        core.document = openapi.render(self.routes, _version(), secured=self.access is not None)

        async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
            router = core_router if is_core(scope["path"]) else own_router
            await router(scope, receive, send)

        self._routes: Asgi = dispatch
        # The two paths, behind the rate limiter only when it is on: decided here, once.
        self._lookup: Lookup = self.lookups.get
        self.limiter = RateLimiter.of(limits)
        if self.limiter is not None:
            self._lookup = limit_lookups(self.limiter, self.lookups.get)
            self._routes = limit_routes(self.limiter, self._routes)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            if scope["method"] == "GET":
                path: str = scope["path"]
                if path.startswith(_TABLES):
                    raw = scope.get("raw_path") or path.encode()
                    table, sep, key = raw[len(_TABLES) :].partition(b"/keys/")
                    if sep and b"/" not in table:
                        await self._lookup(scope, send, table.decode("latin-1"), key)
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


class SecuredKiqApp(KiqApp):
    """``KiqApp`` with authentication: the caller is checked before anything answers."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            access = self.access
            assert access is not None
            if scope["method"] == "GET":
                path: str = scope["path"]
                if path.startswith(_TABLES):
                    raw = scope.get("raw_path") or path.encode()
                    table, sep, key = raw[len(_TABLES) :].partition(b"/keys/")
                    if sep and b"/" not in table:
                        name = table.decode("latin-1")
                        try:
                            access.read(scope, name)
                        except Exception as exc:
                            await send_error(send, exc, scope)
                            return
                        await self._lookup(scope, send, name, key)
                        return
            try:
                access.admit(scope)
                await self._routes(scope, receive, send)
            except Exception as exc:
                await send_error(send, exc, scope)
        elif kind == "lifespan":
            await self._lifespan(receive, send)


def _version() -> str:
    try:
        return version("kiq")
    except PackageNotFoundError:
        return "0"


def create_app(
    node: Node,
    writer: RecordWriter,
    peers: Peers | None = None,
    start_node: bool = True,
    endpoints: AppRoutes = catalog.SHIPPED_ENDPOINTS,
    base: str | None = None,
    limits: LimitsSettings | None = None,
    security: Security | None = None,
    peer_ssl: ssl.SSLContext | None = None,
) -> KiqApp:
    """The app serving ``node``; ``writer`` takes the application's writes.

    ``endpoints`` declare the application's routes: functions, or targets
    (``module:function``, ``file.py:function`` looked for beside ``base`` first);
    by default the shipped stock and word-count routes. ``peers`` carries requests
    to other nodes (made from the node's settings when not given); the app closes
    it and the writer, and starts and stops the node unless told not to. ``limits``:
    the ``[limits]`` the API enforces itself (body size, multiget keys, the rate). With
    ``security`` (``kiq.security.security_for``), callers and peers are checked;
    ``peer_ssl`` verifies ``https://`` peers (``kiq.security.tls.client_context``).
    """
    cls = SecuredKiqApp if security is not None and security.tokens is not None else KiqApp
    return cls(node, writer, peers, start_node, endpoints, base, limits, security, peer_ssl)
