"""Which offsets of a partition were written when: Kafka's offsets for times.

A table with a TTL measures age by its log (``kiq.replicas.aging``): the first
offset written at or after ``now - ttl`` is the cutoff below which every key has
expired. This client has a consumer of its own (the materializer's is used by its
thread only) that never reads a record: it only asks the brokers for offsets. A
question is asked again while the brokers answer with what passes on its own (a leader
not elected yet), within the question's own ``timeout_s`` (``kiq.kafka.retry``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kiq.kafka.config import client_config
from kiq.kafka.retry import retried
from kiq.kafka.security import KafkaSecurity


class LogTimes:
    """Offsets by time of table partitions; used from one thread (the expiry sweeper's)."""

    def __init__(self, bootstrap: str, client_id: str, *, security: KafkaSecurity) -> None:
        self._bootstrap = bootstrap
        self._config = {
            **client_config(bootstrap, security=security),
            # Required by librdkafka; this consumer never joins, reads or commits.
            "group.id": f"kiq-times-{uuid.uuid4().hex}",
            "client.id": client_id,
            "enable.auto.commit": False,
        }
        self._made: Consumer | None = None  # at the first question: most nodes never ask

    @property
    def _consumer(self) -> Consumer:
        if self._made is None:
            self._made = Consumer(self._config)
        return self._made

    def first_offsets_since(
        self, topic: str, partitions: Sequence[int], timestamp_ms: int, timeout_s: float = 5.0
    ) -> dict[int, tuple[int, int]]:
        """Per partition, the first offset whose record was written at or after
        ``timestamp_ms`` (the log end when every record is older), and the log end.

        The ends are asked first: a record appended between the two questions was
        written after ``timestamp_ms``, so an end from before it is never too high.
        Raises ``KafkaUnavailable`` when the brokers do not answer in ``timeout_s``
        (``KafkaException`` for an error that waiting does not change).
        """
        return retried(
            lambda: self._first_offsets_since(topic, partitions, timestamp_ms, timeout_s),
            what=f"ask offsets by time of topic {topic!r}",
            bootstrap=self._bootstrap,
            retry_for_s=timeout_s,
            level=logging.DEBUG,  # the caller's loop logs what still fails
        )

    def _first_offsets_since(
        self, topic: str, partitions: Sequence[int], timestamp_ms: int, timeout_s: float
    ) -> dict[int, tuple[int, int]]:
        ends = {
            p: self._consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s, cached=False
            )[1]
            for p in partitions
        }
        asked = [TopicPartition(topic, p, timestamp_ms) for p in partitions]
        found = self._consumer.offsets_for_times(asked, timeout=timeout_s)
        offsets: dict[int, tuple[int, int]] = {}
        for tp in found:
            if tp.error is not None:
                raise KafkaException(tp.error)
            # -1 (OFFSET_END): no record at or after the time, every one is older.
            end = ends[tp.partition]
            offsets[tp.partition] = (tp.offset if tp.offset >= 0 else end, end)
        return offsets

    def log_ends(
        self, topic: str, partitions: Sequence[int], timeout_s: float = 5.0
    ) -> dict[int, int]:
        """Per partition, the log end (the next offset to be written), asked of the brokers
        now: how far a streaming query's input reaches (``kiq.pipelines.progress``).
        Raises ``KafkaUnavailable`` when they do not answer in ``timeout_s``
        (``KafkaException`` for an error that waiting does not change)."""
        return retried(
            lambda: self._log_ends(topic, partitions, timeout_s),
            what=f"ask the end offsets of topic {topic!r}",
            bootstrap=self._bootstrap,
            retry_for_s=timeout_s,
            level=logging.DEBUG,  # the caller's loop logs what still fails
        )

    def _log_ends(self, topic: str, partitions: Sequence[int], timeout_s: float) -> dict[int, int]:
        return {
            p: self._consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s, cached=False
            )[1]
            for p in partitions
        }

    def close(self) -> None:
        if self._made is not None:
            self._made.close()
