"""One route, declared once: method, path, handler, who may call it, limited or not, its docs.

A ``RouteSpec`` is everything a node needs to know of a route; the rest is derived
from the table of them: the routers and the checks in front of each handler
(routes.py), the core API's reserved prefixes, and ``/openapi.json`` (openapi.py).
The core routes are declared in routes.py, an application's with ``kiq.Routes``
(endpoints.py), which makes the same declarations.

A route's documentation is typed too: its parameters, body and answers name the
types they carry (msgspec Structs, ``list[str]``, ``Any``...), and the document's
JSON Schemas are made from those types, so the two cannot say different things.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, Literal, TypeVar

JSON = "application/json"
H = TypeVar("H")
_PARAM = re.compile(r"{([^}:]+)(?::[^}]*)?}")
_VERSION = re.compile(r"v\d+")


class Rule(Enum):
    """Who may call a route on a node that checks tokens; a node that does not lets anyone
    (but ``CLUSTER``, which a cluster secret alone turns on). The value is what
    ``/openapi.json`` says of the route (``x-kiq-access``)."""

    OPEN = "open"  # anyone: probes, the document
    CALLER = "token"  # any valid token; what it reads or writes is checked as it does (Request)
    READ = "read"  # a token that reads the table named by the path's {table}
    WRITE = "write"  # a token with kiq:write
    ADMIN = "admin"  # a token with kiq:admin
    CLUSTER = "cluster"  # another node: a cluster credential made for this one


@dataclass(frozen=True)
class Param:
    """A path or query parameter; ``schema``, the type its value has (``Annotated`` with a
    ``msgspec.Meta`` for bounds)."""

    name: str
    schema: Any = str
    description: str = ""
    where: Literal["path", "query"] = "query"
    required: bool = False


@dataclass(frozen=True)
class Header:
    name: str
    description: str = ""
    required: bool = False
    schema: Any = str


@dataclass(frozen=True)
class Answer:
    """One status's answer: its body's type by media type (none: no body), its headers."""

    description: str
    content: tuple[tuple[str, Any], ...] = ()
    headers: tuple[Header, ...] = ()

    @classmethod
    def json(cls, description: str, body: Any = Any, headers: tuple[Header, ...] = ()) -> Answer:
        return cls(description, ((JSON, body),), headers)


@dataclass(frozen=True)
class Doc:
    """A route's documentation. ``errors``: the statuses of kiq's own error answers it may
    give (the rules' 401, 403 and 429 are added from the route's rule); ``operation``: an
    OpenAPI operation written out, laid over the rest (what an application's ``doc=`` is)."""

    summary: str = ""
    tags: tuple[str, ...] = ()
    params: tuple[Param, ...] = ()
    body: Any = None  # the request body's type; None: no body
    media: str = JSON  # the request body's media type
    answers: Mapping[str, Answer] = field(default_factory=dict)  # by status, or "default"
    errors: tuple[int, ...] = ()
    operation: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RouteSpec(Generic[H]):
    """A route: ``endpoint`` answers ``method`` on ``path`` (Starlette's pattern) for callers
    ``access`` admits, behind the rate limit when ``limited``. A None ``endpoint`` is
    answered before any router (the raw lookup path, app.py)."""

    method: str
    path: str
    endpoint: H | None
    access: Rule
    limited: bool
    doc: Doc

    def __post_init__(self) -> None:
        if self.access is Rule.READ and "table" not in path_params(self.path):
            raise ValueError(f"{self.method} {self.path}: READ needs a {{table}} in the path")


def path_params(path: str) -> list[str]:
    """The names of ``path``'s parameters, in order."""
    return _PARAM.findall(path)


def prefix(path: str) -> str:
    """The part of ``path`` an API owns: its first segment, or two after a version
    (``/v1/tables/{table}/range`` → ``/v1/tables``; ``/metrics`` → ``/metrics``)."""
    parts = path.split("/")[1:]
    keep = 2 if len(parts) > 1 and _VERSION.fullmatch(parts[0]) else 1
    return "/" + "/".join(parts[:keep])


def reserved(specs: Iterable[RouteSpec[Any]]) -> tuple[str, ...]:
    """The prefixes of ``specs``' paths, in order of declaration."""
    return tuple(dict.fromkeys(prefix(spec.path) for spec in specs))
