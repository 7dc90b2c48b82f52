"""The client computes every key's partition exactly as a node does: plain, composite and
windowed keys, from what GET /v1/tables says of each table."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kiq.client.keys import TableInfo
from kiq.node import NodeView
from kiq.ops import admin
from kiq.partitioning import partition_for
from tests.unit.stand_ins import Cluster, make_node

TABLES = {
    "plain=plain-topic": 12,
    "comp=comp-topic,sep=|": 7,
    "win=win-topic,sep=#,retention=1h": 5,
    "one=one-topic": 1,
}
KEYS = [
    "AAPL",
    "MSFT|2026-11-22T10:31",
    "MSFT|2026-11-22T10:32|x",
    "MSFT#2026-11-25T10:00:00.000Z#2026-11-25T10:01:00.000Z",
    "ünïcödé|ключ",
    "a/b?c%d",
    "|leading",
    "x" * 4096,
    *(f"K{i}" for i in range(2000)),
]


@pytest.fixture(scope="module")
def node_and_tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[NodeView, dict]:
    local = make_node(tmp_path_factory.mktemp("node"), Cluster(), TABLES)
    view = NodeView(local.node)
    served = orjson.loads(admin.tables(view))  # what the node answers on GET /v1/tables
    return view, {t["name"]: TableInfo.of(t) for t in served["tables"]}


@pytest.mark.parametrize("table", ["plain", "comp", "win", "one"])
def test_the_client_and_the_node_agree_on_every_partition(node_and_tables, table):
    view, infos = node_and_tables
    info, runtime = infos[table], view.tables[table]
    assert info.partitions == runtime.partitions
    assert [info.partition_of(k) for k in KEYS] == [view.partition_of(runtime, k) for k in KEYS]
    assert {info.partition_of(k) for k in KEYS} == set(range(runtime.partitions))


def test_composite_and_windowed_keys_go_by_their_first_part(node_and_tables):
    _, infos = node_and_tables
    comp, win = infos["comp"], infos["win"]
    assert comp.sep == "|" and win.sep == "#"
    assert comp.partition_of("MSFT|2026-11-22T10:31") == partition_for("MSFT", 7)
    assert comp.partition_of("MSFT|a") == comp.partition_of("MSFT|b") == comp.partition_of("MSFT")
    window = "E7#2026-11-25T10:00:00.000Z#2026-11-25T10:01:00.000Z"
    assert win.partition_of(window) == partition_for("E7", 5)
    # the plain table partitions the whole key, separators and all
    assert infos["plain"].partition_of("MSFT|a") == partition_for("MSFT|a", 12)


def test_a_prefix_names_one_partition_only_when_it_holds_the_separator():
    comp = TableInfo("comp", 7, sep="|")
    assert comp.prefix_partition("MSFT|2026") == partition_for("MSFT", 7)
    assert comp.prefix_partition("MSFT") is None
    assert comp.prefix_partition(None) is None
    assert TableInfo("plain", 7).prefix_partition("MSFT|") is None


def test_the_cache_answers_as_murmur2_does(tmp_path: Path):
    info = TableInfo("t", 3)
    first = [info.partition_of(f"k{i}") for i in range(70_000)]  # past the cache's size
    again = [info.partition_of(f"k{i}") for i in range(70_000)]
    assert first == again == [partition_for(f"k{i}", 3) for i in range(70_000)]
