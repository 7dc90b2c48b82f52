"""The JSON bodies of the public API, as types: what ``/openapi.json`` says they are.

The handlers write these bodies with orjson (admin.py, batches.py, errors.py); the
types here describe them for the document, field for field, and
``tests/integration/test_api_fuzz.py`` checks every live answer against them. A
schema's name in the document is its type's name (applications refer to
``#/components/schemas/Error``), or the name ``SCHEMA_NAMES`` gives it: a body whose
name the public framework's classes already take (``kiq.Page``, ``kiq.Tables``...)
is ``PageBody`` here and still ``Page`` in the document.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct, field


class Error(Struct):
    """kiq's error body; details (``key``, ``table``, ``scope``, ``retry_after_s``...) may
    follow."""

    error: Annotated[str, Meta(description="a code: bad_request, not_found, ...")]
    message: Annotated[str, Meta(description="what to do about it")]


class KeysBody(Struct):
    keys: list[str]


class Switch(Struct):
    version: Annotated[str, Meta(description="the version the table's name moves to")]
    force: Annotated[bool, Meta(description="switch even if it has not caught up")] = False


class Retire(Struct):
    version: Annotated[str, Meta(description="a version no alias points to")]


class WatchKeys(Struct):
    keys: list[str] = []
    prefix: str | None = None


class MultigetBody(Struct):
    found: Annotated[dict[str, Any], Meta(description="values by key")]
    missing: list[str]
    unavailable: Annotated[list[str], Meta(description="keys no replica could answer for")] = []
    batch: Annotated[
        int | None, Meta(description="?consistent=batch: the micro-batch it reflects (null: none)")
    ] = None


class Item(Struct):
    key: str
    value: Any


class PageBody(Struct):
    items: list[Item]
    next_cursor: str | None
    batch: Annotated[
        int | None, Meta(description="?consistent=batch: the micro-batch it reflects (null: none)")
    ] = None


class IndexPageBody(Struct):
    items: Annotated[
        list[Item], Meta(description="in the field's order (equality: key order), ties by key")
    ]
    next_cursor: Annotated[
        str | None, Meta(description="pass it back as cursor= for the next page (null: the end)")
    ]
    field: Annotated[str, Meta(description="the indexed field read")]
    count: Annotated[
        int | None,
        Meta(description="count=true: every matching row over all partitions (not the page's)"),
    ] = None
    batch: Annotated[
        int | None, Meta(description="?consistent=batch: the micro-batch it reflects (null: none)")
    ] = None


class TopBody(Struct):
    items: Annotated[list[Item], Meta(description="highest rank_by first, ties by key")]
    rank_by: Annotated[
        str, Meta(description="the numeric value field ranked by: the table's, or by=")
    ]
    batch: Annotated[
        int | None, Meta(description="?consistent=batch: the micro-batch it reflects (null: none)")
    ] = None


class Window(Struct):
    start: Annotated[str, Meta(description="ISO 8601 UTC, to the millisecond")]
    end: str
    value: Any


class WindowsBody(Struct):
    key: str
    windows: list[Window]
    next_cursor: str | None
    batch: Annotated[
        int | None, Meta(description="?consistent=batch: the micro-batch it reflects (null: none)")
    ] = None


class Table(Struct):
    name: str
    topic: str
    partitions: int
    format: str
    store: str
    standby_replicas: int
    global_: Annotated[bool, Meta(description="every node holds every partition")] = field(
        name="global"
    )
    sep: Annotated[
        str | None, Meta(description="composite keys: the part before it picks the partition")
    ] = None
    declared: Annotated[
        Declaration | None,
        Meta(description="how its pipeline declared it in the table catalog; null: a topic"),
    ] = None


class IndexDecl(Struct):
    field: Annotated[str, Meta(description="a top-level field of the JSON value")]
    type: Annotated[
        Literal["text", "number"],
        Meta(description="how its values are ordered: as text or as numbers"),
    ]


class Declaration(Struct):
    key: Annotated[list[str], Meta(description="the key's columns, joined by sep")]
    sep: str | None
    partitioning: Annotated[
        str, Meta(description="key: by the first key part; input: the input's partition")
    ]
    pipeline: str
    query: str
    app: str
    ttl_ms: Annotated[int | None, Meta(description="a key not written this long expires")] = None
    window: Annotated[
        str | None, Meta(description="a windowed table: the window column; keys end in it")
    ] = None
    retention_ms: Annotated[
        int | None, Meta(description="windows ended this long before the newest are dropped")
    ] = None
    rank_by: Annotated[str | None, Meta(description="the field GET .../top ranks by")] = None
    index: Annotated[
        list[IndexDecl],
        Meta(
            description="the value fields every replica indexes, which GET .../by/{field} "
            "answers by (ctx.write_table(..., index=[...])); empty: none"
        ),
    ] = field(default_factory=list)
    consistent: Annotated[
        bool, Meta(description="its pipeline marks each micro-batch in every partition")
    ] = False


class TablesBody(Struct):
    tables: list[Table]


class Metadata(Struct):
    """This node's view of the cluster."""

    node: dict[str, str]
    view_version: int
    nodes: list[dict[str, str]]
    unproven: Annotated[
        list[str], Meta(description="group members this node has not proven: never named")
    ]
    tables: Annotated[dict[str, Any], Meta(description="by table: its partitions' replicas")]


class Live(Struct):
    live: bool


class Ready(Struct):
    """Ready or not; ``reason`` only for an admin's token on a node that checks tokens."""

    ready: bool
    reason: str | None = None


# The schema names the document has always given these bodies (openapi.Schemas).
SCHEMA_NAMES: dict[type[Struct], str] = {
    KeysBody: "Keys",
    MultigetBody: "Multiget",
    PageBody: "Page",
    TopBody: "Top",
    IndexPageBody: "IndexPage",
    WindowsBody: "Windows",
    TablesBody: "Tables",
}
