"""Membership in the kiq consumer group (see ``kiq.cluster``), and watching the whole group.

``GroupMember`` holds this node's seat: a consumer subscribed to the table topics
with cooperative rebalancing whose assigned partitions are paused at once — it
never reads data (the materializer does), it only holds ownership and heartbeats.
``GroupMember.describe`` asks the group coordinator for every member's client.id
and assignment, from which ``build_view`` derives the cluster view.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kiq.cluster.members import Member, decode_client_id, encode_client_id

log = logging.getLogger(__name__)


class GroupMember:
    """This node's membership; ``owned`` is the set of (topic, partition) it is active for."""

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        node_id: str,
        url: str,
        topics: list[str],
        on_change: Callable[[], None],
        session_timeout_ms: int = 6000,
    ) -> None:
        self.group_id = group_id
        self.node_id = node_id
        self._topics = topics
        self._on_change = on_change
        self._conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "client.id": encode_client_id(node_id, url),
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": max(100, session_timeout_ms // 6),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "latest",
        }
        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._lock = threading.Lock()
        self._owned: frozenset[tuple[str, int]] = frozenset()
        self._stop = threading.Event()
        self._joined = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kiq-group", daemon=True)

    @property
    def owned(self) -> frozenset[tuple[str, int]]:
        return self._owned

    def start(self) -> None:
        self._thread.start()

    def wait_joined(self, timeout_s: float) -> bool:
        return self._joined.wait(timeout_s)

    def stop(self) -> None:
        """Leave the group (so the others rebalance at once) and stop."""
        self._stop.set()
        self._thread.join(timeout=30)

    def describe(self, timeout_s: float = 5.0) -> tuple[list[Member], dict[str, set]]:
        """Every kiq member of the group and the (topic, partition)s it is assigned."""
        futures = self._admin.describe_consumer_groups([self.group_id], request_timeout=timeout_s)
        desc = futures[self.group_id].result()
        members: list[Member] = []
        assignments: dict[str, set[tuple[str, int]]] = {}
        for m in desc.members:
            member = decode_client_id(m.client_id)
            if member is None:
                continue
            members.append(member)
            tps = m.assignment.topic_partitions if m.assignment else []
            assignments.setdefault(member.node_id, set()).update(
                (tp.topic, tp.partition) for tp in tps
            )
        with self._lock:  # our own assignment is fresher than the coordinator's answer
            if self.node_id in assignments:
                assignments[self.node_id] = set(self._owned)
        return members, assignments

    # -- the consumer thread ---------------------------------------------------

    def _run(self) -> None:
        consumer = Consumer(self._conf)
        consumer.subscribe(
            self._topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
        )
        try:
            while not self._stop.is_set():
                try:
                    consumer.poll(0.2)  # heartbeats and rebalance callbacks; partitions are paused
                except KafkaException as exc:
                    log.warning("group poll failed group=%s error=%s", self.group_id, exc)
        finally:
            consumer.close()
            log.info("left group group=%s node=%s", self.group_id, self.node_id)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        consumer.pause(partitions)
        self._update(add={(tp.topic, tp.partition) for tp in partitions})
        self._joined.set()

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_unassign(partitions)
        self._update(remove={(tp.topic, tp.partition) for tp in partitions})

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("group membership lost node=%s partitions=%d", self.node_id, len(partitions))
        self._revoked(consumer, partitions)

    def _update(self, add: set | None = None, remove: set | None = None) -> None:
        with self._lock:
            self._owned = frozenset((self._owned | (add or set())) - (remove or set()))
        log.info(
            "group assignment node=%s added=%d removed=%d owned=%d",
            self.node_id, len(add or ()), len(remove or ()), len(self._owned),
        )  # fmt: skip
        self._on_change()
