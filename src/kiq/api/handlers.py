"""The core API's handlers, each given only the parts it uses; routes.py declares their routes.

A handler raises; the app turns what it raises into the answer. Who may call it
is checked before it runs (the route's ``Rule``, auth.py): the node-to-node
handlers only finish that check, with the body (``Access.member``).
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from kiq.api import admin
from kiq.api.asgi import query
from kiq.api.auth import Access, caller, forwarded_caller
from kiq.api.batches import Batches
from kiq.api.errors import BadRequest
from kiq.api.lookups import Lookups
from kiq.api.request_body import read_body
from kiq.node import NodeView
from kiq.routing import Peers
from kiq.routing.wire import MSGPACK

JSON = "application/json"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


def _json(body: bytes, status: int = 200) -> Response:
    return Response(body, status, media_type=JSON)


def _auth(request: Request) -> str | None:
    return forwarded_caller(request.scope)


class Handlers:
    """The core routes' handlers (``CORE`` names them unbound; the routers bind them here)."""

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
        route's rule checked the credential's form and time before the body is read)."""
        body = await read_body(request.receive, self._max_body)
        if self._access is not None:
            self._access.member(request.scope, body, admin, for_caller)
        return body

    def _sealed(self, request: Request, answer: bytes) -> Response:
        """An internal answer, sealed for the member that asked (``Access.seal``)."""
        if self._access is not None:
            answer = self._access.seal(request.scope, answer)
        return Response(answer, media_type=MSGPACK)

    async def tables(self, request: Request) -> Response:
        return _json(admin.tables(self._node))

    async def multiget(self, request: Request) -> Response:
        body = await read_body(request.receive, self._max_body)
        table = request.path_params["table"]
        return _json(await self._batches.multiget(table, body, _auth(request)))

    async def range(self, request: Request) -> Response:
        table = request.path_params["table"]
        return _json(await self._batches.range(table, query(request.scope), _auth(request)))

    async def windows(self, request: Request) -> Response:
        table, key = request.path_params["table"], request.path_params["key"]
        params = query(request.scope)
        return _json(await self._batches.windows(table, key, params, _auth(request)))

    async def top(self, request: Request) -> Response:
        table = request.path_params["table"]
        return _json(await self._batches.top_json(table, query(request.scope), _auth(request)))

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
        answer = await self._batches.internal_multiget(body, caller(request.scope))
        return self._sealed(request, answer)

    async def internal_scan(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = await self._batches.internal_scan(body, caller(request.scope))
        return self._sealed(request, answer)

    async def internal_top(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = await self._batches.internal_top(body, caller(request.scope))
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
