"""The trust boundary of what kiq reads from Kafka (``kiq.tables.checks``): every catalog record
kind and every progress record is held to its schema, and one that breaks it is refused (logged
once), never served, never a path, never a reason to stop."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import pytest

from kiq.catalog import CATALOG_TOPIC
from kiq.errors import ConfigError
from kiq.progress import QueryProgress, SourceProgress, decode_progress
from kiq.tables import checks, parse_table
from kiq.tables.declared import (
    Declared,
    IndexedField,
    Started,
    decode_catalog,
    decode_started,
    parse_served,
    resolve_tables,
)
from kiq.tables.spec import TableSpec
from kiq.tables.versions import Alias, decode_aliases

GOOD = Declared(
    table="totals",
    topic="totals.v2",
    key=("customer", "at"),
    sep="|",
    partitions=6,
    app="shop",
    pipeline="orders",
    query="totals",
    version="v2",
    checkpoint="/ck/orders@v2",
    ttl_ms=60_000,
    window="w",
    retention_ms=3_600_000,
    rank_by="spent",
    index=(IndexedField(field="spent", type="number"), IndexedField(field="shop", type="text")),
    dead_letters=("orders-dlq.v2",),
)
ALIAS = Alias(table="totals", version="v2", app="shop", switched_at_ms=7, previous="v1")
STARTED = Started(pipeline="orders@v2", tables=("totals",), started_at_ms=5, app="shop")
PROGRESS = QueryProgress(
    app="shop",
    pipeline="orders@v2",
    query="totals",
    batch=3,
    input_rows=10,
    input_rows_per_s=1.5,
    batch_ms=20,
    behind=0,
    sources=(SourceProgress("KafkaV2[Subscribe[orders]]", 4),),
    reported_ms=1,
    published_ms=2,
    error="line one\nline two",
)

PATHS = [
    "/abs/outside",
    "..",
    ".",
    "../x",
    "a/b",
    "a\\b",
    "x/../..",
    "t\x00",
    "a..b",
    "",
    "x" * 101,
]


def encoded(record: Any, **changes: Any) -> bytes:
    return msgspec.json.encode({**msgspec.to_builtins(record), **changes})


def refusal(record: Any, key: str | None = None, **changes: Any) -> str | None:
    """Why the record (with ``changes``) is refused under ``key`` (its own by default)."""
    kind = type(record)
    own = key if key is not None else getattr(record, "catalog_key", None) or record.key
    try:
        decoded = msgspec.json.decode(encoded(record, **changes), type=kind)
        decoded.check(own if not changes or key is not None else _own_key(decoded))
    except (checks.Refused, msgspec.DecodeError) as exc:
        return str(exc)
    return None


def _own_key(record: Any) -> str:
    return str(getattr(record, "catalog_key", None) or record.key)


@pytest.mark.parametrize("record", [GOOD, ALIAS, STARTED, PROGRESS], ids=type)
def test_a_valid_record_of_each_kind_passes(record: Any):
    assert refusal(record) is None


def test_a_plain_declaration_as_a_pipeline_writes_it_passes():
    plain = Declared(table="word-counts", topic="word-counts", key=("word",))
    assert refusal(plain) is None


@pytest.mark.parametrize("name", PATHS)
def test_a_table_name_is_never_a_path(name: str):
    assert not checks.table_name_ok(name)
    assert refusal(GOOD, table=name) is not None
    assert refusal(ALIAS, table=name) is not None
    assert refusal(STARTED, tables=[name]) is not None
    assert not checks.internal_name_ok(name) and not checks.internal_name_ok(f"{name}@v2")


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("table", "t@v2"),  # a version mark in a table's own name
        ("version", "v/2"),
        ("version", ""),
        ("app", "a/b"),
        ("app", ""),
        ("topic", "/abs"),
        ("topic", "t" * 250),
        ("topic", "kiq-catalog"),  # kiq's own topics are no table's
        ("topic", "__consumer_offsets"),
        ("topic", ".."),
        ("key", []),
        ("key", [""]),
        ("key", ["k"] * 33),
        ("key", ["a\nb"]),
        ("sep", ""),
        ("sep", "||"),
        ("sep", "\x00"),
        ("sep", " "),
        ("partitions", -1),
        ("partitions", 10**6),
        ("partitions", 10**30),
        ("partitions", "6"),
        ("partitions", True),
        ("ttl_ms", 0),
        ("ttl_ms", -5),
        ("ttl_ms", 10**15),
        ("retention_ms", 1.5),
        ("window", ""),
        ("rank_by", "x" * 201),
        ("index", "hotel"),
        ("index", {"field": "hotel", "type": "text"}),
        ("index", ["hotel"]),
        ("index", [{"field": "hotel"}]),
        ("index", [{"field": "hotel", "type": "date"}]),
        ("index", [{"field": 7, "type": "number"}]),
        ("index", [{"field": "", "type": "text"}]),
        ("index", [{"field": "h" * 101, "type": "text"}]),
        ("index", [{"field": "ho\ntel", "type": "text"}]),
        ("index", [{"field": "x\x00", "type": "text"}]),
        ("index", [{"field": "hotel", "type": "text"}, {"field": "hotel", "type": "number"}]),
        ("index", [{"field": f"f{i}", "type": "number"} for i in range(9)]),
        ("index", [{"field": "w", "type": "text"}]),  # GOOD's window column
        ("pipeline", "../../etc"),
        ("pipeline", "p@v2"),
        ("query", "q" * 1001),
        ("checkpoint", "/ck\x00"),
        ("checkpoint", "c" * 4097),
        ("dead_letters", ["/abs"]),
        ("dead_letters", ["d"] * 65),
        ("format", "avro"),
        ("partitioning", "random"),
    ],
)
def test_each_bad_field_of_a_declaration_is_refused(field: str, bad: object):
    assert refusal(GOOD, **{field: bad}) is not None


def test_retention_without_a_window_is_refused_as_a_node_could_not_serve_it():
    assert refusal(GOOD, window=None) is not None


@pytest.mark.parametrize(
    ("record", "field", "bad"),
    [
        (ALIAS, "version", "../v2"),
        (ALIAS, "previous", "v 1"),
        (ALIAS, "switched_at_ms", -1),
        (ALIAS, "switched_at_ms", 10**20),
        (ALIAS, "app", "x/y"),
        (STARTED, "pipeline", "/abs"),
        (STARTED, "pipeline", "p@../x"),
        (STARTED, "tables", ["t"] * 257),
        (STARTED, "started_at_ms", -3),
        (PROGRESS, "pipeline", "../p"),
        (PROGRESS, "batch", -2),
        (PROGRESS, "input_rows", -1),
        (PROGRESS, "input_rows_per_s", -1.0),
        (PROGRESS, "input_rows_per_s", 1e400),  # JSON's "infinity"
        (PROGRESS, "behind", 10**19),
        (PROGRESS, "sources", [{"source": "s"}] * 65),
        (PROGRESS, "published_ms", 10**15),
        (PROGRESS, "query", "q\x1b[2J"),
        (PROGRESS, "error", "e" * 100_001),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, msgspec.Struct) else None,
)
def test_each_bad_field_of_the_other_kinds_is_refused(record: Any, field: str, bad: object):
    assert refusal(record, **{field: bad}) is not None


@pytest.mark.parametrize("record", [GOOD, ALIAS, STARTED, PROGRESS], ids=type)
def test_a_record_under_another_records_key_is_refused(record: Any):
    own = _own_key(record)
    assert refusal(record, key=own + "x") is not None
    assert refusal(record, key="table:shop//abs/outside") is not None


def test_the_readers_skip_refused_records_log_each_once_and_keep_the_others(
    caplog: pytest.LogCaptureFixture,
):
    checks._said.clear()
    hostile = {"table": "/abs/outside", "topic": "t", "key": ["k"], "app": "shop"}
    records = {
        GOOD.catalog_key: GOOD.encode(),
        "table:shop//abs/outside": msgspec.json.encode(hostile),
        "table:shop/..": msgspec.json.encode({**hostile, "table": ".."}),
        "table:shop/big": b"[" * 100_000,  # deep nesting
        "table:shop/huge": b'{"table": "' + b"x" * (checks.MAX_RECORD_BYTES + 1) + b'"}',
        "table:shop/forged": GOOD.encode(),  # a valid record under another key
        ALIAS.catalog_key: ALIAS.encode(),
        "alias:shop/other": ALIAS.encode(),
        STARTED.catalog_key: STARTED.encode(),
        "pipeline:shop/x": encoded(STARTED, started_at_ms=-1),
    }
    with caplog.at_level(logging.WARNING, logger="kiq.tables.checks"):
        for _ in range(3):  # a catalog read again and again says each refusal once
            assert decode_catalog(records, "shop") == {"totals@v2": GOOD}
            assert decode_aliases(records, "shop") == {"totals": ALIAS}
            assert decode_started(records, "shop") == {"orders@v2": STARTED}
    refused = [r.getMessage() for r in caplog.records if "catalog record refused" in r.message]
    assert len(refused) == 7, refused
    assert all(f"topic={CATALOG_TOPIC}" in line and "reason=" in line for line in refused)
    assert any("key='table:shop//abs/outside'" in line for line in refused)


def test_progress_records_are_held_to_their_schema_too():
    forged = encoded(PROGRESS, error="x", published_ms=-1)
    records = {
        PROGRESS.key: PROGRESS.encode(),
        "shop/other/q": PROGRESS.encode(),  # under another query's key
        "shop/orders@v2/q": forged,
    }
    assert decode_progress(records, "shop") == [PROGRESS]


def test_a_table_spec_takes_no_name_that_is_a_path():
    for name in ("..", ".", "a..b", "..@v2"):
        with pytest.raises(ConfigError, match="is invalid"):
            TableSpec(name=name, topic="t")
    with pytest.raises(ConfigError, match="is invalid"):
        parse_table("..=t")
    assert TableSpec(name="a.b@v2", topic="t").name == "a.b@v2"


# -- what a node makes of a catalog: a declaration it cannot serve is left out -----------------


def test_a_declaration_whose_topic_another_table_takes_is_left_out():
    mine = Declared(table="totals", topic="totals", key=("c",), app="shop")
    squatter = Declared(table="aaa", topic="totals", key=("c",), app="shop")
    own_topic = Declared(table="bbb", topic="stores", key=("c",), app="shop")
    catalog = {d.name: d for d in (mine, squatter, own_topic)}
    # Every declared table: the table [serve] tables names claims its topic first.
    tables = resolve_tables([parse_served("totals")], catalog, app="shop", every_declared=True)
    assert [t.name for t in tables] == ["bbb", "totals"]
    # The operator's own NAME=TOPIC entry claims its topic before any declaration.
    tables = resolve_tables(
        [parse_served("stores=stores")], catalog, app="shop", every_declared=True
    )
    assert [(t.name, t.topic) for t in tables] == [("aaa", "totals"), ("stores", "stores")]


def test_a_version_that_disagrees_with_the_entry_is_left_out_when_another_agrees():
    v1 = Declared(table="totals", topic="totals", key=("c",), app="shop")
    forged = Declared(table="totals", topic="elsewhere", key=("c",), app="shop", version="v9")
    tables = resolve_tables(
        [parse_served("totals=totals")], {"totals": v1, "totals@v9": forged}, app="shop"
    )
    assert [t.name for t in tables] == ["totals"]
    with pytest.raises(ConfigError, match="'totals' here, 'elsewhere' in the pipeline"):
        resolve_tables([parse_served("totals=totals")], {"totals@v9": forged}, app="shop")
