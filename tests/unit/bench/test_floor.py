"""The floor app answers as a kiq lookup would, with one header or with kiq's."""

from __future__ import annotations

import asyncio
from typing import Any

from kiq.bench.floor import KIQ_HEADERS, PREFIX, make_app


def _get(app: Any, path: bytes) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    scope = {"type": "http", "method": "GET", "path": path.decode(), "raw_path": path}
    asyncio.run(app(scope, receive, send))
    return sent


def test_plain_floor_sends_one_header() -> None:
    start, body = _get(make_app({b"k": b"{}"}), PREFIX + b"k")
    assert start["status"] == 200 and body["body"] == b"{}"
    assert [name for name, _ in start["headers"]] == [b"content-type"]


def test_floor_with_kiq_headers_sends_a_lookups_headers() -> None:
    start, _ = _get(make_app({b"k": b"{}"}, KIQ_HEADERS), PREFIX + b"k")
    names = {name for name, _ in start["headers"]}
    assert {b"x-kiq-partition", b"x-kiq-offset", b"x-kiq-lag", b"x-kiq-served-by"} <= names
    assert b"x-kiq-version" in names


def test_unknown_key_is_a_404() -> None:
    start, _ = _get(make_app({}), PREFIX + b"nope")
    assert start["status"] == 404
