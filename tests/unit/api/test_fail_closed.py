"""Fail closed: on a node with authentication, no request without a verified caller reads a
table or writes, whatever patterns an application mounts; the core paths always win.

The application here mounts the greediest patterns there are (``/{tenant}/{kind}/{id}``,
``/{p:path}``, ``POST /{x}``), each of which reads a table and writes to Kafka. Every core
prefix is then tried with every method: with no token, a junk one, and a token for another
table. The application's handlers must never run for a core path, and nothing but the
exact open pairs (liveness, readiness, the OpenAPI document) may answer 2xx without a
caller allowed to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from kiq import Request, Routes, json_reply
from kiq.api.routes import OPEN, RESERVED
from kiq.errors import ConfigError
from kiq.replicas import ReplicaState
from kiq.security import ClusterKey, Security, TokenCache, TokenVerifier
from kiq.security.keys import SecretKey
from kiq.settings import LimitsSettings
from tests.unit.security.keys import hs256, secret_file
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
CORE_PATHS = [
    "/v1/internal/lookups",
    "/v1/internal/multiget",
    "/v1/internal/scan",
    "/v1/internal/metadata",
    "/v1/internal/hello",
    "/v1/internal/anything",
    "/v1/health/live",
    "/v1/health/ready",
    "/v1/health/anything",
    "/openapi.json",
    "/openapi.json/x",
    "/v1/metadata",
    "/metrics",
    "/v1/tables",
    "/v1/tables/t/range",
    "/v1/tables/t/multiget",
    "/v1/tables/t/keys/k",
    "/v1/tables/t/keys/k/windows",  # called straight from the path (server.py)
    "/v1/tables/t/keys/k%2Fx/windows",
    "/v1/tables/t/keys//windows",
    "/v1/tables/t/anything/else",
]
SECRET_VALUE = b'{"secret":"value"}'


class Greedy:
    """Routes that match nearly anything, each reading table ``t`` and writing to Kafka."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def routes(self, app: Routes) -> None:
        for method, path in (
            ("GET", "/{tenant}/{kind}/{id}"),
            ("POST", "/{tenant}/{kind}/{id}"),
            ("PUT", "/{tenant}/{kind}/{id}"),
            ("DELETE", "/{tenant}/{kind}/{id}"),
            ("GET", "/{p:path}"),
            ("POST", "/{x}"),
            ("PATCH", "/{p:path}"),
        ):
            app.add(method, path, self.handler)

    async def handler(self, request: Request) -> object:
        self.ran.append(f"{request.method} {request.path}")
        value = await request.tables.get("t", "k")
        await request.write("t", "k", b"{}")
        return json_reply({"value": None if value is None else orjson.loads(value)})


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[LocalNode, Greedy]]:
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    security = Security(TokenCache(verifier), ClusterKey(b"g" * 32))
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("t", 0)])
    greedy = Greedy()
    local = start_node(
        tmp_path,
        cluster,
        {"t=t,standby=0": 1},
        "n1",
        endpoints=[greedy.routes],
        security=security,
        limits=LimitsSettings(auth_failure_rate=0),
    )
    wait_until(serving(local.node, ReplicaState.ACTIVE), what="n1 active")
    local.put("t", "k", SECRET_VALUE, 0)
    yield local, greedy
    local.node.stop()


def callers() -> dict[str, list[tuple[bytes, bytes]]]:
    """Made when a test runs: a token minted at collection may expire before a long run
    gets here."""
    return {
        "no token": [],
        "junk token": [(b"authorization", b"Bearer junk.junk.junk")],
        "token for another table": [(b"authorization", hs256_header("kiq:read:other"))],
    }


WHO = ["no token", "junk token", "token for another table"]


@pytest.mark.parametrize("who", WHO)
def test_no_core_path_reaches_an_application_route_or_a_table(node, who: str):
    local, greedy = node
    answered_open = set()
    for path in CORE_PATHS:
        for method in METHODS:
            r = asyncio.run(call(local.app, method, path, b'{"x":1}', callers()[who]))
            where = f"{method} {path} ({who})"
            assert r.status < 500, where
            assert SECRET_VALUE not in r.body and b"secret" not in r.body, where
            if 200 <= r.status < 300:
                answered_open.add((method, path))
    assert greedy.ran == [], "an application route answered a core path"
    assert local.writer.records == []
    allowed = set(OPEN)
    if who == "token for another table":
        # Any valid token lists the tables and reads the map it routes by (proven members).
        allowed |= {("GET", "/v1/tables"), ("GET", "/v1/metadata")}
    assert answered_open <= allowed


