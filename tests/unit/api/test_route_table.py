"""One declaration per route: the routers, the checks, the reserved prefixes and the document
all come from the table of ``RouteSpec``s, and no route answers a caller its rule refuses.

The node checks tokens and serves the core API and an application's routes whose handlers
only record that they ran: a route left without its guard would run for anyone.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from starlette.routing import Route

from kiq import Reply, Request, Routes, json_reply
from kiq.api import bodies, openapi
from kiq.api.auth import Access
from kiq.api.errors import send_error
from kiq.api.limits import RateLimiter
from kiq.api.openapi import documented_path
from kiq.api.routers import app_router
from kiq.api.routes import CORE, LOOKUP, OPEN, RESERVED, is_core
from kiq.api.spec import Doc, RouteSpec, Rule, prefix
from kiq.peers.wire import PRINCIPAL
from kiq.replicas import ReplicaState
from kiq.security import (
    CLUSTER_HEADER,
    ClusterKey,
    Grants,
    Security,
    TokenCache,
    TokenVerifier,
    VerifiedCaller,
)
from kiq.security.keys import SecretKey
from kiq.settings import LimitsSettings
from tests.unit.security.keys import hs256, secret_file
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

MEMBER = ClusterKey(b"g" * 32)
URL = "http://n1.test"


class Order(msgspec.Struct):
    customer: str
    total: int


class Placed(msgspec.Struct):
    partition: int
    offset: int


class Recorder:
    """An application whose handlers touch nothing: only the rule stands before them."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def routes(self, app: Routes) -> None:
        app.get("/v1/things/{id}", self.handler)
        app.post("/v1/orders", self.handler, request=Order, response=Placed)
        app.add("DELETE", "/v1/things/{id}", self.handler, {"summary": "drop a thing"})

    async def handler(self, request: Request) -> Reply:
        self.ran.append(f"{request.method} {request.path}")
        return json_reply(Placed(0, 1))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[LocalNode, Recorder]]:
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    cluster = Cluster()
    cluster.join("n1", URL)
    cluster.assign("n1", [("t", 0)])
    recorder = Recorder()
    local = start_node(
        tmp_path,
        cluster,
        {"t=t,standby=0": 1},
        "n1",
        endpoints=[recorder.routes],
        security=Security(TokenCache(verifier), MEMBER),
        limits=LimitsSettings(auth_failure_rate=0),
    )
    wait_until(serving(local.node, ReplicaState.ACTIVE), what="n1 active")
    local.put("t", "k", b'{"v":1}', 0)
    yield local, recorder
    local.node.stop()


def concrete(path: str) -> str:
    """``path`` with its parameters filled: table ``t``, key ``k``, anything else ``x``."""
    return re.sub(
        r"{([^}:]+)(?::[^}]*)?}", lambda m: {"table": "t", "key": "k"}.get(m[1], "x"), path
    )


