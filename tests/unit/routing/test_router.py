"""Which replicas answer for a partition, best first."""

from __future__ import annotations

import time

import pytest

from kiq.cluster import ClusterView, Member, PartitionReplicas
from kiq.replicas import Replica, ReplicaState, Role
from kiq.routing import LOCAL, Router
from kiq.routing import router as router_module
from kiq.routing.router import SUSPECT_AFTER
from kiq.stores import MemoryPartitionStore

URL = {n: f"http://{n}:8080" for n in ("a", "b", "c", "d")}


def view(active: str | None, *standbys: str, members: tuple[str, ...] = ("a", "b", "c", "d")):
    return ClusterView(
        version=1,
        members={n: Member(n, URL[n]) for n in members},
        replicas={("t", 0): PartitionReplicas(active, standbys)},
    )


def local(state: ReplicaState = ReplicaState.STANDBY, lag: int = 0) -> Replica:
    r = Replica("t", "topic", 0, MemoryPartitionStore(), Role.STANDBY)
    r.state = state
    r.end_offset = r.position + lag
    return r


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(router_module.time, "monotonic", c)
    return c


def test_active_first_then_standbys_in_view_order():
    r = Router("me")
    assert r.targets(view("b", "c", "a"), "t", 0, None) == [URL["b"], URL["c"], URL["a"]]


def test_no_replicas_no_targets():
    r = Router("me")
    assert r.targets(view(None), "t", 0, None) == []
    assert r.targets(view("a"), "t", 1, None) == []
    assert r.targets(view("a"), "other", 0, None) == []


def test_local_takes_this_nodes_place_in_the_list():
    assert Router("b").targets(view("a", "b", "c"), "t", 0, local()) == [URL["a"], LOCAL, URL["c"]]
    active = local(ReplicaState.ACTIVE)
    assert Router("a").targets(view("a", "b"), "t", 0, active) == [LOCAL, URL["b"]]


def test_this_node_is_never_a_url_target():
    targets = Router("b").targets(view("a", "b", "c"), "t", 0, None)
    assert targets == [URL["a"], URL["c"]]


def test_restoring_local_replica_is_skipped():
    r = Router("a")
    targets = r.targets(view("a", "b"), "t", 0, local(ReplicaState.RESTORING))
    assert targets == [URL["b"]]


def test_revoked_local_replica_is_skipped():
    r = Router("a")
    assert r.targets(view("a", "b"), "t", 0, local(ReplicaState.REVOKED)) == [URL["b"]]


def test_max_lag_filters_the_local_replica():
    r = Router("a")
    v = view("a", "b")
    assert r.targets(v, "t", 0, local(lag=5), max_lag=5) == [LOCAL, URL["b"]]
    assert r.targets(v, "t", 0, local(lag=6), max_lag=5) == [URL["b"]]
    assert r.targets(v, "t", 0, local(lag=0), max_lag=0) == [LOCAL, URL["b"]]
    assert r.targets(v, "t", 0, local(lag=10**6), max_lag=None) == [LOCAL, URL["b"]]


def test_a_local_replica_within_the_callers_max_lag_comes_first():
    r = Router("b")
    v = view("a", "b", "c")
    assert r.targets(v, "t", 0, local(lag=3)) == [URL["a"], LOCAL, URL["c"]]
    assert r.targets(v, "t", 0, local(lag=3), max_lag=3) == [LOCAL, URL["a"], URL["c"]]
    assert r.targets(v, "t", 0, local(lag=4), max_lag=3) == [URL["a"], URL["c"]]
    lingering = Router("d").targets(v, "t", 0, local(lag=0), max_lag=0)  # d: no candidate
    assert lingering == [LOCAL, URL["a"], URL["b"], URL["c"]]


def test_max_lag_refuses_a_replica_whose_lag_is_unknown():
    unknown = local()
    unknown.end_offset = -1
    assert unknown.lag == -1
    r = Router("a")
    assert r.targets(view("a", "b"), "t", 0, unknown, max_lag=100) == [URL["b"]]
    assert r.targets(view("a", "b"), "t", 0, unknown) == [LOCAL, URL["b"]]


def test_failed_url_goes_to_the_back_until_it_succeeds(clock: Clock):
    r = Router("me", penalty_s=5.0)
    v = view("a", "b", "c")
    r.failed(URL["a"])
    assert r.targets(v, "t", 0, None) == [URL["b"], URL["c"], URL["a"]]
    clock.now += 4.9
    assert r.targets(v, "t", 0, None) == [URL["b"], URL["c"], URL["a"]]
    r.succeeded(URL["a"])
    assert r.targets(v, "t", 0, None) == [URL["a"], URL["b"], URL["c"]]


def test_failed_url_returns_when_the_penalty_expires(clock: Clock):
    r = Router("me", penalty_s=5.0)
    v = view("a", "b", "c")
    r.failed(URL["b"])
    assert r.targets(v, "t", 0, None) == [URL["a"], URL["c"], URL["b"]]
    clock.now += 5.1
    assert r.targets(v, "t", 0, None) == [URL["a"], URL["b"], URL["c"]]


def test_penalty_expires_in_real_time():
    r = Router("me", penalty_s=0.02)
    v = view("a", "b")
    r.failed(URL["a"])
    assert r.targets(v, "t", 0, None) == [URL["b"], URL["a"]]
    time.sleep(0.05)
    assert r.targets(v, "t", 0, None) == [URL["a"], URL["b"]]


def test_several_failed_urls_keep_their_relative_order(clock: Clock):
    r = Router("me")
    r.failed(URL["c"])
    r.failed(URL["a"])
    assert r.targets(view("a", "b", "c", "d"), "t", 0, None) == [
        URL["b"],
        URL["d"],
        URL["a"],
        URL["c"],
    ]


