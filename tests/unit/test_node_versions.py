"""A node's table versions, in process: added and dropped while it runs, its name moved by an
alias, and the catalog follower (``kiq.node_catalog``) that turns catalog records into those
changes. Kafka is the stand-ins' (``tests.unit.stand_ins``) and a fake topic lister."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from kiq import node_catalog
from kiq.errors import StoreClosedError
from kiq.kafka import PLAINTEXT
from kiq.node import Node, NodeView
from kiq.node_catalog import NodeCatalog
from kiq.replicas import ReplicaState
from kiq.tables import TableRuntime, checks, codec_for
from kiq.tables.declared import Declared, ServeEntry, parse_served
from kiq.tables.spec import TableSpec
from kiq.tables.versions import Alias
from tests.unit.stand_ins import Cluster, LocalNode, make_node, serving, start_node, wait_until

PARTITIONS = 4
TABLES = {"totals=totals,standby=0": PARTITIONS}
ACTIVE = ReplicaState.ACTIVE


def version(name: str, topic: str, partitions: int = PARTITIONS, **options: object) -> TableRuntime:
    spec = TableSpec(name=name, topic=topic, standby_replicas=0, **options)  # type: ignore[arg-type]
    return TableRuntime(spec, codec_for(spec), partitions)


def topics_of(node: Node) -> list[str]:
    return node._group.topics  # type: ignore[union-attr]


def v2_replicas(node: Node, name: str = "totals@v2") -> dict[int, object]:
    return {p: r for (t, p), r in list(node.replicas.items()) if t == name}


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Cluster, LocalNode]]:
    """One node serving ``totals`` (v1), owning each of its partitions."""
    cluster = Cluster()
    local = start_node(tmp_path, cluster, TABLES, view_refresh_ms=50)
    cluster.assign("n1", [("totals", p) for p in range(PARTITIONS)])
    wait_until(serving(local.node, ACTIVE), what="v1 active")
    yield cluster, local
    local.node.stop()


# -- Node: versions and the name ------------------------------------------------------------


def test_an_added_version_is_served_beside_v1_and_the_name_stays_on_v1(tmp_path: Path):
    local = make_node(tmp_path, Cluster(), TABLES)
    node, v1, v2 = local.node, local.node.tables["totals"], version("totals@v2", "totals.v2")
    node.add_table(v2)
    assert list(node.tables) == ["totals", "totals@v2"]
    assert node.versions_of("totals") == {"v1": v1, "v2": v2}
    assert node.versions_of("nope") == {}
    assert node.current == {"totals": v1}, "no alias: the name keeps meaning v1"
    assert topics_of(node) == ["totals", "totals.v2"], "the group takes the new topic's partitions"
    assert local.materializer._by_topic["totals.v2"] is v2, "the materializer reads it"
    node.add_table(version("totals@v2", "totals.v2"))  # declared again: nothing changes
    assert node.tables["totals@v2"] is v2


def test_an_alias_moves_the_name_and_nothing_else(tmp_path: Path):
    local = make_node(tmp_path, Cluster(), TABLES)
    node, v1, v2 = local.node, local.node.tables["totals"], version("totals@v2", "totals.v2")
    node.add_table(v2)
    view = NodeView(node)
    node.set_alias("totals", Alias(table="totals", version="v2"))
    assert node.current["totals"] is v2 and view.current["totals"] is v2
    assert view.resolve("totals") is v2
    assert view.resolve("totals", "v1") is v1, "?version= still reaches the other one"
    assert list(node.tables) == ["totals", "totals@v2"] and topics_of(node) == [
        "totals",
        "totals.v2",
    ]
    node.set_alias("totals", None)  # the alias's tombstone: back to the default
    assert view.resolve("totals") is v1
    assert node.aliases == {}


def test_an_alias_to_a_version_not_here_yet_takes_effect_when_it_comes(tmp_path: Path):
    local = make_node(tmp_path, Cluster(), TABLES)
    node, v1 = local.node, local.node.tables["totals"]
    node.set_alias("totals", Alias(table="totals", version="v3"))
    assert node.current["totals"] is v1, "v3 does not exist: v1 serves meanwhile"
    v3 = version("totals@v3", "totals.v3")
    node.add_table(v3)
    assert node.current["totals"] is v3


def test_resolve_takes_only_a_tables_own_name(tmp_path: Path):
    local = make_node(tmp_path, Cluster(), TABLES)
    local.node.add_table(version("totals@v2", "totals.v2"))
    view = NodeView(local.node)
    assert view.resolve("totals", "v2") is local.node.tables["totals@v2"]
    assert view.resolve("totals", "v3") is None
    assert view.resolve("totals@v2") is None, "an internal name is no table's name"
    assert view.resolve("totals@v2", "v1") is None
    assert view.resolve("nope") is None and view.resolve("nope", "v2") is None
    assert view.versions_of("totals") == local.node.versions_of("totals")


def test_without_v1_the_name_means_the_first_version_left(tmp_path: Path):
    local = make_node(tmp_path, Cluster(), TABLES)
    node = local.node
    v3, v2 = version("totals@v3", "totals.v3"), version("totals@v2", "totals.v2")
    node.add_table(v3)
    node.add_table(v2)
    node.drop_table("totals")  # not started: the event is set once the thread runs
    assert node.current["totals"] is v2
    assert topics_of(node) == ["totals.v3", "totals.v2"]
    node.drop_table("totals@v2")
    node.drop_table("totals@v3")
    assert "totals" not in node.current and node.versions_of("totals") == {}
    assert topics_of(node) == []


def test_dropping_a_table_not_served_is_done_at_once(tmp_path: Path):
    local = make_node(tmp_path, Cluster(), TABLES)
    done = local.node.drop_table("totals@v9")
    assert done.is_set()
    assert list(local.node.tables) == ["totals"]


def test_an_added_global_version_is_held_whole_without_the_group(tmp_path: Path):
    cluster = Cluster()
    local = start_node(tmp_path, cluster, TABLES, view_refresh_ms=50)
    try:
        ref = version("ref@v2", "ref.v2", partitions=2, store="memory", global_=True)
        local.node.add_table(ref)
        assert topics_of(local.node) == ["totals"], "a global table takes no group partitions"
        wait_until(lambda: len(v2_replicas(local.node, "ref@v2")) == 2, what="ref@v2 opened")
        for p in range(2):
            wait_until(lambda p=p: local.node.replica("ref@v2", p).state is ACTIVE)  # type: ignore[union-attr]
    finally:
        local.node.stop()


# -- Node + materializer: a version's replicas come and go ----------------------------------------


def test_an_added_version_restores_its_partitions_once_assigned(running):
    cluster, local = running
    node = local.node
    node.add_table(version("totals@v2", "totals.v2"))
    cluster.assign("n1", [("totals.v2", p) for p in range(PARTITIONS)])
    wait_until(lambda: len(v2_replicas(node)) == PARTITIONS, what="v2 replicas open")
    wait_until(serving(node, ACTIVE), what="v2 active")
    assert {r.topic for r in v2_replicas(node).values()} == {"totals.v2"}  # type: ignore[attr-defined]
    partition = local.put("totals@v2", "alice", b'{"n":2}', 0)
    local.put("totals", "alice", b'{"n":1}', 0)
    assert node.replica("totals@v2", partition).store.get(b"alice") == (b'{"n":2}', 0)  # type: ignore[union-attr]
    assert node.replica("totals", partition).store.get(b"alice") == (b'{"n":1}', 0)  # type: ignore[union-attr]
    assert node.is_ready() == (True, "ok")


def test_dropping_a_version_closes_its_replicas_and_keeps_the_others(running):
    cluster, local = running
    node = local.node
    node.add_table(version("totals@v2", "totals.v2"))
    cluster.assign("n1", [("totals.v2", p) for p in range(PARTITIONS)])
    wait_until(lambda: len(v2_replicas(node)) == PARTITIONS, what="v2 replicas open")
    wait_until(serving(node, ACTIVE), what="v2 active")
    closing = dict(v2_replicas(node))
    done = node.drop_table("totals@v2")
    assert done.wait(5), "the materializer closed them"
    assert v2_replicas(node) == {}
    assert "totals@v2" not in node.tables and "totals.v2" not in local.materializer._by_topic
    assert topics_of(node) == ["totals"]
    for replica in closing.values():
        assert replica.state is ReplicaState.REVOKED  # type: ignore[attr-defined]
        with pytest.raises(StoreClosedError):
            replica.store.get(b"alice")  # type: ignore[attr-defined]
    assert not any(
        (topic, p) in local.materializer._reader.assigned  # type: ignore[attr-defined]
        for topic, p in [("totals.v2", p) for p in range(PARTITIONS)]
    ), "no longer read"
    version_before = node.view.version
    wait_until(lambda: node.view.version >= version_before + 3, what="a few view refreshes")
    assert v2_replicas(node) == {}, "the view, still assigned its partitions, reopens nothing"
    assert all(t == "totals" for t, _ in node.view.roles_of("n1"))
    assert all(node.replica("totals", p).state is ACTIVE for p in range(PARTITIONS))  # type: ignore[union-attr]


# -- NodeCatalog.apply: the catalog's records become those changes ---------------------------------


V2 = Declared(
    table="totals",
    topic="totals.v2",
    key=("customer",),
    app="shop",
    pipeline="orders",
    query="totals",
    version="v2",
    checkpoint="/ck/orders@v2",
)
V1 = Declared(table="totals", topic="totals", key=("customer",), app="shop", pipeline="orders")


class Topics:
    """``topic_partitions`` as the broker would answer: a count, None for no such topic."""

    def __init__(self, **counts: int) -> None:
        self.counts = {topic.replace("_", "."): n for topic, n in counts.items()}
        self.asked: list[str] = []

    def __call__(self, bootstrap: str, topic: str, *_: object, **__: object) -> int | None:
        self.asked.append(topic)
        return self.counts.get(topic)


def follower(
    local: LocalNode,
    monkeypatch: pytest.MonkeyPatch,
    topics: Topics,
    served: list[ServeEntry] | None = None,
    every: bool = False,
) -> NodeCatalog:
    monkeypatch.setattr(node_catalog, "topic_partitions", topics)
    return NodeCatalog(
        local.node,
        "broker:9092",
        "shop",
        served or [],
        every,
        local.node.settings.data_dir,
        security=PLAINTEXT,
        default_standby=0,
    )


def test_a_declared_version_is_served_with_its_topics_partition_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    local = make_node(tmp_path, Cluster(), TABLES)
    catalog = follower(local, monkeypatch, Topics(totals=4, totals_v2=6))
    catalog.apply([(V2.catalog_key, V2.encode())])
    added = local.node.tables["totals@v2"]
    assert (added.spec.topic, added.partitions, added.spec.standby_replicas) == ("totals.v2", 6, 0)
    assert added.spec.declared is not None and added.spec.declared["version"] == "v2"
    assert local.node.current["totals"].spec.version == "v1"
    catalog.apply([(V2.catalog_key, V2.encode())])  # the same record again (a re-read)
    assert list(local.node.tables) == ["totals", "totals@v2"]


def test_a_version_whose_topic_is_not_there_yet_is_served_once_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    local = make_node(tmp_path, Cluster(), TABLES)
    topics = Topics(totals=4)
    catalog = follower(local, monkeypatch, topics)
    monkeypatch.setattr(node_catalog, "_RETRY_S", 0.0)
    catalog.apply([(V2.catalog_key, V2.encode())])
    assert "totals@v2" not in local.node.tables and set(topics.asked) == {"totals.v2"}
    asked = len(topics.asked)
    catalog.apply([])  # a quiet poll: asked again, still not there
    assert "totals@v2" not in local.node.tables and len(topics.asked) == asked + 1
    topics.counts["totals.v2"] = 3
    catalog.apply([])
    assert local.node.tables["totals@v2"].partitions == 3
    catalog.apply([])
    assert len(topics.asked) == asked + 2, "no longer pending: not asked again"


def test_a_pending_version_retired_before_its_topic_came_is_never_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    local = make_node(tmp_path, Cluster(), TABLES)
    topics = Topics(totals=4)
    catalog = follower(local, monkeypatch, topics)
    monkeypatch.setattr(node_catalog, "_RETRY_S", 0.0)
    catalog.apply([(V2.catalog_key, V2.encode())])
    catalog.apply([(V2.catalog_key, None)])
    topics.counts["totals.v2"] = 3
    catalog.apply([])
    assert "totals@v2" not in local.node.tables


def test_records_the_node_does_not_serve_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    local = make_node(tmp_path, Cluster(), TABLES)
    topics = Topics(totals=4, totals_v2=4, others_v2=4)
    served = [parse_served("totals")]
    catalog = follower(local, monkeypatch, topics, served=served)
    other_app = Declared(table="totals", topic="totals.v2", key=("k",), app="else", version="v2")
    other_table = Declared(table="others", topic="others.v2", key=("k",), app="shop", version="v2")
    catalog.apply(
        [
            (other_app.catalog_key, other_app.encode()),
            (other_table.catalog_key, other_table.encode()),
            ("table:shop/broken", b"{not json"),
            ("pipeline:shop/orders", b"{}"),
        ]
    )
    assert list(local.node.tables) == ["totals"] and topics.asked == []
    catalog.apply([(V2.catalog_key, V2.encode())])
    assert list(local.node.tables) == ["totals", "totals@v2"]


def test_a_version_that_clashes_with_serve_tables_is_not_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    local = make_node(tmp_path, Cluster(), TABLES)
    catalog = follower(
        local, monkeypatch, Topics(totals=4, totals_v2=4), served=[parse_served("totals=elsewhere")]
    )
    catalog.apply([(V2.catalog_key, V2.encode())])
    assert "totals@v2" not in local.node.tables
    assert "'elsewhere' here, 'totals.v2' in the pipeline" in caplog.text


def test_aliases_move_the_name_and_their_tombstone_moves_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    local = make_node(tmp_path, Cluster(), TABLES)
    catalog = follower(local, monkeypatch, Topics(totals=4, totals_v2=4))
    to_v2 = Alias(table="totals", version="v2", app="shop", previous="v1")
    catalog.apply([(V2.catalog_key, V2.encode()), (to_v2.catalog_key, to_v2.encode())])
    assert local.node.current["totals"].spec.name == "totals@v2"
    assert local.node.aliases == {"totals": to_v2}
    catalog.apply([(to_v2.catalog_key, None)])
    assert local.node.current["totals"].spec.name == "totals"


def test_aliases_of_another_app_or_under_another_key_are_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    local = make_node(tmp_path, Cluster(), TABLES)
    catalog = follower(local, monkeypatch, Topics(totals=4, totals_v2=4))
    catalog.apply([(V2.catalog_key, V2.encode())])
    theirs = Alias(table="totals", version="v2", app="else")
    misfiled = Alias(table="totals", version="v2", app="shop")
    catalog.apply(
        [
            (theirs.catalog_key, theirs.encode()),
            ("alias:shop/other", misfiled.encode()),  # the key says another table
            ("alias:shop/totals", b"{not json"),
        ]
    )
    assert local.node.current["totals"].spec.name == "totals"
    mine = Alias(table="totals", version="v2", app="shop")
    catalog.apply([(mine.catalog_key, mine.encode())])
    catalog.apply([("alias:else/totals", None)])  # another app's tombstone
    assert local.node.current["totals"].spec.name == "totals@v2"


def test_a_retired_version_is_dropped_and_its_stores_deleted(
    running, monkeypatch: pytest.MonkeyPatch
):
    cluster, local = running
    node = local.node
    catalog = follower(local, monkeypatch, Topics(totals=4, totals_v2=4))
    catalog.apply([(V1.catalog_key, V1.encode()), (V2.catalog_key, V2.encode())])
    cluster.assign("n1", [("totals.v2", p) for p in range(PARTITIONS)])
    wait_until(lambda: len(v2_replicas(node)) == PARTITIONS, what="v2 replicas open")
    wait_until(serving(node, ACTIVE), what="v2 active")
    local.put("totals@v2", "alice", b'{"n":2}', 0)
    stores = node.settings.data_dir / "tables"
    assert sorted(p.name for p in stores.iterdir()) == ["totals", "totals@v2"]
    assert len(list((stores / "totals@v2").iterdir())) == PARTITIONS
    started = time.monotonic()
    catalog.apply([(V2.catalog_key, None)])  # kiq retire's tombstone
    assert time.monotonic() - started < 5, "returned once the replicas closed"
    assert "totals@v2" not in node.tables and v2_replicas(node) == {}
    assert sorted(p.name for p in stores.iterdir()) == ["totals"], "v2's stores deleted"
    assert node.current["totals"].spec.name == "totals"


def test_v1_declared_before_the_node_started_can_be_retired_too(
    running, monkeypatch: pytest.MonkeyPatch
):
    _, local = running
    node = local.node
    catalog = follower(local, monkeypatch, Topics(totals=4, totals_v2=4))
    # The follower reads the catalog from its start: what the node serves already is noted.
    catalog.apply([(V1.catalog_key, V1.encode()), (V2.catalog_key, V2.encode())])
    assert node.tables["totals"].spec.declared is None, "served already: left as it was"
    catalog.apply([(V1.catalog_key, None)])
    assert list(node.tables) == ["totals@v2"]
    assert node.current["totals"].spec.name == "totals@v2"
    assert not (node.settings.data_dir / "tables" / "totals").exists()


def test_a_hostile_declaration_and_its_tombstone_delete_nothing_and_stop_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    checks._said.clear()  # each refusal is logged once per process
    local = make_node(tmp_path / "nodes", Cluster(), TABLES)
    node, data_dir = local.node, local.node.settings.data_dir
    (data_dir / "tables").mkdir(parents=True)
    (data_dir / "keep").mkdir()
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    catalog = follower(local, monkeypatch, Topics(totals=4, totals_v2=4))
    hostile = [
        (f"table:shop/{name}", {"table": name, "topic": "totals.v2", "key": ["k"], "app": "shop"})
        for name in (str(outside), "..", "../../outside", ".")
    ]
    hostile += [
        ("table:shop/badsep", {"table": "badsep", "topic": "b", "key": ["a"], "sep": "||"}),
        ("table:shop/totals@v8", {**msgspec.to_builtins(V2), "version": "v9"}),  # not its key
    ]
    records = [(key, msgspec.json.encode(value)) for key, value in hostile]
    catalog.apply([*records[:3], (V2.catalog_key, V2.encode()), *records[3:]])
    assert list(node.tables) == ["totals", "totals@v2"], "the valid record among them is served"
    catalog.apply([(key, None) for key, _ in records])
    assert (outside / "keep").is_dir() and (data_dir / "keep").is_dir()
    assert list(node.tables) == ["totals", "totals@v2"]
    assert caplog.text.count("catalog record refused") == len(records)


def test_a_refused_catalog_record_is_named_by_its_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """An operator finds the record in the topic (kafka-console-consumer --offset N)."""
    checks._said.clear()
    local = make_node(tmp_path / "nodes", Cluster(), TABLES)
    catalog = follower(local, monkeypatch, Topics(totals=4, totals_v2=4))
    bad = msgspec.json.encode({"table": "..", "topic": "totals.v2", "key": ["k"], "app": "shop"})
    catalog.apply([(V2.catalog_key, V2.encode()), ("table:shop/..", bad)], [41, 42])
    assert "catalog record refused topic=kiq-catalog partition=0 offset=42 key=" in caplog.text
    assert "offset=41" not in caplog.text
    assert list(local.node.tables) == ["totals", "totals@v2"]
