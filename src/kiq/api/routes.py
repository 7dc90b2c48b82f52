"""Every route but the raw lookup path, declared with Starlette's router.

  POST /v1/tables/{table}/multiget          many keys, one call per owner
  GET  /v1/tables/{table}/range             byte-ordered scan with cursors
  GET  /v1/tables                           tables and their partition counts
  GET  /v1/metadata                         nodes, actives, standbys, offsets, lag
  GET  /v1/health/live, /v1/health/ready    liveness, readiness
  GET  /metrics                             Prometheus
  GET  /openapi.json                        the OpenAPI 3.1 document (openapi.py)
  POST /v1/internal/lookups, /v1/internal/multiget, /v1/internal/scan,
  GET  /v1/internal/metadata                node-to-node calls (msgpack; routing/wire.py)

then the application's own routes (endpoints.py; the shipped stock and word-count
ones among them), after the core ones so that they never shadow one.

A route answers its one method; any other request is a 404 ``no_route``, as
before the router. Handlers raise; the app turns what they raise into the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route, Router
from starlette.types import ASGIApp

from kiq.api import admin
from kiq.api.asgi import Receive, Scope, Send, header, query, read_body
from kiq.api.auth import Access, caller
from kiq.api.batches import Batches
from kiq.api.errors import NoRoute
from kiq.api.lookups import Lookups
from kiq.api.openapi import OPENAPI_PATH
from kiq.node import NodeView
from kiq.routing import Peers
from kiq.routing.wire import (
    INTERNAL_LOOKUPS,
    INTERNAL_METADATA,
    INTERNAL_MULTIGET,
    INTERNAL_SCAN,
    MSGPACK,
)

JSON = "application/json"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


class _Route(Route):
    """A route for one method only (no implied HEAD); another method finds no route."""

    def __init__(self, method: str, path: str, endpoint: Callable[..., Any]) -> None:
        super().__init__(path, endpoint, methods=[method])
        self.methods = {method}

    def matches(self, scope: Any) -> tuple[Match, Any]:
        match, child = super().matches(scope)
        return (Match.NONE, {}) if match is Match.PARTIAL else (match, child)


async def _no_route(scope: Scope, receive: Receive, send: Send) -> None:
    raise NoRoute("no such path; see /v1/tables and /v1/metadata")


def _json(body: bytes, status: int = 200) -> Response:
    return Response(body, status, media_type=JSON)


def _auth(request: Request) -> str | None:
    return header(request.scope, b"authorization")


class Endpoints:
    """The handlers behind the routes, each given only the parts it uses."""

    def __init__(
        self,
        node: NodeView,
        lookups: Lookups,
        batches: Batches,
        peers: Peers,
        max_body: int,
        access: Access | None = None,
    ) -> None:
        self._node = node
        self._lookups = lookups
        self._batches = batches
        self._peers = peers
        self._max_body = max_body
        self.document = b"{}"  # /openapi.json, set once the routes are known (openapi.py)
        self._access = access  # None: a node without authentication

    async def _from_member(self, request: Request, admin: bool = False) -> bytes:
        """The body of a node-to-node request, once its sender is known to be a member."""
        body = await read_body(request.receive, self._max_body)
        if self._access is not None:
            self._access.member(request.scope, body, admin)
        return body

    def router(self, custom: Sequence[tuple[str, str, ASGIApp]] = ()) -> Router:
        """The core routes, then ``custom`` ones (method, path, ASGI endpoint)."""
        return Router(
            [
                _Route("GET", "/v1/tables", self.tables),
                _Route("POST", "/v1/tables/{table}/multiget", self.multiget),
                _Route("GET", "/v1/tables/{table}/range", self.range),
                _Route("GET", "/v1/metadata", self.metadata),
                _Route("GET", "/v1/health/live", self.live),
                _Route("GET", "/v1/health/ready", self.ready),
                _Route("GET", "/metrics", self.metrics),
                _Route("GET", OPENAPI_PATH, self.openapi),
                _Route("POST", INTERNAL_LOOKUPS, self.internal_lookups),
                _Route("POST", INTERNAL_MULTIGET, self.internal_multiget),
                _Route("POST", INTERNAL_SCAN, self.internal_scan),
                _Route("GET", INTERNAL_METADATA, self.internal_metadata),
                *(_Route(method, path, endpoint) for method, path, endpoint in custom),
            ],
            redirect_slashes=False,
            default=_no_route,
        )

    async def tables(self, request: Request) -> Response:
        return _json(admin.tables(self._node))

    async def multiget(self, request: Request) -> Response:
        body = await read_body(request.receive, self._max_body)
        table = request.path_params["table"]
        return _json(await self._batches.multiget(table, body, _auth(request)))

    async def range(self, request: Request) -> Response:
        table = request.path_params["table"]
        return _json(await self._batches.range(table, query(request.scope), _auth(request)))

    async def metadata(self, request: Request) -> Response:
        cluster = query(request.scope).get("cluster", "") in ("1", "true")
        return _json(await admin.metadata(self._node, self._peers, cluster, _auth(request)))

    async def live(self, request: Request) -> Response:
        return _json(b'{"live":true}')

    async def ready(self, request: Request) -> Response:
        status, body = await asyncio.to_thread(admin.ready, self._node)
        return _json(body, status)

    async def metrics(self, request: Request) -> Response:
        return Response(admin.metrics(self._node), media_type=PROMETHEUS)

    async def openapi(self, request: Request) -> Response:
        return _json(self.document)

    async def internal_lookups(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = await self._lookups.internal(body, caller(request.scope))
        return Response(answer, media_type=MSGPACK)

    async def internal_multiget(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = self._batches.internal_multiget(body, caller(request.scope))
        return Response(answer, media_type=MSGPACK)

    async def internal_scan(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = self._batches.internal_scan(body, caller(request.scope))
        return Response(answer, media_type=MSGPACK)

    async def internal_metadata(self, request: Request) -> Response:
        await self._from_member(request, admin=True)
        return Response(admin.node_status(self._node), media_type=MSGPACK)
