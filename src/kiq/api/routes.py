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
from kiq.api.watch import MAX_WATCH_KEYS
from kiq.peers import wire
from kiq.peers.wire import (
    INTERNAL_BY_INDEX,
    INTERNAL_BY_INDEX_MANY,
    INTERNAL_CHANGES,
    INTERNAL_HELLO,
    INTERNAL_LOOKUPS,
    INTERNAL_METADATA,
    INTERNAL_MULTIGET,
    INTERNAL_SCAN,
    INTERNAL_TOP,
    INTERNAL_TOP_MANY,
    MSGPACK,
)

CoreEndpoint = Callable[[Handlers, Request], Awaitable[Response]]

# -- what the operations share ------------------------------------------------------------

_NAME = Annotated[str, Meta(min_length=1)]
_COUNT = Annotated[int, Meta(ge=0)]
TABLE = Param("table", _NAME, "a table this cluster serves (GET /v1/tables)", "path")
VERSION = Param(
    "version", str, "read this version of the table (kiq pipeline run --version) [the current]"
)
_LOOKUP_HEADERS = (
    Header("X-Kiq-Version", "the version of the table that answered", True),
    Header("X-Kiq-Partition", "the key's partition", True),
    Header("X-Kiq-Served-By", "the node whose replica answered", True),
    Header("X-Kiq-Lag", "records the replica was behind its log end", True),
    Header("X-Kiq-Offset", "the value's offset in the table's topic", True),
    Header("X-Kiq-Stale", "true: from a standby"),
    Header(
        "X-Kiq-Position",
        "a position token: the key's partition and the offset its replica had applied "
        "(send it back as X-Kiq-After or ?after= to read nothing older)",
        True,
    ),
)
# A read across partitions: what bounds it (``api.consistency``) and what its answer says.
_CONSISTENT = (
    Param(
        "consistent",
        Literal["batch"],
        "batch: every partition as of one micro-batch (a table written with "
        "consistent=True); the answer names it",
    ),
    Param("after", str, "a position token (as the X-Kiq-After header): never older than it"),
    Param(
        "wait_ms",
        Annotated[int, Meta(ge=0, le=MAX_WAIT_MS)],
        "how long to wait for a replica at the position",
    ),
)
_READ_HEADERS = (
    Header("X-Kiq-Version", "the version of the table that answered", True),
    Header("X-Kiq-Position", "what was read: send it back as X-Kiq-After", True),
    Header("X-Kiq-Batch", "consistent=batch: the micro-batch the answer reflects"),
)
_INDEX_PARAMS = (
    Param(
        "order",
        Literal["asc", "desc"],
        "asc [default]: lowest value first; desc: highest first, cursors going down",
    ),
    Param(
        "limit",
        Annotated[int, Meta(ge=0, le=MAX_RANGE_LIMIT)],
        "items per page [100]; 0 only with count=true",
    ),
    Param("cursor", str, "next_cursor of the previous page"),
    Param("count", bool, "add count: every matching row over all partitions"),
    Param("max_lag", _COUNT, "only replicas at most this many records behind"),
    *_CONSISTENT,
)
_INDEX_OPERATION = {
    "description": "For a table its pipeline indexes by a top-level field of the JSON value "
    "(ctx.write_table(..., index=[FIELD])): every partition is asked once for its part, from "
    "its best replica, and the parts are merged; a cursor pages on stably across partitions. "
    "A number index reads values as numbers (anything else is a 400). A field the table keeps "
    "no index of is a 404."
}
_BYTES = ((MSGPACK, bytes),)
_PAGE = {"200": Answer("the file", (("text/html", str),))}  # the dashboard's


def _internal(summary: str, body: Any, answer: Any) -> Doc:
    """A node-to-node route: msgpack both ways (peers/wire.py); not in the document."""
    content = ((MSGPACK, answer),) if answer is not None else _BYTES
    return Doc(summary, body=body, media=MSGPACK, answers={"200": Answer("sealed", content)})


