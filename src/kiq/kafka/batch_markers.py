"""Producing batch markers (``kiq.markers``) from a pipeline's driver.

A consistent query (``ctx.write_table(consistent=True)``) calls ``MarkerProducer.mark``
once a micro-batch's records are written: one marker to every partition of each table
topic the query wrote, acknowledged by every in-sync replica before it returns, so the
batch commits only once its markers are in. The partitions are asked of the broker at
each batch, so a topic given more partitions gets markers in the new ones too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from kiq.errors import KiqError
from kiq.kafka.config import producer_config
from kiq.kafka.security import PLAINTEXT, KafkaSecurity
from kiq.markers import HEADERS, MARKER_KEY, marker_value

# How long a batch waits for its markers (and for a topic's partitions) before it fails.
MARKER_TIMEOUT_S = 30.0


class MarkerFailed(KiqError):
    """A batch's markers were not all acknowledged: the batch must not commit."""


def marker_records(
    partitions: Iterable[tuple[str, int]], batch_id: int
) -> list[tuple[str, int, bytes, bytes]]:
    """(topic, partition, key, value) of batch ``batch_id``'s markers: one for each
    (topic, partition count) given, in every partition of it."""
    value = marker_value(batch_id)
    return [(topic, p, MARKER_KEY, value) for topic, count in partitions for p in range(count)]


class MarkerProducer:
    """One driver's producer of markers, kept for the query's life (a batch reuses its
    connections)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        security: KafkaSecurity = PLAINTEXT,
        timeout_s: float = MARKER_TIMEOUT_S,
    ) -> None:
        self._timeout_s = timeout_s
        ms = int(timeout_s * 1000)
        self._producer = Producer(
            producer_config(
                bootstrap, security=security, **{"linger.ms": 0, "message.timeout.ms": ms}
            )
        )

    def partitions(self, topic: str) -> int:
        """``topic``'s partition count, as the broker says now."""
        try:
            found = self._producer.list_topics(topic, timeout=self._timeout_s).topics.get(topic)
        except KafkaException as exc:
            raise MarkerFailed(f"no partitions of {topic} for its batch markers: {exc}") from exc
        if found is None or found.error is not None or not found.partitions:
            why = found.error if found is not None else "not found"
            raise MarkerFailed(f"no partitions of {topic} for its batch markers: {why}")
        return len(found.partitions)

    def mark(self, topics: Sequence[str], batch_id: int) -> int:
        """Write batch ``batch_id``'s marker to every partition of ``topics``; returns once
        every one is acknowledged (acks=all), else ``MarkerFailed``. Returns how many."""
        records = marker_records(((t, self.partitions(t)) for t in topics), batch_id)
        failed: list[str] = []

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failed.append(f"{msg.topic()}[{msg.partition()}]: {err}")

        for topic, partition, key, value in records:
            try:
                self._producer.produce(
                    topic,
                    key=key,
                    value=value,
                    partition=partition,
                    headers=HEADERS,
                    on_delivery=delivered,
                )
            except (BufferError, KafkaException) as exc:
                raise MarkerFailed(f"batch {batch_id}'s marker to {topic}: {exc}") from exc
        left = self._producer.flush(self._timeout_s)
        if left:
            raise MarkerFailed(
                f"batch {batch_id}: {left} markers not acknowledged in {self._timeout_s:.0f}s"
            )
        if failed:
            raise MarkerFailed(f"batch {batch_id}: {len(failed)} markers failed: {failed[0]}")
        return len(records)

    def close(self) -> None:
        self._producer.flush(self._timeout_s)