def test_application_routes_need_a_caller_too(node):
    local, greedy = node
    for method in METHODS:
        for path in ("/a/b/c", "/anything/at/all/here", "/x"):
            for who in ("no token", "junk token"):
                r = asyncio.run(call(local.app, method, path, b"{}", callers()[who]))
                assert r.status == 401, f"{method} {path} ({who})"
    assert greedy.ran == [] and local.writer.records == []
    ok = asyncio.run(
        call(local.app, "GET", "/a/b/c", headers=[(b"authorization", hs256_header("kiq:read"))])
    )
    assert ok.status == 403 and greedy.ran == ["GET /a/b/c"]  # ran, but may not write
    r = asyncio.run(
        call(local.app, "GET", "/a/b/c", headers=[(b"authorization", hs256_header("kiq:write"))])
    )
    assert r.status == 403 and r.json()["scope"] == "kiq:read:t"  # nor read t


def hs256_header(scope: str) -> bytes:
    return f"Bearer {hs256(scope=scope)}".encode()


def test_readiness_says_only_ready_or_not_without_an_admin_token(node):
    local, _ = node
    anyone = asyncio.run(call(local.app, "GET", "/v1/health/ready"))
    assert anyone.status == 200 and anyone.json() == {"ready": True}
    admin = [(b"authorization", hs256_header("kiq:admin"))]
    detailed = asyncio.run(call(local.app, "GET", "/v1/health/ready", headers=admin))
    assert detailed.json() == {"ready": True, "reason": "ok"}


@pytest.mark.parametrize("core", RESERVED)
def test_a_route_a_core_path_would_shadow_is_a_startup_error_naming_both(core: str):
    routes = Routes()
    with pytest.raises(ConfigError) as refused:
        routes.get(core + "/{rest}", Greedy().handler)
    assert core + "/{rest}" in str(refused.value) and f"core API's {core}" in str(refused.value)


def test_refused_credentials_are_limited_per_address_before_any_signature_check(tmp_path):
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    checks = 0
    verify = verifier.verify

    def counting(token: str):  # type: ignore[no-untyped-def]
        nonlocal checks
        checks += 1
        return verify(token)

    verifier.verify = counting  # type: ignore[method-assign]
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("t", 0)])
    local = start_node(
        tmp_path,
        cluster,
        {"t=t,standby=0": 1},
        "n1",
        security=Security(TokenCache(verifier), ClusterKey(b"g" * 32)),
        limits=LimitsSettings(auth_failure_rate=1, auth_failure_burst=5),
    )
    limiter = local.app.access._failures  # type: ignore[union-attr]
    try:
        statuses = [
            asyncio.run(
                call(
                    local.app,
                    "GET",
                    "/v1/tables/t/keys/k",
                    headers=[(b"authorization", f"Bearer junk-{i}".encode())],
                )
            ).status
            for i in range(20)
        ]
        assert statuses[:5] == [401] * 5 and set(statuses[6:]) == {429}
        assert checks <= 6  # the refused ones never reached the verifier
        limited = asyncio.run(call(local.app, "GET", "/v1/tables", headers=[]))
        assert limited.status == 429 and int(limited.headers["retry-after"]) >= 1
        # A neighbour behind the same address whose token was verified before goes on; a new
        # token, even a valid one, waits: nothing new is checked for this address meanwhile.
        known = [(b"authorization", hs256_header("kiq:read"))]
        local.app.access._failures = None  # type: ignore[union-attr]
        assert asyncio.run(call(local.app, "GET", "/v1/tables", headers=known)).status == 200
        local.app.access._failures = limiter  # type: ignore[union-attr]
        assert asyncio.run(call(local.app, "GET", "/v1/tables", headers=known)).status == 200
        fresh = [(b"authorization", hs256_header("kiq:read kiq:write"))]
        assert asyncio.run(call(local.app, "GET", "/v1/tables", headers=fresh)).status == 429
    finally:
        local.node.stop()
