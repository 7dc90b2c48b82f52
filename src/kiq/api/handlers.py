"""The core API's handlers, each given only the parts it uses; routes.py declares their routes.

A handler raises; the app turns what it raises into the answer. Who may call it
is checked before it runs (the route's ``Rule``, auth.py): the node-to-node
handlers only finish that check, with the body (``Access.member``).
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

import msgspec
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from kiq import formats
from kiq.api import bodies, sse
from kiq.api.asgi import header, query
from kiq.api.auth import Access, caller, forwarded_caller
from kiq.api.batches import Answer, Batches
from kiq.api.consistency import ReadAt, read_at
from kiq.api.errors import BadRequest, InsufficientScope, NotHere, Unavailable
from kiq.api.limits import caller_of
from kiq.api.lookups import Lookups
from kiq.api.names import VERSION, resolve
from kiq.api.request_body import read_body
from kiq.api.watch import SubscriptionFrames, WatchApi, keys_of, keys_of_body
from kiq.http_errors import WireTooNew
from kiq.node import NodeView
from kiq.ops import admin, dashboard
from kiq.ops.versions import VersionsApi
from kiq.peers import Peers
from kiq.peers.wire import (
    FORWARDED,
    MSGPACK,
    SPOKEN,
    WIRE,
    decode_changes,
    encode,
    hello_answer,
    wire_range,
)
from kiq.positions import AFTER_HEADER
from kiq.tables import TableRuntime

_B = TypeVar("_B", bodies.Switch, bodies.Retire)
JSON = "application/json"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


def _json(body: bytes, status: int = 200, runtime: TableRuntime | None = None) -> Response:
    """A JSON answer; a table read's says which version of the table answered."""
    if runtime is None:
        return Response(body, status, media_type=JSON)
    return Response(body, status, {VERSION: runtime.spec.version}, media_type=JSON)


def _read(answer: Answer, runtime: TableRuntime) -> Response:
    """A read across partitions: its JSON, the version, position and batch it read."""
    body, headers = answer
    return Response(body, 200, {VERSION: runtime.spec.version, **headers}, media_type=JSON)


