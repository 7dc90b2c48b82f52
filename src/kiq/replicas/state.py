"""A replica's lifecycle, with its allowed transitions written down.

    RESTORING ──caught up──▶ ACTIVE ◀──promote / demote──▶ STANDBY
        │                      │                             │
        └──────────────────────┴──────────────┬──────────────┘
                                              ▼
                                           REVOKED

A replica restores (reads toward the log end) after it is opened; once caught
up it is ACTIVE if this node owns the partition, else STANDBY. A replica this
node no longer needs lingers a while (it may be the only up-to-date copy during
a rebalance), then is REVOKED: its store closes but stays on disk. A replica's
``Role`` is its node's role in the cluster view, so it is the view's enum.
"""

from __future__ import annotations

from enum import StrEnum

from kiq.cluster import Role
from kiq.errors import KiqError

__all__ = ["TRANSITIONS", "IllegalTransition", "ReplicaState", "Role", "check_transition"]


class ReplicaState(StrEnum):
    RESTORING = "restoring"
    ACTIVE = "active"
    STANDBY = "standby"
    REVOKED = "revoked"

    @property
    def serving(self) -> bool:
        return self in (ReplicaState.ACTIVE, ReplicaState.STANDBY)


TRANSITIONS: dict[ReplicaState, frozenset[ReplicaState]] = {
    ReplicaState.RESTORING: frozenset(
        {ReplicaState.ACTIVE, ReplicaState.STANDBY, ReplicaState.REVOKED}
    ),
    ReplicaState.ACTIVE: frozenset({ReplicaState.STANDBY, ReplicaState.REVOKED}),
    ReplicaState.STANDBY: frozenset({ReplicaState.ACTIVE, ReplicaState.REVOKED}),
    ReplicaState.REVOKED: frozenset(),
}


class IllegalTransition(KiqError):
    """A replica was asked to move to a state its lifecycle does not allow."""


def check_transition(current: ReplicaState, target: ReplicaState) -> None:
    if target is not current and target not in TRANSITIONS[current]:
        raise IllegalTransition(f"replica cannot go from {current.value} to {target.value}")
