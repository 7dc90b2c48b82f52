"""The OpenAPI 3.1 document a node serves at GET /openapi.json, made from its route table.

Every route the node answers is a ``RouteSpec`` (the core's in routes.py, the
application's from ``kiq.Routes``), and the document is made from those alone, so
a route can be neither left out nor described apart from what it does. Each
operation says its rule (``x-kiq-access``: open, token, read, write, admin) and:

- security: none for an open route; ``bearerAuth`` for the others, required, with
  the 401 and 403 answers, on a node that checks tokens (``[auth] mode = "jwt"``),
  optional (``{}`` first, no token is also accepted) on one that does not;
- the rate limit's 429 where the route is limited, and kiq's error answers it names;
- its schemas, made by msgspec from the types its documentation names: the bodies
  in api/bodies.py, or an application's own (``Routes.add(..., request=, response=)``).

An application's route may carry an operation written out (``doc=``), laid over what
its declaration says; one declared with neither has a generic JSON answer.
Node-to-node routes (``Rule.CLUSTER``) stay out.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Annotated, Any

import msgspec
import orjson

from kiq.api.bodies import SCHEMA_NAMES, Error
from kiq.api.spec import Answer, Header, Param, RouteSpec, Rule, path_params

Operation = dict[str, Any]

# The requirement a route that needs a token carries; ``{}``: no token needed yet.
SECURED: list[dict[str, list[str]]] = [{}, {"bearerAuth": []}]
REQUIRED: list[dict[str, list[str]]] = [{"bearerAuth": []}]
SECURITY_SCHEMES = {
    "bearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "Authorization: Bearer <JWT>",
    }
}
_REF = "#/components/schemas/{name}"
_PREFIX = _REF.removesuffix("{name}")
_NAME = Annotated[str, msgspec.Meta(min_length=1)]
_CHALLENGE = (Header("WWW-Authenticate", "Bearer challenge"),)

# kiq's error answers by status, as ``send_error`` gives them; a route's doc names its own.
ERRORS: dict[int, tuple[str, Answer]] = {
    400: ("BadRequest", Answer.json("bad_request: a malformed parameter or body", Error)),
    401: (
        "Unauthorized",
        Answer.json(
            "unauthorized (no token) or invalid_token (bad signature, expired, wrong audience...)",
            Error,
            _CHALLENGE,
        ),
    ),
    403: (
        "Forbidden",
        Answer.json(
            "insufficient_scope: the token lacks the scope this needs (named in the challenge)",
            Error,
            _CHALLENGE,
        ),
    ),
    404: ("NotFound", Answer.json("not_found (no such key) or unknown_table", Error)),
    409: (
        "Conflict",
        Answer.json(
            "conflict: the table's versions do not allow it now (the message says why)", Error
        ),
    ),
    413: (
        "TooLarge",
        Answer.json("too_large: the body or the number of keys is over the node's limit", Error),
    ),
    429: (
        "RateLimited",
        Answer.json(
            "rate_limited: this caller sent more than [limits] rate_limit allows",
            Error,
            (Header("Retry-After", "seconds", schema=Annotated[int, msgspec.Meta(ge=1)]),),
        ),
    ),
    503: ("Unavailable", Answer.json("unavailable: no replica could answer; retry shortly", Error)),
}


class Schemas:
    """The JSON Schemas of the types a document names: each asked for is a slot filled once
    all are known, the named ones (Structs) in ``components``."""

    def __init__(self) -> None:
        self._wanted: list[tuple[Any, dict[str, Any]]] = []

    def of(self, kind: Any) -> dict[str, Any]:
        slot: dict[str, Any] = {}
        self._wanted.append((kind, slot))
        return slot

    def components(self) -> dict[str, Any]:
        found, components = msgspec.json.schema_components(
            [kind for kind, _ in self._wanted], ref_template=_REF
        )
        for (_, slot), schema in zip(self._wanted, found, strict=True):
            slot.update(schema)
        renames = _schema_renames(components)
        if renames:
            components = {renames.get(name, name): schema for name, schema in components.items()}
            for slot in [*(slot for _, slot in self._wanted), *components.values()]:
                _rename_refs(slot, renames)
        return components


def _schema_renames(components: dict[str, Any]) -> dict[str, str]:
    """msgspec names a component after its type; a core body keeps its schema name
    (``bodies.SCHEMA_NAMES``) unless an application's type has taken that name."""
    renames: dict[str, str] = {}
    for kind, public in SCHEMA_NAMES.items():
        for made in (kind.__name__, f"{kind.__module__}.{kind.__qualname__}"):
            if made in components and public not in components:
                renames[made] = public
                components[made]["title"] = public
    return renames


