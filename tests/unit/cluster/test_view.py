"""The cluster view: actives from assignments, standbys by rendezvous rank."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

import pytest

from kiq.cluster import ClusterView, Member, PartitionReplicas, Role, build_view
from kiq.cluster.view import EMPTY_VIEW, TableLayout, rank

TABLE = TableLayout(name="users", topic="users-topic", partitions=30, standby_replicas=1)

Assignments = dict[str, list[tuple[str, int]]]


def members(n: int) -> list[Member]:
    return [Member(f"n{i}", f"http://10.0.0.{i}:8080") for i in range(n)]


def round_robin(nodes: list[Member], table: TableLayout = TABLE) -> Assignments:
    out: Assignments = {m.node_id: [] for m in nodes}
    for p in range(table.partitions):
        out[nodes[p % len(nodes)].node_id].append((table.topic, p))
    return out


def view_of(
    nodes: list[Member],
    assignments: Mapping[str, list[tuple[str, int]]],
    table: TableLayout = TABLE,
    previous: ClusterView | None = None,
    version: int = 1,
) -> ClusterView:
    return build_view(version, nodes, assignments, [table], previous)


def test_actives_come_from_assignments():
    nodes = members(3)
    view = view_of(nodes, {"n0": [(TABLE.topic, 0), (TABLE.topic, 2)], "n1": [(TABLE.topic, 1)]})
    assert view.of("users", 0).active == "n0"
    assert view.of("users", 1).active == "n1"
    assert view.of("users", 2).active == "n0"
    assert view.version == 1
    assert set(view.members) == {"n0", "n1", "n2"}


def test_assignments_of_other_topics_are_ignored():
    view = view_of(members(2), {"n0": [("other-topic", 0)]})
    assert view.of("users", 0).active is None


def test_standbys_are_other_members_never_the_active():
    for k in (0, 1, 2, 3):
        table = TableLayout("users", "users-topic", 20, standby_replicas=k)
        nodes = members(4)
        view = view_of(nodes, round_robin(nodes, table), table)
        for p in range(table.partitions):
            reps = view.of("users", p)
            assert reps.active is not None
            assert reps.active not in reps.standbys
            assert len(reps.standbys) == k
            assert len(set(reps.standbys)) == k
            assert set(reps.standbys) <= set(view.members)
            assert reps.all == (reps.active, *reps.standbys)


def test_standbys_are_capped_by_the_members_there_are():
    table = TableLayout("users", "users-topic", 4, standby_replicas=5)
    nodes = members(3)
    view = view_of(nodes, round_robin(nodes, table), table)
    for p in range(4):
        reps = view.of("users", p)
        assert len(reps.standbys) == 2
        assert set(reps.all) == {"n0", "n1", "n2"}


def test_standbys_are_the_top_ranked_other_members():
    table = TableLayout("users", "users-topic", 40, standby_replicas=2)
    nodes = members(6)
    view = view_of(nodes, round_robin(nodes, table), table)
    for p in range(table.partitions):
        reps = view.of("users", p)
        left_out = set(view.members) - set(reps.all)
        ranks = [rank(n, "users", p) for n in reps.standbys]
        assert ranks == sorted(ranks, reverse=True)
        assert min(ranks) > max(rank(n, "users", p) for n in left_out)


def test_same_input_same_view_whatever_the_order():
    table = TableLayout("users", "users-topic", 50, standby_replicas=2)
    nodes = members(5)
    assignments = round_robin(nodes, table)
    first = view_of(nodes, assignments, table)
    assert view_of(nodes, assignments, table).replicas == first.replicas
    shuffled = nodes[:]
    random.Random(7).shuffle(shuffled)
    reordered = {n: assignments[n] for n in reversed(list(assignments))}
    assert view_of(shuffled, reordered, table).replicas == first.replicas


def test_a_partition_claimed_twice_gets_one_active_the_same_everywhere():
    both = [(TABLE.topic, 0)]
    nodes = members(3)
    a = view_of(nodes, {"n2": both, "n1": both})
    b = view_of(list(reversed(nodes)), {"n1": both, "n2": both})
    assert a.of("users", 0) == b.of("users", 0)
    assert a.of("users", 0).active in {"n1", "n2"}


def test_removing_a_bystander_changes_nothing_it_did_not_hold():
    table = TableLayout("users", "users-topic", 60, standby_replicas=2)
    nodes = members(6)
    before = view_of(nodes, round_robin(nodes, table), table)
    gone = "n3"
    survivors = [m for m in nodes if m.node_id != gone]
    # Survivors keep their assignments; the dead node's partitions are unowned for now.
    assignments = {n: tps for n, tps in round_robin(nodes, table).items() if n != gone}
    after = view_of(survivors, assignments, table, previous=before, version=2)
    untouched = [p for p in range(60) if gone not in before.of("users", p).all]
    assert len(untouched) > 20
    for p in untouched:
        assert after.of("users", p) == before.of("users", p)


@pytest.mark.parametrize("heir", ["standby", "other", "nobody"])
def test_surviving_standby_stays_when_the_active_dies(heir: str):
    nodes = members(3)
    before = view_of(nodes, round_robin(nodes))
    dead = "n0"
    survivors = [m for m in nodes if m.node_id != dead]
    assignments = {n: list(tps) for n, tps in round_robin(nodes).items() if n != dead}
    orphaned = [p for p in range(TABLE.partitions) if before.of("users", p).active == dead]
    assert orphaned
    for p in orphaned:
        standby = before.of("users", p).standbys[0]
        if heir == "standby":
            assignments[standby].append((TABLE.topic, p))
        elif heir == "other":
            other = next(m.node_id for m in survivors if m.node_id != standby)
            assignments[other].append((TABLE.topic, p))
    after = view_of(survivors, assignments, previous=before, version=2)
    for p in orphaned:
        standby = before.of("users", p).standbys[0]
        reps = after.of("users", p)
        assert standby in reps.all
        assert dead not in reps.all
        if heir == "nobody":
            assert reps.active is None
            assert set(reps.standbys) == {"n1", "n2"}


def test_surviving_standbys_stay_with_more_members():
    table = TableLayout("users", "users-topic", 100, standby_replicas=2)
    nodes = members(5)
    before = view_of(nodes, round_robin(nodes, table), table)
    dead = "n4"
    survivors = [m for m in nodes if m.node_id != dead]
    assignments = {n: list(tps) for n, tps in round_robin(nodes, table).items() if n != dead}
    orphaned = [p for p in range(100) if before.of("users", p).active == dead]
    for p in orphaned:  # worst case: the group hands it to a node that was not a standby
        stand = before.of("users", p).standbys
        heir = next(m.node_id for m in survivors if m.node_id not in stand)
        assignments[heir].append((table.topic, p))
    after = view_of(survivors, assignments, table, previous=before, version=2)
    for p in orphaned:
        assert set(before.of("users", p).standbys) <= set(after.of("users", p).standbys)


def test_unowned_partition_keeps_the_previous_active_if_still_a_member():
    nodes = members(3)
    before = view_of(nodes, round_robin(nodes))
    assert before.of("users", 4).active == "n1"
    assignments = round_robin(nodes)
    assignments["n1"].remove((TABLE.topic, 4))  # mid-rebalance: nobody holds it
    after = view_of(nodes, assignments, previous=before, version=2)
    reps = after.of("users", 4)
    assert reps.active == "n1"
    assert len(reps.standbys) == TABLE.standby_replicas
    assert "n1" not in reps.standbys


def test_unowned_partition_without_a_living_active_gets_an_extra_standby():
    table = TableLayout("users", "users-topic", 9, standby_replicas=1)
    nodes = members(4)
    before = view_of(nodes, round_robin(nodes, table), table)
    assert before.of("users", 1).active == "n1"
    survivors = [m for m in nodes if m.node_id != "n1"]
    assignments = {n: tps for n, tps in round_robin(nodes, table).items() if n != "n1"}
    after = view_of(survivors, assignments, table, previous=before, version=2)
    reps = after.of("users", 1)
    assert reps.active is None
    assert len(reps.standbys) == 2
    assert "n1" not in reps.standbys
    assert reps.all == reps.standbys


def test_unowned_partition_without_a_previous_view_gets_an_extra_standby():
    view = view_of(members(4), {})
    reps = view.of("users", 0)
    assert reps.active is None
    assert len(reps.standbys) == TABLE.standby_replicas + 1


def test_an_assignment_held_by_a_non_member_is_ignored():
    view = view_of(members(2), {"ghost": [(TABLE.topic, 0)]})
    reps = view.of("users", 0)
    assert reps.active is None
    assert "ghost" not in reps.all


def test_global_tables_list_every_member():
    table = TableLayout("countries", "countries-topic", 3, standby_replicas=1, global_=True)
    nodes = members(4)
    view = view_of(nodes, round_robin(nodes, table), table)
    for p in range(3):
        reps = view.of("countries", p)
        assert reps.active is None
        assert sorted(reps.standbys) == ["n0", "n1", "n2", "n3"]
    assert view.roles_of("n2") == {("countries", p): Role.STANDBY for p in range(3)}


def test_several_tables_in_one_view():
    a = TableLayout("a", "ta", 2, standby_replicas=1)
    g = TableLayout("g", "tg", 1, standby_replicas=0, global_=True)
    nodes = members(2)
    view = build_view(3, nodes, {"n0": [("ta", 0)], "n1": [("ta", 1)]}, [a, g])
    assert set(view.replicas) == {("a", 0), ("a", 1), ("g", 0)}
    assert view.of("a", 0) == PartitionReplicas("n0", ("n1",))
    assert view.of("a", 1) == PartitionReplicas("n1", ("n0",))


def test_roles_of():
    table = TableLayout("users", "users-topic", 6, standby_replicas=1)
    nodes = members(3)
    view = view_of(nodes, round_robin(nodes, table), table)
    roles = view.roles_of("n0")
    assert roles[("users", 0)] is Role.ACTIVE
    assert roles[("users", 3)] is Role.ACTIVE
    standby_for = {p for p in range(6) if "n0" in view.of("users", p).standbys}
    assert {k for k, r in roles.items() if r is Role.STANDBY} == {("users", p) for p in standby_for}
    assert set(roles) == {("users", p) for p in range(6) if "n0" in view.of("users", p).all}
    assert view.roles_of("nobody") == {}


def test_unknown_partition_has_nobody():
    view = view_of(members(2), {})
    assert view.of("users", 999).all == ()
    assert view.of("nope", 0) == PartitionReplicas(None, ())
    assert EMPTY_VIEW.of("users", 0).all == ()


def test_url():
    view = view_of(members(2), {})
    assert view.url("n1") == "http://10.0.0.1:8080"
    assert view.url("n9") is None
    assert EMPTY_VIEW.url("n0") is None


def test_standbys_spread_roughly_evenly():
    nodes = members(3)
    view = view_of(nodes, round_robin(nodes))
    counts = Counter(s for p in range(30) for s in view.of("users", p).standbys)
    assert set(counts) == {"n0", "n1", "n2"}
    assert sum(counts.values()) == 30
    for node, n in counts.items():
        assert 5 <= n <= 15, (node, counts)


def test_former_holders_are_kept_after_the_replicas_move():
    nodes = members(4)
    before = view_of(nodes, round_robin(nodes))
    after = view_of(nodes[:3], round_robin(nodes[:3]), previous=before, version=2)
    moved = 0
    for p in range(TABLE.partitions):
        old, new = before.of("users", p), after.of("users", p)
        assert set(new.former) == {n for n in old.all if n not in new.all and n != "n3"}
        assert "n3" not in new.candidates  # no longer a member: never asked
        assert new.candidates[: len(new.all)] == new.all  # asked after active and standbys
        moved += bool(new.former)
    assert moved > 0
    # Unchanged replicas keep what they had; a former holder back in the replicas leaves.
    again = view_of(nodes[:3], round_robin(nodes[:3]), previous=after, version=3)
    assert again.replicas == after.replicas
    back = view_of(nodes, round_robin(nodes), previous=after, version=4)
    for p in range(TABLE.partitions):
        assert not set(back.of("users", p).former) & set(back.of("users", p).all)