def bearer(scope: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {hs256(scope=scope)}".encode())]


def member(method: str, path: str, body: bytes, scope: str) -> list[tuple[bytes, bytes]]:
    statement = VerifiedCaller("alice", Grants.parse(scope), time.time() + 60).statement
    credential = MEMBER.sign(URL, method, path, body, statement)
    return [
        (CLUSTER_HEADER.encode(), credential.encode()),
        (PRINCIPAL.encode(), statement.encode()),
    ]


def refused_callers() -> dict[Rule, list[tuple[str, Any, int]]]:
    """Per rule: callers it refuses, and with what. Made when a test runs, not at import: a
    token minted at collection may have expired by the time a long run gets here."""
    return {
        Rule.CALLER: [
            ("no token", [], 401),
            ("junk", [(b"authorization", b"Bearer j.u.nk")], 401),
        ],
        Rule.READ: [("no token", [], 401), ("another table", bearer("kiq:read:other"), 403)],
        Rule.WRITE: [("no token", [], 401), ("a reader", bearer("kiq:read"), 403)],
        Rule.ADMIN: [("no token", [], 401), ("a reader", bearer("kiq:read kiq:write"), 403)],
        Rule.CLUSTER: [("no credential", [], 403), ("an admin's token", bearer("kiq:admin"), 403)],
    }


ALL = "kiq:read kiq:write kiq:admin"


def test_every_route_refuses_whom_its_rule_refuses_and_admits_whom_it_admits(node):
    local, recorder = node
    specs = local.app.specs
    refused = refused_callers()
    assert {s.access for s in specs} >= {Rule.OPEN, Rule.CALLER, Rule.READ, Rule.ADMIN}
    for spec in specs:
        target = concrete(spec.path)
        where = f"{spec.method} {spec.path}"
        for who, headers, status in refused.get(spec.access, []):
            r = asyncio.run(call(local.app, spec.method, target, b"{}", headers))
            assert r.status == status, f"{where} answered {r.status} to {who}"
        assert recorder.ran == [], f"{where} ran its handler for a caller its rule refuses"
        body = b'{"keys":["k"]}' if spec.method == "POST" else b""
        if spec.access is Rule.CLUSTER:
            admitted = member(spec.method, target, body, ALL)
        elif spec.access is Rule.OPEN:
            admitted = []
        else:
            admitted = bearer(ALL)
        r = asyncio.run(call(local.app, spec.method, target, body, admitted))
        assert r.status not in (401, 403), f"{where} refused a caller its rule admits: {r.body}"
        recorder.ran.clear()


def test_the_routers_hold_the_declared_routes_and_no_other(node):
    local, _ = node
    routed = {
        (method, route.path)
        for router in local.app.routers
        for route in router.routes
        if isinstance(route, Route)
        for method in route.methods or ()
    }
    declared = {(s.method, s.path) for s in local.app.specs}
    assert routed == declared - {(LOOKUP.method, LOOKUP.path)}  # that one answers before them
    core, own = local.app.routers
    assert all(is_core(r.path) for r in core.routes if isinstance(r, Route))
    assert not any(is_core(r.path) for r in own.routes if isinstance(r, Route))


def test_every_route_but_the_members_is_in_the_document_with_its_rule(node):
    local, _ = node
    doc = asyncio.run(call(local.app, "GET", "/openapi.json")).json()
    documented = {
        (m.upper(), p): op["x-kiq-access"]
        for p, ops in doc["paths"].items()
        for m, op in ops.items()
    }
    public = {
        (s.method, documented_path(s.path)): s.access.value
        for s in local.app.specs
        if s.access is not Rule.CLUSTER
    }
    assert documented == public
    for spec in local.app.specs:
        if spec.access is Rule.CLUSTER:
            continue
        op = doc["paths"][documented_path(spec.path)][spec.method.lower()]
        if spec.access is Rule.OPEN:
            assert op["security"] == [] and "401" not in op["responses"]
        else:
            assert op["security"] == [{"bearerAuth": []}], spec.path
            assert {"401", "403"} <= set(op["responses"]), spec.path
        assert ("429" in op["responses"]) == spec.limited, spec.path


def test_the_raw_lookup_path_is_the_declared_one():
    assert LOOKUP.path == "/v1/tables/{table}/keys/{key}"  # app.py matches it by hand
    assert LOOKUP.endpoint is None and LOOKUP.access is Rule.READ
    assert [s for s in CORE if s.endpoint is None] == [LOOKUP]


def test_reserved_prefixes_open_routes_and_members_paths_come_from_the_table():
    assert RESERVED == (
        "/v1/tables",
        "/v1/metadata",
        "/v1/health",
        "/metrics",
        "/openapi.json",
        "/ui",  # the dashboard (ops/dashboard.py)
        "/v1/status",
        "/v1/pipelines",
        "/v1/internal",
    )
    assert {
        ("GET", "/v1/health/live"),
        ("GET", "/v1/health/ready"),
        ("GET", "/openapi.json"),
        ("GET", "/ui"),  # the dashboard's page and files; what they read asks for admin
        ("GET", "/ui/{asset:path}"),
    } == OPEN
    members = {s.path for s in CORE if s.access is Rule.CLUSTER}
    assert members == {s.path for s in CORE if s.path.startswith("/v1/internal/")}
    unlimited = {s.path for s in CORE if not s.limited}
    assert unlimited == members | {"/v1/health/live", "/v1/health/ready"}
    assert prefix("/v1/tables/{table}/range") == "/v1/tables" and prefix("/metrics") == "/metrics"


def test_a_read_rule_needs_a_table_in_its_path():
    with pytest.raises(ValueError, match="table"):
        RouteSpec("GET", "/v1/x/{name}", None, Rule.READ, True, Doc())


def test_a_members_credential_is_checked_before_the_body_is_read(node):
    local, _ = node

    async def run() -> tuple[int, bool]:
        read = False

        async def receive() -> dict[str, Any]:
            nonlocal read
            read = True
            return {"type": "http.request", "body": b"x" * 10, "more_body": False}

        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/internal/lookups",
            "raw_path": b"/v1/internal/lookups",
            "query_string": b"",
            "headers": [(CLUSTER_HEADER.encode(), b"junk")],
            "client": ("10.0.0.1", 1),
        }
        await local.app(scope, receive, send)
        return int(sent[0]["status"]), read

    assert asyncio.run(run()) == (403, False)


