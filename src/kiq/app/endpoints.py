"""Custom endpoints: an application's own HTTP routes on every node, computed from tables.

An application names functions in its file's ``[app] endpoints``; each is called
once as a node's app is built, with a ``Routes`` to declare its handlers on. A
handler takes a ``Request`` and returns a ``Reply``: ``json_reply`` for a JSON
body, or ``Request.lookup`` for a table lookup's own answer (its value, status and
X-Kiq-* headers, the raw path's fast case included), optionally enriched. Reads go
through ``Request.tables``, which routes each partition to its replicas as the
table API does (the node's one ``ReplicaReader``, with the table API's ``max_lag``,
``min_offset`` and ``wait_ms``) and carries the caller's Authorization to other
nodes; what they answer is in results.py. Writes and deletes go through
``Request.write`` and ``Request.delete``, to the node's Kafka writer. On a node with
authentication every route here needs a valid token (``Request.principal`` is its
caller, principal.py), each table read through ``Request.tables`` or
``Request.lookup`` needs read on that table, and ``Request.write`` and
``Request.delete`` need ``kiq:write`` (api/auth.py). Handlers raise ``ApiError``s
(``BadRequest``, ``UnknownTable``, ...) for the answers ``send_error`` makes on
every route.

A declared route is a ``RouteSpec`` as the core's are (api/spec.py), with the rule
``CALLER``: one declaration gives its router entry, its checks and its operation in
/openapi.json. The core routes come first: an application's route never shadows one.
"""

from __future__ import annotations

from collections.abc import (
    AsyncIterable,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

import msgspec
import orjson
from starlette.responses import Response

from kiq.api import sse
from kiq.api.asgi import Receive, Scope, Send, header, query
from kiq.api.auth import AUTH_ON, caller, forwarded_caller, require_read, require_write
from kiq.api.batches import (
    MAX_RANGE_LIMIT,
    MAX_TOP,
    Batches,
    is_descending,
    rank_field,
    top_window,
    window_sep,
)
from kiq.api.consistency import PLAIN, ReadAt
from kiq.api.errors import (
    BadRequest,
    InsufficientScope,
    Unauthorized,
    Unavailable,
    UnknownTable,
    lookup_error,
)
from kiq.api.indexes import bounds, given_bound, index_cursor, index_field, indexes
from kiq.api.limits import caller_of
from kiq.api.lookups import MAX_WAIT_MS, Enrich, Lookups, after
from kiq.api.params import check_key, encode_cursor, int_param
from kiq.api.precedence import shape
from kiq.api.request_body import read_body
from kiq.api.routes import RESERVED
from kiq.api.spec import Answer, Doc, RouteSpec, Rule
from kiq.api.watch import WatchApi
from kiq.app.positions import RequestPosition
from kiq.app.principal import Principal
from kiq.app.results import Many, Page, Read, Served, Windows
from kiq.app.streams import EventFrames, ServerEvent, Watch
from kiq.app.targets import resolve
from kiq.errors import ConfigError
from kiq.peers import Outcome, Source
from kiq.security import VerifiedCaller, read_scope
from kiq.tables import TableRuntime

__all__ = [
    "MAX_RANGE_LIMIT",
    "Many",
    "Page",
    "Principal",
    "Read",
    "Reply",
    "Request",
    "Routes",
    "Served",
    "Tables",
    "Windows",
    "json_reply",
]

JSON = "application/json"
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
GENERIC = "declared by the application"  # the summary of a route declared without a doc


class Writer(Protocol):
    """The node's writer (``kiq.node_build.LogWriter``: the Kafka topic); a ``None`` value
    is a tombstone, the record that deletes its key from a table."""

    async def send(self, topic: str, key: bytes, value: bytes | None) -> tuple[int, int]: ...


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


class _EventStream(Reply):
    def __init__(
        self, events: AsyncIterable[ServerEvent], headers: Mapping[str, str] | None
    ) -> None:
        self._frames = EventFrames(events)
        self._headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]

    async def send(self, scope: Scope, receive: Receive, send: Send) -> None:
        await sse.send_stream(send, receive, self._frames, self._headers)


