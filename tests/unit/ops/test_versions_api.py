"""Two nodes in process serving two versions of ``totals``: reads that name a version (or
not) and say which answered, and the versions, switch and retire endpoints.

``n1`` owns the even partitions of both versions, ``n2`` the odd ones. The table catalog is a
fake (``Catalog``) that hands every record it is given to each node's real catalog follower
(``kiq.node_catalog.NodeCatalog.apply``), as the catalog topic would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from kiq import node_catalog
from kiq.catalog import CATALOG_TOPIC, PROGRESS_TOPIC
from kiq.kafka import PLAINTEXT
from kiq.node_catalog import NodeCatalog
from kiq.partitioning import partition_for
from kiq.replicas import ReplicaState
from kiq.security import ClusterKey, Security, TokenCache, TokenVerifier
from kiq.security.keys import SecretKey
from kiq.tables.declared import Declared, parse_served
from tests.unit.security.keys import hs256, secret_file
from tests.unit.stand_ins import Cluster, LocalNode, call, make_node, serving, wait_until

APP = "shop"
PARTITIONS = 4
TOPICS = {
    "totals": PARTITIONS,
    "totals.v2": PARTITIONS,
    "counts.v2": 2,
    "totals.v3": PARTITIONS,
    "ref": 2,
    "ref.v2": 2,
}


def declared(table: str, version: str, topic: str, pipeline: str = "orders") -> Declared:
    return Declared(
        table=table,
        topic=topic,
        key=("customer",),
        app=APP,
        pipeline=pipeline,
        query=table,
        version=version,
        checkpoint=f"/ck/{pipeline}" + ("" if version == "v1" else f"@{version}"),
    )


V1 = declared("totals", "v1", "totals")
V2 = declared("totals", "v2", "totals.v2")
V3 = declared("totals", "v3", "totals.v3")
COUNTS_V2 = declared("counts", "v2", "counts.v2")
REF_V1, REF_V2 = declared("ref", "v1", "ref", "refs"), declared("ref", "v2", "ref.v2", "refs")

# Keys on either node's partitions, and their values in each version.
V1_ROWS = {"alice": b'{"n":1}', "bob": b'{"n":10}', "carol": b'{"n":100}'}
V2_ROWS = {"alice": b'{"n":2}', "bob": b'{"n":20}'}


class Catalog:
    """``kiq.ops.versions.CatalogAdmin``: records every put; a catalog record goes to each
    node's follower at once, as if they all followed the topic."""

    app = APP

    def __init__(self) -> None:
        self.followers: dict[str, NodeCatalog] = {}
        self.records: list[tuple[str, str, bytes | None]] = []
        self.topics = set(TOPICS) | {"totals-dlq", "totals-dlq.v2", "totals.v2-dlq"}
        self.deleted: list[str] = []
        self.latest_records: dict[str, bytes] = {}  # the catalog topic, compacted

    async def put(self, topic: str, key: str, value: bytes | None) -> int:
        self.records.append((topic, key, value))
        if topic == CATALOG_TOPIC:
            if value is None:
                self.latest_records.pop(key, None)
            else:
                self.latest_records[key] = value
            for follower in self.followers.values():
                await asyncio.to_thread(follower.apply, [(key, value)])
        return len(self.records) - 1

    async def followed(self, offset: int, timeout_s: float) -> bool:
        return offset < len(self.records)

    async def delete_topics(self, topics: Sequence[str]) -> list[str]:
        there = [t for t in topics if t in self.topics]
        self.topics -= set(there)
        self.deleted += there
        return there

    async def latest(self) -> dict[str, bytes]:
        return dict(self.latest_records)

    def declare(self, *tables: Declared, on: Sequence[str] = ("n1", "n2")) -> None:
        """A pipeline's declarations, followed by the nodes ``on``."""
        for d in tables:
            self.latest_records[d.catalog_key] = d.encode()
            for node_id in on:
                self.followers[node_id].apply([(d.catalog_key, d.encode())])

    def keys(self, topic: str = CATALOG_TOPIC) -> list[tuple[str, bool]]:
        """(key, tombstone?) of what was put to ``topic``."""
        return [(k, v is None) for t, k, v in self.records if t == topic]