def test_a_write_rule_admits_only_writers(tmp_path):
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    access = Access(TokenCache(verifier), None)
    ran = []

    class Endpoint:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            ran.append(scope["path"])
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    endpoint = Endpoint()
    spec = RouteSpec("POST", "/w", endpoint, Rule.WRITE, False, Doc())
    router = app_router([(spec, endpoint)], access, None)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            await router(scope, receive, send)
        except Exception as exc:
            await send_error(send, exc, scope)

    assert asyncio.run(call(app, "POST", "/w", headers=bearer("kiq:read"))).status == 403
    assert ran == []
    assert asyncio.run(call(app, "POST", "/w", headers=bearer("kiq:write"))).status == 204
    assert ran == ["/w"]


def test_a_path_no_route_takes_needs_a_caller_and_is_counted_by_the_limit(tmp_path):
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    access = Access(TokenCache(verifier), MEMBER)
    router = app_router([], access, RateLimiter(rate=1, burst=1))

    def status(path: str, headers: Any = ()) -> int:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            try:
                await router(scope, receive, send)
            except Exception as exc:
                await send_error(send, exc, scope)

        return asyncio.run(call(app, "GET", path, headers=headers)).status

    assert status("/nowhere") == 401
    assert status("/v1/internal/nowhere") == 403  # a member's path: the credential first
    assert status("/nowhere", bearer("kiq:read")) == 404
    assert status("/nowhere", bearer("kiq:read")) == 429


def test_the_bodies_documented_are_the_bodies_answered(tmp_path: Path):
    cluster = Cluster()
    cluster.join("n1", URL)
    cluster.assign("n1", [("t", 0)])
    local = start_node(tmp_path, cluster, {"t=t,standby=0": 1}, "n1")
    try:
        wait_until(serving(local.node, ReplicaState.ACTIVE), what="n1 active")
        local.put("t", "k", b'{"v":1}', 0)
        for method, target, body, kind in [
            ("GET", "/v1/tables", b"", bodies.TablesBody),
            ("GET", "/v1/metadata", b"", bodies.Metadata),
            ("GET", "/v1/metadata?cluster=true", b"", bodies.Metadata),
            ("POST", "/v1/tables/t/multiget", b'{"keys":["k","nope"]}', bodies.MultigetBody),
            ("GET", "/v1/tables/t/range?limit=1", b"", bodies.PageBody),
            ("GET", "/v1/health/live", b"", bodies.Live),
            ("GET", "/v1/health/ready", b"", bodies.Ready),
            ("GET", "/v1/tables/nope/range", b"", bodies.Error),
        ]:
            r = asyncio.run(call(local.app, method, target, body))
            msgspec.json.decode(r.body, type=kind, strict=True)  # raises if they differ
        request = msgspec.json.decode(b'{"keys":["k"]}', type=bodies.KeysBody)
        assert request.keys == ["k"]
    finally:
        local.node.stop()


def test_an_applications_typed_bodies_are_in_the_document(node):
    local, _ = node
    doc = asyncio.run(call(local.app, "GET", "/openapi.json")).json()
    post = doc["paths"]["/v1/orders"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Order"
    }
    assert post["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Placed"
    }
    assert doc["components"]["schemas"]["Order"]["required"] == ["customer", "total"]
    assert "Error" in doc["components"]["schemas"]
    delete = doc["paths"]["/v1/things/{id}"]["delete"]
    assert delete["summary"] == "drop a thing"
    assert [p["name"] for p in delete["parameters"]] == ["id"]  # added: the path has it
    r = asyncio.run(call(local.app, "POST", "/v1/orders", b"{}", bearer(ALL)))
    assert r.json() == {"partition": 0, "offset": 1}  # a Struct answered as JSON


def test_the_members_routes_document_their_wire_types():
    schemas = openapi.Schemas()
    ops = [openapi.operation(s, True, schemas) for s in CORE if s.access is Rule.CLUSTER]
    components = schemas.components()
    assert {"Lookup", "LookupResult", "Multiget", "MultigetResult", "Scan", "NodeStatus"} <= set(
        components
    )
    assert all(op["x-kiq-access"] == "cluster" for op in ops)


def test_the_core_bodies_keep_their_schema_names():
    """Core bodies named apart from the public framework's classes (``PageBody`` beside
    ``kiq.Page``) keep their names in the document, and every reference to them resolves."""
    doc = openapi.document(CORE, secured=True)
    names = set(doc["components"]["schemas"])
    assert set(bodies.SCHEMA_NAMES.values()) <= names
    assert not {kind.__name__ for kind in bodies.SCHEMA_NAMES} & names
    refs = set(re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(doc)))
    assert refs <= names
    assert doc["components"]["schemas"]["Page"]["title"] == "Page"
