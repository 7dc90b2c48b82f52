"""Point lookups: GET /v1/tables/{table}/keys/{key}. The hot path: keep it lean.

A node answers from its own replica when it is the best one, else asks the
replicas the router orders, falling back on failure; a remote replica slow to
answer is hedged with the next (routing/hedging.py). Lookups for another node
go through ``Peers.forward``, which sends those of one loop tick together as one
POST /v1/internal/lookups (``internal`` answers it); the receiver answers every
item from its own replica or refuses it with 421, never forwarding it again (as
for a GET carrying X-Kiq-Forwarded). Local and forwarded answers become a
response in one place, ``_answer``, so both carry the same headers. An API may
pass ``enrich`` to add to a found value what another table holds (the stock
quote's day statistics); plain table lookups pass none.

A replica whose store closes under a lookup (the partition was revoked) is
passed over like one that failed: the lookup goes to the partition's next replica.
Any other error becomes the response ``send_error`` makes, as on every route.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from kiq.api.asgi import JSON, Send, header, query, respond
from kiq.api.auth import forwarded_caller
from kiq.api.errors import (
    BadRequest,
    InsufficientScope,
    KeyNotFound,
    NotHere,
    RateLimited,
    Unavailable,
    UnknownTable,
    send_error,
)
from kiq.api.limits import caller_of
from kiq.api.params import bool_param, check_key, int_param, key_from_path
from kiq.errors import StoreClosedError
from kiq.node import NodeView
from kiq.replicas import Replica, ReplicaState
from kiq.replicas.waits import Parking, wait_applied
from kiq.routing import FAILED, FORWARDED, LOCAL, LookupResult, Peers, Router, servable
from kiq.routing.wire import DecodeError, decode_lookups, encode
from kiq.security import Principal, read_scope
from kiq.settings import LimitsSettings
from kiq.tables import MAX_KEY_BYTES, TableRuntime

log = logging.getLogger(__name__)
OCTETS = (b"content-type", b"application/octet-stream")
MAX_WAIT_MS = 60_000
# How long a read waits for a store being reopened (its open takes milliseconds) before it
# tries the other replicas: on a single replica a read has nowhere else to go.
REOPEN_WAIT_S = 0.2
# Retry-After (s) of a lookup refused because too many wait for min_offset already.
PARKED_RETRY_S = 1
_NOT_HERE = LookupResult(421, reason="no usable replica of this partition here")
_NO_TABLE = LookupResult(421, reason="no such table here")
_NO_SCOPE = LookupResult(403, reason="the caller's token does not read this table")

# A found value → the value to answer with (an API adding what another table holds).
Enrich = Callable[[bytes], Awaitable[bytes]]


class Lookups:
    def __init__(
        self, node: NodeView, router: Router, peers: Peers, limits: LimitsSettings | None = None
    ) -> None:
        """``limits``: how many lookups may wait for ``min_offset`` at once (see ``_wait_for``)."""
        limits = limits if limits is not None else LimitsSettings()
        self._parking = Parking(limits.max_parked_waits, limits.max_parked_waits_per_caller)
        self._node = node
        # The node's live mappings and its partitioner, bound once for the hot path.
        self._tables = node.tables
        self._replicas = node.replicas
        self._partition_of = node.partition_of
        self.router = router
        self.peers = peers
        self._served_by = node.node_id.encode()
        m = node.metrics
        self._stats = m.route("get")
        self._internal_stats = m.route("internal_lookups")
        self._forward_ok = m.forwards.labels("ok")
        self._forward_failed = m.forwards.labels("failed")

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
        """The common case in one frame: a plain key, no parameters, an active local replica.

        Anything else (0) goes the general way, which also explains bad input.
        Same answer as ``_get`` + ``_answer``, without their calls and objects.
        """
        runtime = self._tables.get(table)
        if (
            runtime is None
            or scope["query_string"]
            or b"%" in raw_key
            or not 0 < len(raw_key) <= MAX_KEY_BYTES
        ):
            return 0
        try:
            partition = self._partition_of(runtime, raw_key.decode())
        except UnicodeDecodeError:
            return 0
        replica = self._replicas.get((table, partition))
        if replica is None or replica.state is not ReplicaState.ACTIVE:
            return 0
        try:
            found = replica.store.get(raw_key)
        except StoreClosedError:
            return 0  # revoked under this request: the general way asks the next replica
        if found is None:
            return 0  # a 404 builds an error body: the general way
        value, offset = found
        if enrich is not None:
            value = await enrich(value)
        lag = replica.end_offset - replica.position
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
                ],
            }
        )
        await send({"type": "http.response.body", "body": value})
        return 200

    async def _get(
        self, scope: dict[str, Any], send: Send, table: str, raw_key: bytes, enrich: Enrich | None
    ) -> int:
        runtime = self._tables.get(table)
        if runtime is None:
            raise UnknownTable(f"no table named {table!r}", table=table)
        key = key_from_path(raw_key)
        partition = self._partition_of(runtime, key.decode())
        local = self._replicas.get((table, partition))
        params = query(scope)
        if not params and local is not None and local.state is ReplicaState.ACTIVE:
            served = await self._serve_local(send, runtime, local, key, params, enrich, scope)
            if served is not None:
                return served
            local = None  # revoked under this request: the next replica answers
        max_lag = int_param(params, "max_lag") if params else None

        if header(scope, FORWARDED.encode()) is not None:
            if local is not None and servable(local, max_lag):
                served = await self._serve_local(send, runtime, local, key, params, enrich, scope)
                if served is not None:
                    return served  # else revoked under this request: as if never here
            raise NotHere(f"{self._node.node_id} holds no usable replica of {table}[{partition}]")

        targets = self.router.targets(self._node.view, table, partition, local, max_lag)
        if params and bool_param(params, "redirect") and targets and targets[0] != LOCAL:
            location = targets[0] + scope["raw_path"].decode("latin-1")
            query_string = scope["query_string"].decode("latin-1")
            rest = [p for p in query_string.split("&") if p and not p.startswith("redirect=")]
            if rest:
                location += "?" + "&".join(rest)
            await respond(send, 307, b"", [(b"location", location.encode()), JSON])
            return 307
        min_offset = int_param(params, "min_offset") if params else None
        wait_ms = (int_param(params, "wait_ms", 0, MAX_WAIT_MS) or 0) if params else 0
        auth = forwarded_caller(scope)
        last_error = "no replica of this partition is known"
        i = 0
        while i < len(targets):
            target = targets[i]
            if target == LOCAL:
                i += 1
                assert local is not None
                served = await self._serve_local(send, runtime, local, key, params, enrich, scope)
                if served is not None:
                    return served
                last_error = "this node's replica was revoked during the request"
                continue
            # Hedged over the remote targets from i on (routing/hedging.py).
            race = self.peers.forward(targets, i, table, key, max_lag, min_offset, wait_ms, auth)
            result = await race
            i = race.end
            status = result.status
            if status == 200 or status == 404:
                self._forward_ok.inc()
                return await _answer(send, runtime, key, result, enrich)
            if status == FAILED:
                self._forward_failed.inc()
                # The peer's URL and the OS's words stay in the log, out of the answer.
                log.info(
                    "lookup forward failed table=%s partition=%d error=%s",
                    table,
                    partition,
                    result.reason,
                )
                last_error = "no other replica answered in time"
            elif status == 403:  # the owner applies the caller's scopes too
                raise InsufficientScope(read_scope(table))
            else:  # 421, 503: this replica cannot answer (yet); the next one may
                last_error = f"a replica answered {status}: {result.reason}"
        raise Unavailable(
            f"no replica of {table}[{partition}] could answer",
            partition=partition,
            reason=last_error,
        )

    async def _serve_local(
        self,
        send: Send,
        runtime: TableRuntime,
        replica: Replica,
        key: bytes,
        params: dict[str, str],
        enrich: Enrich | None,
        scope: dict[str, Any],
    ) -> int | None:
        """:meth:`_serve` from this node's ``replica``; None if its store closed under the
        request for good (revoked: the caller asks the next replica). A store closed to be
        reopened after a refused write (``replicas.materializer``) is waited for, up to
        ``REOPEN_WAIT_S``: its open takes milliseconds."""
        closed, state = replica.store, replica.state
        try:
            return await self._serve(send, runtime, replica, key, params, enrich, scope)
        except StoreClosedError:
            pass
        registered = (replica.table, replica.partition)
        deadline = time.monotonic() + REOPEN_WAIT_S
        while time.monotonic() < deadline:
            await asyncio.sleep(0.005)
            if self._replicas.get(registered) is not replica or replica.state is not state:
                return None
            if replica.store is not closed:
                try:
                    return await self._serve(send, runtime, replica, key, params, enrich, scope)
                except StoreClosedError:
                    return None
        return None

    async def _serve(
        self,
        send: Send,
        runtime: TableRuntime,
        replica: Replica,
        key: bytes,
        params: dict[str, str],
        enrich: Enrich | None,
        scope: dict[str, Any],
    ) -> int:
        if params:
            min_offset = int_param(params, "min_offset")
            if min_offset is not None and replica.applied_offset < min_offset:
                wait_ms = int_param(params, "wait_ms", 0, MAX_WAIT_MS) or 0
                await self._wait_for(replica, min_offset, wait_ms / 1000, caller_of(scope))
        return await _answer(send, runtime, key, self._result(replica, key), enrich)

    def _result(self, replica: Replica, key: bytes) -> LookupResult:
        """What the local replica holds for ``key``, as a local or forwarded answer needs it.

        Raises ``StoreClosedError`` when the replica was revoked meanwhile.
        """
        got = replica.store.get(key)
        stale = replica.state is not ReplicaState.ACTIVE
        if got is None:
            return LookupResult(404, replica.partition, replica.lag, stale, self._served_by)
        value, offset = got
        return LookupResult(
            200, replica.partition, replica.lag, stale, self._served_by, offset, value
        )

    # -- POST /v1/internal/lookups: another node's batch --------------------------

    async def internal(self, body: bytes, caller: Principal | None = None) -> bytes:
        """Answers each item from the local replica only; items that wait, wait together.

        ``caller``: whose token came along (None without authentication); an item of a
        table it may not read is refused with 403.
        """
        started = time.perf_counter()
        try:
            items = decode_lookups(body)
        except DecodeError as exc:
            raise BadRequest(f"malformed lookup batch: {exc}") from exc
        tables = self._tables
        waiter = None if caller is None else caller.subject  # else the node's cap alone
        results: list[LookupResult] = []
        waiting: list[Coroutine[Any, Any, None]] = []
        for item in items:
            runtime = tables.get(item.table)
            if runtime is None:
                results.append(_NO_TABLE)
                continue
            if caller is not None and not caller.grants.may_read(item.table):
                results.append(_NO_SCOPE)
                continue
            key = item.key
            try:
                check_key(key)
            except BadRequest as exc:
                results.append(LookupResult(400, reason=exc.message))
                continue
            replica = self._replicas.get((item.table, self._partition_of(runtime, key.decode())))
            if replica is None or not servable(replica, item.max_lag):
                results.append(_NOT_HERE)
                continue
            min_offset = item.min_offset
            if min_offset is not None and replica.applied_offset < min_offset:
                wait_s = min(item.wait_ms, MAX_WAIT_MS) / 1000
                index = len(results)
                waiting.append(
                    self._when_applied(results, index, replica, key, min_offset, wait_s, waiter)
                )
                results.append(_NOT_HERE)  # replaced once the wait is over
                continue
            try:
                results.append(self._result(replica, key))
            except StoreClosedError:
                results.append(_NOT_HERE)  # revoked meanwhile: the caller asks the next replica
        if waiting:
            await asyncio.gather(*waiting)
        self._internal_stats.record(200, time.perf_counter() - started)
        return encode(results)

    async def _when_applied(
        self,
        results: list[LookupResult],
        index: int,
        replica: Replica,
        key: bytes,
        min_offset: int,
        wait_s: float,
        caller: str | None,
    ) -> None:
        try:
            await self._wait_for(replica, min_offset, wait_s, caller)
            results[index] = self._result(replica, key)
        except (Unavailable, RateLimited) as exc:  # too many parked: the next replica may
            results[index] = LookupResult(503, replica.partition, reason=exc.message)
        except StoreClosedError:
            pass  # revoked meanwhile: stays 421, the caller asks the next replica

    async def _wait_for(
        self, replica: Replica, min_offset: int, wait_s: float, caller: str | None
    ) -> None:
        """Read-your-writes: returns once ``replica`` applied ``min_offset``.

        The wait parks until the materializer applies that offset (``replicas.waits``),
        never polling. Raises ``Unavailable`` (503) when ``wait_s`` passes first,
        ``StoreClosedError`` when the replica is revoked meanwhile (the next replica is
        asked), and ``RateLimited`` (429, ``Retry-After``) when the node already parks
        ``max_parked_waits`` lookups, or ``caller`` ``max_parked_waits_per_caller``.
        """
        parked = wait_s > 0
        if parked and not self._parking.enter(caller):
            raise RateLimited(
                f"too many lookups wait for min_offset: try again in {PARKED_RETRY_S} s",
                PARKED_RETRY_S,
            )
        try:
            reached = await wait_applied(replica, min_offset, wait_s)
        finally:
            if parked:
                self._parking.leave(caller)
        if reached:
            return
        if replica.state is ReplicaState.REVOKED:
            raise StoreClosedError(f"{replica.table}[{replica.partition}] was revoked")
        raise Unavailable(
            f"{replica.table}[{replica.partition}] has applied offset "
            f"{replica.applied_offset}, not yet {min_offset}",
            partition=replica.partition,
            applied_offset=replica.applied_offset,
            reason="min_offset not reached within wait_ms",
        )


_DIGITS = [str(i).encode() for i in range(1024)]


def _digits(n: int) -> bytes:
    return _DIGITS[n] if n < 1024 else str(n).encode()


async def _answer(
    send: Send,
    runtime: TableRuntime,
    key: bytes,
    result: LookupResult,
    enrich: Enrich | None,
) -> int:
    """The response for a found (200) or missing (404) key, wherever it was looked up."""
    headers = [
        JSON,
        (b"x-kiq-partition", str(result.partition).encode()),
        (b"x-kiq-served-by", result.served_by),
        (b"x-kiq-lag", str(max(result.lag, 0)).encode()),
    ]
    if result.stale:
        headers.append((b"x-kiq-stale", b"true"))
    if result.status == 404:
        body = KeyNotFound(
            "no such key", table=runtime.spec.name, key=key.decode(), partition=result.partition
        ).body()
        await respond(send, 404, body, headers)
        return 404
    headers.append((b"x-kiq-offset", str(result.offset).encode()))
    if runtime.spec.format == "raw":
        headers[0] = OCTETS
    value = result.value if enrich is None else await enrich(result.value)
    await respond(send, 200, value, headers)
    return 200