class Progress:
    """``GET /v1/pipelines``' source: the queries' progress as ``summary()`` gives it."""

    def __init__(self) -> None:
        self.queries: list[dict[str, Any]] = []

    def summary(self) -> dict[str, Any]:
        return {"queries": list(self.queries)}

    def say(self, run: str, query: str, state: str = "running", **more: Any) -> None:
        self.queries.append(
            {"pipeline": run, "query": query, "state": state, "stale": False, **more}
        )


class Pair:
    def __init__(self, cluster: Cluster, nodes: list[LocalNode], catalog: Catalog, progress):
        self.cluster, self.nodes, self.catalog, self.progress = cluster, nodes, catalog, progress
        self.n1, self.n2 = nodes
        self.topics: dict[str, int] = {}

    def owner(self, key: str, partitions: int = PARTITIONS) -> LocalNode:
        return self.nodes[partition_for(key, partitions) % 2]

    def assign(self, topic: str, partitions: int = PARTITIONS) -> None:
        for i, node_id in enumerate(("n1", "n2")):
            self.cluster.assign(node_id, [(topic, p) for p in range(i, partitions, 2)])

    def serving(self) -> None:
        for local in self.nodes:
            wait_until(serving(local.node, ReplicaState.ACTIVE), what=f"{local.node.node_id}")


def start_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **node_args: Any) -> Pair:
    topics = dict(TOPICS)  # the broker's topics and their partition counts
    monkeypatch.setattr(node_catalog, "topic_partitions", lambda _b, topic, **_: topics.get(topic))
    cluster, catalog, progress = Cluster(), Catalog(), Progress()
    served = [
        parse_served("totals,store=memory,standby=0"),
        parse_served("counts,store=memory"),
        parse_served("ref,store=memory,global"),
    ]
    nodes = []
    for node_id in ("n1", "n2"):
        local = make_node(
            tmp_path, cluster, {}, node_id, catalog=catalog, progress=progress, **node_args
        )
        catalog.followers[node_id] = NodeCatalog(
            local.node,
            "broker:9092",
            APP,
            served,
            True,
            local.node.settings.data_dir,
            security=PLAINTEXT,
            default_standby=0,
        )
        nodes.append(local)
    pair = Pair(cluster, nodes, catalog, progress)
    pair.topics = topics
    catalog.declare(V1, V2)
    for local in nodes:
        local.node.start()
    pair.assign("totals")
    pair.assign("totals.v2")
    pair.serving()
    for offset, (key, value) in enumerate(V1_ROWS.items()):
        pair.owner(key).put("totals", key, value, offset)
    for offset, (key, value) in enumerate(V2_ROWS.items()):
        pair.owner(key).put("totals@v2", key, value, offset)
    return pair


@pytest.fixture
def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pair]:
    started = start_pair(tmp_path, monkeypatch)
    yield started
    for local in started.nodes:
        local.node.stop()


def get(node: LocalNode, target: str, token: str | None = None):
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return asyncio.run(call(node.app, "GET", target, headers=headers))


def post(node: LocalNode, target: str, body: Any):
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return asyncio.run(call(node.app, "POST", target, raw))


# -- reads: which version, and saying so --------------------------------------------------------


def test_the_tables_own_name_reads_the_current_version_on_every_node(pair: Pair):
    for node in pair.nodes:
        served_by = set()
        for key, value in V1_ROWS.items():
            r = get(node, f"/v1/tables/totals/keys/{key}")  # the fast path: no query string
            assert (r.status, r.body, r.headers["x-kiq-version"]) == (200, value, "v1"), key
            served_by.add(r.headers["x-kiq-served-by"])
            slow = get(node, f"/v1/tables/totals/keys/{key}?max_lag=100")
            assert (slow.status, slow.body, slow.headers["x-kiq-version"]) == (200, value, "v1")
        assert served_by == {"n1", "n2"}, "some keys local, some forwarded"


