"""Ticks into a Kafka topic: keyed by symbol, JSON values, murmur2 partitioning.

The one place the feeds talk to Kafka. It uses ``kiq.kafka.producer_config``,
so a symbol lands in the partition that Spark, the Java clients and kiq's
routing (``kiq.partitioning``) expect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from confluent_kafka import Producer

from kiq.kafka import producer_config

log = logging.getLogger(__name__)

DeliveryHook = Callable[[str, int, int, int], None]
"""``on_delivery(symbol, partition, offset, produced_at_ms)`` for each acknowledged tick."""

_POLL_EVERY = 512  # serve delivery reports every this many produces


class TickProducer:
    """Produces ticks to ``topic`` and counts what the broker acknowledged.

    ``produced`` counts ticks handed to the client, ``delivered`` and ``failed``
    the delivery reports seen so far (served by :meth:`poll` and :meth:`flush`).
    ``produced_at_ms`` in the hook is the record's timestamp: when it was produced.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        on_delivery: DeliveryHook | None = None,
        linger_ms: int = 5,
        delivery_timeout_ms: int = 30_000,
        **overrides: Any,
    ) -> None:
        self.topic = topic
        self.produced = 0
        self.delivered = 0
        self.failed = 0
        self.last_error: str | None = None
        self._hook = on_delivery
        conf = producer_config(
            bootstrap,
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

    def produce(self, tick: Mapping[str, Any]) -> None:
        """Queue one tick; waits for room when the client's queue is full."""
        key = tick["symbol"].encode()
        value = orjson.dumps(tick)
        while True:
            try:
                self._producer.produce(self.topic, value, key)
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
        """Wait for every queued tick to be acknowledged; returns how many are still pending."""
        return self._producer.flush(timeout_s)

    @property
    def pending(self) -> int:
        return self.produced - self.delivered - self.failed

    def __enter__(self) -> TickProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            if self.last_error is None:
                log.warning("tick not delivered topic=%s error=%s", self.topic, err)
            self.last_error = str(err)
            return
        self.delivered += 1
        if self._hook is not None:
            self._hook(msg.key().decode(), msg.partition(), msg.offset(), msg.timestamp()[1])
