"""The dead-letter topic: malformed records go here with the reason, and work goes on."""

from __future__ import annotations

import logging

from confluent_kafka import Producer

from kiq.kafka.config import producer_config
from kiq.kafka.security import KafkaSecurity

log = logging.getLogger(__name__)


class DeadLetters:
    """Sends a bad record, untouched, with headers saying where it came from and why."""

    def __init__(self, bootstrap: str, topic: str, *, security: KafkaSecurity) -> None:
        self.topic = topic
        conf = producer_config(bootstrap, security=security, **{"linger.ms": 50})
        self._producer = Producer(conf)
        self.sent = 0

    def send(
        self,
        source_topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
    ) -> None:
        headers: dict[str, str | bytes | None] = {
            "kiq.reason": reason.encode(),
            "kiq.source.topic": source_topic.encode(),
            "kiq.source.partition": str(partition).encode(),
            "kiq.source.offset": str(offset).encode(),
        }
        log.warning(
            "dead letter topic=%s partition=%d offset=%d reason=%s",
            source_topic,
            partition,
            offset,
            reason,
        )
        while True:
            try:
                self._producer.produce(self.topic, key=key, value=value, headers=headers)
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)
        self.sent += 1

    def flush(self, timeout_s: float = 10.0) -> None:
        self._producer.flush(timeout_s)
