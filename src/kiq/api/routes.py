"""The core API's routes, one declaration each: ``CORE``.

Each row says who may call the route (``Rule``, api/auth.py), whether the rate
limit counts it, and what ``/openapi.json`` says of it. Everything else is derived
from this table: ``RESERVED``, the prefixes the core API owns (an application's
patterns never answer under them, a 404 for a path it lacks included); ``OPEN``,
the routes anyone may call; ``MEMBERS``, where only other nodes call; the routers
with the checks and limits in front of each handler (routers.py); the document
(openapi.py). The raw lookup path (``LOOKUP``) is answered before any router, by
hand (app.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from msgspec import Meta
from starlette.requests import Request
from starlette.responses import Response

from kiq.api import bodies
from kiq.api.batches import MAX_RANGE_LIMIT, MAX_TOP
from kiq.api.handlers import Handlers
from kiq.api.lookups import MAX_WAIT_MS
from kiq.api.spec import Answer, Doc, Header, Param, RouteSpec, Rule, reserved
from kiq.routing import wire
from kiq.routing.wire import (
    INTERNAL_HELLO,
    INTERNAL_LOOKUPS,
    INTERNAL_METADATA,
    INTERNAL_MULTIGET,
    INTERNAL_SCAN,
    INTERNAL_TOP,
    MSGPACK,
)

CoreEndpoint = Callable[[Handlers, Request], Awaitable[Response]]

# -- what the operations share ------------------------------------------------------------

_NAME = Annotated[str, Meta(min_length=1)]
_COUNT = Annotated[int, Meta(ge=0)]
TABLE = Param("table", _NAME, "a table this cluster serves (GET /v1/tables)", "path")
_LOOKUP_HEADERS = (
    Header("X-Kiq-Partition", "the key's partition", True),
    Header("X-Kiq-Served-By", "the node whose replica answered", True),
    Header("X-Kiq-Lag", "records the replica was behind its log end", True),
    Header("X-Kiq-Offset", "the value's offset in the table's topic", True),
    Header("X-Kiq-Stale", "true: from a standby"),
)
_BYTES = ((MSGPACK, bytes),)


def _internal(summary: str, body: Any, answer: Any) -> Doc:
    """A node-to-node route: msgpack both ways (routing/wire.py); not in the document."""
    content = ((MSGPACK, answer),) if answer is not None else _BYTES
    return Doc(summary, body=body, media=MSGPACK, answers={"200": Answer("sealed", content)})


# -- the table ----------------------------------------------------------------------------

LOOKUP: RouteSpec[CoreEndpoint] = RouteSpec(
    "GET",
    "/v1/tables/{table}/keys/{key}",
    None,  # answered before the routers (app.py)
    Rule.READ,
    limited=True,
    doc=Doc(
        "One key's value, from any node",
        ("tables",),
        (
            TABLE,
            Param("key", _NAME, "UTF-8, at most 4 KiB", "path"),
            Param("max_lag", _COUNT, "only a replica at most this many records behind"),
            Param("min_offset", _COUNT, "read-your-writes: once this offset is applied"),
            Param(
                "wait_ms",
                Annotated[int, Meta(ge=0, le=MAX_WAIT_MS)],
                "how long to wait for min_offset",
            ),
            Param("redirect", bool, "307 to the owner instead of forwarding"),
        ),
        answers={
            "200": Answer(
                "the stored value (JSON; raw tables: bytes)",
                (("application/json", Any), ("application/octet-stream", str)),
                _LOOKUP_HEADERS,
            ),
            "307": Answer(
                "redirect=true: the owner's URL", headers=(Header("Location", "", True),)
            ),
        },
        errors=(400, 404, 503),
    ),
)

CORE: tuple[RouteSpec[CoreEndpoint], ...] = (
    LOOKUP,
    RouteSpec(
        "POST",
        "/v1/tables/{table}/multiget",
        Handlers.multiget,
        Rule.READ,
        limited=True,
        doc=Doc(
            "Many keys at once, one call per owning node",
            ("tables",),
            (TABLE,),
            body=bodies.Keys,
            answers={"200": Answer.json("found values by key, the missing keys", bodies.Multiget)},
            errors=(400, 404, 413),
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/tables/{table}/range",
        Handlers.range,
        Rule.READ,
        limited=True,
        doc=Doc(
            "Keys in byte order, a page at a time",
            ("tables",),
            (
                TABLE,
                Param("prefix", str, "only keys starting with it"),
                Param("from", str, "lowest key (inclusive)"),
                Param("to", str, "highest key (exclusive)"),
                Param(
                    "order",
                    Literal["asc", "desc"],
                    "asc [default]: lowest key first; desc: highest first, cursors going down",
                ),
                Param(
                    "limit",
                    Annotated[int, Meta(ge=1, le=MAX_RANGE_LIMIT)],
                    "items per page [100]",
                ),
                Param("cursor", str, "next_cursor of the previous page"),
            ),
            answers={"200": Answer.json("a page of items", bodies.Page)},
            errors=(400, 404, 503),
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/tables/{table}/top",
        Handlers.top,
        Rule.READ,
        limited=True,
        doc=Doc(
            "The N highest-ranked keys of a ranked table, across every partition",
            ("tables",),
            (
                TABLE,
                Param(
                    "n",
                    Annotated[int, Meta(ge=1, le=MAX_TOP)],
                    "how many keys [10]: the exact top N at that moment",
                ),
                Param("prefix", str, "only keys starting with it"),
                Param(
                    "window",
                    str,
                    "a windowed table's window start (ISO 8601, a date or epoch ms; naive "
                    "is UTC): only windows starting then, e.g. the top pages of one hour",
                ),
            ),
            answers={
                "200": Answer.json(
                    "the keys by the table's rank_by field, highest first, ties by key",
                    bodies.Top,
                )
            },
            errors=(400, 404, 503),
            operation={
                "description": "For a table its pipeline ranks by a numeric value field "
                "(ctx.write_table(..., rank_by=FIELD)): each partition's replicas keep its keys "
                "in that order, every partition is asked once for its own first N, from its "
                "best replica, and the heads are merged. A table that is not ranked, or "
                "window= for a table that is not windowed, is a 400."
            },
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/tables/{table}/keys/{key}/windows",
        Handlers.windows,
        Rule.READ,
        limited=True,
        doc=Doc(
            "One key's windows in time order (a windowed table)",
            ("tables",),
            (
                TABLE,
                Param("key", _NAME, "the key the windows belong to (no /)", "path"),
                Param("from", str, "windows starting at or after (ISO 8601, or epoch ms)"),
                Param("to", str, "windows starting before (ISO 8601, or epoch ms)"),
                Param(
                    "order",
                    Literal["asc", "desc"],
                    "asc [default]: oldest first; desc: newest first, cursors going back",
                ),
                Param(
                    "limit",
                    Annotated[int, Meta(ge=1, le=MAX_RANGE_LIMIT)],
                    "windows per page [100]",
                ),
                Param("cursor", str, "next_cursor of the previous page"),
            ),
            answers={"200": Answer.json("a page of windows", bodies.Windows)},
            errors=(400, 404, 503),
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/tables",
        Handlers.tables,
        Rule.CALLER,
        limited=True,
        doc=Doc(
            "The tables this cluster serves",
            ("cluster",),
            answers={"200": Answer.json("tables, topics, partitions, formats", bodies.Tables)},
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/metadata",
        Handlers.metadata,
        Rule.ADMIN,
        limited=True,
        doc=Doc(
            "Members, and every partition's replicas, offsets and lag",
            ("cluster",),
            (Param("cluster", bool, "ask every replica's node"),),
            answers={"200": Answer.json("this node's view of the cluster", bodies.Metadata)},
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/health/live",
        Handlers.live,
        Rule.OPEN,
        limited=False,
        doc=Doc(
            "Liveness",
            ("health",),
            answers={"200": Answer.json("the process answers", bodies.Live)},
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/health/ready",
        Handlers.ready,
        Rule.OPEN,
        limited=False,
        doc=Doc(
            "Readiness: in the group and every active replica caught up",
            ("health",),
            answers={
                "200": Answer.json("ready", bodies.Ready),
                "503": Answer.json("not ready (and why, to an admin)", bodies.Ready),
            },
        ),
    ),
    RouteSpec(
        "GET",
        "/metrics",
        Handlers.metrics,
        Rule.ADMIN,
        limited=True,
        doc=Doc(
            "Prometheus metrics",
            ("cluster",),
            answers={"200": Answer("text exposition", (("text/plain", str),))},
        ),
    ),
    RouteSpec(
        "GET",
        "/openapi.json",
        Handlers.openapi,
        Rule.OPEN,
        limited=True,
        doc=Doc("This document", ("cluster",), answers={"200": Answer.json("OpenAPI 3.1", dict)}),
    ),
    RouteSpec(
        "POST",
        INTERNAL_LOOKUPS,
        Handlers.internal_lookups,
        Rule.CLUSTER,
        limited=False,
        doc=_internal("Lookups forwarded", list[wire.Lookup], list[wire.LookupResult]),
    ),
    RouteSpec(
        "POST",
        INTERNAL_MULTIGET,
        Handlers.internal_multiget,
        Rule.CLUSTER,
        limited=False,
        doc=_internal("A multiget's keys", wire.Multiget, wire.MultigetResult),
    ),
    RouteSpec(
        "POST",
        INTERNAL_SCAN,
        Handlers.internal_scan,
        Rule.CLUSTER,
        limited=False,
        doc=_internal("A partition's scan", wire.Scan, wire.ScanResult),
    ),
    RouteSpec(
        "POST",
        INTERNAL_TOP,
        Handlers.internal_top,
        Rule.CLUSTER,
        limited=False,
        doc=_internal("A partition's head in rank order", wire.Top, wire.ScanResult),
    ),
    RouteSpec(
        "GET",
        INTERNAL_METADATA,
        Handlers.internal_metadata,
        Rule.CLUSTER,
        limited=False,
        doc=_internal("This node's replicas", None, wire.NodeStatus),
    ),
    RouteSpec(
        "POST",
        INTERNAL_HELLO,
        Handlers.internal_hello,
        Rule.CLUSTER,
        limited=False,
        doc=_internal("A challenge, answered sealed", bytes, None),
    ),
)

# The core API's paths and everything under them: an application's routes never answer there.
RESERVED = reserved(CORE)
_UNDER_RESERVED = tuple(r + "/" for r in RESERVED)
OPEN = frozenset((s.method, s.path) for s in CORE if s.access is Rule.OPEN)
# Where only members call: a path there no route takes is still theirs to be told of.
MEMBERS = tuple(p + "/" for p in reserved(s for s in CORE if s.access is Rule.CLUSTER))


def is_core(path: str) -> bool:
    """Whether ``path`` belongs to the core API (``RESERVED``, or under one of them)."""
    return path in RESERVED or path.startswith(_UNDER_RESERVED)
