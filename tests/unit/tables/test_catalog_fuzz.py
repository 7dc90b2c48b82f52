"""The catalog reader and follower under random and hostile records (hypothesis): whatever the
catalog holds, no exception escapes, nothing outside ``data_dir/tables/<valid name>`` is
touched, and the valid records among the others are still applied."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiq import node_catalog, stores
from kiq.kafka import PLAINTEXT
from kiq.node_catalog import NodeCatalog
from kiq.progress import decode_progress
from kiq.tables import TableRuntime, checks
from kiq.tables.declared import Declared, decode_catalog, decode_started, resolve_tables
from kiq.tables.versions import Alias, decode_aliases

APP = "shop"
# An absolute name replaces the whole path it is joined to: this directory, outside the
# data dir, must survive (made at import: the names are drawn before any fixture runs).
ABS = Path(tempfile.mkdtemp(prefix="kiq-fuzz-abs-"))
HOSTILE_NAMES = [
    str(ABS),
    str(ABS / "keep"),
    "..",
    ".",
    "../outside",
    "../../outside",
    "a/b",
    "a\\b",
    "x\x00y",
    "",
    "linked",  # a valid name whose directory is a link out of tables/
    "t@..",
    "x" * 300,
]
NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False),
    st.sampled_from([0, -1, 2**63, 10**400, True, "6", None, [], {}]),
)
NAMES = st.one_of(
    st.sampled_from(HOSTILE_NAMES),
    st.sampled_from(["totals", "t-1", "orders.by.time"]),
    st.text(max_size=20),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)

# A table's index as a hostile writer lists it: fields any name, types any value, any length.
INDEXES = st.lists(
    st.fixed_dictionaries(
        {"field": NAMES, "type": st.sampled_from(["text", "number", "date", 1, None])}
    ),
    max_size=10,
)


@st.composite
def declarations(draw: st.DrawFn) -> tuple[str, bytes | None]:
    """A ``table:`` record as a hostile writer makes one: its key usually the one its fields
    would make, its fields anything."""
    table = draw(NAMES)
    version = draw(st.sampled_from(["v1", "v2", "../x", "", draw(st.text(max_size=6))]))
    app = draw(st.sampled_from([APP, APP, "other", "../x", ""]))
    body: dict[str, Any] = {
        "table": table,
        "topic": draw(st.one_of(st.sampled_from(["t-in", "kiq-catalog", "/abs", ""]), NAMES)),
        "key": draw(st.sampled_from([["k"], [], [""], ["a", "b"], "k", [1]])),
        "app": app,
        "version": version,
    }
    for name in ("partitions", "ttl_ms", "retention_ms"):
        if draw(st.booleans()):
            body[name] = draw(NUMBERS)
    for name in ("sep", "window", "rank_by", "checkpoint", "pipeline"):
        if draw(st.booleans()):
            body[name] = draw(st.one_of(st.text(max_size=4), NUMBERS, st.sampled_from(["|", ".."])))
    if draw(st.booleans()):
        body["index"] = draw(st.one_of(JSON, INDEXES))
    if draw(st.booleans()):
        body[draw(st.text(max_size=6))] = draw(JSON)
    internal = table if version == "v1" else f"{table}@{version}"
    key = draw(
        st.sampled_from([f"table:{app}/{internal}", f"table:{APP}/totals", f"table:{APP}/{table}"])
    )
    value = draw(
        st.one_of(
            st.just(msgspec.json.encode(body)),
            st.none(),  # a tombstone
            st.binary(max_size=40),
            st.builds(lambda j: msgspec.json.encode(j), JSON),
        )
    )
    return key, value


@st.composite
def aliases(draw: st.DrawFn) -> tuple[str, bytes | None]:
    table = draw(NAMES)
    body = {
        "table": table,
        "version": draw(st.sampled_from(["v2", "..", "", "v/1"])),
        "app": APP,
        "switched_at_ms": draw(NUMBERS),
    }
    key = draw(st.sampled_from([f"alias:{APP}/{table}", f"alias:{APP}/totals", "alias:x"]))
    return key, draw(st.sampled_from([msgspec.json.encode(body), None, b"{", b"[]"]))


RECORDS = st.lists(
    st.one_of(
        declarations(),
        aliases(),
        st.tuples(st.text(max_size=30), st.one_of(st.none(), st.binary(max_size=30))),
    ),
    max_size=12,
)


@dataclass
class Settings:
    dead_letter_topic: str = "kiq-dead-letters"


@dataclass
class FakeNode:
    """What ``NodeCatalog`` asks of a node: its tables, and adding, dropping, aliasing them."""

    node_id: str = "n1"
    settings: Settings = field(default_factory=Settings)
    tables: dict[str, TableRuntime] = field(default_factory=dict)
    aliases: dict[str, Alias | None] = field(default_factory=dict)
    ever_served: set[str] = field(default_factory=set)

    def add_table(self, runtime: TableRuntime) -> None:
        self.tables[runtime.spec.name] = runtime
        self.ever_served.add(runtime.spec.name)

    def drop_table(self, name: str) -> threading.Event:
        self.tables.pop(name, None)
        done = threading.Event()
        done.set()
        return done

    def set_alias(self, table: str, alias: Alias | None) -> None:
        assert checks.table_name_ok(table)
        self.aliases[table] = alias


@pytest.fixture(scope="module")
def ground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("fuzz")
    shutil.rmtree(ABS, ignore_errors=True)


@pytest.fixture(scope="module")
def removed() -> Iterator[list[str]]:
    """Every name the follower asked ``remove_table_stores`` to delete."""
    calls: list[str] = []
    real = stores.remove_table_stores
    patch = pytest.MonkeyPatch()

    def spy(data_dir: Path, table: str) -> bool:
        calls.append(table)
        return real(data_dir, table)

    patch.setattr(node_catalog, "remove_table_stores", spy)
    patch.setattr(node_catalog, "_RETRY_S", 0.0)
    patch.setattr(
        node_catalog,
        "topic_partitions",
        lambda bootstrap, topic, **_: 3 if checks.TOPIC_NAME.fullmatch(topic) else None,
    )
    yield calls
    patch.undo()


def plant(ground: Path) -> tuple[Path, list[Path]]:
    """A data dir, and the directories outside its ``tables`` that must survive."""
    data_dir = ground / "a" / "b" / "node"
    tables = data_dir / "tables"
    sentinels = [
        ground / "outside" / "keep",  # where tables/linked points
        ground / "a" / "b" / "outside" / "keep",  # tables/../../outside
        data_dir / "outside" / "keep",  # tables/../outside
        data_dir / "keep",  # tables/..
        ABS / "keep",
    ]
    for path in sentinels:
        path.mkdir(parents=True, exist_ok=True)
    tables.mkdir(parents=True, exist_ok=True)
    link = tables / "linked"
    if not link.is_symlink():
        link.symlink_to(ground / "outside", target_is_directory=True)
    return data_dir, sentinels


GOOD = Declared(table="good", topic="good-topic", key=("k",), app=APP, version="v7")


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(RECORDS, RECORDS, st.data())
def test_the_follower_survives_any_catalog_and_touches_nothing_outside(
    ground: Path, removed: list[str], before: list[Any], after: list[Any], data: st.DataObject
):
    data_dir, sentinels = plant(ground)
    node = FakeNode()
    follower = NodeCatalog(
        node,  # type: ignore[arg-type]
        "broker:9092",
        APP,
        [],
        True,
        data_dir,
        security=PLAINTEXT,
        default_standby=0,
    )
    removed.clear()
    batch = [*before, (GOOD.catalog_key, GOOD.encode()), *after]
    cut = data.draw(st.integers(min_value=0, max_value=len(batch)))
    follower.apply(batch[:cut])
    follower.apply(batch[cut:])
    follower.apply([])
    # Every tombstone again: whatever was declared is retired, if it may be.
    follower.apply([(key, None) for key, _ in batch])
    for path in sentinels:
        assert path.is_dir(), f"{path} was deleted"
    assert (data_dir / "tables").is_dir() and (data_dir / "tables" / "linked").is_symlink()
    for name in removed:
        assert checks.internal_name_ok(name), name
        assert name in node.ever_served, f"{name} deleted but never served"
    assert "good@v7" in node.ever_served, "a valid record among the others was applied"
    for name in node.tables:
        assert checks.internal_name_ok(name)


@settings(max_examples=80, deadline=None)
@given(RECORDS)
def test_the_start_up_read_takes_any_catalog_and_keeps_only_valid_tables(records: list[Any]):
    read = {key: value for key, value in records if value is not None}
    read[GOOD.catalog_key] = GOOD.encode()
    catalog = decode_catalog(read, APP)
    decode_aliases(read, APP)
    decode_started(read)
    decode_progress(read)
    tables = resolve_tables([], catalog, app=APP, every_declared=True)
    assert "good@v7" in {t.name for t in tables}
    assert all(checks.internal_name_ok(t.name) for t in tables)
    topics = [t.topic for t in tables]
    assert len(topics) == len(set(topics)), "two tables never read one topic"
