"""Point lookups: GET /v1/tables/{table}/keys/{key}. The hot path: keep it lean.

The replica reader (``routing/reader.py``) finds a key's answer: this node's own
replica when it is the best one, else the others in the router's order, forwarded
and hedged, through a store being reopened and a wait for ``min_offset``.
``_get_owned`` is the reader's first choice inlined, for the common case (a plain
key whose active replica is here) in one frame; anything else goes through the
reader. Local and forwarded answers become a response in one place, ``_answer``, so
both carry the same headers; no value becomes the error its outcome maps to
(``api.errors.lookup_error``). An API may pass ``enrich`` to add to a found value
what another table holds (the stock quote's day statistics); plain table lookups
pass none. ``?redirect=true`` answers 307 to the best replica's node only once this
node has proven it a member (``api.proven``); else the key is read as without it.

Every answer (a value, a 404) carries ``X-Kiq-Position``: the key's partition and the
offset the answering replica had applied (``kiq.positions``). A request may send one
back (``X-Kiq-After``, ``?after=``): its offset for the key's partition is a
``min_offset``, so no replica behind what the caller has seen answers.

Another node's lookups arrive in batches (POST /v1/internal/lookups, ``internal``):
each item is answered from this node's replicas only, an outcome per item, never
forwarded again (as a GET carrying X-Kiq-Forwarded is). Any other error becomes the
response ``send_error`` makes, as on every route.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from kiq.api.asgi import JSON, Send, header, query, respond
from kiq.api.auth import forwarded_caller
from kiq.api.errors import BadRequest, lookup_error, send_error
from kiq.api.limits import caller_of
from kiq.api.names import resolve, version_header
from kiq.api.params import bool_param, check_key, int_param, key_from_path
from kiq.errors import StoreClosedError
from kiq.metrics import RouteStats
from kiq.node import NodeView
from kiq.ops.proven import may_redirect
from kiq.peers import FORWARDED, LookupResult, Outcome, Peers
from kiq.peers.wire import DecodeError, Lookup, decode_lookups, encode
from kiq.positions import AFTER_HEADER, HEADER, Position, decode, merge, offset_of
from kiq.replicas import ReplicaState
from kiq.replicas.reads import get as read_key
from kiq.routing import ReplicaReader
from kiq.routing.local import MOVED
from kiq.security import VerifiedCaller
from kiq.tables import MAX_KEY_BYTES, TableRuntime
from kiq.tables.versions import public_name

log = logging.getLogger(__name__)
OCTETS = (b"content-type", b"application/octet-stream")
MAX_WAIT_MS = 60_000  # the longest a lookup may wait for ``min_offset``
FOUND, MISSING = Outcome.FOUND, Outcome.MISSING
_FORWARDED = FORWARDED.encode()
_AFTER = AFTER_HEADER.encode()
_POSITION = HEADER.encode()
_NO_TABLE = LookupResult(Outcome.MOVED, reason="no such table here")
_NO_SCOPE = LookupResult(Outcome.FORBIDDEN, reason="the caller's token does not read this table")

# A found value → the value to answer with (an API adding what another table holds).
Enrich = Callable[[bytes], Awaitable[bytes]]


class Lookups:
    def __init__(self, node: NodeView, reader: ReplicaReader, peers: Peers) -> None:
        """``reader``: the node's one ``ReplicaReader`` (shared with ``Batches``); ``peers``:
        whom it has proven, the only nodes a redirect names (``api.proven``)."""
        self.reader = reader
        self._peers = peers
        self._here = self.reader.here
        # The node's live mappings and its partitioner, bound once for the hot path.
        self._node = node
        self._tables = node.tables  # every version, by internal name: other nodes' asks
        self._current = node.current  # a table's own name → its current version: callers'
        self._replicas = node.replicas
        self._partition_of = node.partition_of
        self._served_by = node.node_id.encode()
        # ``TABLE:PARTITION=`` by (table, partition) answered here: a position header's start
        self._marks: dict[tuple[str, int], bytes] = {}
        m = node.metrics
        self._stats = m.route("get")
        self._internal_stats = m.route("internal_lookups")

    @property
    def stats(self) -> RouteStats:
        """The raw path's counts (``get`` in /metrics): its refusals are counted there too."""
        return self._stats

    async def get(
        self,
        scope: dict[str, Any],
        send: Send,
        table: str,
        raw_key: bytes,
        enrich: Enrich | None = None,
    ) -> None:
        started = time.perf_counter()
        try:
            status = await self._get_owned(scope, send, table, raw_key, enrich)
            if status == 0:
                status = await self._get(scope, send, table, raw_key, enrich)
        except Exception as exc:
            status = await send_error(send, exc, scope)
        self._stats.record(status, time.perf_counter() - started)

    async def _get_owned(
        self, scope: dict[str, Any], send: Send, table: str, raw_key: bytes, enrich: Enrich | None
    ) -> int:
        """The common case in one frame: a plain key, no parameters, an active local replica
        (at or past the request's position token, when it has one).

        Anything else (0) goes the general way, which also explains bad input.
        Same answer as ``_get`` + ``_answer``, without their calls and objects. A plain
        key with no active replica here goes straight to ``_read``: parsed once.
        """
        runtime = self._current.get(table)
        if (
            runtime is None
            or scope["query_string"]
            or b"%" in raw_key
            or not 0 < len(raw_key) <= MAX_KEY_BYTES
        ):
            return 0
        after = None
        for name, value in scope["headers"]:
            if name == _AFTER:
                after = value  # a position token to honour
                break
        try:
            partition = self._partition_of(runtime, raw_key.decode())
        except UnicodeDecodeError:
            return 0
        where = (runtime.spec.name, partition)
        replica = self._replicas.get(where)
        if replica is None or replica.state is not ReplicaState.ACTIVE:
            if after is not None:
                return 0  # the general way: the token is a min_offset wherever it goes
            # Most often another node's: read where it is (the key is checked as
            # ``key_from_path`` would: no escapes, its length, UTF-8).
            return await self._read(scope, send, runtime, raw_key, partition, enrich)
        if after is not None:
            seen = offset_of(after.decode("latin-1"), runtime.spec.name, partition)
            if seen is not None and replica.applied_offset < seen:
                return 0  # behind what the caller has seen: the general way waits for it
        try:
            found = read_key(replica, raw_key)
        except StoreClosedError:
            return 0  # closed under this request: the reader waits for a reopen or goes on
        if found is None:
            return 0  # absent or aged out: a 404 builds an error body, the general way
        value, offset = found
        position = replica.position  # after the read: the answer holds nothing past it
        if enrich is not None:
            value = await enrich(value)
        lag = replica.end_offset - position
        # the value's offset too: the materializer writes a record before it moves on
        applied = position - 1 if position > offset else offset
        mark = self._marks.get(where)
        if mark is None:
            mark = self._marks[where] = f"{where[0]}:{partition}=".encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    OCTETS if runtime.spec.format == "raw" else JSON,
                    (b"x-kiq-partition", _digits(partition)),
                    (b"x-kiq-served-by", self._served_by),
                    (b"x-kiq-lag", _digits(lag) if lag > 0 else b"0"),
                    (b"x-kiq-offset", str(offset).encode()),
                    version_header(runtime),
                    (_POSITION, mark + str(applied).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": value})
        return 200

    async def _get(
        self, scope: dict[str, Any], send: Send, table: str, raw_key: bytes, enrich: Enrich | None
    ) -> int:
        params = query(scope)
        runtime = resolve(self._node, table, params.get("version") if params else None)
        table = runtime.spec.name  # the version's: forwards and replicas go by it
        key = key_from_path(raw_key)
        partition = self._partition_of(runtime, key.decode())
        max_lag = min_offset = parker = None
        wait_ms = 0
        if params:
            max_lag = int_param(params, "max_lag")
            min_offset = int_param(params, "min_offset")
            wait_ms = int_param(params, "wait_ms", 0, MAX_WAIT_MS) or 0
        seen = _seen(scope, params, table, partition)
        if seen is not None and (min_offset is None or seen > min_offset):
            min_offset = seen  # the caller has seen this much: nothing older answers
        if min_offset is not None:
            parker = caller_of(scope)  # whom a wait for it counts against
        if params and header(scope, _FORWARDED) is None and bool_param(params, "redirect"):
            location = self.reader.elsewhere(table, partition, max_lag)
            if location is not None and await may_redirect(self._node, self._peers, location):
                return await _redirect(send, scope, location)
            # not a proven member: read as without ``redirect`` (its standbys, or forwarded)
        return await self._read(
            scope, send, runtime, key, partition, enrich, max_lag, min_offset, wait_ms, parker
        )

    async def _read(
        self,
        scope: dict[str, Any],
        send: Send,
        runtime: TableRuntime,
        key: bytes,
        partition: int,
        enrich: Enrich | None,
        max_lag: int | None = None,
        min_offset: int | None = None,
        wait_ms: int = 0,
        parker: str | None = None,
    ) -> int:
        """``key`` read where it is (here only, when another node forwarded the request)
        and answered."""
        table = runtime.spec.name
        if header(scope, _FORWARDED) is not None:  # answer from here, never forward
            result = await self._here.lookup(
                table, partition, key, max_lag, min_offset, wait_ms, parker
            )
        else:
            caller = forwarded_caller(scope)
            result = await self.reader.lookup(
                table, partition, key, max_lag, min_offset, wait_ms, caller, parker
            )
        outcome = result.outcome
        if outcome is not FOUND and outcome is not MISSING:
            raise lookup_error(result, table, partition, key)
        return await _answer(send, runtime, key, result, enrich, min_offset)

    # -- POST /v1/internal/lookups: another node's batch --------------------------

    async def internal(self, body: bytes, caller: VerifiedCaller | None = None) -> bytes:
        """Answers each item from the local replica only; items that wait, wait together.

        ``caller``: whose token came along (None without authentication); an item of a
        table it may not read is refused with FORBIDDEN.
        """
        started = time.perf_counter()
        results, waiting = self.internal_now(body, caller)
        if waiting:
            await asyncio.gather(*waiting)
        self._internal_stats.record(200, time.perf_counter() - started)
        return encode(results)

    def internal_now(
        self, body: bytes, caller: VerifiedCaller | None = None
    ) -> tuple[list[LookupResult], list[Coroutine[Any, Any, None]]]:
        """``internal`` up to its waits: the results, and what must run before the ones
        that wait are in them (a channel answers a batch with none at once, no task)."""
        try:
            items = decode_lookups(body)
        except DecodeError as exc:
            raise BadRequest(f"malformed lookup batch: {exc}") from exc
        tables = self._tables
        lookup_now = self._here.lookup_now
        parker = None if caller is None else caller.subject  # else the node's cap alone
        results: list[LookupResult] = []
        waiting: list[Coroutine[Any, Any, None]] = []
        for item in items:
            runtime = tables.get(item.table)
            if runtime is None:
                results.append(_NO_TABLE)
                continue
            if caller is not None and not caller.grants.may_read(public_name(item.table)):
                results.append(_NO_SCOPE)
                continue
            key = item.key
            try:
                check_key(key)
            except BadRequest as exc:
                results.append(LookupResult(Outcome.BAD_KEY, reason=exc.message))
                continue
            partition = self._partition_of(runtime, key.decode())
            result = lookup_now(item.table, partition, key, item.max_lag, item.min_offset)
            if result is None:  # it takes a wait: for min_offset, or a store being reopened
                waiting.append(self._later(results, len(results), partition, item, parker))
                result = MOVED  # replaced once the wait is over
            results.append(result)
        return results, waiting

    def record_internal(self, seconds: float) -> None:
        """A batch answered on a channel, counted as its request would be."""
        self._internal_stats.record(200, seconds)

    async def _later(
        self,
        results: list[LookupResult],
        index: int,
        partition: int,
        item: Lookup,
        parker: str | None,
    ) -> None:
        wait_ms = min(item.wait_ms, MAX_WAIT_MS)
        results[index] = await self._here.lookup(
            item.table, partition, item.key, item.max_lag, item.min_offset, wait_ms, parker
        )


_DIGITS = [str(i).encode() for i in range(1024)]


def _digits(n: int) -> bytes:
    return _DIGITS[n] if n < 1024 else str(n).encode()


async def _redirect(send: Send, scope: dict[str, Any], base_url: str) -> int:
    """307 to the same path at ``base_url``, with the query less ``redirect``."""
    location = base_url + scope["raw_path"].decode("latin-1")
    query_string = scope["query_string"].decode("latin-1")
    rest = [p for p in query_string.split("&") if p and not p.startswith("redirect=")]
    if rest:
        location += "?" + "&".join(rest)
    await respond(send, 307, b"", [(b"location", location.encode()), JSON])
    return 307


def after(scope: dict[str, Any], params: dict[str, str] | None = None) -> Position:
    """The position a request says its caller has seen (``X-Kiq-After``, ``?after=``: both
    merged when both come); ``BadPosition`` (a 400) for a malformed token."""
    given = header(scope, _AFTER)
    token = params.get("after") if params else None
    if token is None:
        return decode(given) if given else {}
    return decode(token) if given is None else merge(decode(given), decode(token))


def _seen(scope: dict[str, Any], params: dict[str, str], table: str, partition: int) -> int | None:
    """What the request's tokens (``after``'s) say of one partition, without decoding the
    rest into a position; ``BadPosition`` as ``after``."""
    seen = None
    for token in (header(scope, _AFTER), params.get("after") if params else None):
        if token is not None:
            offset = offset_of(token, table, partition)
            if offset is not None and (seen is None or offset > seen):
                seen = offset
    return seen


def position_header(table: str, partition: int, applied: int) -> tuple[bytes, bytes] | None:
    """``X-Kiq-Position`` naming one partition read at ``applied`` (None when unknown)."""
    if applied < 0:
        return None
    return _POSITION, f"{table}:{partition}={applied}".encode()


async def _answer(
    send: Send,
    runtime: TableRuntime,
    key: bytes,
    result: LookupResult,
    enrich: Enrich | None,
    asked: int | None = None,
) -> int:
    """The response for a found or missing key, wherever it was looked up; its position
    is what the replica had applied, never less than what was ``asked`` (``min_offset``,
    a token's: a replica that answered had applied that) or the value's offset."""
    headers = [
        JSON,
        (b"x-kiq-partition", str(result.partition).encode()),
        (b"x-kiq-served-by", result.served_by),
        (b"x-kiq-lag", str(max(result.lag, 0)).encode()),
        version_header(runtime),
    ]
    applied = max(result.applied, result.offset, -1 if asked is None else asked)
    position = position_header(runtime.spec.name, result.partition, applied)
    if position is not None:
        headers.append(position)
    if result.stale:
        headers.append((b"x-kiq-stale", b"true"))
    if result.outcome is MISSING:
        missing = lookup_error(result, runtime.spec.name, result.partition, key)
        await respond(send, missing.status, missing.body(), headers)
        return missing.status
    headers.append((b"x-kiq-offset", str(result.offset).encode()))
    if runtime.spec.format == "raw":
        headers[0] = OCTETS
    value = result.value if enrich is None else await enrich(result.value)
    await respond(send, 200, value, headers)
    return 200