def test_version_names_the_version_read_forwards_included(pair: Pair):
    for node in pair.nodes:
        served_by = set()
        for key, value in V2_ROWS.items():
            r = get(node, f"/v1/tables/totals/keys/{key}?version=v2")
            assert (r.status, r.body, r.headers["x-kiq-version"]) == (200, value, "v2"), key
            served_by.add(r.headers["x-kiq-served-by"])
        assert served_by == {"n1", "n2"}
        v1 = get(node, "/v1/tables/totals/keys/alice?version=v1")
        assert (v1.body, v1.headers["x-kiq-version"]) == (V1_ROWS["alice"], "v1")
        missing = get(node, "/v1/tables/totals/keys/carol?version=v2")  # only v1 has carol
        assert (missing.status, missing.json()["error"]) == (404, "not_found")


def test_an_unknown_version_is_a_404_naming_the_versions_there_are(pair: Pair):
    r = get(pair.n1, "/v1/tables/totals/keys/alice?version=v9")
    assert r.status == 404
    assert r.json() == {
        "error": "unknown_table",
        "message": "table 'totals' has no version 'v9': it has v1, v2",
        "table": "totals",
        "version": "v9",
    }
    for target in [
        "/v1/tables/nope/keys/alice?version=v2",
        "/v1/tables/totals@v2/keys/alice",
        "/v1/tables/totals@v2/keys/alice?version=v1",
    ]:
        r = get(pair.n1, target)
        assert (r.status, r.json()["error"]) == (404, "unknown_table"), target
        assert r.json()["message"].startswith("no table named"), target
    r = get(pair.n1, "/v1/tables/totals/range?version=v9")
    assert (r.status, r.json()["message"]) == (
        404,
        "table 'totals' has no version 'v9': it has v1, v2",
    )


def test_range_and_multiget_read_the_version_asked_for(pair: Pair):
    for node in pair.nodes:
        v2 = get(node, "/v1/tables/totals/range?version=v2&limit=10")
        assert v2.headers["x-kiq-version"] == "v2"
        assert [(i["key"], i["value"]) for i in v2.json()["items"]] == [
            ("alice", {"n": 2}),
            ("bob", {"n": 20}),
        ]
        v1 = get(node, "/v1/tables/totals/range?limit=10")
        assert v1.headers["x-kiq-version"] == "v1"
        assert [i["key"] for i in v1.json()["items"]] == ["alice", "bob", "carol"]
        keys = {"keys": ["alice", "bob", "carol"]}
        many = post(node, "/v1/tables/totals/multiget?version=v2", keys)
        assert many.status == 200 and many.headers["x-kiq-version"] == "v2"
        assert many.json() == {"found": {"alice": {"n": 2}, "bob": {"n": 20}}, "missing": ["carol"]}
        plain = post(node, "/v1/tables/totals/multiget", keys)
        assert plain.headers["x-kiq-version"] == "v1" and plain.json()["missing"] == []


def test_the_table_list_names_each_table_once_with_its_versions(pair: Pair):
    (table,) = get(pair.n1, "/v1/tables").json()["tables"]
    assert (table["name"], table["version"], table["versions"], table["topic"]) == (
        "totals",
        "v1",
        ["v1", "v2"],
        "totals",
    )


# -- GET /v1/tables/{t}/versions -------------------------------------------------------------------