def _rename_refs(schema: Any, renames: dict[str, str]) -> None:
    """Points every ``$ref`` under ``schema`` that names a renamed component at its new name."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_PREFIX):
            name = ref[len(_PREFIX) :]
            if name in renames:
                schema["$ref"] = _REF.format(name=renames[name])
        for value in schema.values():
            _rename_refs(value, renames)
    elif isinstance(schema, list):
        for value in schema:
            _rename_refs(value, renames)


def _param(param: Param, schemas: Schemas) -> dict[str, Any]:
    out: dict[str, Any] = {"name": param.name, "in": param.where}
    if param.where == "path" or param.required:
        out["required"] = True
    if param.description:
        out["description"] = param.description
    out["schema"] = schemas.of(param.schema)
    return out


def _answer(answer: Answer, schemas: Schemas) -> dict[str, Any]:
    out: dict[str, Any] = {"description": answer.description}
    if answer.headers:
        out["headers"] = {
            h.name: {
                **({"description": h.description} if h.description else {}),
                **({"required": True} if h.required else {}),
                "schema": schemas.of(h.schema),
            }
            for h in answer.headers
        }
    if answer.content:
        out["content"] = {media: {"schema": schemas.of(t)} for media, t in answer.content}
    return out


def _error(status: int) -> dict[str, str]:
    return {"$ref": f"#/components/responses/{ERRORS[status][0]}"}


def operation(spec: RouteSpec[Any], secured: bool, schemas: Schemas) -> Operation:
    """``spec``'s operation: what its doc says, its written operation laid over, its rule's
    security and answers added."""
    doc = spec.doc
    op: Operation = {"operationId": _operation_id(spec.method, spec.path)}
    if doc.summary:
        op["summary"] = doc.summary
    if doc.tags:
        op["tags"] = list(doc.tags)
    if doc.params:
        op["parameters"] = [_param(p, schemas) for p in doc.params]
    if doc.body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {doc.media: {"schema": schemas.of(doc.body)}},
        }
    op["responses"] = {status: _answer(a, schemas) for status, a in doc.answers.items()}
    op["responses"].update((str(s), _error(s)) for s in doc.errors)
    for key, value in copy.deepcopy(dict(doc.operation or {})).items():
        op[key] = {**op["responses"], **value} if key == "responses" else value
    named = {p.get("name") for p in op.get("parameters", ()) if p.get("in") == "path"}
    unnamed = [Param(n, _NAME, where="path") for n in path_params(spec.path) if n not in named]
    if unnamed:
        op["parameters"] = [*op.get("parameters", ()), *(_param(p, schemas) for p in unnamed)]
    op["x-kiq-access"] = spec.access.value
    responses = op["responses"]
    if spec.access is Rule.OPEN:
        op["security"] = []
    elif secured:
        op["security"] = REQUIRED
        for status in (401, 403):
            responses.setdefault(str(status), _error(status))
    else:
        op["security"] = SECURED
    if spec.limited:
        responses.setdefault("429", _error(429))
    return op


def document(
    specs: Iterable[RouteSpec[Any]], version: str = "", secured: bool = False
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``specs`` (every route the node answers); ``secured``:
    the node checks bearer tokens."""
    schemas = Schemas()
    responses = {name: _answer(answer, schemas) for name, answer in ERRORS.values()}
    paths: dict[str, dict[str, Operation]] = {}
    for spec in specs:
        if spec.access is not Rule.CLUSTER:
            op = operation(spec, secured, schemas)
            paths.setdefault(documented_path(spec.path), {})[spec.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "kiq",
            "version": version or "0",
            "description": "Kafka topics and Spark-derived tables, by key, from any node.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas.components(),
            "responses": responses,
            "securitySchemes": SECURITY_SCHEMES,
        },
    }


def render(specs: Iterable[RouteSpec[Any]], version: str = "", secured: bool = False) -> bytes:
    return orjson.dumps(document(specs, version, secured))


def documented_path(path: str) -> str:
    """``path`` as OpenAPI writes it: without a router's converter (``{asset:path}``)."""
    return _CONVERTER.sub("}", path)


_CONVERTER = re.compile(r":[a-z]+}")


def _operation_id(method: str, path: str) -> str:
    words = re.sub(r"[^A-Za-z0-9]+", "_", path.replace("{", "by_").replace("}", "")).strip("_")
    trailing = "_slash" if path.endswith("/") and len(path) > 1 else ""  # /v1/stocks/
    return f"{method.lower()}_{words or 'root'}{trailing}"
