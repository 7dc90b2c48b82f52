"""A table's log read back as the nodes would apply it, checked from Kafka alone: each
partition's records in order, its batch markers (``kiq.markers``), and the table's state
as of a batch every partition has marked."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kiq.kafka import consumer_config, end_offsets
from kiq.markers import MARKER_KEY, batch_of


@dataclass(frozen=True)
class Entry:
    offset: int
    key: bytes | None
    value: bytes | None

    @property
    def batch(self) -> int | None:
        """The batch id when this is a marker, else None."""
        return batch_of(self.value) if self.key == MARKER_KEY else None


def read_log(bootstrap: str, topic: str, timeout_s: float = 60.0) -> dict[int, list[Entry]]:
    """Every partition of ``topic`` from its start to its end offset now, in order."""
    ends = end_offsets(bootstrap, topic)
    logs: dict[int, list[Entry]] = {p: [] for p in ends}
    wanted = {p for p, end in ends.items() if end > 0}
    consumer = Consumer(consumer_config(bootstrap, f"ledger-{uuid.uuid4().hex}"))
    consumer.assign([TopicPartition(topic, p, 0) for p in sorted(wanted)])
    deadline = time.monotonic() + timeout_s
    try:
        while wanted:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(wanted)} not read to their end")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                p, offset = msg.partition(), msg.offset()
                if offset < ends[p]:
                    logs[p].append(Entry(offset, msg.key(), msg.value()))
                if offset + 1 >= ends[p]:
                    wanted.discard(p)
    finally:
        consumer.close()
    return logs


def marked(log: list[Entry]) -> list[int]:
    """The batch ids of a partition's markers, in log order."""
    return [b for e in log if (b := e.batch) is not None]


def common_batches(logs: dict[int, list[Entry]]) -> list[int]:
    """The batch ids every partition has a marker of, in order."""
    sets = [set(marked(log)) for log in logs.values()]
    return sorted(set.intersection(*sets)) if sets else []


def state_at(log: list[Entry], batch: int) -> dict[bytes, bytes] | None:
    """A partition's keys and values as of ``batch``'s last marker (a batch Spark ran again
    is marked again), applying tombstones; None when the partition has no such marker."""
    state: dict[bytes, bytes] = {}
    snapshot: dict[bytes, bytes] | None = None
    for e in log:
        b = e.batch
        if b is not None:
            if b > batch:
                break
            if b == batch:
                snapshot = dict(state)
            continue
        if e.key is None:
            continue
        if e.value is None:
            state.pop(e.key, None)
        else:
            state[e.key] = e.value
    return snapshot


def table_at(logs: dict[int, list[Entry]], batch: int) -> dict[bytes, bytes]:
    """The whole table as of ``batch``, every partition at its marker (KeyError if one has
    none)."""
    out: dict[bytes, bytes] = {}
    for p, log in logs.items():
        state = state_at(log, batch)
        if state is None:
            raise KeyError(f"partition {p} has no marker of batch {batch}")
        out |= state
    return out