def test_versions_describes_each_version_across_the_cluster(pair: Pair):
    pair.progress.say("orders", "totals", behind=0)
    pair.progress.say("orders@v2", "totals", behind=7)
    answer = get(pair.n2, "/v1/tables/totals/versions")
    assert answer.status == 200
    body = answer.json()
    assert (body["table"], body["current"]) == ("totals", "v1")
    v1, v2 = body["versions"]
    for described in (v1, v2):
        assert described["bytes"] > 0
        del described["bytes"]
    assert v1 == {
        "version": "v1",
        "current": True,
        "name": "totals",
        "topic": "totals",
        "pipeline": "orders",
        "run": "orders",
        "query": "totals",
        "partitions": PARTITIONS,
        "keys": 3,
        "lag": 0,
        "behind": 0,
        "pipeline_state": "running",
        "serving": True,
        "nodes": 2,
        "caught_up": True,
    }
    assert v2 == {
        "version": "v2",
        "current": False,
        "name": "totals@v2",
        "topic": "totals.v2",
        "pipeline": "orders",
        "run": "orders@v2",
        "query": "totals",
        "partitions": PARTITIONS,
        "keys": 2,
        "lag": 0,
        "behind": 7,
        "pipeline_state": "running",
        "serving": True,
        "nodes": 2,
        "caught_up": False,
    }


def test_a_version_some_node_does_not_hold_is_not_serving(pair: Pair):
    pair.catalog.declare(V3)  # declared and followed, but the group gave out no partitions
    pair.progress.queries.append(
        {"pipeline": "orders@v3", "query": "totals", "state": "failed", "stale": True}
    )
    v3 = get(pair.n1, "/v1/tables/totals/versions").json()["versions"][2]
    assert (v3["version"], v3["serving"], v3["caught_up"], v3["nodes"]) == ("v3", False, False, 2)
    assert (v3["keys"], v3["pipeline_state"], v3["behind"]) == (0, "stale", None)


def test_versions_of_an_unknown_table_is_a_404(pair: Pair):
    r = get(pair.n1, "/v1/tables/nope/versions")
    assert (r.status, r.json()["error"]) == (404, "unknown_table")


# -- POST /v1/tables/{t}/switch ------------------------------------------------------------------


def test_switch_moves_the_name_on_every_node(pair: Pair):
    r = post(pair.n1, "/v1/tables/totals/switch", {"version": "v2"})
    assert r.status == 200, r.body
    answer = r.json()
    assert answer["took_ms"] >= 0
    del answer["took_ms"]
    assert answer == {
        "table": "totals",
        "version": "v2",
        "previous": "v1",
        "nodes": {"n1": "v2", "n2": "v2"},
    }
    (topic, key, value) = pair.catalog.records[-1]
    assert (topic, key) == (CATALOG_TOPIC, "alias:shop/totals")
    assert value is not None
    alias = orjson.loads(value)
    assert (alias["table"], alias["version"], alias["previous"], alias["app"]) == (
        "totals",
        "v2",
        "v1",
        APP,
    )
    for node in pair.nodes:
        r = get(node, "/v1/tables/totals/keys/alice")
        assert (r.body, r.headers["x-kiq-version"]) == (V2_ROWS["alice"], "v2")
        old = get(node, "/v1/tables/totals/keys/alice?version=v1")
        assert (old.body, old.headers["x-kiq-version"]) == (V1_ROWS["alice"], "v1")
    assert get(pair.n2, "/v1/tables/totals/versions").json()["current"] == "v2"
    back = post(pair.n2, "/v1/tables/totals/switch", {"version": "v1"})
    assert (back.json()["previous"], back.json()["nodes"]) == ("v2", {"n1": "v1", "n2": "v1"})


def test_switch_to_a_version_there_is_not_is_a_409(pair: Pair):
    r = post(pair.n1, "/v1/tables/totals/switch", {"version": "v9"})
    assert r.status == 409
    assert r.json() == {
        "error": "conflict",
        "message": "table 'totals' has no version 'v9': it has v1, v2",
    }
    assert pair.catalog.records == [], "nothing written"