def event_stream(
    events: AsyncIterable[ServerEvent], headers: Mapping[str, str] | None = None
) -> Reply:
    """A reply of Server-Sent Events: each of ``events`` as it comes, a heartbeat comment
    every 15 s, until the iterator ends or the client goes (it is closed then, so an async
    generator's ``finally`` runs: close its watches there). A client that takes nothing
    for 30 s is dropped."""
    return _EventStream(events, headers)


def json_reply(value: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
    """``value`` as a JSON body (``bytes`` are sent as they are: JSON already); msgspec
    Structs, a route's declared ``response`` type, and read-only mappings (a
    ``Principal``'s claims) in it included."""
    body = value if isinstance(value, bytes) else orjson.dumps(value, default=_builtins)
    return _Json(body, status, headers)


def _builtins(value: Any) -> Any:
    """What orjson does not encode itself, as what it does."""
    if isinstance(value, Mapping):
        return dict(value)
    return msgspec.to_builtins(value)


class _Lookup(Reply):
    __slots__ = ("_enrich", "_key", "_lookups", "_position", "_table")

    def __init__(
        self,
        lookups: Lookups,
        table: str,
        key: bytes,
        enrich: Enrich | None,
        position: RequestPosition,
    ) -> None:
        self._lookups = lookups
        self._table = table
        self._key = key
        self._enrich = enrich
        self._position = position

    async def send(self, scope: Scope, receive: Receive, send: Send) -> None:
        require_read(scope, self._table)
        # What the handler read or wrote before: the lookup is at or past it too.
        asked = self._position.into(scope)
        await self._lookups.get(
            cast(dict[str, Any], asked), send, self._table, self._key, self._enrich
        )


Order = Literal["asc", "desc"]
Consistent = Literal["batch"] | None  # what a read across partitions reflects


def _writer(runtime: TableRuntime) -> tuple[str, str] | None:
    """The query that writes ``runtime``'s table with batch markers (pipeline, query), as
    its catalog declaration says; None for a table declared otherwise, or not at all."""
    declared = runtime.spec.declared
    if not declared or not declared.get("consistent") or not declared.get("query"):
        return None
    return str(declared.get("pipeline", "")), str(declared["query"])


_MAX_COUNT = 2**62  # the largest max_lag or min_offset, as the table API's parameters


def _within(name: str, value: int | None, high: int = _MAX_COUNT) -> None:
    """A freshness parameter checked as the table API checks its own: a 400 out of range."""
    if value is not None and not 0 <= value <= high:
        raise BadRequest(f"{name} must be between 0 and {high}, got {value}")


class Tables:
    """Reads of the cluster's tables for one request, routed as the table API routes them.

    ``position``: the request's (``RequestPosition``): a key is read only from a replica
    at or past it, and every read's answer is merged into it."""

    __slots__ = (
        "_auth",
        "_auth_on",
        "_batches",
        "_caller",
        "_parker",
        "_pins",
        "_position",
        "_watches",
    )

    def __init__(
        self,
        batches: Batches,
        auth: str | None,
        caller: VerifiedCaller | None = None,
        auth_on: bool = False,
        parker: str | None = None,
        watches: WatchApi | None = None,
        position: RequestPosition | None = None,
    ) -> None:
        self._batches = batches
        self._watches = watches
        self._position = position if position is not None else RequestPosition()
        self._auth = auth  # what peers are told of the caller (``VerifiedCaller.statement``)
        self._caller = caller  # None: no authentication on this node
        self._auth_on = auth_on  # the node checks tokens: no caller is no read (fail closed)
        self._parker = parker  # whom a wait for ``min_offset`` counts against
        # The batch each consistent query's tables are read as of in this request, once
        # one of them was: two tables one query writes are read as of the same batch.
        self._pins: dict[tuple[str, str], int] = {}

    def serves(self, table: str) -> bool:
        """Whether this cluster serves ``table``."""
        return table in self._batches.node.current

    def _runtime(self, table: str) -> TableRuntime:
        if self._caller is None:
            if self._auth_on:
                raise Unauthorized("this node needs a bearer token: Authorization: Bearer TOKEN")
        elif not self._caller.grants.may_read(table):
            raise InsufficientScope(read_scope(table))
        runtime = self._batches.node.current.get(table)  # its current version (api/names.py)
        if runtime is None:
            raise UnknownTable(f"no table named {table!r}", table=table)
        return runtime

    async def read(
        self,
        table: str,
        key: str,
        *,
        max_lag: int | None = None,
        min_offset: int | None = None,
        wait_ms: int = 0,
    ) -> Read | None:
        """``key``'s value and where it came from (offset, lag, stale, served by); None when
        the table has no such key.

        ``max_lag``, ``min_offset`` and ``wait_ms`` mean what they mean to
        ``GET /v1/tables/{table}/keys/{key}``, and fail as they do there: ``Unavailable``
        when ``min_offset`` is not applied within ``wait_ms`` or no replica (within
        ``max_lag``) answers, ``BadRequest`` when out of range.
        """
        runtime = self._runtime(table)
        _within("max_lag", max_lag)
        _within("min_offset", min_offset)
        _within("wait_ms", wait_ms, MAX_WAIT_MS)
        raw = check_key(key.encode())
        partition = self._batches.node.partition_of(runtime, key)
        name = runtime.spec.name
        min_offset = self._position.at_least(name, partition, min_offset)
        parker = self._parker if min_offset is not None else None
        result = await self._batches.reader.lookup(
            name, partition, raw, max_lag, min_offset, wait_ms, self._auth, parker
        )
        if result.outcome is not Outcome.FOUND and result.outcome is not Outcome.MISSING:
            raise lookup_error(result, table, partition, raw)
        applied = max(result.applied, result.offset, -1 if min_offset is None else min_offset)
        self._position.saw(name, partition, applied)
        if result.outcome is Outcome.MISSING:
            return None
        return Read(
            runtime,
            key,
            result.value,
            result.partition,
            result.offset,
            max(result.lag, 0),
            result.stale,
            result.served_by.decode(),
        )

    async def get(
        self,
        table: str,
        key: str,
        *,
        max_lag: int | None = None,
        min_offset: int | None = None,
        wait_ms: int = 0,
    ) -> bytes | None:
        """The stored value of ``key``, or None; as ``read`` otherwise."""
        found = await self.read(table, key, max_lag=max_lag, min_offset=min_offset, wait_ms=wait_ms)
        return None if found is None else found.value

    async def get_json(
        self,
        table: str,
        key: str,
        *,
        max_lag: int | None = None,
        min_offset: int | None = None,
        wait_ms: int = 0,
    ) -> Any:
        """The value of ``key`` as a Python object (``Read.parsed``), or None; as ``read``
        otherwise."""
        found = await self.read(table, key, max_lag=max_lag, min_offset=min_offset, wait_ms=wait_ms)
        return None if found is None else found.parsed()

    def _at(self, runtime: TableRuntime, consistent: Consistent) -> ReadAt:
        """What bounds a read across partitions: this request's position of the table, and
        ``consistent``."""
        if consistent not in (None, "batch"):
            raise BadRequest(f'consistent must be "batch" or None, got {consistent!r}')
        after = self._position.of_table(runtime.spec.name)
        if consistent is None and not after:
            return PLAIN
        writer = _writer(runtime) if consistent == "batch" else None
        pinned = self._pins.get(writer) if writer is not None else None
        return ReadAt(consistent == "batch", after, batch=pinned)

    def _saw(
        self, runtime: TableRuntime, consistent: Consistent, sources: list[Source]
    ) -> tuple[Served, ...]:
        """What a read across partitions answered: merged into the request's position,
        and the batch it reflected kept for the other tables its query writes."""
        served = tuple(Served.of(s) for s in sources)
        self._position.read(runtime.spec.name, served)
        if consistent == "batch":
            writer = _writer(runtime)
            batches = {s.batch for s in served}
            if writer is not None and len(batches) == 1 and -1 not in batches:
                self._pins.setdefault(writer, batches.pop())
        return served

    async def get_many(
        self,
        table: str,
        keys: Sequence[str],
        *,
        max_lag: int | None = None,
        consistent: Consistent = None,
    ) -> Many:
        """Many keys, one call per node owning some of them; only from replicas at most
        ``max_lag`` records behind when given (keys of a partition none such holds are
        ``unavailable``). ``consistent="batch"``: every partition as of one micro-batch
        (``Many.batch``), docs/concepts/consistency.md."""
        runtime = self._runtime(table)
        _within("max_lag", max_lag)
        found, missing, unavailable, sources = await self._batches.get_many(
            runtime, list(keys), self._auth, max_lag, self._at(runtime, consistent)
        )
        served = self._saw(runtime, consistent, sources)
        return Many(runtime, found, missing, unavailable, served)

    async def range(
        self,
        table: str,
        *,
        prefix: str = "",
        start: str | None = None,
        end: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        order: Order = "asc",
        max_lag: int | None = None,
        consistent: Consistent = None,
    ) -> Page:
        """Keys in byte order: those starting with ``prefix``, from ``start`` (inclusive) to
        ``end`` (exclusive), after ``cursor``; at most ``limit`` (1 to ``MAX_RANGE_LIMIT``).

        ``order="desc"``: the same keys, highest first, a cursor going on below its key.
        With a prefix that ends in the table's ``sep``, one partition is read. ``max_lag``:
        only replicas at most that many records behind (``Unavailable`` if a partition has
        none). ``consistent="batch"``: every partition as of one micro-batch (``Page.batch``).
        """
        if not 1 <= limit <= MAX_RANGE_LIMIT:
            raise BadRequest(f"limit must be between 1 and {MAX_RANGE_LIMIT}, got {limit}")
        reverse = is_descending(order)
        runtime = self._runtime(table)
        _within("max_lag", max_lag)
        items, last_key, sources = await self._batches.scan(
            runtime,
            prefix=prefix.encode(),
            start=start.encode() if start is not None else None,
            end=end.encode() if end is not None else None,
            cursor=cursor,
            limit=limit,
            auth=self._auth,
            reverse=reverse,
            max_lag=max_lag,
            at=self._at(runtime, consistent),
        )
        served = self._saw(runtime, consistent, sources)
        return Page(
            runtime,
            [(k.decode(), v) for k, v in items],
            encode_cursor(last_key) if last_key is not None else None,
            served,
        )

    async def top(
        self,
        table: str,
        n: int = 10,
        prefix: str | None = None,
        window: str | None = None,
        *,
        max_lag: int | None = None,
        consistent: Consistent = None,
        by: str | None = None,
    ) -> Page:
        """The table's ``n`` (1 to ``MAX_TOP``) highest-ranked keys, as
        ``GET /v1/tables/{table}/top`` answers: by its ``rank_by`` field (``ctx.write_table(...,
        rank_by=FIELD)``), highest first, ties by key; only keys starting with ``prefix`` when
        given; in a windowed table, only windows starting at ``window`` when given (a time as
        ``windows`` takes them: "top pages this hour"). Every partition is asked once, from
        its best replica (within ``max_lag``).

        ``by``: a number index of the table (``index=[FIELD]``) to rank by instead, highest
        first, ties by key (not with ``prefix`` or ``window``).

        A ``Page`` (``next_cursor`` None); ``BadRequest`` for a table that is not ranked, a
        ``window`` of a table that is not windowed or that is no time; ``Unavailable`` when a
        partition has no replica that answers.
        """
        if not 1 <= n <= MAX_TOP:
            raise BadRequest(f"n must be between 1 and {MAX_TOP}, got {n}")
        runtime = self._runtime(table)
        _within("max_lag", max_lag)
        if by is not None and (by != runtime.spec.rank_by or indexes(runtime, by)):
            if prefix or window:
                raise BadRequest("top by an index (by=) takes neither prefix nor window")
            at = self._at(runtime, consistent)
            ranked, sources = await self._batches.top_by(runtime, by, n, self._auth, max_lag, at)
            served = self._saw(runtime, consistent, sources)
            return Page(runtime, [(k.decode(), v) for k, v in ranked], None, served)
        raw_prefix = (prefix or "").encode()
        rank_field(runtime)  # not ranked: that 400 first
        start = top_window(runtime, window)
        items, sources = await self._batches.top(
            runtime, n, raw_prefix, self._auth, max_lag, start, self._at(runtime, consistent)
        )
        served = self._saw(runtime, consistent, sources)
        return Page(runtime, [(k.decode(), v) for k, v in items], None, served)

    async def by(
        self,
        table: str,
        field: str,
        value: str | float | None = None,
        *,
        low: str | float | None = None,
        high: str | float | None = None,
        order: Order = "asc",
        limit: int = 100,
        cursor: str | None = None,
        count: bool = False,
        consistent: Consistent = None,
        max_lag: int | None = None,
    ) -> Page:
        """Rows by an indexed field (``ctx.write_table(..., index=[FIELD])``), as
        ``GET /v1/tables/{table}/by/{field}`` answers: with ``value``, those whose field
        equals it, in key order; else those with ``low`` <= field <= ``high`` (either None:
        open), in the field's order, ties by key. ``order="desc"``: highest first, a cursor
        going down. At most ``limit`` (1 to ``MAX_RANGE_LIMIT``; 0 with ``count``); pass
        ``next_cursor`` back as ``cursor`` for the next page. ``count=True``: ``Page.count``
        says how many rows match over every partition.

        A number index takes numbers; ``BadRequest`` for another value, ``UnknownIndex``
        (404) for a field the table keeps no index of, ``Unavailable`` when a partition has
        no replica that answers."""
        least = 0 if count else 1  # a count alone reads no rows
        if not least <= limit <= MAX_RANGE_LIMIT:
            raise BadRequest(f"limit must be between {least} and {MAX_RANGE_LIMIT}, got {limit}")
        reverse = is_descending(order)
        runtime = self._runtime(table)
        _within("max_lag", max_lag)
        indexed = index_field(runtime, field)
        start, end = bounds(
            indexed,
            None if value is None else given_bound(indexed, value, "value"),
            None if low is None else given_bound(indexed, low, "low"),
            None if high is None else given_bound(indexed, high, "high"),
        )
        page = await self._batches.by_index(
            runtime,
            field,
            start,
            end,
            index_cursor(cursor),
            limit,
            self._auth,
            reverse,
            count,
            max_lag,
            self._at(runtime, consistent),
        )
        served = self._saw(runtime, consistent, page.sources)
        return Page(
            runtime,
            [(k.decode(), v) for _, k, v in page.items],
            encode_cursor(page.last) if page.last is not None else None,
            served,
            page.count,
        )

    async def windows(
        self,
        table: str,
        key: str,
        *,
        start: str | None = None,
        end: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        order: Order = "asc",
        max_lag: int | None = None,
        consistent: Consistent = None,
    ) -> Windows:
        """``key``'s windows in a windowed table (``ctx.write_table(..., window=)``): those
        starting in [``start``, ``end``) (ISO 8601, a date, or epoch ms as text; naive
        times are UTC), oldest first, or newest first with ``order="desc"``; one partition
        read. ``BadRequest`` for a table that is not windowed or a time that is no time."""
        if not 1 <= limit <= MAX_RANGE_LIMIT:
            raise BadRequest(f"limit must be between 1 and {MAX_RANGE_LIMIT}, got {limit}")
        reverse = is_descending(order)
        runtime = self._runtime(table)
        _within("max_lag", max_lag)
        items, last_key, sources = await self._batches.scan_windows(
            runtime,
            key,
            start,
            end,
            cursor,
            limit,
            self._auth,
            reverse,
            max_lag,
            self._at(runtime, consistent),
        )
        served = self._saw(runtime, consistent, sources)
        return Windows(
            runtime,
            [(k.decode(), v) for k, v in items],
            encode_cursor(last_key) if last_key is not None else None,
            served,
            key=key,
            sep=window_sep(runtime),
        )

    async def watch(
        self,
        table: str,
        keys: Sequence[str] = (),
        *,
        prefix: str | Sequence[str] = (),
        after: str | None = None,
    ) -> Watch:
        """A watch of ``keys`` (and of every key starting with ``prefix``, one or several):
        their snapshot, then each change, from whichever replica this node has or relayed
        from the best one (``async for change in watch``; close it when done). ``after``: a
        ``Watch.cursor`` (or an SSE Last-Event-ID) to resume from. ``BadRequest`` for no
        keys, too many or a bad cursor, ``Unavailable`` when the node has no room."""
        runtime = self._runtime(table)
        if self._watches is None:
            raise Unavailable("this node serves no watches")
        prefixes = [prefix] if isinstance(prefix, str) else list(prefix)
        sub = await self._watches.open(
            runtime, [k.encode() for k in keys], [p.encode() for p in prefixes if p], after
        )
        return Watch(self._watches, sub, runtime)


@dataclass(frozen=True)
class _Services:
    lookups: Lookups
    batches: Batches
    writer: Writer
    max_body: int
    watches: WatchApi | None = None


class Request:
    """One request to an application's route."""

    __slots__ = (
        "_position",
        "_principal",
        "_receive",
        "_services",
        "_tables",
        "path_params",
        "query",
        "scope",
    )

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        services: _Services,
        position: RequestPosition | None = None,
    ) -> None:
        self.scope = scope
        self._receive = receive
        self._services = services
        self._tables: Tables | None = None
        self._principal: Principal | None = None
        self.path_params: dict[str, str] = scope.get("path_params", {})
        self.query: dict[str, str] = dict(query(scope))  # its own: a route may change it
        self._position = position if position is not None else RequestPosition()

    @property
    def position(self) -> str:
        """What this request has read and written so far, as a position token (the
        ``X-Kiq-Position`` its answer carries); seeded from its ``X-Kiq-After``."""
        return self._position.token()

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
    def principal(self) -> Principal | None:
        """The verified caller: subject, scopes, the token's claims; None on a node without
        authentication. Made when first asked for."""
        if self._principal is None:
            verified = caller(self.scope)
            if verified is None:
                return None
            self._principal = Principal.of(verified, self.header("authorization"))
        return self._principal

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
                caller_of(scope),
                self._services.watches,
                self._position,
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
        lookups, position = self._services.lookups, self._position
        if enrich is None:
            return _Lookup(lookups, table, key.encode(), None, position)

        async def as_json(value: bytes) -> bytes:
            return orjson.dumps(await enrich(orjson.loads(value)))

        return _Lookup(lookups, table, key.encode(), as_json, position)

    async def write(self, topic: str, key: bytes | str, value: bytes | str) -> tuple[int, int]:
        """Writes a record to ``topic``: (partition, offset) once Kafka has it.

        Raises ``kiq.WriteFailed`` when it did not take it; needs ``kiq:write`` on a node
        with authentication.
        """
        require_write(self.scope)
        k = key.encode() if isinstance(key, str) else key
        v = value.encode() if isinstance(value, str) else value
        return self._wrote(topic, await self._services.writer.send(topic, k, v))

    async def delete(self, topic: str, key: bytes | str) -> tuple[int, int]:
        """Writes a tombstone (``key`` with a null value) to ``topic``, the record that
        deletes ``key`` from the tables served from it: (partition, offset) once Kafka has
        it. As ``write`` otherwise: ``kiq.WriteFailed``, and ``kiq:write``."""
        require_write(self.scope)
        k = key.encode() if isinstance(key, str) else key
        return self._wrote(topic, await self._services.writer.send(topic, k, None))

    def _wrote(self, topic: str, produced: tuple[int, int]) -> tuple[int, int]:
        """``produced`` (partition, offset) into the request's position, for each table
        served from ``topic``: a later read sees the write (read your writes)."""
        partition, offset = produced
        for name, runtime in self._services.batches.node.tables.items():
            if runtime.spec.topic == topic:
                self._position.saw(name, partition, offset)
        return produced


