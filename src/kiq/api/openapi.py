"""The OpenAPI 3.1 document a node serves at GET /openapi.json.

It is made from the app's own route table, so a route cannot be left out: each
route the node answers (node-to-node ``/v1/internal/...`` ones aside) is looked
up in ``CORE``, the core API's operations declared here, or carries the
operation its application declared with it (``Routes.get(path, handler,
doc=...)``); an application's route declared without one appears with a generic
JSON answer. The errors every route may answer, the rate limit's 429 among them,
are added to each operation from ``ERRORS``.

Security: ``bearerAuth`` (an HTTP bearer JWT) is declared, and every operation
but the open ones (health, this document) lists it: required, with the 401 and 403
answers, on a node that checks tokens (``[auth] mode = "jwt"``); optional
(``SECURED``: ``{}`` first, no token is also accepted) on one that does not.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from kiq.api.batches import MAX_RANGE_LIMIT
from kiq.api.lookups import MAX_WAIT_MS

Operation = dict[str, Any]
RouteDoc = tuple[str, str, Mapping[str, Any] | None]  # method, path, declared operation

OPENAPI_PATH = "/openapi.json"
INTERNAL = "/v1/internal/"
# The requirement every operation but the open ones carries; ``{}``: no token needed yet.
SECURED: list[dict[str, list[str]]] = [{}, {"bearerAuth": []}]
REQUIRED: list[dict[str, list[str]]] = [{"bearerAuth": []}]
OPEN: list[dict[str, list[str]]] = []
SECURITY_SCHEMES = {
    "bearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "Authorization: Bearer <JWT>",
    }
}

# -- schemas and shared pieces -----------------------------------------------------------

ERROR = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {
        "error": {"type": "string", "description": "a code: bad_request, not_found, ..."},
        "message": {"type": "string", "description": "what to do about it"},
    },
    "additionalProperties": True,
}
ANY_JSON: dict[str, Any] = {"description": "any JSON value"}
KEYS = {"type": "array", "items": {"type": "string"}}
SCHEMAS: dict[str, Any] = {
    "Error": ERROR,
    "Multiget": {
        "type": "object",
        "required": ["found", "missing"],
        "properties": {
            "found": {"type": "object", "additionalProperties": ANY_JSON},
            "missing": KEYS,
            "unavailable": {**KEYS, "description": "keys no replica could answer for"},
        },
    },
    "Page": {
        "type": "object",
        "required": ["items", "next_cursor"],
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "value"],
                    "properties": {"key": {"type": "string"}, "value": ANY_JSON},
                },
            },
            "next_cursor": {"type": ["string", "null"]},
        },
    },
}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_content(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def answer(description: str, schema: Mapping[str, Any] = ANY_JSON) -> dict[str, Any]:
    """A JSON response."""
    return {"description": description, "content": json_content(schema)}


def _error(description: str, headers: Mapping[str, Any] | None = None) -> dict[str, Any]:
    response = answer(description, ref("Error"))
    if headers:
        response["headers"] = dict(headers)
    return response


# Errors by status, as ``send_error`` answers them; operations name the ones they may give.
RESPONSES: dict[str, Any] = {
    "BadRequest": _error("bad_request: a malformed parameter or body"),
    "NotFound": _error("not_found (no such key) or unknown_table"),
    "TooLarge": _error("too_large: the body or the number of keys is over the node's limit"),
    "RateLimited": _error(
        "rate_limited: this caller sent more than [limits] rate_limit allows",
        {"Retry-After": {"description": "seconds", "schema": {"type": "integer", "minimum": 1}}},
    ),
    "Unavailable": _error("unavailable: no replica could answer; retry shortly"),
    "Unauthorized": _error(
        "unauthorized (no token) or invalid_token (bad signature, expired, wrong audience...)",
        {"WWW-Authenticate": {"description": "Bearer challenge", "schema": {"type": "string"}}},
    ),
    "Forbidden": _error(
        "insufficient_scope: the token lacks the scope this needs (named in the challenge)",
        {"WWW-Authenticate": {"description": "Bearer challenge", "schema": {"type": "string"}}},
    ),
}
ERRORS = {
    "400": "BadRequest",
    "401": "Unauthorized",
    "403": "Forbidden",
    "404": "NotFound",
    "413": "TooLarge",
    "429": "RateLimited",
    "503": "Unavailable",
}


def errors(*statuses: int) -> dict[str, Any]:
    """References to the shared error responses for ``statuses``."""
    return {str(s): {"$ref": f"#/components/responses/{ERRORS[str(s)]}"} for s in statuses}


def path_param(name: str, description: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "minLength": 1},
    }


def query_param(name: str, schema: Mapping[str, Any], description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": dict(schema)}


def integer(low: int = 0, high: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": low}
    if high is not None:
        schema["maximum"] = high
    return schema


TABLE = path_param("table", "a table this cluster serves (GET /v1/tables)")
TEXT = {"type": "string"}
_KIQ_HEADERS = {
    "X-Kiq-Partition": "the key's partition",
    "X-Kiq-Served-By": "the node whose replica answered",
    "X-Kiq-Lag": "records the replica was behind its log end",
    "X-Kiq-Offset": "the value's offset in the table's topic",
}
LOOKUP_HEADERS: dict[str, Any] = {
    **{
        name: {"description": text, "required": True, "schema": {"type": "string"}}
        for name, text in _KIQ_HEADERS.items()
    },
    "X-Kiq-Stale": {"description": "true: from a standby", "schema": {"type": "string"}},
}
LOOKUP_PARAMS = [
    query_param("max_lag", integer(), "only a replica at most this many records behind"),
    query_param("min_offset", integer(), "read-your-writes: once this offset is applied"),
    query_param("wait_ms", integer(0, MAX_WAIT_MS), "how long to wait for min_offset"),
    query_param("redirect", {"type": "boolean"}, "307 to the owner instead of forwarding"),
]


def lookup_answer(description: str, schema: Mapping[str, Any] = ANY_JSON) -> dict[str, Any]:
    """A table lookup's 200: the stored value with the X-Kiq-* headers."""
    return {
        "description": description,
        "headers": LOOKUP_HEADERS,
        "content": json_content(schema),
    }


