"""JSON records into a Kafka topic, keyed by one of their fields, at high rates.

Uses ``producer_config``, so a key lands in the partition that Spark, the Java
clients and kiq's routing (``kiq.partitioning``) expect. Counts what the broker
acknowledged, for feeds and benchmarks that must report it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kiq.errors import KafkaUnavailable
from kiq.kafka.config import consumer_config, producer_config
from kiq.kafka.retry import retried
from kiq.kafka.security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)

DeliveryHook = Callable[[str, int, int, int], None]
"""``on_delivery(key, partition, offset, produced_at_ms)`` for each acknowledged record."""

_POLL_EVERY = 512  # serve delivery reports every this many produces


class JsonProducer:
    """Produces JSON records to ``topic``, keyed by ``record[key_field]``.

    ``produced`` counts records handed to the client, ``delivered`` and ``failed``
    the delivery reports seen so far (served by :meth:`poll` and :meth:`flush`).
    ``produced_at_ms`` in the hook is the record's timestamp: when it was produced.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        key_field: str,
        on_delivery: DeliveryHook | None = None,
        linger_ms: int = 5,
        delivery_timeout_ms: int = 30_000,
        security: KafkaSecurity = PLAINTEXT,
        **overrides: Any,
    ) -> None:
        self.topic = topic
        self.key_field = key_field
        self.produced = 0
        self.delivered = 0
        self.failed = 0
        self.last_error: str | None = None
        self._hook = on_delivery
        conf = producer_config(
            bootstrap,
            security=security,
            **{
                "linger.ms": linger_ms,
                "message.timeout.ms": delivery_timeout_ms,
                "compression.type": "lz4",
                "on_delivery": self._on_delivery,
                "logger": log,  # librdkafka's own warnings, through kiq's logging
                **overrides,
            },
        )
        self._producer = Producer(conf)

    def produce(self, record: Mapping[str, Any], partition: int = -1) -> None:
        """Queue one record (to ``partition``, else the partitioner's choice); waits for room
        when the client's queue is full."""
        self.produce_raw(record[self.key_field].encode(), orjson.dumps(record), partition)

    def produce_raw(self, key: bytes, value: bytes | None, partition: int = -1) -> None:
        """Queue one record as it is (a batch marker, a tombstone); as ``produce``."""
        while True:
            try:
                self._producer.produce(self.topic, value, key, partition)
                break
            except BufferError:
                self._producer.poll(0.01)
        self.produced += 1
        if self.produced % _POLL_EVERY == 0:
            self._producer.poll(0)

    def poll(self, timeout_s: float = 0.0) -> int:
        """Serve delivery reports, waiting up to ``timeout_s`` for one; returns how many."""
        return self._producer.poll(timeout_s)

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for every queued record to be acknowledged; returns how many are still pending."""
        return self._producer.flush(timeout_s)

    @property
    def pending(self) -> int:
        return self.produced - self.delivered - self.failed

    def __enter__(self) -> JsonProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            if self.last_error is None:
                log.warning("record not delivered topic=%s error=%s", self.topic, err)
            self.last_error = str(err)
            return
        self.delivered += 1
        if self._hook is not None:
            self._hook(msg.key().decode(), msg.partition(), msg.offset(), msg.timestamp()[1])


def read_topic(
    bootstrap: str, topic: str, timeout_s: float = 60.0, *, security: KafkaSecurity = PLAINTEXT
) -> list[tuple[bytes, int, int]]:
    """Every record of ``topic`` up to its end now: (value, partition, offset) in log order.

    For checks that must see exactly what the log holds (a benchmark's reference),
    whatever its producers believed they wrote. Asked again whole while Kafka answers
    with what passes on its own (``kiq.kafka.retry``).
    """
    return retried(
        lambda: _read_topic(bootstrap, topic, timeout_s, security),
        what=f"read topic {topic!r}",
        bootstrap=bootstrap,
    )


def _read_topic(
    bootstrap: str, topic: str, timeout_s: float, security: KafkaSecurity
) -> list[tuple[bytes, int, int]]:
    consumer = Consumer(
        consumer_config(bootstrap, f"kiq-read-{uuid.uuid4().hex}", security=security)
    )
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        ends: dict[int, int] = {}
        for partition in meta.partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        out: list[tuple[bytes, int, int]] = []
        deadline = time.monotonic() + timeout_s
        left = dict(ends)
        while left:
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"{topic}: not read to its end within {timeout_s:.0f}s")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    continue
                partition, offset = msg.partition(), msg.offset()
                if partition in left and offset is not None:
                    out.append((msg.value() or b"", partition, offset))
                    if offset + 1 >= left[partition]:
                        del left[partition]
        return out
    finally:
        consumer.close()