Handler = Callable[[Request], Awaitable[Reply]]


class Routes:
    """Where an application's ``routes(app)`` declares its handlers.

    Paths are Starlette's: ``/v1/orders/{id}`` puts ``id`` in ``Request.path_params``.
    A route answers its one method; the core API's paths are not to be taken. Where two
    paths match a request, the more specific answers, whatever the order declared: a
    literal segment before a parameter, a parameter before ``{rest:path}``
    (api/precedence.py); two that differ only in their parameters' names are refused. For the
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
        for other in self._routes:
            if other.method != method or shape(other.path) != shape(path):
                continue
            if other.path == path:
                raise ConfigError(f"route {method} {path} is declared twice")
            raise ConfigError(
                f"route {method} {path} could never be reached: {method} {other.path} "
                f"matches every path it does (only the parameters' names differ); "
                f"give one of them another path"
            )
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
        # The header alone: a route's query is the application's own (``?after=`` too).
        position = RequestPosition(after(cast(dict[str, Any], scope)))
        reply = await self._handler(Request(scope, receive, self._services, position))
        if not isinstance(reply, Reply):
            raise TypeError(f"{self._handler!r} returned {type(reply).__name__}, not a Reply")
        await reply.send(scope, receive, position.stamping(send))


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
    watches: WatchApi | None = None,
) -> list[tuple[RouteSpec[Handler], Endpoint]]:
    """Each declared route with the ASGI endpoint that calls its handler."""
    services = _Services(lookups, batches, writer, max_body, watches)
    return [(spec, Endpoint(spec.endpoint, services)) for spec in routes if spec.endpoint]
