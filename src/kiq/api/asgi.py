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
    """The request's query parameters, parsed once per request: its limits, its handler and
    the read it makes each ask (the dict is shared: read it, do not change it)."""
    raw = scope.get("query_string") or b""
    if not raw:
        return {}
    parsed: tuple[bytes, dict[str, str]] | None = scope.get(_QUERY)
    if parsed is not None and parsed[0] is raw:
        return parsed[1]
    params = dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True))
    scope[_QUERY] = (raw, params)
    return params


_QUERY = "kiq.query"  # the scope's parsed query string, beside the string it was parsed from
