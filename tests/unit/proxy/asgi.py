"""Calling the proxy's ASGI app in-process, and a cluster of stand-in nodes behind it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from kiq.partitioning import partition_for
from kiq.proxy import ProxyApp

Message = dict[str, Any]


@dataclass
class Answer:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def scope(
    method: str,
    path: str,
    headers: Sequence[tuple[str, str]] = (),
    client: str = "198.51.100.7",
    query: str = "",
) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
        "client": (client, 40000),
    }


async def call(
    app: ProxyApp, scope: dict[str, Any], receive: Callable[[], Awaitable[Message]]
) -> Answer:
    answer = Answer()

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}
        else:
            answer.body += message.get("body", b"")

    await app(scope, receive, send)
    return answer


def body_of(*chunks: bytes, unfinished: bool = False) -> Callable[[], Awaitable[Message]]:
    """A receive that gives ``chunks`` (the last saying more is to come when ``unfinished``)
    then waits for ever (the caller never disconnects)."""
    left = list(chunks)

    async def receive() -> Message:
        if left:
            chunk = left.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(left) or unfinished}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return receive


def never_read() -> Callable[[], Awaitable[Message]]:
    async def receive() -> Message:
        raise AssertionError("the body was read")

    return receive


PARTITIONS = 4


class Nodes:
    """Stand-in nodes behind an ``httpx.MockTransport``: ``n1`` (a seed) answers everything;
    its metadata names ``n1`` as a member and, as a partition's active, ``ghost`` (a URL
    that is no member it vouches for). Every request any of them is sent is ``seen``."""

    N1 = "http://n1.test:8080"
    GHOST = "http://ghost.test:8080"

    def __init__(self) -> None:
        self.seen: list[httpx.Request] = []
        self.transport = httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        path = request.url.path
        if path == "/v1/metadata":
            parts = [
                {
                    "partition": p,
                    "active": "ghost" if p == 0 else "n1",
                    "standbys": ["n1"] if p == 0 else [],
                    "urls": {"n1": self.N1, "ghost": self.GHOST},
                }
                for p in range(PARTITIONS)
            ]
            return httpx.Response(
                200,
                json={
                    "view_version": 1,
                    "nodes": [{"id": "n1", "url": self.N1}],
                    "tables": {"t": {"partitions": parts}},
                },
            )
        if path == "/v1/tables":
            return httpx.Response(200, json={"tables": [{"name": "t", "partitions": PARTITIONS}]})
        if path == "/v1/tables/t/multiget":
            keys = orjson.loads(request.content)["keys"]
            return httpx.Response(200, json={"found": {k: {"k": k} for k in keys}, "missing": []})
        if path.startswith("/v1/tables/t/keys/"):
            key = path.rsplit("/", 1)[1]
            return httpx.Response(200, json={"k": key}, headers={"x-kiq-served-by": "n1"})
        return httpx.Response(200, json={})

    def to(self, url: str) -> list[httpx.Request]:
        return [r for r in self.seen if str(r.url).startswith(url)]


def key_in(partition: int) -> str:
    return next(
        k for k in (f"k{i}" for i in range(1000)) if partition_for(k, PARTITIONS) == partition
    )
