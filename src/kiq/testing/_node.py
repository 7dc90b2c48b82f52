"""One kiq node in process, its Kafka replaced by topics in memory.

The node is kiq's own: ``Node``, its ``Materializer`` and replicas, memory stores, the
cluster view, and ``create_app``'s ASGI app with its routers, checks and errors. What
stands in for Kafka is only what a node is handed: the partition reader (``Reader``, over
``Topics``), the group seat (``Seat``: one member, every partition its own), the
dead-letter sender, the writer that takes ``Request.write`` and ``Request.delete``
(``Writer``, appending to ``Topics``), and the transport to peers (there are none).

A table is its topic, as on a real node: a record appended to a table's topic is
materialized by the node's own materializer (decoded by the table's codec, a record it
cannot serve sent to its dead letters), so a route's write to a table's topic shows in
the table, as it would once Kafka has it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from kiq.cluster.members import encode_client_id
from kiq.kafka.group import GroupMemberInfo
from kiq.kafka.reader import Fetched, Record

if TYPE_CHECKING:
    from kiq.node import Node

Partition = tuple[str, int]


class Message:
    """One record of a topic in memory, as the reader hands records on (``kiq.kafka.Record``)."""

    __slots__ = ("_key", "_offset", "_partition", "_value")

    def __init__(self, key: bytes | None, value: bytes | None, partition: int, offset: int):
        self._key = key
        self._value = value
        self._partition = partition
        self._offset = offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return self._partition

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return None  # no sweep writes here: kiq.testing ages no table


class Topics:
    """The topics the node reads and writes: records appended, offsets from 0 per partition."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self._logs: dict[Partition, list[Message]] = {}

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None) -> int:
        """Appends a record; its offset."""
        with self.changed:
            log = self._logs.setdefault((topic, partition), [])
            log.append(Message(key, value, partition, len(log)))
            self.changed.notify_all()
            return len(log) - 1

    def end(self, topic: str, partition: int) -> int:
        """The offset the next record of ``(topic, partition)`` gets."""
        return len(self._logs.get((topic, partition), ()))

    def since(self, tp: Partition, position: int, most: int) -> list[Message]:
        return self._logs.get(tp, [])[position : position + most]


class Reader:
    """The materializer's partition reader (``kiq.kafka.reader.PartitionReader``) over
    ``Topics``: it brings what was appended, and says when a partition is read to its end."""

    def __init__(self, topics: Topics) -> None:
        self._topics = topics
        self._positions: dict[Partition, int] = {}
        self._told_end: dict[Partition, int] = {}

    def assign(self, positions: Iterable[tuple[str, int, int]]) -> None:
        with self._topics.changed:
            for topic, partition, offset in positions:
                self._positions[(topic, partition)] = max(offset, 0)
                self._told_end.pop((topic, partition), None)

    def unassign(self, partitions: Iterable[Partition]) -> None:
        with self._topics.changed:
            for tp in partitions:
                self._positions.pop(tp, None)
                self._told_end.pop(tp, None)

    def consume(self, max_records: int = 5000, timeout_s: float = 0.05) -> Fetched:
        topics = self._topics
        with topics.changed:
            fetched = self._fetch(max_records)
            if not fetched:
                topics.changed.wait(timeout_s)
                fetched = self._fetch(max_records)
        return fetched

    def _fetch(self, max_records: int) -> Fetched:
        fetched = Fetched()
        for tp, position in self._positions.items():
            new = self._topics.since(tp, position, max_records)
            if new:
                fetched.records[tp] = cast("list[Record]", new)
                position += len(new)
                self._positions[tp] = position
            end = self._topics.end(*tp)
            if position == end and self._told_end.get(tp) != end:
                fetched.ends[tp] = end  # as librdkafka's partition EOF event, once per end
                self._told_end[tp] = end
        return fetched

    def end_offset(
        self, topic: str, partition: int, timeout_s: float = 2.0, fresh: bool = False
    ) -> int:
        return self._topics.end(topic, partition)

    def close(self) -> None: ...


class Seat:
    """The node's seat in its group (``kiq.node.Group``): the only member, owning every
    partition of every table."""

    def __init__(self, node_id: str, url: str, owned: Iterable[Partition]) -> None:
        self._client_id = encode_client_id(node_id, url)
        self._owned = frozenset(owned)

    @property
    def owned(self) -> frozenset[Partition]:
        return self._owned

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wait_joined(self, timeout_s: float) -> bool:
        return True

    def describe(self) -> list[GroupMemberInfo]:
        return [GroupMemberInfo(self._client_id, self._owned)]

    def set_topics(self, topics: list[str]) -> None: ...  # a test's tables do not change


@dataclass(frozen=True)
class DeadLetter:
    """A record of a table's topic the node could not serve (not JSON, no key, ...)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str


class DeadLetters:
    """The node's dead-letter sender (``kiq.kafka.dlq.DeadLetters``), keeping what it is sent."""

    def __init__(self) -> None:
        self.sent: list[DeadLetter] = []

    def send(
        self,
        source_topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
    ) -> None:
        self.sent.append(DeadLetter(source_topic, partition, offset, key, value, reason))

    def flush(self, timeout_s: float = 10.0) -> None: ...


@dataclass(frozen=True)
class Written:
    """A record a route wrote (``Request.write``) or deleted (``Request.delete``: ``value``
    None, a tombstone), with the partition and offset it was given."""

    topic: str
    key: bytes
    value: bytes | None
    partition: int
    offset: int

    def text(self) -> str | None:
        """The value as text (UTF-8), None for a tombstone."""
        return None if self.value is None else self.value.decode()


@dataclass
class Writer:
    """The node's writer (``kiq.node_build.LogWriter``): appends to ``Topics`` (partition 0:
    every topic in process has one) and keeps what it took in ``written``. With ``error``
    set, a write raises it instead (``WriteFailed``: Kafka did not take the record)."""

    topics: Topics
    written: list[Written] = field(default_factory=list)
    error: Exception | None = None

    async def send(self, topic: str, key: bytes, value: bytes | None) -> tuple[int, int]:
        if self.error is not None:
            raise self.error
        offset = self.topics.append(topic, 0, key, value)
        self.written.append(Written(topic, key, value, 0, offset))
        return 0, offset

    def close(self) -> None: ...


class NoPeers:
    """The transport to other nodes (``kiq.peers.sender.Transport``): there are none."""

    async def request(
        self,
        base_url: str,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> tuple[int, bytes]:
        raise ConnectionError(f"{base_url}: kiq.testing runs one node, no peers")

    def close(self) -> None: ...


def wait_caught_up(node: Node, topics: Topics, timeout_s: float = 10.0) -> None:
    """Until every replica of ``node`` serves and has applied its topic to the end."""
    deadline = time.monotonic() + timeout_s
    wanted = [
        (name, t.spec.topic, p) for name, t in node.tables.items() for p in range(t.partitions)
    ]
    while True:
        behind = []
        for table, topic, partition in wanted:
            replica = node.replica(table, partition)
            if replica is None or not replica.state.serving:
                behind.append(f"{table}[{partition}] not serving")
            elif replica.position < topics.end(topic, partition):
                behind.append(f"{table}[{partition}] at {replica.position}")
        if not behind:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"kiq.testing: the node did not catch up: {', '.join(behind)}")
        time.sleep(0.001)