# -- the core API ---------------------------------------------------------------------------

CORE: dict[tuple[str, str], Operation] = {
    ("GET", "/v1/tables/{table}/keys/{key}"): {
        "summary": "One key's value, from any node",
        "tags": ["tables"],
        "parameters": [TABLE, path_param("key", "UTF-8, at most 4 KiB"), *LOOKUP_PARAMS],
        "responses": {
            "200": {
                **lookup_answer("the stored value (JSON; raw tables: bytes)"),
                "content": {
                    **json_content(ANY_JSON),
                    "application/octet-stream": {"schema": {"type": "string"}},
                },
            },
            "307": {
                "description": "redirect=true: the owner's URL",
                "headers": {"Location": {"required": True, "schema": TEXT}},
            },
            **errors(400, 404, 429, 503),
        },
    },
    ("POST", "/v1/tables/{table}/multiget"): {
        "summary": "Many keys at once, one call per owning node",
        "tags": ["tables"],
        "parameters": [TABLE],
        "requestBody": {
            "required": True,
            "content": json_content(
                {"type": "object", "required": ["keys"], "properties": {"keys": KEYS}}
            ),
        },
        "responses": {
            "200": answer("found values by key, and the missing keys", ref("Multiget")),
            **errors(400, 404, 413, 429),
        },
    },
    ("GET", "/v1/tables/{table}/range"): {
        "summary": "Keys in byte order, a page at a time",
        "tags": ["tables"],
        "parameters": [
            TABLE,
            query_param("prefix", TEXT, "only keys starting with it"),
            query_param("from", TEXT, "first key (inclusive)"),
            query_param("to", TEXT, "last key (exclusive)"),
            query_param("limit", integer(1, MAX_RANGE_LIMIT), "items per page [100]"),
            query_param("cursor", TEXT, "next_cursor of the previous page"),
        ],
        "responses": {
            "200": answer("a page of items", ref("Page")),
            **errors(400, 404, 429, 503),
        },
    },
    ("GET", "/v1/tables"): {
        "summary": "The tables this cluster serves",
        "tags": ["cluster"],
        "responses": {
            "200": answer(
                "tables, topics, partitions, formats",
                {
                    "type": "object",
                    "required": ["tables"],
                    "properties": {"tables": {"type": "array", "items": {"type": "object"}}},
                },
            ),
            **errors(429),
        },
    },
    ("GET", "/v1/metadata"): {
        "summary": "Members, and every partition's replicas, offsets and lag",
        "tags": ["cluster"],
        "parameters": [query_param("cluster", {"type": "boolean"}, "ask every replica's node")],
        "responses": {
            "200": answer(
                "this node's view of the cluster",
                {"type": "object", "required": ["node", "nodes", "tables"]},
            ),
            **errors(429),
        },
    },
    ("GET", "/v1/health/live"): {
        "summary": "Liveness",
        "tags": ["health"],
        "security": OPEN,
        "responses": {"200": answer("the process answers", {"type": "object"})},
    },
    ("GET", "/v1/health/ready"): {
        "summary": "Readiness: in the group and every active replica caught up",
        "tags": ["health"],
        "security": OPEN,
        "responses": {
            status: answer(
                text,
                {
                    "type": "object",
                    "required": ["ready", "reason"],
                    "properties": {
                        "ready": {"type": "boolean"},
                        "reason": {"type": ["string", "null"]},
                    },
                },
            )
            for status, text in (("200", "ready"), ("503", "not ready, and why"))
        },
    },
    ("GET", "/metrics"): {
        "summary": "Prometheus metrics",
        "tags": ["cluster"],
        "responses": {
            "200": {"description": "text exposition", "content": {"text/plain": {"schema": TEXT}}},
            **errors(429),
        },
    },
    ("GET", OPENAPI_PATH): {
        "summary": "This document",
        "tags": ["cluster"],
        "security": OPEN,
        "responses": {"200": answer("OpenAPI 3.1", {"type": "object"})},
    },
}

