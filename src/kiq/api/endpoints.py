"""Custom endpoints: an application's own HTTP routes on every node, computed from tables.

An application names functions in its file's ``[app] endpoints``; each is called
once as a node's app is built, with a ``Routes`` to declare its handlers on. A
handler takes a ``Request`` and returns a ``Reply``: ``json_reply`` for a JSON
body, or ``Request.lookup`` for a table lookup's own answer (its value, status and
X-Kiq-* headers, the raw path's fast case included), optionally enriched. Reads go
through ``Request.tables``, which routes each partition to its replicas as the
table API does and carries the caller's Authorization to other nodes; writes go
through ``Request.write``, to the node's Kafka writer. On a node with
authentication every route here needs a valid token, each table read through
``Request.tables`` or ``Request.lookup`` needs read on that table, and
``Request.write`` needs ``kiq:write`` (api/auth.py). Handlers raise ``ApiError``s
(``BadRequest``, ``UnknownTable``, ...) for the answers ``send_error`` makes on
every route.

A declared route is a ``RouteSpec`` as the core's are (api/spec.py), with the rule
``CALLER``: one declaration gives its router entry, its checks and its operation in
/openapi.json. The core routes come first: an application's route never shadows one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import msgspec
import orjson
from starlette.responses import Response

from kiq.api.asgi import Receive, Scope, Send, header, query
from kiq.api.auth import AUTH_ON, caller, forwarded_caller, require_read, require_write
from kiq.api.batches import MAX_RANGE_LIMIT, Batches, value_json
from kiq.api.errors import (
    BadRequest,
    InsufficientScope,
    Unauthorized,
    Unavailable,
    UnknownTable,
)
from kiq.api.lookups import Enrich, Lookups
from kiq.api.params import encode_cursor, int_param
from kiq.api.request_body import read_body
from kiq.api.routes import RESERVED
from kiq.api.spec import Answer, Doc, RouteSpec, Rule
from kiq.api.targets import resolve
from kiq.errors import ConfigError
from kiq.security import Principal, read_scope
from kiq.tables import TableRuntime

__all__ = [
    "MAX_RANGE_LIMIT",
    "Many",
    "Page",
    "Reply",
    "Request",
    "Routes",
    "Tables",
    "json_reply",
]

JSON = "application/json"
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
GENERIC = "declared by the application"  # the summary of a route declared without a doc


class Writer(Protocol):
    """The node's writer (``kiq.node_build.LogWriter``: the Kafka topic)."""

    async def send(self, topic: str, key: bytes, value: bytes) -> tuple[int, int]: ...


