"""Membership in the kiq consumer group (see ``kiq.cluster``), and watching the whole group.

``GroupMember`` holds this node's seat: a consumer subscribed to the table topics
with cooperative rebalancing whose assigned partitions are paused at once — it
never reads data (the materializer does), it only holds ownership and heartbeats.
``GroupMember.describe`` asks the group coordinator for every member's client.id
and assignment, from which the cluster view is derived.

Describing a group is the one coordinator request kiq makes, and librdkafka has a
use-after-free there (librdkafka issue 4605): an admin request that times out
while it waits for the coordinator leaves that wait behind, and when the
coordinator returns the wait frees the request's state twice, which aborts the
process (``rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0'``)
— in 3 of 8 broker restarts here, with a timed-out describe every half second
of the outage. So no describe ever times out inside librdkafka: it is sent with
librdkafka's longest timeout, awaited for ``timeout_s`` in Python, and when that
runs out the admin client is dropped; destroying a client fails its waiting
requests on the clean path, before the coordinator can answer them. The next
describe makes a new client. With this, 0 of 9 restarts aborted.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kiq.errors import KafkaUnavailable
from kiq.kafka.config import client_config
from kiq.kafka.logs import KAFKA_LOG
from kiq.kafka.security import KafkaSecurity

log = logging.getLogger(__name__)

# librdkafka's longest admin request timeout (1 hour): the Python side gives up far sooner.
_LIBRDKAFKA_TIMEOUT_S = 3600.0

Partition = tuple[str, int]


@dataclass(frozen=True)
class GroupMemberInfo:
    """One member of the group as the coordinator describes it."""

    client_id: str
    partitions: frozenset[Partition]


class GroupMember:
    """This node's membership; ``owned`` is the set of (topic, partition) it is active for."""

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        client_id: str,
        topics: list[str],
        on_change: Callable[[], None],
        *,
        security: KafkaSecurity,
        session_timeout_ms: int = 6000,
    ) -> None:
        self.group_id = group_id
        self.client_id = client_id
        self._bootstrap = bootstrap
        self._security = security
        self._topics = topics
        self._new_topics: list[str] | None = None  # set_topics's, for the thread to subscribe
        self._on_change = on_change
        self._conf = {
            **client_config(bootstrap, security=security),
            "group.id": group_id,
            "client.id": client_id,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": max(100, session_timeout_ms // 6),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "latest",
        }
        self._admin: AdminClient | None = None
        self._describing = threading.Lock()
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

    def set_topics(self, topics: list[str]) -> None:
        """Subscribe to exactly ``topics`` from now on (a table version came or went): the
        group rebalances, cooperatively, the partitions of the others staying where they are."""
        with self._lock:
            if topics != self._topics:
                self._new_topics = list(topics)

    def describe(self, timeout_s: float = 5.0) -> list[GroupMemberInfo]:
        """Every member of the group and the partitions it is assigned.

        This member's own entry holds what it owns now, which is fresher than the
        coordinator's answer. Raises ``KafkaUnavailable`` when the coordinator does
        not answer within ``timeout_s``.
        """
        with self._describing:
            if self._admin is None:
                self._admin = AdminClient(client_config(self._bootstrap, security=self._security))
            future = self._admin.describe_consumer_groups(
                [self.group_id], request_timeout=_LIBRDKAFKA_TIMEOUT_S
            )[self.group_id]
            try:
                desc = future.result(timeout=timeout_s)
            except concurrent.futures.TimeoutError:
                self._admin = None  # see the module docstring: never let it time out inside
                raise KafkaUnavailable(
                    f"the coordinator of group {self.group_id!r} did not answer in {timeout_s:.0f}s"
                ) from None
            except KafkaException as exc:
                raise KafkaUnavailable(
                    f"describing group {self.group_id!r} failed: {exc.args[0].str()}"
                ) from exc
            finally:
                if self._admin is not None:
                    self._admin.poll(0)  # hands its queued log lines to KAFKA_LOG
        KAFKA_LOG.reachable()
        members: list[GroupMemberInfo] = []
        for m in desc.members:
            if m.client_id == self.client_id:
                with self._lock:
                    owned = self._owned
            else:
                tps = m.assignment.topic_partitions if m.assignment else []
                owned = frozenset((tp.topic, tp.partition) for tp in tps)
            members.append(GroupMemberInfo(m.client_id, owned))
        return members

    # -- the consumer thread ---------------------------------------------------

    def _run(self) -> None:
        consumer = Consumer(self._conf)
        self._subscribe(consumer, self._topics)
        try:
            while not self._stop.is_set():
                with self._lock:
                    topics, self._new_topics = self._new_topics, None
                if topics is not None:
                    self._topics = topics
                    log.info("group topics group=%s topics=%s", self.group_id, ",".join(topics))
                    self._subscribe(consumer, topics)
                try:
                    consumer.poll(0.2)  # heartbeats and rebalance callbacks; partitions are paused
                except KafkaException as exc:
                    log.warning("group poll failed group=%s error=%s", self.group_id, exc)
        finally:
            consumer.close()
            log.info("left group group=%s client=%s", self.group_id, self.client_id)

    def _subscribe(self, consumer: Consumer, topics: list[str]) -> None:
        if not topics:
            consumer.unsubscribe()
            return
        consumer.subscribe(
            topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
        )

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        consumer.pause(partitions)
        self._update(add={(tp.topic, tp.partition) for tp in partitions})
        self._joined.set()

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_unassign(partitions)
        self._update(remove={(tp.topic, tp.partition) for tp in partitions})

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("group membership lost group=%s partitions=%d", self.group_id, len(partitions))
        self._revoked(consumer, partitions)

    def _update(
        self, add: set[Partition] | None = None, remove: set[Partition] | None = None
    ) -> None:
        with self._lock:
            self._owned = frozenset((self._owned | (add or set())) - (remove or set()))
        log.info(
            "group assignment group=%s added=%d removed=%d owned=%d",
            self.group_id,
            len(add or ()),
            len(remove or ()),
            len(self._owned),
        )
        self._on_change()
