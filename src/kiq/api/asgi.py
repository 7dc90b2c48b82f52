"""The few raw-ASGI helpers the hot path uses instead of a framework's objects."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from kiq.http_errors import Headers

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]

JSON = (b"content-type", b"application/json")


async def respond(send: Send, status: int, body: bytes, headers: Headers = (JSON,)) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def query(scope: Scope) -> dict[str, str]:
    raw = scope.get("query_string") or b""
    if not raw:
        return {}
    return dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True))
