"""A node from its parts, in process: stand-in group and reader, real stores."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kiq.errors import ConfigError, StoreClosedError
from kiq.node import NodeView
from kiq.node_build import check_tables
from kiq.partitioning import partition_for
from kiq.replicas import ReplicaState
from kiq.tables import parse_table
from tests.unit.stand_ins import Cluster, make_node, serving, start_node, wait_until

TABLES = {"t=t,store=rocksdb,standby=1": 4, "g=g,store=memory,global": 2}
ACTIVE, STANDBY = ReplicaState.ACTIVE, ReplicaState.STANDBY


def test_making_a_node_does_no_io(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    started: list[threading.Thread] = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self))
    local = make_node(tmp_path, Cluster(), TABLES)
    assert started == [], "no thread runs before start()"
    assert not (tmp_path / "n1").exists(), "no store is opened before start()"
    assert local.node.view.version == 0 and dict(local.node.replicas) == {}


def test_owned_partitions_are_active_the_others_standby_and_global_ones_active(tmp_path: Path):
    cluster = Cluster()
    n1 = start_node(tmp_path, cluster, TABLES, "n1")
    n2 = start_node(tmp_path, cluster, TABLES, "n2")
    cluster.assign("n1", [("t", 0), ("t", 1)])
    cluster.assign("n2", [("t", 2), ("t", 3)])
    try:
        for local in (n1, n2):
            wait_until(serving(local.node), what=f"{local.node.node_id} serving")
        for local, mine in [(n1, {0, 1}), (n2, {2, 3})]:
            node = local.node
            states = {p: node.replica("t", p).state for p in range(4)}  # type: ignore[union-attr]
            assert states == {p: ACTIVE if p in mine else STANDBY for p in range(4)}
            assert [node.replica("g", p).state for p in range(2)] == [ACTIVE, ACTIVE]  # type: ignore[union-attr]
            assert set(node.view.members) == {"n1", "n2"}
    finally:
        n1.node.stop()
        n2.node.stop()


def test_a_group_change_moves_roles_at_once(tmp_path: Path):
    cluster = Cluster()
    n1 = start_node(tmp_path, cluster, TABLES, "n1", view_refresh_ms=60_000)
    n2 = start_node(tmp_path, cluster, TABLES, "n2", view_refresh_ms=60_000)
    cluster.assign("n1", [("t", p) for p in range(4)])
    try:
        wait_until(lambda: n1.node.view.of("t", 0).active == "n1", what="n1 active")
        cluster.assign("n2", [("t", 0)])
        wait_until(lambda: n2.node.view.of("t", 0).active == "n2", what="the view moved")
        wait_until(lambda: getattr(n2.node.replica("t", 0), "state", None) is ACTIVE, what="n2")
        wait_until(lambda: getattr(n1.node.replica("t", 0), "state", None) is STANDBY, what="n1")
    finally:
        n1.node.stop()
        n2.node.stop()


def test_ready_once_in_the_group_and_caught_up(tmp_path: Path):
    cluster = Cluster()
    local = make_node(tmp_path, cluster, TABLES, ready_max_lag=10)
    group = local.node._group
    group.joined = False  # type: ignore[union-attr]
    cluster.assign("n1", [("t", p) for p in range(4)])
    assert local.node.is_ready() == (False, "not yet a member of the cluster group")
    group.joined = True  # type: ignore[union-attr]
    ready, reason = local.node.is_ready()
    assert not ready and reason.endswith("is restoring"), reason
    local.node.start()
    try:
        wait_until(lambda: local.node.is_ready()[0], what="ready")
        replica = local.node.replica("t", 3)
        replica.end_offset = replica.position + 11  # type: ignore[union-attr]
        assert local.node.is_ready() == (False, "t[3] lags 11 records")
    finally:
        local.node.stop()


def test_stopping_closes_every_store(tmp_path: Path):
    cluster = Cluster()
    local = start_node(tmp_path, cluster, TABLES)
    cluster.assign("n1", [("t", p) for p in range(4)])
    wait_until(serving(local.node), what="serving")
    replicas = list(local.node.replicas.values())
    local.node.stop()
    for replica in replicas:
        with pytest.raises(StoreClosedError):
            replica.store.get(b"k")


def test_the_view_handlers_get(tmp_path: Path):
    local = make_node(tmp_path, Cluster(), TABLES)
    view = NodeView(local.node)
    assert (view.node_id, view.url) == ("n1", "http://n1.test")
    assert view.tables is local.node.tables and view.replicas is local.node.replicas
    runtime = view.tables["t"]
    for key in ("AAPL", "MSFT", "AAPL"):
        assert view.partition_of(runtime, key) == partition_for(key.encode(), 4)
    assert not hasattr(view, "start") and not hasattr(view, "stop")


def test_tables_are_checked_before_the_broker_is_asked():
    with pytest.raises(ConfigError, match="no tables"):
        check_tables([])
    twice = [parse_table("a=x"), parse_table("b=x")]
    with pytest.raises(ConfigError, match="its own topic"):
        check_tables(twice)
