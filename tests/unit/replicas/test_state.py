"""A replica's lifecycle: the transition table, and Replica's position, lag and role."""

from __future__ import annotations

import itertools
import time

import pytest

from kiq.replicas import Replica, ReplicaState, Role
from kiq.replicas.state import TRANSITIONS, IllegalTransition, check_transition
from kiq.stores import MemoryPartitionStore

ALLOWED = [(a, b) for a, targets in TRANSITIONS.items() for b in targets]
FORBIDDEN = [(a, b) for a, b in itertools.permutations(ReplicaState, 2) if b not in TRANSITIONS[a]]


def test_the_table_is_the_documented_lifecycle():
    assert set(ALLOWED) == {
        (ReplicaState.RESTORING, ReplicaState.ACTIVE),
        (ReplicaState.RESTORING, ReplicaState.STANDBY),
        (ReplicaState.RESTORING, ReplicaState.REVOKED),
        (ReplicaState.ACTIVE, ReplicaState.STANDBY),
        (ReplicaState.ACTIVE, ReplicaState.REVOKED),
        (ReplicaState.STANDBY, ReplicaState.ACTIVE),
        (ReplicaState.STANDBY, ReplicaState.REVOKED),
    }
    assert set(TRANSITIONS) == set(ReplicaState)


@pytest.mark.parametrize(("current", "target"), ALLOWED)
def test_allowed_transitions_pass(current: ReplicaState, target: ReplicaState):
    check_transition(current, target)


@pytest.mark.parametrize(("current", "target"), FORBIDDEN)
def test_other_transitions_raise(current: ReplicaState, target: ReplicaState):
    with pytest.raises(IllegalTransition, match=f"from {current.value} to {target.value}"):
        check_transition(current, target)


def test_forbidden_set_is_what_the_lifecycle_forbids():
    assert set(FORBIDDEN) == {
        (ReplicaState.ACTIVE, ReplicaState.RESTORING),
        (ReplicaState.STANDBY, ReplicaState.RESTORING),
        (ReplicaState.REVOKED, ReplicaState.RESTORING),
        (ReplicaState.REVOKED, ReplicaState.ACTIVE),
        (ReplicaState.REVOKED, ReplicaState.STANDBY),
    }


@pytest.mark.parametrize("state", list(ReplicaState))
def test_staying_put_is_allowed(state: ReplicaState):
    check_transition(state, state)


def test_serving_states():
    assert {s for s in ReplicaState if s.serving} == {ReplicaState.ACTIVE, ReplicaState.STANDBY}


def replica(role: Role = Role.ACTIVE, applied: int = -1) -> Replica:
    store = MemoryPartitionStore()
    if applied >= 0:
        store.apply([(b"k", b"v", applied)], applied)
    return Replica("users", "users-topic", 3, store, role)


@pytest.mark.parametrize(("current", "target"), ALLOWED)
def test_replica_moves_along_allowed_transitions(current: ReplicaState, target: ReplicaState):
    r = replica()
    r.state = current
    r.move_to(target)
    assert r.state is target


@pytest.mark.parametrize(("current", "target"), FORBIDDEN)
def test_replica_refuses_other_transitions(current: ReplicaState, target: ReplicaState):
    r = replica()
    r.state = current
    with pytest.raises(IllegalTransition):
        r.move_to(target)
    assert r.state is current


def test_new_replica_restores_from_the_next_offset():
    r = replica(applied=41)
    assert r.state is ReplicaState.RESTORING
    assert r.position == 42
    assert r.applied_offset == 41
    assert r.state is not ReplicaState.ACTIVE


def test_empty_store_starts_at_offset_zero():
    r = replica()
    assert r.position == 0
    assert r.applied_offset == -1


def test_lag_unknown_until_the_end_offset_is():
    r = replica(applied=41)
    assert r.lag == -1
    r.end_offset = 50
    assert r.lag == 8
    r.end_offset = 42
    assert r.lag == 0
    r.position = 45
    r.end_offset = 50
    assert r.lag == 5


def test_lag_is_never_negative():
    r = replica(applied=99)
    r.end_offset = 10  # e.g. a stale watermark, or the topic was truncated
    assert r.lag == 0


@pytest.mark.parametrize(
    ("role", "state"), [(Role.ACTIVE, ReplicaState.ACTIVE), (Role.STANDBY, ReplicaState.STANDBY)]
)
def test_mark_caught_up_follows_the_role(role: Role, state: ReplicaState):
    r = replica(role)
    assert r.caught_up_at is None
    r.mark_caught_up()
    assert r.state is state
    assert r.caught_up_at is not None


def test_mark_caught_up_twice_changes_nothing():
    r = replica(Role.STANDBY)
    r.mark_caught_up()
    first = r.caught_up_at
    r.mark_caught_up()
    assert r.state is ReplicaState.STANDBY
    assert r.caught_up_at == first


def test_set_role_while_restoring_changes_only_the_role():
    r = replica(Role.STANDBY)
    r.set_role(Role.ACTIVE)
    assert r.state is ReplicaState.RESTORING
    assert r.role is Role.ACTIVE
    r.mark_caught_up()
    assert r.state is ReplicaState.ACTIVE


def test_set_role_promotes_and_demotes_a_serving_replica():
    r = replica(Role.STANDBY)
    r.mark_caught_up()
    r.set_role(Role.ACTIVE)
    assert (r.role, r.state) == (Role.ACTIVE, ReplicaState.ACTIVE)
    r.set_role(Role.ACTIVE)
    assert r.state is ReplicaState.ACTIVE
    r.set_role(Role.STANDBY)
    assert (r.role, r.state) == (Role.STANDBY, ReplicaState.STANDBY)


def test_revoked_is_terminal():
    r = replica(Role.ACTIVE)
    r.mark_caught_up()
    r.move_to(ReplicaState.REVOKED)
    for target in (ReplicaState.RESTORING, ReplicaState.ACTIVE, ReplicaState.STANDBY):
        with pytest.raises(IllegalTransition):
            r.move_to(target)
    r.mark_caught_up()
    r.set_role(Role.STANDBY)
    assert r.state is ReplicaState.REVOKED


def test_a_restoring_replica_can_be_revoked():
    r = replica()
    r.move_to(ReplicaState.REVOKED)
    assert r.state is ReplicaState.REVOKED
    r.mark_caught_up()
    assert r.state is ReplicaState.REVOKED


def test_describe():
    r = replica(Role.STANDBY, applied=9)
    r.end_offset = 15
    r.mark_caught_up()
    d = r.describe()
    assert 0 <= d.pop("restore_s") < 1  # opened and caught up just now
    assert abs(d.pop("caught_up_at_ms") - time.time() * 1000) < 60_000  # on the wall clock
    assert d == {
        "table": "users",
        "partition": 3,
        "role": "standby",
        "state": "standby",
        "applied_offset": 9,
        "end_offset": 15,
        "lag": 5,
        "restored_records": 0,
        "restore_began_at_ms": None,  # it applied no record while restoring
        "lingering": False,
        "fault": None,
        "keys": 1,  # the store's own count and size
        "bytes": 2,
    }