# The raw lookup path answers before the router: named here with the router's routes.
RAW_ROUTES = [("GET", "/v1/tables/{table}/keys/{key}")]
_PARAM = re.compile(r"{([^}:]+)(?::[^}]*)?}")


def generic(path: str) -> Operation:
    """An application's route declared without an operation."""
    return {
        "summary": "declared by the application",
        "parameters": [path_param(name) for name in _PARAM.findall(path)],
        "responses": {"default": answer("the route's JSON answer, or an error")},
    }


def operation(
    method: str, path: str, declared: Mapping[str, Any] | None, secured: bool = False
) -> Operation:
    """The route's operation: declared, core, or generic; with the security requirement and
    the rate limit's 429 added where not open, and 401 and 403 where tokens are checked."""
    op = copy.deepcopy(dict(declared or CORE.get((method, path)) or generic(path)))
    op.setdefault("operationId", _operation_id(method, path))
    op.setdefault("security", SECURED)
    if op["security"] is not OPEN and op["security"]:
        if secured:
            op["security"] = REQUIRED
            for status, response in errors(401, 403).items():
                op["responses"].setdefault(status, response)
        op["responses"].setdefault("429", errors(429)["429"])
    return op


def document(
    routes: Iterable[RouteDoc], version: str = "", secured: bool = False
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (every route the node answers); ``secured``:
    the node checks bearer tokens."""
    paths: dict[str, dict[str, Operation]] = {}
    for method, path, declared in routes:
        if path.startswith(INTERNAL):
            continue
        paths.setdefault(path, {})[method.lower()] = operation(method, path, declared, secured)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "kiq",
            "version": version or "0",
            "description": "Kafka topics and Spark-derived tables, by key, from any node.",
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "responses": RESPONSES,
            "securitySchemes": SECURITY_SCHEMES,
        },
    }


def render(routes: Iterable[RouteDoc], version: str = "", secured: bool = False) -> bytes:
    return orjson.dumps(document(routes, version, secured))


def _operation_id(method: str, path: str) -> str:
    words = re.sub(r"[^A-Za-z0-9]+", "_", path.replace("{", "by_").replace("}", "")).strip("_")
    trailing = "_slash" if path.endswith("/") and len(path) > 1 else ""  # /v1/stocks/
    return f"{method.lower()}_{words or 'root'}{trailing}"