def test_local_comes_before_failed_urls(clock: Clock):
    r = Router("b")
    r.failed(URL["a"])
    assert r.targets(view("a", "b", "c"), "t", 0, local()) == [LOCAL, URL["c"], URL["a"]]


def test_succeeded_on_a_healthy_url_is_harmless():
    r = Router("me")
    r.succeeded(URL["a"])
    assert r.targets(view("a", "b"), "t", 0, None) == [URL["a"], URL["b"]]


def test_lingering_local_replica_not_in_the_list_is_used_last(clock: Clock):
    r = Router("d")
    v = view("a", "b")
    assert r.targets(v, "t", 0, local()) == [URL["a"], URL["b"], LOCAL]
    r.failed(URL["a"])
    assert r.targets(v, "t", 0, local()) == [URL["b"], URL["a"], LOCAL]
    assert r.targets(view(None), "t", 0, local()) == [LOCAL]


def test_lingering_local_replica_must_still_be_servable():
    r = Router("d")
    assert r.targets(view("a"), "t", 0, local(ReplicaState.REVOKED)) == [URL["a"]]
    assert r.targets(view("a"), "t", 0, local(lag=9), max_lag=1) == [URL["a"]]


def test_nodes_that_are_not_members_are_never_targets():
    v = view("ghost", "b", "phantom", "c", members=("b", "c"))
    assert Router("me").targets(v, "t", 0, None) == [URL["b"], URL["c"]]


def test_members_without_a_replica_are_never_targets():
    assert Router("me").targets(view("a", "b"), "t", 0, None) == [URL["a"], URL["b"]]


def test_former_holders_come_after_the_standbys():
    v = ClusterView(
        version=1,
        members={n: Member(n, URL[n]) for n in URL},
        replicas={("t", 0): PartitionReplicas("a", ("b",), ("d", "c"))},
    )
    assert Router("me").targets(v, "t", 0, None) == [URL["a"], URL["b"], URL["d"], URL["c"]]


def test_a_node_that_keeps_losing_races_unanswered_goes_last_until_it_answers(clock):
    r = Router("me")
    v = view("b", "c")
    for _ in range(SUSPECT_AFTER - 1):
        assert not r.unanswered(URL["b"])
    assert r.targets(v, "t", 0, None) == [URL["b"], URL["c"]]
    assert r.unanswered(URL["b"])  # now avoided
    assert r.targets(v, "t", 0, None) == [URL["c"], URL["b"]]
    r.failed(URL["b"])  # a failure's short penalty does not lift it
    clock.now += 3600
    assert r.targets(v, "t", 0, None) == [URL["c"], URL["b"]]
    r.succeeded(URL["b"])
    assert r.targets(v, "t", 0, None) == [URL["b"], URL["c"]]


def test_an_answer_in_between_resets_the_count_of_races_lost():
    r = Router("me")
    for _ in range(SUSPECT_AFTER - 1):
        r.unanswered(URL["b"])
    r.succeeded(URL["b"])
    assert not r.unanswered(URL["b"])
    assert not r.suspect(URL["b"])


def test_a_read_workers_own_node_takes_its_place_when_the_local_copy_cannot_answer():
    home = "http://127.0.0.1:9999"
    worker = Router("a", home=home)
    assert worker.targets(view("a", "b"), "t", 0, None) == [home, URL["b"]]
    restoring = local(ReplicaState.RESTORING)
    assert worker.targets(view("b", "a"), "t", 0, restoring) == [URL["b"], home]
    assert worker.targets(view("a", "b"), "t", 0, local(ReplicaState.ACTIVE)) == [LOCAL, URL["b"]]


# -- orders kept between lookups: each must change as soon as what it came from does --


def test_a_failure_after_an_order_was_kept_moves_the_node_back_at_once(clock: Clock):
    r = Router("me", penalty_s=5.0)
    v = view("a", "b")
    assert r.targets(v, "t", 0, None) == [URL["a"], URL["b"]]
    r.failed(URL["a"])
    assert r.targets(v, "t", 0, None) == [URL["b"], URL["a"]]
    clock.now += 5.1  # the penalty ran out: no call in between to notice
    assert r.targets(v, "t", 0, None) == [URL["a"], URL["b"]]


def test_a_suspect_node_moves_back_and_returns_once_it_answers():
    r = Router("me")
    v = view("a", "b")
    assert r.targets(v, "t", 0, None) == [URL["a"], URL["b"]]
    for _ in range(SUSPECT_AFTER):
        r.unanswered(URL["a"])
    assert r.targets(v, "t", 0, None) == [URL["b"], URL["a"]]
    r.succeeded(URL["a"])
    assert r.targets(v, "t", 0, None) == [URL["a"], URL["b"]]


def test_the_callers_list_is_its_own():
    r = Router("me")
    v = view("a", "b")
    r.targets(v, "t", 0, None).pop(0)  # the multiget path takes targets off its list
    assert r.targets(v, "t", 0, None) == [URL["a"], URL["b"]]


def test_a_new_view_and_the_local_replicas_state_count_at_once():
    r = Router("b")
    replica = local()
    v = view("a", "b")
    assert r.targets(v, "t", 0, replica) == [URL["a"], LOCAL]
    replica.state = ReplicaState.RESTORING
    assert r.targets(v, "t", 0, replica) == [URL["a"]]
    assert r.targets(view("c", "b"), "t", 0, replica) == [URL["c"]]
    assert r.targets(v, "t", 0, replica, max_lag=5) == [URL["a"]]
    replica.state = ReplicaState.STANDBY
    assert r.targets(v, "t", 0, replica, max_lag=5) == [LOCAL, URL["a"]]
