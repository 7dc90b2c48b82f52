"""A read worker's ASGI app: the reads it answers itself, the rest handed to its node.

A worker answers what its copies of the stores and its node's view answer as well as
the node would: point lookups (the raw path), multiget, range, top, windows and index
reads (``/by/FIELD``, from its copies' indexes as top from their rank order), and the
application's own routes. Every other request (watches, admin and status routes,
metrics, writes of the core API, and whatever peers forward, which must be answered
from the node's replicas alone) goes to the node's private listener unchanged, streamed
both ways, with the caller's address (``HomeProxy``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson

from kiq.api.asgi import Receive, Scope, Send, respond
from kiq.api.routes import is_core
from kiq.http_client import HttpError, Timeout, async_client, async_transport, send_stream
from kiq.peers import FORWARDED
from kiq.peers.frames import TRY_AGAIN_LATER
from kiq.server import KiqApp
from kiq.workers.state import CLIENT_HEADER, TOKEN_HEADER

_TABLES = "/v1/tables/"
_READS = ("/multiget", "/range", "/top", "/windows")
_FORWARDED = FORWARDED.lower().encode()
# Not passed on: they describe one connection, not the request.
_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"proxy-authorization",
        b"proxy-connection",
        b"host",
        b"content-length",
        CLIENT_HEADER.encode(),
        TOKEN_HEADER.encode(),
    }
)


def answers_here(scope: Scope) -> bool:
    """Whether a worker answers ``scope`` itself (see the module's docstring)."""
    path: str = scope["path"]
    if not is_core(path):
        return True
    if not path.startswith(_TABLES):
        return False
    if b"consistent=" in scope.get("query_string", b""):
        return False  # as of a batch: only the node keeps its replicas' batch markers
    method = scope["method"]
    if method == "GET" and "/keys/" in path and not path.endswith("/watch"):
        return not any(name == _FORWARDED for name, _ in scope["headers"])
    if method == "GET" and _is_index_read(path):
        return True
    return path.endswith(_READS) and method in ("GET", "POST")


def _is_index_read(path: str) -> bool:
    """``/v1/tables/{table}/by/{field}`` or ``.../by/{field}/{value}``."""
    parts = path[len(_TABLES) :].split("/", 3)
    return len(parts) >= 3 and parts[1] == "by" and bool(parts[0]) and bool(parts[2])


class HomeProxy:
    """Hands a request to the node's private listener (its Unix socket, ``path``), as it
    came."""

    def __init__(self, path: str, token: str) -> None:
        self._client = async_client(
            base_url="http://localhost",
            timeout=Timeout(None, connect=5.0),
            transport=async_transport(uds=path, max_connections=None, max_keepalive=64),
        )
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope["headers"]
            if name not in _HOP
        ]
        headers.append((TOKEN_HEADER, self._token))
        client = scope.get("client")
        if client:
            headers.append((CLIENT_HEADER, str(client[0])))
        path = scope.get("raw_path") or scope["path"].encode()
        target = path.decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        request = self._client.build_request(
            scope["method"], target, headers=headers, content=_body(receive)
        )
        try:
            response = await send_stream(self._client, request)
        except HttpError as exc:
            detail = f"this node's writer did not answer its worker: {exc.reason}"
            body = b'{"error":"unavailable","detail":' + _quoted(detail) + b"}"
            await respond(send, 503, body)
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


def _quoted(text: str) -> bytes:
    return orjson.dumps(text)


LIVE = "/v1/health/live"


class WorkerApp:
    """``app`` (the worker's ``KiqApp``) for what it answers, ``home`` for the rest.

    ``GET /v1/health/live`` is this process's own answer, with its worker index: whether
    it lives, and which process a connection reached (the node's says no index)."""

    def __init__(self, app: KiqApp, home: HomeProxy, index: int) -> None:
        self._app = app
        self._home = home
        self._live = b'{"live":true,"worker":%d}' % index

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if scope["path"] == LIVE:
                await respond(send, 200, self._live)
            elif answers_here(scope):
                await self._app(scope, receive, send)
            else:
                await self._home(scope, receive, send)
        elif kind == "lifespan":
            await self._app(scope, receive, send)
            with contextlib.suppress(Exception):
                await self._home.aclose()
        elif kind == "websocket":
            # A peer's lookup channel (peers/channel.py) belongs to the node: refused
            # here, the peer sends that batch over HTTP, which the node answers.
            await send({"type": "websocket.close", "code": TRY_AGAIN_LATER})

    def end_streams(self) -> None:
        self._app.end_streams()
