"""Every route but the raw lookup path, declared with Starlette's router.

  POST /v1/tables/{table}/multiget          many keys, one call per owner
  GET  /v1/tables/{table}/range             byte-ordered scan with cursors
  GET  /v1/tables                           tables and their partition counts
  GET  /v1/metadata                         nodes, actives, standbys, offsets, lag
  GET  /v1/health/live, /v1/health/ready    liveness, readiness
  GET  /metrics                             Prometheus
  GET  /openapi.json                        the OpenAPI 3.1 document (openapi.py)
  POST /v1/internal/lookups, /v1/internal/multiget, /v1/internal/scan,
  GET  /v1/internal/metadata,
  POST /v1/internal/hello                   node-to-node calls (msgpack; routing/wire.py)

Every path under ``RESERVED`` is the core API's: the core router answers it, a
route it lacks included (404), whatever an application's patterns would match.
The application's own routes (endpoints.py; the shipped stock and word-count ones
among them) have a router of their own, for every other path.

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
from kiq.api.asgi import Receive, Scope, Send, query, read_body
from kiq.api.auth import Access, caller, forwarded_caller
from kiq.api.batches import Batches
from kiq.api.errors import BadRequest, NoRoute
from kiq.api.lookups import Lookups
from kiq.api.openapi import OPENAPI_PATH
from kiq.node import NodeView
from kiq.routing import Peers
from kiq.routing.wire import (
    INTERNAL_HELLO,
    INTERNAL_LOOKUPS,
    INTERNAL_METADATA,
    INTERNAL_MULTIGET,
    INTERNAL_SCAN,
    MSGPACK,
)

JSON = "application/json"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
# The core API's paths and everything under them: an application's routes never answer there.
RESERVED = (
    "/v1/tables",
    "/v1/internal",
    "/v1/metadata",
    "/v1/health",
    "/metrics",
    "/openapi.json",
)
_UNDER_RESERVED = tuple(r + "/" for r in RESERVED)


def is_core(path: str) -> bool:
    """Whether ``path`` belongs to the core API (``RESERVED``, or under one of them)."""
    return path in RESERVED or path.startswith(_UNDER_RESERVED)


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
    return forwarded_caller(request.scope)


def app_router(custom: Sequence[tuple[str, str, ASGIApp]]) -> Router:
    """An application's routes (method, path, ASGI endpoint), for paths outside ``RESERVED``."""
    routes = [_Route(method, path, endpoint) for method, path, endpoint in custom]
    return Router(routes, redirect_slashes=False, default=_no_route)


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

    async def _from_member(
        self, request: Request, admin: bool = False, for_caller: bool = True
    ) -> bytes:
        """The body of a node-to-node request, once its sender is known to be a member (the
        credential's form and time are checked before the body is read)."""
        if self._access is not None:
            self._access.check_form(request.scope)
        body = await read_body(request.receive, self._max_body)
        if self._access is not None:
            self._access.member(request.scope, body, admin, for_caller)
        return body

    def _sealed(self, request: Request, answer: bytes) -> Response:
        """An internal answer, sealed for the member that asked (``Access.seal``)."""
        if self._access is not None:
            answer = self._access.seal(request.scope, answer)
        return Response(answer, media_type=MSGPACK)

    def router(self) -> Router:
        """The core routes: every path under ``RESERVED`` is answered here."""
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
                _Route("POST", INTERNAL_HELLO, self.internal_hello),
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
        detail = self._access is None or self._access.is_admin(request.scope)
        status, body = await asyncio.to_thread(admin.ready, self._node, detail)
        return _json(body, status)

    async def metrics(self, request: Request) -> Response:
        return Response(admin.metrics(self._node), media_type=PROMETHEUS)

    async def openapi(self, request: Request) -> Response:
        return _json(self.document)

    async def internal_lookups(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = await self._lookups.internal(body, caller(request.scope))
        return self._sealed(request, answer)

    async def internal_multiget(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = self._batches.internal_multiget(body, caller(request.scope))
        return self._sealed(request, answer)

    async def internal_scan(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = self._batches.internal_scan(body, caller(request.scope))
        return self._sealed(request, answer)

    async def internal_metadata(self, request: Request) -> Response:
        await self._from_member(request, admin=True)
        return self._sealed(request, admin.node_status(self._node))

    async def internal_hello(self, request: Request) -> Response:
        """A peer's challenge, answered sealed: proof that this node holds the secret."""
        challenge = await self._from_member(request, for_caller=False)
        if len(challenge) > 64:
            raise BadRequest("a challenge is at most 64 bytes")
        return self._sealed(request, challenge)
