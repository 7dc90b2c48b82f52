"""Producing and draining topics in tests, through confluent-kafka as kiq configures it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Producer

from kiq.kafka import consumer_config, producer_config


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    headers: dict[str, bytes] = field(default_factory=dict)


def produce(
    bootstrap: str,
    topic: str,
    items: Iterable[tuple[str, str]],
    partition_of: Callable[[str], int] | None = None,
) -> dict[str, int]:
    """Produce (key, value) pairs; returns key → partition the broker acknowledged.

    ``partition_of`` picks partitions explicitly (composite keys that must stay
    with their entity); otherwise the partitioner (murmur2) does.
    """
    producer = Producer(producer_config(bootstrap))
    placed: dict[str, int] = {}
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            placed[msg.key().decode()] = msg.partition()

    for key, value in items:
        while True:
            try:
                extra = {} if partition_of is None else {"partition": partition_of(key)}
                producer.produce(
                    topic, key=key.encode(), value=value.encode(), on_delivery=on_delivery, **extra
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records not delivered"
    assert not errors, errors[:5]
    return placed


def drain(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> list[Record]:
    """Read ``topic`` from the start until ``expected`` records arrived (or time runs out)."""
    consumer = Consumer(consumer_config(bootstrap, f"test-{uuid.uuid4().hex}"))
    consumer.subscribe([topic])
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(records) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                headers = dict(msg.headers() or [])
                records.append(
                    Record(msg.key(), msg.value(), msg.partition(), msg.offset(), headers)
                )
    finally:
        consumer.close()
    return records
