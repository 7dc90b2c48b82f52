"""The ASGI application of one node: a small dispatcher in front of the handlers.

Routes (all JSON):
  GET  /v1/tables/{table}/keys/{key}        point lookup (lookups.py, the hot path)
  POST /v1/tables/{table}/multiget          many keys, one call per owner
  GET  /v1/tables/{table}/range             byte-ordered scan with cursors
  GET  /v1/tables                           tables and their partition counts
  GET  /v1/metadata                         nodes, actives, standbys, offsets, lag
  GET  /v1/health/live, /v1/health/ready    liveness, readiness
  GET  /metrics                             Prometheus
  POST /v1/internal/lookups, /v1/internal/multiget, /v1/internal/scan,
  GET  /v1/internal/metadata                node-to-node calls (msgpack; routing/wire.py)
  GET  /v1/stocks/{symbol}, /v1/stocks?symbols=, /v1/stocks/{symbol}/bars   (stocks.py)
  POST /v1/words, GET /v1/words/{word}                                       (words.py)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kiq.api import admin
from kiq.api.asgi import JSON, header, query, read_body, respond
from kiq.api.batches import Batches
from kiq.api.errors import ApiError
from kiq.api.lookups import Lookups
from kiq.api.stocks import Stocks
from kiq.api.words import Words
from kiq.node import Node
from kiq.routing import Peers, Router
from kiq.routing.wire import (
    INTERNAL_LOOKUPS,
    INTERNAL_METADATA,
    INTERNAL_MULTIGET,
    INTERNAL_SCAN,
    MSGPACK,
)

log = logging.getLogger(__name__)

_TABLES = "/v1/tables/"
_NOT_FOUND = b'{"error":"no_route","message":"no such path; see /v1/tables and /v1/metadata"}'
_PROMETHEUS = (b"content-type", b"text/plain; version=0.0.4; charset=utf-8")
_MSGPACK = (b"content-type", MSGPACK.encode())


class KiqApp:
    def __init__(self, node: Node, start_node: bool = True) -> None:
        self.node = node
        self.router = Router(node.node_id)
        self.peers = Peers(node.node_id, self.router, node.settings.forward_timeout_ms)
        self.lookups = Lookups(node, self.router, self.peers)
        self.batches = Batches(node, self.router, self.peers)
        self.stocks = Stocks(self.lookups, self.batches)
        self.words = Words(self.lookups, node.settings.bootstrap)
        self._start_node = start_node

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            path: str = scope["path"]
            if scope["method"] == "GET" and path.startswith(_TABLES):
                raw = scope.get("raw_path") or path.encode()
                table, sep, key = raw[len(_TABLES) :].partition(b"/keys/")
                if sep and b"/" not in table:
                    await self.lookups.get(scope, send, table.decode("latin-1"), key)
                    return
            try:
                if scope["method"] == "GET" and path.startswith("/v1/stocks/"):
                    symbol, sep, _ = path[len("/v1/stocks/") :].partition("/")
                    if not sep:
                        await self.stocks.quote(scope, send, symbol)
                        return
                await self._other(scope, receive, send, path)
            except ApiError as exc:
                await respond(send, exc.status, exc.body())
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _other(self, scope: dict[str, Any], receive: Any, send: Any, path: str) -> None:
        method = scope["method"]
        parts = path.strip("/").split("/")
        auth = header(scope, b"authorization")
        if method == "GET":
            if path == "/v1/tables":
                return await respond(send, 200, admin.tables(self.node))
            if path == "/v1/metadata":
                cluster = query(scope).get("cluster", "") in ("1", "true")
                body = await admin.metadata(self.node, self.peers, cluster, auth)
                return await respond(send, 200, body)
            if path == "/v1/health/live":
                return await respond(send, 200, b'{"live":true}')
            if path == "/v1/health/ready":
                status, body = await asyncio.to_thread(admin.ready, self.node)
                return await respond(send, status, body)
            if path == "/metrics":
                return await respond(send, 200, admin.metrics(self.node), [_PROMETHEUS])
            if path == "/v1/stocks":
                return await respond(send, 200, await self.stocks.quotes(query(scope), auth))
            if len(parts) == 4 and parts[:2] == ["v1", "stocks"] and parts[3] == "bars":
                body = await self.stocks.bars(parts[2], query(scope), auth)
                return await respond(send, 200, body)
            if len(parts) == 3 and parts[:2] == ["v1", "words"]:
                return await self.words.count(scope, send, parts[2])
            if len(parts) == 4 and parts[:2] == ["v1", "tables"] and parts[3] == "range":
                body = await self.batches.range(parts[2], query(scope), auth)
                return await respond(send, 200, body)
            if path == INTERNAL_METADATA:
                return await respond(send, 200, admin.node_status(self.node), [_MSGPACK])
        elif (
            method == "POST"
            and len(parts) == 4
            and parts[:2] == ["v1", "tables"]
            and (parts[3] == "multiget")
        ):
            body = await self.batches.multiget(parts[2], await read_body(receive), auth)
            return await respond(send, 200, body)
        elif method == "POST" and path == "/v1/words":
            return await respond(send, 202, await self.words.post(await read_body(receive)))
        elif method == "POST" and path == INTERNAL_LOOKUPS:
            body = await self.lookups.internal(await read_body(receive))
            return await respond(send, 200, body, [_MSGPACK])
        elif method == "POST" and path == INTERNAL_MULTIGET:
            body = self.batches.internal_multiget(await read_body(receive))
            return await respond(send, 200, body, [_MSGPACK])
        elif method == "POST" and path == INTERNAL_SCAN:
            body = self.batches.internal_scan(await read_body(receive))
            return await respond(send, 200, body, [_MSGPACK])
        await respond(send, 404, _NOT_FOUND, [JSON])

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    if self._start_node:
                        await asyncio.to_thread(self.node.start)
                except Exception as exc:
                    log.exception("node start failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.peers.close()
                self.words.close()
                if self._start_node:
                    await asyncio.to_thread(self.node.stop)
                await send({"type": "lifespan.shutdown.complete"})
                return


def create_app(node: Node, start_node: bool = True) -> KiqApp:
    return KiqApp(node, start_node)