def test_switch_to_a_version_not_every_node_serves_is_a_409(pair: Pair):
    pair.catalog.declare(V3, on=["n1"])  # n2 has not followed it yet
    pair.assign("totals.v3")
    wait_until(lambda: pair.n1.node.replica("totals@v3", 0) is not None, what="n1 holds v3")
    r = post(pair.n1, "/v1/tables/totals/switch", {"version": "v3", "force": True})
    assert r.status == 409
    assert r.json()["message"].startswith("totals v3 is not served by n2 yet")
    assert pair.catalog.records == []
    assert pair.n1.node.current["totals"].spec.version == "v1"


def test_switch_to_a_version_not_caught_up_is_a_409_unless_forced(pair: Pair):
    pair.progress.say("orders@v2", "totals", behind=5)
    r = post(pair.n1, "/v1/tables/totals/switch", {"version": "v2"})
    assert r.status == 409
    assert "its pipeline has 5 input records to read" in r.json()["message"]
    assert r.json()["version"]["behind"] == 5, "the version as GET .../versions describes it"
    assert pair.catalog.records == []
    forced = post(pair.n1, "/v1/tables/totals/switch", {"version": "v2", "force": True})
    assert (forced.status, forced.json()["version"]) == (200, "v2")


def test_switch_to_a_version_without_serving_replicas_says_so(pair: Pair):
    pair.catalog.declare(V3)
    r = post(pair.n2, "/v1/tables/totals/switch", {"version": "v3"})
    assert r.status == 409
    assert "some partitions have no serving replica yet" in r.json()["message"]


def test_switch_checks_its_request(pair: Pair):
    unknown = post(pair.n1, "/v1/tables/nope/switch", {"version": "v2"})
    assert (unknown.status, unknown.json()["error"]) == (404, "unknown_table")
    for body in [b"{", b"{}", {"version": 2}, {"version": ""}]:
        r = post(pair.n1, "/v1/tables/totals/switch", body)
        assert (r.status, r.json()["error"]) == (400, "bad_request"), body


def test_a_node_without_a_catalog_moves_no_versions(tmp_path: Path):
    local = make_node(tmp_path, Cluster(), {"totals=totals": PARTITIONS})
    for target, body in [("switch", {"version": "v1"}), ("retire", {"version": "v2"})]:
        r = post(local, f"/v1/tables/totals/{target}", body)
        assert r.status == 409, target
        assert "does not follow a table catalog" in r.json()["message"]


# -- POST /v1/tables/{t}/retire ---------------------------------------------------------------


def test_retire_the_current_version_is_a_409(pair: Pair):
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v1"})
    assert r.status == 409
    assert r.json()["message"].startswith("totals v1 is the version its name serves")
    assert post(pair.n1, "/v1/tables/totals/switch", {"version": "v2"}).status == 200
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v2"})
    assert r.status == 409
    assert pair.catalog.keys() == [("alias:shop/totals", False)], "no tombstone written"


def test_retire_a_version_whose_pipeline_runs_is_a_409(pair: Pair):
    pair.progress.say("orders@v2", "totals", state="running")
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v2"})
    assert r.status == 409
    assert r.json()["message"].startswith("pipeline orders@v2 still writes totals v2")
    assert pair.catalog.records == []
    assert "totals@v2" in pair.n2.node.tables


def test_retire_a_version_whose_pipeline_stopped_or_went_stale(pair: Pair):
    pair.progress.say("orders@v2", "totals", state="stopped")
    pair.progress.queries.append(
        {"pipeline": "orders@v2", "query": "totals", "state": "running", "stale": True}
    )
    pair.progress.say("orders", "totals", state="running")  # v1's run: not v2's
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v2"})
    assert r.status == 200, r.body