class Reply:
    """What a handler answers with: it sends itself."""

    async def send(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class _Json(Reply):
    __slots__ = ("_response",)

    def __init__(self, body: bytes, status: int, headers: Mapping[str, str] | None) -> None:
        self._response = Response(body, status, headers, media_type=JSON)

    async def send(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._response(scope, receive, send)


def json_reply(value: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
    """``value`` as a JSON body (``bytes`` are sent as they are: JSON already); msgspec
    Structs, a route's declared ``response`` type, in it included."""
    body = value if isinstance(value, bytes) else orjson.dumps(value, default=msgspec.to_builtins)
    return _Json(body, status, headers)


class _Lookup(Reply):
    __slots__ = ("_enrich", "_key", "_lookups", "_table")

    def __init__(self, lookups: Lookups, table: str, key: bytes, enrich: Enrich | None) -> None:
        self._lookups = lookups
        self._table = table
        self._key = key
        self._enrich = enrich

    async def send(self, scope: Scope, receive: Receive, send: Send) -> None:
        require_read(scope, self._table)
        await self._lookups.get(
            cast(dict[str, Any], scope), send, self._table, self._key, self._enrich
        )


@dataclass(frozen=True)
class Many:
    """What ``Tables.get_many`` found: stored values by key, and the keys it did not."""

    table: TableRuntime
    found: dict[str, bytes]
    missing: list[str]
    unavailable: list[str]  # no replica of their partitions could answer

    def parsed(self) -> dict[str, Any]:
        """The found values of a JSON table, parsed."""
        return {key: orjson.loads(value) for key, value in self.found.items()}

    def json_found(self) -> dict[str, Any]:
        """The found values to put in a ``json_reply`` as the table API does (stored JSON as
        it is, base64 for a raw table), without parsing them."""
        return {key: value_json(self.table, value) for key, value in self.found.items()}


@dataclass(frozen=True)
class Page:
    """What ``Tables.range`` read: (key, stored value) in key order, and where to go on."""

    table: TableRuntime
    items: list[tuple[str, bytes]]
    next_cursor: str | None  # pass it back as ``cursor`` for the next page

    def json_values(self) -> list[Any]:
        """The values to put in a ``json_reply`` as the table API does (see ``Many``)."""
        return [value_json(self.table, value) for _, value in self.items]

    def json_items(self) -> list[dict[str, Any]]:
        """``[{"key": ..., "value": ...}]``, as ``GET /v1/tables/{t}/range`` answers."""
        return [{"key": key, "value": value_json(self.table, v)} for key, v in self.items]


class Tables:
    """Reads of the cluster's tables for one request, routed as the table API routes them."""

    __slots__ = ("_auth", "_auth_on", "_batches", "_caller")

    def __init__(
        self,
        batches: Batches,
        auth: str | None,
        caller: Principal | None = None,
        auth_on: bool = False,
    ) -> None:
        self._batches = batches
        self._auth = auth  # what peers are told of the caller (``Principal.statement``)
        self._caller = caller  # None: no authentication on this node
        self._auth_on = auth_on  # the node checks tokens: no caller is no read (fail closed)

    def serves(self, table: str) -> bool:
        """Whether this cluster serves ``table``."""
        return table in self._batches.node.tables

    def _runtime(self, table: str) -> TableRuntime:
        if self._caller is None:
            if self._auth_on:
                raise Unauthorized("this node needs a bearer token: Authorization: Bearer TOKEN")
        elif not self._caller.grants.may_read(table):
            raise InsufficientScope(read_scope(table))
        runtime = self._batches.node.tables.get(table)
        if runtime is None:
            raise UnknownTable(f"no table named {table!r}", table=table)
        return runtime

    async def get(self, table: str, key: str) -> bytes | None:
        """The stored value of ``key``, or None; ``Unavailable`` when no replica answers."""
        many = await self.get_many(table, [key])
        if many.unavailable:
            raise Unavailable(f"no replica of {table} could answer for {key!r}", table=table)
        return many.found.get(key)

    async def get_json(self, table: str, key: str) -> Any:
        """The parsed value of ``key`` in a JSON table, or None."""
        value = await self.get(table, key)
        return None if value is None else orjson.loads(value)

    async def get_many(self, table: str, keys: Sequence[str]) -> Many:
        """Many keys, one call per node owning some of them."""
        runtime = self._runtime(table)
        found, missing, unavailable = await self._batches.get_many(runtime, list(keys), self._auth)
        return Many(runtime, found, missing, unavailable)

    async def range(
        self,
        table: str,
        *,
        prefix: str = "",
        start: str | None = None,
        end: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page:
        """Keys in byte order: those starting with ``prefix``, from ``start`` (inclusive) to
        ``end`` (exclusive), after ``cursor``; at most ``limit`` (1 to ``MAX_RANGE_LIMIT``).

        With a prefix that ends in the table's ``sep``, one partition is read.
        """
        if not 1 <= limit <= MAX_RANGE_LIMIT:
            raise BadRequest(f"limit must be between 1 and {MAX_RANGE_LIMIT}, got {limit}")
        runtime = self._runtime(table)
        items, last_key = await self._batches.scan(
            runtime,
            prefix=prefix.encode(),
            start=start.encode() if start is not None else None,
            end=end.encode() if end is not None else None,
            cursor=cursor,
            limit=limit,
            auth=self._auth,
        )
        return Page(
            runtime,
            [(k.decode(), v) for k, v in items],
            encode_cursor(last_key) if last_key is not None else None,
        )


@dataclass(frozen=True)
class _Services:
    lookups: Lookups
    batches: Batches
    writer: Writer
    max_body: int


class Request:
    """One request to an application's route."""

    __slots__ = ("_receive", "_services", "_tables", "path_params", "query", "scope")

    def __init__(self, scope: Scope, receive: Receive, services: _Services) -> None:
        self.scope = scope
        self._receive = receive
        self._services = services
        self._tables: Tables | None = None
        self.path_params: dict[str, str] = scope.get("path_params", {})
        self.query: dict[str, str] = query(scope)

    @property
    def method(self) -> str:
        return str(self.scope["method"])

    @property
    def path(self) -> str:
        return str(self.scope["path"])

    def header(self, name: str) -> str | None:
        """A request header's value (the first), by case-insensitive name."""
        return header(self.scope, name.lower().encode("latin-1"))

    def int_param(self, name: str, low: int = 0, high: int = 2**62) -> int | None:
        """A whole-number query parameter, None when absent; a 400 when not in [low, high]."""
        return int_param(self.query, name, low, high)

    async def body(self, limit: int | None = None) -> bytes:
        """The body; more than ``limit`` bytes (default: the node's ``[limits]
        max_body_bytes``) is a 413."""
        return await read_body(self._receive, limit or self._services.max_body)

    async def json(self, invalid: str = "the body must be JSON") -> Any:
        """The body as JSON; a 400 saying ``invalid`` when it is not."""
        body = await self.body()
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(invalid) from exc

    @property
    def tables(self) -> Tables:
        """The cluster's tables, read on behalf of this request's caller."""
        if self._tables is None:
            scope = self.scope
            self._tables = Tables(
                self._services.batches,
                forwarded_caller(scope),
                caller(scope),
                bool(scope.get(AUTH_ON)),
            )
        return self._tables

    def lookup(
        self, table: str, key: str, enrich: Callable[[Any], Awaitable[Any]] | None = None
    ) -> Reply:
        """The answer ``GET /v1/tables/{table}/keys/{key}`` gives (value, 404, headers), the
        request's ``max_lag``, ``min_offset``, ``wait_ms`` and ``redirect`` honoured.

        With ``enrich``, a found value of a JSON table is given to it parsed, and what it
        returns is the answer's body, as JSON (same status and headers).
        """
        if enrich is None:
            return _Lookup(self._services.lookups, table, key.encode(), None)

        async def as_json(value: bytes) -> bytes:
            return orjson.dumps(await enrich(orjson.loads(value)))

        return _Lookup(self._services.lookups, table, key.encode(), as_json)

    async def write(self, topic: str, key: bytes | str, value: bytes | str) -> tuple[int, int]:
        """Writes a record to ``topic``: (partition, offset) once Kafka has it.

        Raises ``kiq.WriteFailed`` when it did not take it; needs ``kiq:write`` on a node
        with authentication.
        """
        require_write(self.scope)
        k = key.encode() if isinstance(key, str) else key
        v = value.encode() if isinstance(value, str) else value
        return await self._services.writer.send(topic, k, v)


Handler = Callable[[Request], Awaitable[Reply]]


class Routes:
    """Where an application's ``routes(app)`` declares its handlers.

    Paths are Starlette's: ``/v1/orders/{id}`` puts ``id`` in ``Request.path_params``.
    A route answers its one method; the core API's paths are not to be taken. For the
    node's /openapi.json: ``doc``, the route's OpenAPI operation (``summary``,
    ``parameters``, ``requestBody``, ``responses``; ``#/components/schemas/Error`` is
    kiq's error body); ``request`` and ``response``, the types of its JSON bodies (msgspec
    Structs, dataclasses, ``list[str]``...), whose schemas the document is given. A route
    declared with none of them appears with a generic JSON answer.
    """

    def __init__(self) -> None:
        self._routes: list[RouteSpec[Handler]] = []

    def get(
        self,
        path: str,
        handler: Handler,
        doc: Mapping[str, Any] | None = None,
        *,
        response: Any = None,
    ) -> None:
        self.add("GET", path, handler, doc, response=response)

    def post(
        self,
        path: str,
        handler: Handler,
        doc: Mapping[str, Any] | None = None,
        *,
        request: Any = None,
        response: Any = None,
    ) -> None:
        self.add("POST", path, handler, doc, request=request, response=response)

    def add(
        self,
        method: str,
        path: str,
        handler: Handler,
        doc: Mapping[str, Any] | None = None,
        *,
        request: Any = None,
        response: Any = None,
    ) -> None:
        method = method.upper()
        if method not in METHODS:
            raise ConfigError(f"route {path}: method {method} is not one of {sorted(METHODS)}")
        if not path.startswith("/"):
            raise ConfigError(f"route {path!r}: a path starts with /")
        for core in RESERVED:
            if path == core or path.startswith(core + "/"):
                raise ConfigError(
                    f"route {method} {path} could never be reached: the core API's {core} "
                    f"answers every path under it; move the route elsewhere"
                )
        if any(r.method == method and r.path == path for r in self._routes):
            raise ConfigError(f"route {method} {path} is declared twice")
        described = _doc(doc, request, response)
        self._routes.append(RouteSpec(method, path, handler, Rule.CALLER, True, described))

    def __iter__(self) -> Iterator[RouteSpec[Handler]]:
        return iter(self._routes)


def _doc(operation: Mapping[str, Any] | None, request: Any, response: Any) -> Doc:
    answers = {} if response is None else {"200": Answer.json("the route's answer", response)}
    if operation is not None:
        return Doc(body=request, answers=answers, operation=operation)
    generic = Answer.json("the route's JSON answer, or an error")
    return Doc(GENERIC, body=request, answers={**answers, "default": generic})


class Endpoint:
    """One declared route as the ASGI endpoint the router calls."""

    __slots__ = ("_handler", "_services")

    def __init__(self, handler: Handler, services: _Services) -> None:
        self._handler = handler
        self._services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reply = await self._handler(Request(scope, receive, self._services))
        if not isinstance(reply, Reply):
            raise TypeError(f"{self._handler!r} returned {type(reply).__name__}, not a Reply")
        await reply.send(scope, receive, send)


Declare = Callable[[Routes], None]


def declared_routes(endpoints: Iterable[str | Declare], base: str | None = None) -> Routes:
    """The routes the application's functions declare: each given, or a target
    (``module:function``, ``path/file.py:function``; a relative file is looked for beside
    ``base``, the application file, first)."""
    routes = Routes()
    for entry in endpoints:
        declare = resolve(entry, "endpoints", base) if isinstance(entry, str) else entry
        declare(routes)
    return routes


def endpoints_for(
    routes: Iterable[RouteSpec[Handler]],
    lookups: Lookups,
    batches: Batches,
    writer: Writer,
    max_body: int,
) -> list[tuple[RouteSpec[Handler], Endpoint]]:
    """Each declared route with the ASGI endpoint that calls its handler."""
    services = _Services(lookups, batches, writer, max_body)
    return [(spec, Endpoint(spec.endpoint, services)) for spec in routes if spec.endpoint]
