"""The cluster view: for every table partition, its active node and its standbys.

Pure logic, rebuilt from each group description. Actives come from the group's
assignment; standbys are the top-ranked other members by rendezvous hashing of
(node, table, partition), so a node joining or leaving moves as few standbys as
possible, and a surviving standby stays standby when its active dies.

When a partition's replicas move, the nodes that held it before are kept as
``former`` holders: their copies linger, warm, for a while (the materializer's
``linger_s``), while the new holders may still be restoring. Routing asks them
after the active and the standbys, so a rebalance is not a window of 503s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from kiq.cluster.members import Member


class Role(StrEnum):
    """A node's part in a partition: the active owns it, standbys keep warm copies."""

    ACTIVE = "active"
    STANDBY = "standby"


# Former holders kept per partition: the latest ones first.
MAX_FORMER = 3


@dataclass(frozen=True)
class PartitionReplicas:
    active: str | None
    standbys: tuple[str, ...]
    former: tuple[str, ...] = ()

    @property
    def all(self) -> tuple[str, ...]:
        return ((self.active,) if self.active else ()) + self.standbys

    @property
    def candidates(self) -> tuple[str, ...]:
        """Every node that may answer, best first: active, standbys, former holders."""
        return self.all + self.former


@dataclass(frozen=True)
class TableLayout:
    """What the view needs to know of a table."""

    name: str
    topic: str
    partitions: int
    standby_replicas: int
    global_: bool = False


@dataclass(frozen=True)
class ClusterView:
    version: int
    members: Mapping[str, Member]
    replicas: Mapping[tuple[str, int], PartitionReplicas] = field(repr=False)

    def of(self, table: str, partition: int) -> PartitionReplicas:
        return self.replicas.get((table, partition), _NOBODY)

    def url(self, node_id: str) -> str | None:
        member = self.members.get(node_id)
        return member.url if member else None

    def roles_of(self, node_id: str) -> dict[tuple[str, int], Role]:
        """(table, partition) → the role of one node, for the partitions it has one in."""
        roles: dict[tuple[str, int], Role] = {}
        for key, reps in self.replicas.items():
            if reps.active == node_id:
                roles[key] = Role.ACTIVE
            elif node_id in reps.standbys:
                roles[key] = Role.STANDBY
        return roles


_NOBODY = PartitionReplicas(active=None, standbys=())
EMPTY_VIEW = ClusterView(version=0, members={}, replicas={})


def rank(node_id: str, table: str, partition: int) -> int:
    digest = hashlib.blake2b(f"{node_id}/{table}/{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def build_view(
    version: int,
    members: Iterable[Member],
    assignments: Mapping[str, Iterable[tuple[str, int]]],
    tables: Iterable[TableLayout],
    previous: ClusterView | None = None,
) -> ClusterView:
    """Derive every partition's replicas from members and their (topic, partition) sets.

    A partition nobody holds (mid-rebalance) keeps its previous active if that node
    is still a member; otherwise it has no active and one more standby.
    """
    by_id = {m.node_id: m for m in members}
    owner: dict[tuple[str, int], str] = {}
    for node_id in sorted(assignments):
        if node_id in by_id:
            for tp in assignments[node_id]:
                owner.setdefault(tp, node_id)
    replicas: dict[tuple[str, int], PartitionReplicas] = {}
    for t in tables:
        for p in range(t.partitions):
            key = (t.name, p)
            if t.global_:
                replicas[key] = PartitionReplicas(active=None, standbys=tuple(sorted(by_id)))
                continue
            active = owner.get((t.topic, p))
            if active is None and previous is not None:
                before = previous.of(t.name, p).active
                active = before if before in by_id else None
            others = sorted(
                (n for n in by_id if n != active), key=lambda n: rank(n, t.name, p), reverse=True
            )
            wanted = t.standby_replicas + (0 if active else 1)
            standbys = tuple(others[:wanted])
            held = previous.of(t.name, p) if previous is not None else _NOBODY
            now = ((active,) if active else ()) + standbys
            former = tuple(
                n for n in dict.fromkeys(held.all + held.former) if n in by_id and n not in now
            )[:MAX_FORMER]
            replicas[key] = PartitionReplicas(active, standbys, former)
    return ClusterView(version=version, members=by_id, replicas=replicas)
