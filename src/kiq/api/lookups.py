"""Point lookups: GET /v1/tables/{table}/keys/{key}. The hot path: keep it lean.

A node answers from its own replica when it is the best one, else forwards to
the replicas the router orders, falling back on failure; a forwarded request is
answered locally or refused with 421, never forwarded again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kiq.api.asgi import JSON, Send, header, query, respond
from kiq.api.errors import ApiError, KeyNotFound, NotHere, Unavailable, UnknownTable
from kiq.api.params import bool_param, int_param, key_from_path
from kiq.node import Node
from kiq.replicas import Replica, ReplicaState
from kiq.routing import LOCAL, Forwarder, Router
from kiq.routing.forwarder import FORWARDED
from kiq.routing.router import servable

OCTETS = (b"content-type", b"application/octet-stream")
MAX_WAIT_MS = 60_000


class Lookups:
    def __init__(self, node: Node, router: Router, forwarder: Forwarder) -> None:
        self.node = node
        self.router = router
        self.forwarder = forwarder
        self._served_by = node.node_id.encode()
        m = node.metrics
        self._stats = m.route("get")
        self._forward_ok = m.forwards.labels("ok")
        self._forward_failed = m.forwards.labels("failed")

    async def get(self, scope: dict[str, Any], send: Send, table: str, raw_key: bytes) -> None:
        started = time.perf_counter()
        try:
            status = await self._get(scope, send, table, raw_key)
        except ApiError as exc:
            status = exc.status
            await respond(send, status, exc.body())
        self._stats.record(status, time.perf_counter() - started)

    async def _get(self, scope: dict[str, Any], send: Send, table: str, raw_key: bytes) -> int:
        runtime = self.node.tables.get(table)
        if runtime is None:
            raise UnknownTable(f"no table named {table!r}", table=table)
        key = key_from_path(raw_key)
        partition = self.node.partition_of(runtime, key.decode())
        local = self.node.replica(table, partition)
        params = query(scope)
        if not params and local is not None and local.state is ReplicaState.ACTIVE:
            return await self._serve(send, local, key, params)  # the common case: we own it
        max_lag = int_param(params, "max_lag") if params else None

        if header(scope, FORWARDED.encode()) is not None:
            if local is None or not servable(local, max_lag):
                raise NotHere(
                    f"{self.node.node_id} holds no usable replica of {table}[{partition}]"
                )
            return await self._serve(send, local, key, params)

        targets = self.router.targets(self.node.view, table, partition, local, max_lag)
        if params and bool_param(params, "redirect") and targets and targets[0] != LOCAL:
            location = targets[0] + scope["raw_path"].decode("latin-1")
            rest = [p for p in scope["query_string"].decode("latin-1").split("&")
                    if p and not p.startswith("redirect=")]  # fmt: skip
            if rest:
                location += "?" + "&".join(rest)
            await respond(send, 307, b"", [(b"location", location.encode()), JSON])
            return 307
        wait_s = (int_param(params, "wait_ms", 0, MAX_WAIT_MS) or 0) / 1000 if params else 0.0
        last_error = "no replica of this partition is known"
        for target in targets:
            if target == LOCAL:
                assert local is not None
                return await self._serve(send, local, key, params)
            path = scope["raw_path"].decode("latin-1")
            qs = scope["query_string"].decode("latin-1")
            url = f"{target}{path}?{qs}" if qs else f"{target}{path}"
            try:
                reply = await self.forwarder.send(
                    "GET", url, header(scope, b"authorization"), extra_timeout_s=wait_s
                )
            except ConnectionError as exc:
                self.router.failed(target)
                self._forward_failed.inc()
                last_error = str(exc)
                continue
            self.router.succeeded(target)
            if reply.status in (421, 503):
                last_error = f"{target} answered {reply.status}"
                continue
            self._forward_ok.inc()
            await respond(send, reply.status, reply.body, reply.headers)
            return reply.status
        raise Unavailable(
            f"no replica of {table}[{partition}] could answer", partition=partition,
            reason=last_error,
        )  # fmt: skip

    async def _serve(self, send: Send, replica: Replica, key: bytes, params: dict[str, str]) -> int:
        if params:
            min_offset = int_param(params, "min_offset")
            if min_offset is not None and replica.applied_offset < min_offset:
                wait_ms = int_param(params, "wait_ms", 0, MAX_WAIT_MS) or 0
                await _wait_for(replica, min_offset, wait_ms / 1000)
        got = replica.store.get(key)
        headers = [
            JSON,
            (b"x-kiq-partition", str(replica.partition).encode()),
            (b"x-kiq-served-by", self._served_by),
            (b"x-kiq-lag", str(max(replica.lag, 0)).encode()),
        ]
        if not replica.is_active:
            headers.append((b"x-kiq-stale", b"true"))
        if got is None:
            body = KeyNotFound(
                "no such key", table=replica.table, key=key.decode(), partition=replica.partition
            ).body()
            await respond(send, 404, body, headers)
            return 404
        value, offset = got
        headers.append((b"x-kiq-offset", str(offset).encode()))
        if self.node.tables[replica.table].spec.format == "raw":
            headers[0] = OCTETS
        await respond(send, 200, value, headers)
        return 200


async def _wait_for(replica: Replica, min_offset: int, wait_s: float) -> None:
    """Read-your-writes: wait until the replica applied ``min_offset``, or give up."""
    deadline = time.monotonic() + wait_s
    while replica.applied_offset < min_offset:
        if time.monotonic() >= deadline:
            raise Unavailable(
                f"{replica.table}[{replica.partition}] has applied offset "
                f"{replica.applied_offset}, not yet {min_offset}",
                partition=replica.partition, applied_offset=replica.applied_offset,
                reason="min_offset not reached within wait_ms",
            )  # fmt: skip
        await asyncio.sleep(0.002)