def test_retire_drops_the_version_everywhere_and_deletes_what_it_wrote(pair: Pair):
    r = post(pair.n2, "/v1/tables/totals/retire", {"version": "v2"})
    assert r.status == 200, r.body
    assert r.json() == {
        "table": "totals",
        "version": "v2",
        "run": "orders@v2",
        "topics_deleted": ["totals.v2", "totals-dlq.v2"],
        "topics_kept": [],
        "checkpoint": "/ck/orders@v2",
        "last_of_run": True,
        "nodes": {"n1": "dropped", "n2": "dropped"},
    }
    assert pair.catalog.keys() == [
        ("table:shop/totals@v2", True),
        ("pipeline:shop/orders@v2", True),
    ]
    assert pair.catalog.keys(PROGRESS_TOPIC) == [("shop/orders@v2/totals", True)]
    for local in pair.nodes:
        assert list(local.node.tables) == ["totals"]
        assert not any(t == "totals@v2" for t, _ in list(local.node.replicas))
    versions = get(pair.n1, "/v1/tables/totals/versions").json()["versions"]
    assert [v["version"] for v in versions] == ["v1"]
    r = get(pair.n1, "/v1/tables/totals/keys/alice?version=v2")
    assert (r.status, r.json()["message"]) == (404, "table 'totals' has no version 'v2': it has v1")
    assert get(pair.n1, "/v1/tables/totals/keys/alice").body == V1_ROWS["alice"]


def test_retire_keeps_the_checkpoint_while_the_run_writes_another_table(pair: Pair):
    pair.catalog.declare(COUNTS_V2)
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v2"})
    assert r.status == 200, r.body
    answer = r.json()
    assert (answer["last_of_run"], answer["checkpoint"]) == (False, None)
    assert pair.catalog.keys() == [("table:shop/totals@v2", True)], "the run's records stay"
    assert pair.catalog.keys(PROGRESS_TOPIC) == []
    assert "counts@v2" in pair.n1.node.tables


def test_retire_checks_its_request(pair: Pair):
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v9"})
    assert (r.status, r.json()["error"]) == (409, "conflict")
    assert "has no version 'v9'" in r.json()["message"]
    unknown = post(pair.n1, "/v1/tables/nope/retire", {"version": "v2"})
    assert (unknown.status, unknown.json()["error"]) == (404, "unknown_table")
    assert post(pair.n1, "/v1/tables/totals/retire", {}).status == 400
    assert pair.catalog.records == []


# -- with authentication -------------------------------------------------------------------------


def test_a_token_that_reads_the_table_reads_each_of_its_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    security = Security(TokenCache(verifier), ClusterKey(b"g" * 32))
    secured = start_pair(tmp_path, monkeypatch, security=security)
    try:
        token = hs256(scope="kiq:read:totals")
        for node in secured.nodes:
            served_by = set()
            for key, value in V2_ROWS.items():
                r = get(node, f"/v1/tables/totals/keys/{key}?version=v2", token)
                assert (r.status, r.body) == (200, value), (node.node.node_id, key, r.body)
                served_by.add(r.headers["x-kiq-served-by"])
            assert served_by == {"n1", "n2"}, "forwarded reads of v2 too"
            page = get(node, "/v1/tables/totals/range?version=v2", token)
            assert page.status == 200 and len(page.json()["items"]) == 2, page.body
            denied = get(node, "/v1/tables/totals/keys/alice?version=v2", hs256(scope="kiq:read:x"))
            assert (denied.status, denied.json()["scope"]) == (403, "kiq:read:totals")
            # switching takes kiq:admin
            r = asyncio.run(
                call(
                    node.app,
                    "POST",
                    "/v1/tables/totals/switch",
                    b'{"version": "v2"}',
                    [(b"authorization", f"Bearer {token}".encode())],
                )
            )
            assert (r.status, r.json()["error"]) == (403, "insufficient_scope")
    finally:
        for local in secured.nodes:
            local.node.stop()


# -- more of switch and retire -------------------------------------------------------------------


