"""The OpenAPI document at /openapi.json: valid 3.1, and every route the node answers in it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from starlette.routing import Route

from kiq import Reply, Request, Routes, json_reply
from kiq.api.openapi import documented_path
from kiq.api.routes import CORE
from kiq.catalog import SHIPPED_ENDPOINTS
from tests.unit.stand_ins import Cluster, LocalNode, call, make_node


async def mine(request: Request) -> Reply:
    return json_reply({})


def declare(app: Routes) -> None:
    app.get("/v1/mine/{id}/items/{item}", mine)
    app.post(
        "/v1/documented",
        mine,
        {"summary": "mine", "responses": {"200": {"description": "ok"}}},
    )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[LocalNode]:
    local = make_node(tmp_path, Cluster(), {"t=t": 1}, endpoints=[*SHIPPED_ENDPOINTS, declare])
    yield local


def served(node: LocalNode) -> dict:
    r = asyncio.run(call(node.app, "GET", "/openapi.json"))
    assert r.status == 200 and r.headers["content-type"] == "application/json"
    return r.json()


def router_routes(node: LocalNode) -> set[tuple[str, str]]:
    """Every (method, path) the node answers, read from its router, not from the document."""
    found = {("GET", "/v1/tables/{table}/keys/{key}")}  # the raw path, before the router
    for route in (r for router in node.app.routers for r in router.routes):
        assert isinstance(route, Route)
        found.update((m, route.path) for m in route.methods or ())
    return found


def test_the_document_is_openapi_3_1_with_the_bearer_scheme(node: LocalNode):
    doc = served(node)
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["title"] == "kiq" and doc["info"]["version"]
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "Authorization: Bearer <JWT>",
    }
    lookup = doc["paths"]["/v1/tables/{table}/keys/{key}"]["get"]
    assert lookup["security"] == [{}, {"bearerAuth": []}]
    assert "429" in lookup["responses"]
    assert doc["paths"]["/v1/health/live"]["get"]["security"] == []


def test_schemathesis_loads_every_operation(node: LocalNode):
    schema = schemathesis.openapi.from_dict(served(node))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == sum(len(methods) for methods in served(node)["paths"].values())


def test_every_public_route_is_in_the_document_and_no_internal_one(node: LocalNode):
    doc = served(node)
    documented = {(m.upper(), p) for p, methods in doc["paths"].items() for m in methods}
    routes = router_routes(node)
    public = {(m, documented_path(p)) for m, p in routes if not p.startswith("/v1/internal/")}
    assert public == documented
    assert any(p.startswith("/v1/internal/") for _, p in routes)


def test_every_core_and_shipped_route_is_declared_not_generic(node: LocalNode):
    """A core route declared without its documentation fails here."""
    doc = served(node)
    mine = {("GET", "/v1/mine/{id}/items/{item}")}
    for method, path in router_routes(node) - mine:
        if path.startswith("/v1/internal/"):
            continue
        op = doc["paths"][documented_path(path)][method.lower()]
        assert op["summary"] != "declared by the application", f"{method} {path} is undocumented"
        assert "default" not in op["responses"], f"{method} {path}"
        for name in re.findall(r"{(\w+)}", path):
            assert any(p["name"] == name and p["in"] == "path" for p in op["parameters"])


def test_core_declarations_are_all_routed(node: LocalNode):
    assert {(s.method, s.path) for s in CORE} <= router_routes(node)


def test_an_application_route_without_a_doc_gets_a_generic_one(node: LocalNode):
    doc = served(node)
    op = doc["paths"]["/v1/mine/{id}/items/{item}"]["get"]
    assert [p["name"] for p in op["parameters"]] == ["id", "item"]
    assert "default" in op["responses"] and "429" in op["responses"]
    documented = doc["paths"]["/v1/documented"]["post"]
    assert documented["summary"] == "mine" and documented["security"] == [{}, {"bearerAuth": []}]


def test_operation_ids_are_unique(node: LocalNode):
    doc = served(node)
    ids = [op["operationId"] for methods in doc["paths"].values() for op in methods.values()]
    assert len(ids) == len(set(ids))


def test_an_application_may_not_take_the_documents_path():
    from kiq.errors import ConfigError

    with pytest.raises(ConfigError):
        Routes().get("/openapi.json", mine)
