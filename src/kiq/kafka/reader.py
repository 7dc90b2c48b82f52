"""A consumer with manual assignment that reads table partitions for the materializer.

No group management: which partitions to read, and from which offset, is kiq's
decision (each store knows the offset it applied). Partition EOF events are on,
so the reader can tell when a replica has caught up with the log end.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from kiq.kafka.config import client_config
from kiq.kafka.logs import KAFKA_LOG
from kiq.kafka.security import KafkaSecurity

log = logging.getLogger(__name__)

Partition = tuple[str, int]


class Record(Protocol):
    """One record of a table partition, as the reader hands it on.

    confluent-kafka's ``Message`` has these methods, so records pass through as
    they came: copying each into a Python object would cost more than applying
    it (restores apply about 500k records/s), and the layers above the reader
    never see confluent-kafka's types.
    """

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def offset(self) -> int: ...

    def partition(self) -> int: ...

    def headers(self) -> list[tuple[str, bytes | None]] | None: ...


@dataclass(slots=True)
class Fetched:
    """What one ``consume`` brought, grouped by (topic, partition).

    ``records`` are error free, in offset order per partition. ``ends`` maps a
    partition that reached its log end to that end offset.
    """

    records: dict[Partition, list[Record]] = field(default_factory=dict)
    ends: dict[Partition, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.records or self.ends)


class PartitionReader:
    def __init__(
        self, bootstrap: str, client_id: str, *, security: KafkaSecurity, **overrides: object
    ) -> None:
        self._consumer = Consumer(
            {
                **client_config(bootstrap, security=security),
                # Required by librdkafka even with manual assignment; nothing is committed.
                "group.id": f"kiq-reader-{uuid.uuid4().hex}",
                "client.id": client_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 20,
                "fetch.min.bytes": 1,
                # Restores are fetch-bound: big fetches per partition, and when the
                # prefetch queue is full, fetch again soon (librdkafka waits 1 s by
                # default), doubled the records a node materializes per second. The queue
                # itself stays one fetch deep: 64 MB of prefetch held a restoring node at
                # 532 MB for 1,000,000 keys, 4 MB at 237 MB, at the same rate (kiq bench
                # restore; docs/benchmarks.md).
                "max.partition.fetch.bytes": 4 * 1024 * 1024,
                "queued.max.messages.kbytes": 4096,
                "fetch.queue.backoff.ms": 10,
                **overrides,
            }
        )

    def assign(self, positions: Iterable[tuple[str, int, int]]) -> None:
        """Start reading (topic, partition) at ``next_offset`` (-1: from the beginning)."""
        tps = [
            TopicPartition(t, p, OFFSET_BEGINNING if off < 0 else off) for t, p, off in positions
        ]
        if tps:
            self._consumer.incremental_assign(tps)

    def unassign(self, partitions: Iterable[tuple[str, int]]) -> None:
        tps = [TopicPartition(t, p) for t, p in partitions]
        if tps:
            self._consumer.incremental_unassign(tps)

    def consume(self, max_records: int = 5000, timeout_s: float = 0.05) -> Fetched:
        """What has arrived, up to ``max_records``: waits up to ``timeout_s`` for the first
        record or event only. librdkafka's batch consume waits for a full batch or the
        whole timeout, so a record landing in a quiet table waited up to ``timeout_s`` on
        the node; here it is returned as soon as it is fetched, with whatever queued
        behind it (a busy table still comes in batches)."""
        records: dict[tuple[str | None, int | None], list[Message]] = {}
        ends: dict[tuple[str | None, int | None], int | None] = {}
        first = self._consumer.poll(timeout_s)
        messages = [] if first is None else [first]
        if first is not None and max_records > 1:
            messages += self._consumer.consume(num_messages=max_records - 1, timeout=0)
        for msg in messages:
            err = msg.error()
            if err is None:
                tp = (msg.topic(), msg.partition())
                batch = records.get(tp)
                if batch is None:
                    records[tp] = [msg]
                else:
                    batch.append(msg)
            elif err.code() == KafkaError._PARTITION_EOF:
                ends[(msg.topic(), msg.partition())] = msg.offset()
            elif err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED and msg.topic() is None:
                # The reader assigns partitions and commits nothing: its group is only
                # looked up, and a user without Describe on it still reads.
                log.warning("kafka: %s (this reader uses no group; reading goes on)", err.str())
            elif not err.retriable():
                raise RuntimeError(f"reading {msg.topic()}[{msg.partition()}] failed: {err}")
        if records or ends:
            KAFKA_LOG.reachable()
        # A message without an error, or an EOF event, always has a topic, a partition
        # and an offset (the stubs make them optional for other events): these are
        # what Fetched promises, as they are.
        return Fetched(
            cast("dict[Partition, list[Record]]", records), cast("dict[Partition, int]", ends)
        )

    def end_offset(
        self, topic: str, partition: int, timeout_s: float = 2.0, fresh: bool = False
    ) -> int:
        """The log end offset (high watermark) of one partition.

        Every fetch response carries it, so for a partition being read the
        consumer's cached value is at most one fetch old; the broker is asked
        only before the first fetch. Asking it every time cost each node a
        request per replica twice a second, on the broker's cores too.
        """
        tp = TopicPartition(topic, partition)
        _low, high = -1, -1
        if not fresh:
            _low, high = self._consumer.get_watermark_offsets(tp, cached=True)
        if high < 0:
            _low, high = self._consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
        return high

    def close(self) -> None:
        self._consumer.close()