def test_switch_answers_for_the_nodes_it_reaches(pair: Pair):
    pair.cluster.down.add("http://n2.test")
    r = post(pair.n1, "/v1/tables/totals/switch", {"version": "v2"})
    assert r.status == 409, "n2's partitions: no serving replica known"
    r = post(pair.n1, "/v1/tables/totals/switch", {"version": "v2", "force": True})
    assert r.status == 200, r.body
    assert r.json()["nodes"] == {"n1": "v2", "n2": "unreachable"}
    assert pair.n2.node.current["totals"].spec.version == "v2", "it follows the catalog anyway"


def test_retire_v1_deletes_its_own_topics_and_its_runs_records(pair: Pair):
    assert post(pair.n1, "/v1/tables/totals/switch", {"version": "v2"}).status == 200
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v1"})
    assert r.status == 200, r.body
    answer = r.json()
    assert (answer["topics_deleted"], answer["checkpoint"], answer["last_of_run"]) == (
        ["totals", "totals-dlq"],
        "/ck/orders",
        True,
    )
    assert pair.catalog.keys()[1:] == [("table:shop/totals", True), ("pipeline:shop/orders", True)]
    assert pair.catalog.keys(PROGRESS_TOPIC) == [("shop/orders/totals", True)]
    for local in pair.nodes:
        assert list(local.node.tables) == ["totals@v2"]
    r = get(pair.n2, "/v1/tables/totals/keys/bob")
    assert (r.status, r.body, r.headers["x-kiq-version"]) == (200, V2_ROWS["bob"], "v2")


def test_a_version_retired_and_declared_again_reads_its_new_partitions(pair: Pair):
    # bob is in partition 2 of 4, and in partition 0 of 2
    for node in pair.nodes:
        assert get(node, "/v1/tables/totals/keys/bob?version=v2").body == V2_ROWS["bob"]
    assert post(pair.n1, "/v1/tables/totals/retire", {"version": "v2"}).status == 200
    pair.topics["totals.v2"] = 2  # the pipeline's v2 is run again, its topic made anew
    pair.catalog.declare(V2)
    pair.assign("totals.v2", partitions=2)
    for i, local in enumerate(pair.nodes):
        wait_until(
            lambda local=local, i=i: (
                getattr(local.node.replica("totals@v2", i), "state", None) is ReplicaState.ACTIVE
            ),
            what=f"{local.node.node_id} holds the new v2",
        )
    assert pair.n1.node.tables["totals@v2"].partitions == 2
    pair.owner("bob", partitions=2).put("totals@v2", "bob", b'{"n":21}', 0)
    for node in pair.nodes:
        r = get(node, "/v1/tables/totals/keys/bob?version=v2")
        assert (r.status, r.body) == (200, b'{"n":21}'), (node.node.node_id, r.body)


def test_a_global_tables_versions_are_served_by_every_nodes_own_copy(pair: Pair):
    pair.catalog.declare(REF_V1, REF_V2)
    for local in pair.nodes:
        for name in ("ref", "ref@v2"):
            for p in range(2):
                wait_until(
                    lambda local=local, name=name, p=p: (
                        getattr(local.node.replica(name, p), "state", None) is ReplicaState.ACTIVE
                    ),
                    what=f"{local.node.node_id} holds {name}[{p}]",
                )
        local.put("ref@v2", "AAPL", b'{"name":"Apple"}', 0)
    v1, v2 = get(pair.n1, "/v1/tables/ref/versions").json()["versions"]
    assert (v2["serving"], v2["keys"], v2["nodes"], v2["caught_up"]) == (True, 1, 2, True)
    assert (v1["serving"], v1["keys"]) == (True, 0)
    r = post(pair.n2, "/v1/tables/ref/switch", {"version": "v2"})
    assert (r.status, r.json().get("nodes")) == (200, {"n1": "v2", "n2": "v2"}), r.body
    r = get(pair.n1, "/v1/tables/ref/keys/AAPL")
    assert (r.status, r.headers["x-kiq-version"]) == (200, "v2")
