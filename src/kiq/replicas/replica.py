"""One local replica of one table partition: its store, role, state and lag."""

from __future__ import annotations

import time
from typing import Protocol

from kiq.replicas.aging import Aging
from kiq.replicas.snapshots import BatchHistory
from kiq.replicas.state import ReplicaState, Role, check_transition
from kiq.replicas.waits import OffsetWaits
from kiq.stores import PartitionStore
from kiq.stores.base import ReadOnlyStore


class Positioned:
    """A replica's offsets as readers see them: ``position`` is the next offset to read,
    ``end_offset`` the log end last seen (-1: not known yet)."""

    __slots__ = ()
    position: int
    end_offset: int

    @property
    def applied_offset(self) -> int:
        return self.position - 1

    @property
    def lag(self) -> int:
        """Records between what this replica applied and the log end (-1: not known yet)."""
        if self.end_offset < 0:
            return -1
        return max(0, self.end_offset - self.position)


class Replica(Positioned):
    """Written by the materializer thread; read (get, lag) by request handlers.

    ``position`` is the next offset to read; ``end_offset`` the log end last seen.
    ``fault`` says why the store last refused a write (a full disk, an I/O error)
    until a retry succeeds: the replica still answers what it has, with its lag.
    Plain attribute writes are atomic under the GIL, so readers need no lock.
    ``waits``: lookups parked until an offset is applied (``replicas.waits``); whoever
    moves ``position`` forward tells it, and revoking the replica releases them.
    ``aging``: what has aged out of a table with a TTL or retention (``replicas.aging``),
    None for a table that keeps every key. ``batches``: the batch markers it applied
    while serving, to read as of each (``replicas.snapshots``); empty for a table whose
    pipeline writes none.
    """

    __slots__ = (
        "aging",
        "batches",
        "caught_up_at",
        "caught_up_at_ms",
        "end_offset",
        "fault",
        "lingering_since",
        "opened_at",
        "partition",
        "position",
        "restore_began_at_ms",
        "restored",
        "role",
        "state",
        "store",
        "table",
        "topic",
        "waits",
    )

    def __init__(
        self,
        table: str,
        topic: str,
        partition: int,
        store: PartitionStore,
        role: Role,
        aging: Aging | None = None,
    ) -> None:
        self.aging = aging
        self.table = table
        self.topic = topic
        self.partition = partition
        self.store = store
        self.role = role
        self.state = ReplicaState.RESTORING
        self.position = store.applied_offset() + 1
        self.end_offset = -1  # unknown until the first watermark or EOF
        self.restored = 0  # records applied since this replica was opened
        self.opened_at = time.monotonic()
        self.caught_up_at: float | None = None
        # The same two moments on the wall clock (epoch ms), comparable across replicas:
        # its first record applied while restoring, and its catching up.
        self.restore_began_at_ms: int | None = None
        self.caught_up_at_ms: int | None = None
        self.lingering_since: float | None = None
        self.fault: str | None = None
        self.waits = OffsetWaits()
        self.batches = BatchHistory()

    def move_to(self, target: ReplicaState) -> None:
        check_transition(self.state, target)
        self.state = target
        if target is ReplicaState.REVOKED:
            self.waits.close()  # its lookups go to the next replica, not on waiting here
            self.batches.clear()

    def set_role(self, role: Role) -> None:
        self.role = role
        if self.state.serving:
            self.move_to(ReplicaState.ACTIVE if role is Role.ACTIVE else ReplicaState.STANDBY)

    def mark_caught_up(self) -> None:
        if self.state is ReplicaState.RESTORING:
            self.caught_up_at = time.monotonic()
            self.caught_up_at_ms = int(time.time() * 1000)
            self.move_to(ReplicaState.ACTIVE if self.role is Role.ACTIVE else ReplicaState.STANDBY)

    def describe(self) -> dict[str, object]:
        return {
            "table": self.table,
            "partition": self.partition,
            "role": self.role.value,
            "state": self.state.value,
            "applied_offset": self.applied_offset,
            "end_offset": self.end_offset,
            "lag": self.lag,
            "restored_records": self.restored,
            "restore_s": None
            if self.caught_up_at is None
            else round(self.caught_up_at - self.opened_at, 3),
            "restore_began_at_ms": self.restore_began_at_ms,
            "caught_up_at_ms": self.caught_up_at_ms,
            "lingering": self.lingering_since is not None,
            "fault": self.fault,
            **self._size(),
        }

    def _size(self) -> dict[str, int]:
        """Keys and bytes, from the store's own estimates; 0 when it is closed."""
        try:
            return {"keys": self.store.count(), "bytes": self.store.size_bytes()}
        except Exception:  # closed under us (a revoke, a retire): nothing to count
            return {"keys": 0, "bytes": 0}


class ReadOnlyReplica(Protocol):
    """A local replica as its readers see it (``NodeView``, ``routing.reader``); a
    ``Replica`` is one. Its store is read-only, its role and state are not theirs to
    move; ``waits`` is where a read parks until an offset is applied."""

    @property
    def table(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def state(self) -> ReplicaState: ...

    @property
    def store(self) -> ReadOnlyStore: ...

    @property
    def position(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def applied_offset(self) -> int: ...

    @property
    def lag(self) -> int: ...

    @property
    def waits(self) -> OffsetWaits: ...

    @property
    def aging(self) -> Aging | None: ...

    @property
    def batches(self) -> BatchHistory: ...

    def describe(self) -> dict[str, object]: ...