def _read_at(request: Request, runtime: TableRuntime) -> ReadAt:
    """The bounds the request names (``api.consistency``): ``?consistent=``, a position."""
    params = query(request.scope) if request.scope["query_string"] else {}
    return read_at(runtime.spec.name, params, request.headers.get(AFTER_HEADER))


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
        watches: WatchApi | None = None,
        versions: VersionsApi | None = None,
    ) -> None:
        self._node = node
        self._watches = watches
        self._versions = versions
        self._lookups = lookups
        self._batches = batches
        self._peers = peers
        self._max_body = max_body
        self.document = b"{}"  # /openapi.json, set once the routes are known (openapi.py)
        self._access = access  # None: a node without authentication
        # Where GET /v1/pipelines reads the queries' progress (dashboard.py); None: nowhere.
        self.progress: dashboard.PipelineProgress | None = None

    async def _from_member(
        self, request: Request, admin: bool = False, for_caller: bool = True
    ) -> bytes:
        """The body of a node-to-node request, once its sender is known to be a member (the
        route's rule checked the credential's form and time before the body is read)."""
        body = await read_body(request.receive, self._max_body)
        if self._access is not None:
            self._access.member(request.scope, body, admin, for_caller)
        _wire_of(request)
        return body

    def _sealed(self, request: Request, answer: bytes) -> Response:
        """An internal answer, sealed for the member that asked (``Access.seal``)."""
        if self._access is not None:
            answer = self._access.seal(request.scope, answer)
        return Response(answer, media_type=MSGPACK)

    async def tables(self, request: Request) -> Response:
        shown = self._access is None or self._access.is_admin(request.scope)  # checkpoints
        return _json(admin.tables(self._node, shown))

    def _table(self, request: Request) -> TableRuntime:
        """The version of the path's table the request reads (``?version=``, else current)."""
        version = query(request.scope).get("version") if request.scope["query_string"] else None
        return resolve(self._node, request.path_params["table"], version)

    async def multiget(self, request: Request) -> Response:
        body = await read_body(request.receive, self._max_body)
        runtime = self._table(request)
        at = _read_at(request, runtime)
        answer = await self._batches.multiget(runtime.spec.name, body, _auth(request), at)
        return _read(answer, runtime)

    async def range(self, request: Request) -> Response:
        runtime = self._table(request)
        params = query(request.scope)
        at = _read_at(request, runtime)
        answer = await self._batches.range(runtime.spec.name, params, _auth(request), at)
        return _read(answer, runtime)

    async def windows(self, request: Request) -> Response:
        runtime, key = self._table(request), request.path_params["key"]
        params = query(request.scope)
        at = _read_at(request, runtime)
        answer = await self._batches.windows(runtime.spec.name, key, params, _auth(request), at)
        return _read(answer, runtime)

    async def top(self, request: Request) -> Response:
        runtime = self._table(request)
        params = query(request.scope)
        at = _read_at(request, runtime)
        answer = await self._batches.top_json(runtime.spec.name, params, _auth(request), at)
        return _read(answer, runtime)

    async def by_value(self, request: Request) -> Response:
        """GET /v1/tables/{table}/by/{field}/{value}: the rows whose field equals value."""
        return await self._by_index(request, request.path_params["value"])

    async def by_range(self, request: Request) -> Response:
        """GET /v1/tables/{table}/by/{field}?from=&to=: the rows whose field is within."""
        return await self._by_index(request, None)

    async def _by_index(self, request: Request, value: str | None) -> Response:
        runtime = self._table(request)
        params = query(request.scope)
        at = _read_at(request, runtime)
        field = request.path_params["field"]
        answer = await self._batches.by_index_json(
            runtime.spec.name, field, value, params, _auth(request), at
        )
        return _read(answer, runtime)

    # -- versions (ops/versions.py) -----------------------------------------------------------

    @property
    def _versioning(self) -> VersionsApi:
        if self._versions is None:
            raise Unavailable("this node does not manage table versions")
        return self._versions

    async def versions(self, request: Request) -> Response:
        table = request.path_params["table"]
        return _json(orjson.dumps(await self._versioning.describe(table, _auth(request))))

    async def switch(self, request: Request) -> Response:
        body = await self._body(request, bodies.Switch)
        table = request.path_params["table"]
        answer = await self._versioning.switch(table, body.version, body.force, _auth(request))
        return _json(orjson.dumps(answer))

    async def retire(self, request: Request) -> Response:
        body = await self._body(request, bodies.Retire)
        answer = await self._versioning.retire(
            request.path_params["table"], body.version, _auth(request)
        )
        return _json(orjson.dumps(answer))

    async def _body(self, request: Request, kind: type[_B]) -> _B:
        raw = await read_body(request.receive, self._max_body)
        try:
            return msgspec.json.decode(raw, type=kind)
        except msgspec.DecodeError as exc:
            raise BadRequest(f"malformed body: {exc}") from exc

    # -- watches (api/watch.py) ------------------------------------------------------------

    @property
    def watches(self) -> WatchApi:
        if self._watches is None:
            raise Unavailable("this node serves no watches")
        return self._watches

    async def watch_key(self, request: Request) -> Response:
        runtime = self.watches.runtime(self._table(request).spec.name)
        key = request.path_params["key"].encode()
        return await self._watch(request, runtime, [key], [])

    async def watch(self, request: Request) -> Response:
        runtime = self.watches.runtime(self._table(request).spec.name)
        if request.method == "POST":
            body = await read_body(request.receive, self._max_body)
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise BadRequest("the body must be JSON") from exc
            keys, prefixes = keys_of_body(parsed)
        else:
            keys, prefixes = keys_of(query(request.scope))
        return await self._watch(request, runtime, keys, prefixes)

    async def _watch(
        self, request: Request, runtime: TableRuntime, keys: list[bytes], prefixes: list[bytes]
    ) -> Response:
        last = request.headers.get("last-event-id") or query(request.scope).get("last_event_id")
        sub = await self.watches.open(runtime, keys, prefixes, last, caller_of(request.scope))
        return _Stream(SubscriptionFrames(self.watches.watches, sub, runtime))

    async def internal_changes(self, request: Request) -> Response:
        body = await self._from_member(request, for_caller=False)
        try:
            asked = decode_changes(body)
        except ValueError as exc:
            raise BadRequest(f"malformed changes request: {exc}") from exc
        answer = await self._batches.reader.here.changes(asked)
        if answer is None:
            raise NotHere(
                f"{self._node.node_id} holds no usable replica of {asked.table}[{asked.partition}]"
            )
        return self._sealed(request, encode(answer))

    async def metadata(self, request: Request) -> Response:
        cluster = query(request.scope).get("cluster", "") in ("1", "true")
        # Any caller may route by the map (it names proven members only); asking every node
        # for its replicas costs each of them a call, so that stays an operator's.
        if cluster and self._access is not None and not self._access.is_admin(request.scope):
            raise InsufficientScope("kiq:admin")
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

    # -- the dashboard (dashboard.py) ---------------------------------------------------------

    async def ui(self, request: Request) -> Response:
        body, media = dashboard.asset(request.path_params.get("asset", ""))
        return Response(body, media_type=media, headers=dashboard.HEADERS)

    async def status(self, request: Request) -> Response:
        return _json(dashboard.status_json(self._node))

    async def pipelines(self, request: Request) -> Response:
        return _json(await asyncio.to_thread(dashboard.pipelines_json, self.progress))

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

    async def internal_top_many(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = await self._batches.internal_top_many(body, caller(request.scope))
        return self._sealed(request, answer)

    async def internal_by_index(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = await self._batches.internal_by_index(body, caller(request.scope))
        return self._sealed(request, answer)

    async def internal_by_index_many(self, request: Request) -> Response:
        body = await self._from_member(request)
        answer = await self._batches.internal_by_index_many(body, caller(request.scope))
        return self._sealed(request, answer)

    async def internal_metadata(self, request: Request) -> Response:
        await self._from_member(request, admin=True)
        return self._sealed(request, admin.node_status(self._node))

    async def internal_hello(self, request: Request) -> Response:
        """A peer's challenge, answered sealed: proof that this node holds the secret."""
        challenge = await self._from_member(request, for_caller=False)
        if len(challenge) > 64:
            raise BadRequest("a challenge is at most 64 bytes")
        asked = _wire_of(request) if header(request.scope, _WIRE) is not None else None
        return self._sealed(request, hello_answer(challenge, asked))


_WIRE = WIRE.encode()


def _wire_of(request: Request) -> tuple[int, int]:
    """The wire versions a peer's request says it speaks (``X-Kiq-Wire``); ``WireTooNew``
    when this node speaks none of them, said once in the log (``kiq.formats``)."""
    spoken = wire_range(header(request.scope, _WIRE))
    if spoken is None:
        raise BadRequest("X-Kiq-Wire must be OLDEST-NEWEST, two versions")
    sender = header(request.scope, FORWARDED.encode()) or "(unnamed)"
    if formats.too_new("peer wire of node", sender, spoken[0], formats.WIRE):
        raise WireTooNew(
            f"this node speaks peer wire {SPOKEN}, the request {spoken[0]}-{spoken[1]}",
            spoken=SPOKEN,
        )
    return spoken


class _Stream(Response):
    """A Server-Sent Events answer (api/sse.py), sent as the stream goes."""

    def __init__(self, frames: sse.Frames) -> None:
        self._frames = frames
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await sse.send_stream(send, receive, self._frames)
