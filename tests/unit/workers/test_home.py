"""The node's private listener: a socket only its user reaches, and what it passes on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from kiq.api import limits
from kiq.api.limits import NodeWideLimiter, RateLimiter
from kiq.cluster import decode_client_id
from kiq.peers.pool import ConnectionPool
from kiq.settings import LimitsSettings
from kiq.workers.home import Home, HomeApp
from kiq.workers.server import http_server
from kiq.workers.state import CLIENT_HEADER, TOKEN_HEADER


class Seen:
    """An app that keeps the scope it was given, and answers 204."""

    def __init__(self) -> None:
        self.scope: dict[str, Any] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        self.scope = scope
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def _ask(app: Any, *headers: tuple[bytes, bytes]) -> int:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/stocks/AAPL",
        "headers": [(b"host", b"localhost"), *headers],
        "client": ("", 0),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


@pytest.fixture
def home() -> Iterator[Home]:
    made = Home.open(LimitsSettings(rate_clients=16))
    yield made
    made.remove()


def test_no_route_sees_the_worker_token(home: Home):
    """A worker's request: its caller's address is taken, and neither header goes on."""
    seen = Seen()
    app = HomeApp(seen, node=None, token=home.token)  # type: ignore[arg-type]
    asyncio.run(
        _ask(
            app,
            (TOKEN_HEADER.encode(), home.token.encode()),
            (CLIENT_HEADER.encode(), b"203.0.113.7"),
        )
    )
    assert seen.scope is not None
    names = {name for name, _ in seen.scope["headers"]}
    assert TOKEN_HEADER.encode() not in names and CLIENT_HEADER.encode() not in names
    assert b"host" in names
    assert seen.scope["client"] == ("203.0.113.7", 0)


def test_a_request_without_the_token_names_no_caller_and_passes_on_neither_header(home: Home):
    seen = Seen()
    app = HomeApp(seen, node=None, token=home.token)  # type: ignore[arg-type]
    asyncio.run(
        _ask(app, (TOKEN_HEADER.encode(), b"a guess"), (CLIENT_HEADER.encode(), b"10.9.9.9"))
    )
    assert seen.scope is not None
    assert [name for name, _ in seen.scope["headers"]] == [b"host"]
    assert seen.scope["client"] == ("", 0)


def test_the_home_directory_is_private_and_holds_the_node_wide_limits(home: Home):
    assert home.path.stat().st_mode & 0o777 == 0o700
    assert home.table.path.parent == home.path
    assert home.table.path.stat().st_mode & 0o777 == 0o600
    assert home.url == f"unix:{home.socket}"
    assert isinstance(RateLimiter.of(LimitsSettings(rate_limit=1)), NodeWideLimiter)


def test_removing_the_home_leaves_nothing_and_limits_per_process_again():
    made = Home.open(LimitsSettings())
    made.remove()
    assert not made.path.exists()
    assert limits._node_wide is None


def test_the_listener_is_a_socket_of_mode_0600_that_answers_before_it_is_named(home: Home):
    """A worker's peer client (the router's target for its node's replicas) reaches it too."""

    async def run() -> tuple[int, int]:
        server = http_server(Seen(), "", 0, LimitsSettings(), uds=home.socket)
        serving = asyncio.get_running_loop().create_task(server.serve())
        pool = ConnectionPool()
        try:
            await home.listening(timeout_s=10)
            mode = home.socket.stat().st_mode & 0o777
            status, _ = await pool.request(home.url, "GET", "/x", b"", {}, 5.0)
            return mode, status
        finally:
            pool.close()
            server.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(serving, 10)

    mode, status = asyncio.run(run())
    assert mode == 0o600
    assert status == 204


def test_no_group_member_can_name_a_local_socket_for_its_url():
    """Only the worker's own settings name the node's socket: a member's URL never does."""
    assert decode_client_id("kiq|n9|unix:/tmp/kiq-node-x/home.sock") is None
    assert decode_client_id("kiq|n9|http://h:1") is not None