_EVENTS = {
    "200": Answer(
        "text/event-stream: events value, absent, delete, expire (data: JSON with table, key, "
        "partition, offset, value, served_by, stale, lag, snapshot), dropped; id: to resume",
        (("text/event-stream", str),),
    )
}
_WATCH_PARAMS = (
    VERSION,
    Param("last_event_id", str, "resume after this id (as the Last-Event-ID header)"),
)
_WATCH_OPERATION = {
    "description": "The snapshot first (each key's value, or absent), then one event per "
    "change, as the replica applies it; any node serves any watch (from its own replica, or "
    "relayed from the best one). Reconnect with Last-Event-ID to resume with no gap and no "
    "repeat. A slow subscriber gets each key's latest value; one with more keys waiting "
    "than the node allows, or that takes nothing for 30 s, is dropped. A comment every 15 s "
    "keeps the connection alive."
}


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
            VERSION,
            Param("key", _NAME, "UTF-8, at most 4 KiB", "path"),
            Param("max_lag", _COUNT, "only a replica at most this many records behind"),
            Param("min_offset", _COUNT, "read-your-writes: once this offset is applied"),
            Param(
                "wait_ms",
                Annotated[int, Meta(ge=0, le=MAX_WAIT_MS)],
                "how long to wait for min_offset",
            ),
            Param("redirect", bool, "307 to the owner instead of forwarding"),
            Param(
                "after",
                str,
                "a position token (an earlier answer's X-Kiq-Position; or the X-Kiq-After "
                "header): only a replica at or past it answers, waiting up to wait_ms",
            ),
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
            (TABLE, VERSION, *_CONSISTENT),
            body=bodies.KeysBody,
            answers={
                "200": Answer.json(
                    "found values by key, the missing keys", bodies.MultigetBody, _READ_HEADERS
                )
            },
            errors=(400, 404, 413, 503),
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
                VERSION,
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
                *_CONSISTENT,
            ),
            answers={"200": Answer.json("a page of items", bodies.PageBody, _READ_HEADERS)},
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
                VERSION,
                Param(
                    "n",
                    Annotated[int, Meta(ge=1, le=MAX_TOP)],
                    "how many keys [10]: the exact top N at that moment",
                ),
                Param("prefix", str, "only keys starting with it"),
                Param(
                    "by",
                    str,
                    "a number index of the table to rank by instead of its rank_by "
                    "(not with prefix or window)",
                ),
                Param(
                    "window",
                    str,
                    "a windowed table's window start (ISO 8601, a date or epoch ms; naive "
                    "is UTC): only windows starting then, e.g. the top pages of one hour",
                ),
                *_CONSISTENT,
            ),
            answers={
                "200": Answer.json(
                    "the keys by the table's rank_by field, highest first, ties by key",
                    bodies.TopBody,
                    _READ_HEADERS,
                )
            },
            errors=(400, 404, 503),
            operation={
                "description": "For a table its pipeline ranks by a numeric value field "
                "(ctx.write_table(..., rank_by=FIELD)): each partition's replicas keep its keys "
                "in that order, every partition is asked once for its own first N, from its "
                "best replica, and the heads are merged. A table that is not ranked, or "
                "window= for a table that is not windowed, is a 400. by=FIELD ranks by a "
                "number index of the table (ctx.write_table(..., index=[FIELD])) instead: a "
                "text index is a 400, a field not indexed a 404."
            },
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/tables/{table}/by/{field}",
        Handlers.by_range,
        Rule.READ,
        limited=True,
        doc=Doc(
            "Rows whose indexed field is within from..to, in the field's order",
            ("tables",),
            (
                TABLE,
                VERSION,
                Param("field", _NAME, "an indexed field of the table", "path"),
                Param("from", str, "the lowest value (inclusive) [none]"),
                Param("to", str, "the highest value (inclusive) [none]"),
                *_INDEX_PARAMS,
            ),
            answers={
                "200": Answer.json(
                    "a page of items, ties by key", bodies.IndexPageBody, _READ_HEADERS
                )
            },
            errors=(400, 404, 503),
            operation=_INDEX_OPERATION,
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/tables/{table}/by/{field}/{value:path}",
        Handlers.by_value,
        Rule.READ,
        limited=True,
        doc=Doc(
            "Rows whose indexed field equals a value, in key order",
            ("tables",),
            (
                TABLE,
                VERSION,
                Param("field", _NAME, "an indexed field of the table", "path"),
                Param("value", str, "the value (a number index: a number)", "path"),
                *_INDEX_PARAMS,
            ),
            answers={"200": Answer.json("a page of items", bodies.IndexPageBody, _READ_HEADERS)},
            errors=(400, 404, 503),
            operation=_INDEX_OPERATION,
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
                VERSION,
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
                *_CONSISTENT,
            ),
            answers={"200": Answer.json("a page of windows", bodies.WindowsBody, _READ_HEADERS)},
            errors=(400, 404, 503),
        ),
    ),
    # -- watches (api/watch.py): Server-Sent Events
    RouteSpec(
        "GET",
        "/v1/tables/{table}/keys/{key}/watch",
        Handlers.watch_key,
        Rule.READ,
        limited=True,
        doc=Doc(
            "One key's value, then each change, as Server-Sent Events",
            ("watch",),
            (TABLE, Param("key", _NAME, "the key to watch (no /)", "path"), *_WATCH_PARAMS),
            answers=_EVENTS,
            errors=(400, 404, 503),
            operation=_WATCH_OPERATION,
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/tables/{table}/watch",
        Handlers.watch,
        Rule.READ,
        limited=True,
        doc=Doc(
            "Several keys' (or a prefix's) values, then each change, as Server-Sent Events",
            ("watch",),
            (
                TABLE,
                Param("keys", str, f"comma-separated, at most {MAX_WATCH_KEYS}"),
                Param("prefix", str, "every key starting with it"),
                *_WATCH_PARAMS,
            ),
            answers=_EVENTS,
            errors=(400, 404, 503),
            operation=_WATCH_OPERATION,
        ),
    ),
    RouteSpec(
        "POST",
        "/v1/tables/{table}/watch",
        Handlers.watch,
        Rule.READ,
        limited=True,
        doc=Doc(
            "Keys given in the body, watched as GET /v1/tables/{table}/watch",
            ("watch",),
            (TABLE, *_WATCH_PARAMS),
            body=bodies.WatchKeys,
            answers=_EVENTS,
            errors=(400, 404, 413, 503),
            operation=_WATCH_OPERATION,
        ),
    ),
    # -- versions (ops/versions.py)
    RouteSpec(
        "GET",
        "/v1/tables/{table}/versions",
        Handlers.versions,
        Rule.READ,
        limited=True,
        doc=Doc(
            "The table's versions across the cluster: lag, size, pipeline, which is current",
            ("versions",),
            (TABLE,),
            answers={"200": Answer.json("every version, and which the name serves", dict)},
            errors=(404,),
        ),
    ),
    RouteSpec(
        "POST",
        "/v1/tables/{table}/switch",
        Handlers.switch,
        Rule.ADMIN,
        limited=True,
        doc=Doc(
            "Move the table's name to another version on every node",
            ("versions",),
            (TABLE,),
            body=bodies.Switch,
            answers={"200": Answer.json("the version each node serves now", dict)},
            errors=(400, 404, 409),
        ),
    ),
    RouteSpec(
        "POST",
        "/v1/tables/{table}/retire",
        Handlers.retire,
        Rule.ADMIN,
        limited=True,
        doc=Doc(
            "Delete a version no alias points to: its stores on every node, its topic",
            ("versions",),
            (TABLE,),
            body=bodies.Retire,
            answers={"200": Answer.json("what was deleted", dict)},
            errors=(400, 404, 409),
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
            answers={"200": Answer.json("tables, topics, partitions, formats", bodies.TablesBody)},
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/metadata",
        Handlers.metadata,
        Rule.CALLER,
        limited=True,
        doc=Doc(
            "Members, and every partition's replicas, offsets and lag",
            ("cluster",),
            (Param("cluster", bool, "ask every replica's node (a kiq:admin token)"),),
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
    # -- the dashboard (ops/dashboard.py): the page is open, what it reads asks the admin scope
    RouteSpec(
        "GET",
        "/ui",
        Handlers.ui,
        Rule.OPEN,
        limited=True,
        doc=Doc(
            "The dashboard: cluster map, pipelines, rates (a page)", ("dashboard",), answers=_PAGE
        ),
    ),
    RouteSpec(
        "GET",
        "/ui/{asset:path}",
        Handlers.ui,
        Rule.OPEN,
        limited=True,
        doc=Doc(
            "The dashboard's files (index.html, dashboard.js, dashboard.css)",
            ("dashboard",),
            (Param("asset", str, "a file name; empty: the page", "path"),),
            answers=_PAGE,
            errors=(404,),
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/status",
        Handlers.status,
        Rule.ADMIN,
        limited=True,
        doc=Doc(
            "This node's request counts and latency buckets by route, and its tables' "
            "replicas, lag, records applied and dead letters (counters: rates are differences)",
            ("dashboard",),
            answers={"200": Answer.json("this node's figures", dict)},
        ),
    ),
    RouteSpec(
        "GET",
        "/v1/pipelines",
        Handlers.pipelines,
        Rule.ADMIN,
        limited=True,
        doc=Doc(
            "Each streaming query's latest progress, as its Spark driver published it",
            ("dashboard",),
            answers={"200": Answer.json("rows/s, batch time, offsets behind, by query", dict)},
        ),
    ),
    # -- end of the dashboard's routes
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
        "POST",
        INTERNAL_BY_INDEX,
        Handlers.internal_by_index,
        Rule.CLUSTER,
        limited=False,
        doc=_internal("A partition's index entries", wire.ByIndex, wire.IndexResult),
    ),
    RouteSpec(
        "POST",
        INTERNAL_BY_INDEX_MANY,
        Handlers.internal_by_index_many,
        Rule.CLUSTER,
        limited=False,
        doc=_internal("Several partitions' index entries", wire.ByIndexMany, wire.IndexResults),
    ),
    RouteSpec(
        "POST",
        INTERNAL_TOP_MANY,
        Handlers.internal_top_many,
        Rule.CLUSTER,
        limited=False,
        doc=_internal("Several partitions' heads of one top", wire.TopMany, wire.TopResults),
    ),
    RouteSpec(
        "POST",
        INTERNAL_CHANGES,
        Handlers.internal_changes,
        Rule.CLUSTER,
        limited=False,
        doc=_internal("A watch relayed: what changed", wire.Changes, wire.ChangesResult),
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
