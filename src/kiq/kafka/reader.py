"""A consumer with manual assignment that reads table partitions for the materializer.

No group management: which partitions to read, and from which offset, is kiq's
decision (each store knows the offset it applied). Partition EOF events are on,
so the reader can tell when a replica has caught up with the log end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition


@dataclass(frozen=True, slots=True)
class Fetched:
    """One consumed record, or an end-of-partition marker (``eof=True``, ``offset`` = end)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    eof: bool = False


class PartitionReader:
    def __init__(self, bootstrap: str, client_id: str, **overrides: object) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                # Required by librdkafka even with manual assignment; nothing is committed.
                "group.id": f"kiq-reader-{uuid.uuid4().hex}",
                "client.id": client_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 20,
                "fetch.min.bytes": 1,
                "queued.max.messages.kbytes": 65536,
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

    def consume(self, max_records: int = 2000, timeout_s: float = 0.05) -> list[Fetched]:
        out: list[Fetched] = []
        for msg in self._consumer.consume(num_messages=max_records, timeout=timeout_s):
            err = msg.error()
            if err is None:
                out.append(
                    Fetched(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
                )
            elif err.code() == KafkaError._PARTITION_EOF:
                out.append(Fetched(msg.topic(), msg.partition(), msg.offset(), None, None, True))
            elif not err.retriable():
                raise RuntimeError(f"reading {msg.topic()}[{msg.partition()}] failed: {err}")
        return out

    def end_offset(self, topic: str, partition: int, timeout_s: float = 2.0) -> int:
        """The log end offset (high watermark) of one partition, asked of the broker."""
        _low, high = self._consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout_s, cached=False
        )
        return high

    def close(self) -> None:
        self._consumer.close()
