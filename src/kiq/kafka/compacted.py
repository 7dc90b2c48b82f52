"""A small compacted topic read whole and written a record at a time: the table catalog.

The catalog is a handful of records (one per table), so it is read from the start to
the end offsets seen when the read began, latest value per key, with no consumer
group: every reader sees all of it, and a reader needs only READ and DESCRIBE on the
topic. A read (and ``ensure``) is asked again while Kafka answers with what passes on
its own, such as a leader not yet elected after a restart (``kiq.kafka.retry``).
Writes wait for the broker's acknowledgement, so a pipeline's declaration is in the
topic before its query writes the table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from kiq.errors import KiqError
from kiq.kafka.admin import create_topics, topic_partitions
from kiq.kafka.config import consumer_config, producer_config
from kiq.kafka.retry import retried, transient
from kiq.kafka.security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)

COMPACTED_ONE = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"}


def ensure(
    bootstrap: str,
    topic: str,
    *,
    security: KafkaSecurity = PLAINTEXT,
    config: Mapping[str, str] = COMPACTED_ONE,
) -> None:
    """Create ``topic`` compacted with one partition unless it exists (order kept per key)."""

    def once() -> None:
        if topic_partitions(bootstrap, topic, security=security) is None:
            create_topics(bootstrap, {topic: 1}, config=dict(config), security=security)

    retried(once, what=f"make sure topic {topic!r} exists", bootstrap=bootstrap)


def read_latest(
    bootstrap: str,
    topic: str,
    *,
    security: KafkaSecurity = PLAINTEXT,
    timeout_s: float = 30.0,
) -> dict[str, bytes]:
    """Every key's latest value (a tombstone removes the key); {} when the topic is absent.

    Transient errors are retried for ``timeout_s`` in all: a node's caller that asks
    with a short one (the pipelines' progress, behind an HTTP request) is not held longer.
    """
    return retried(
        lambda: _read_latest(bootstrap, topic, security, timeout_s),
        what=f"read topic {topic!r}",
        bootstrap=bootstrap,
        retry_for_s=timeout_s,
    )


def _read_latest(
    bootstrap: str, topic: str, security: KafkaSecurity, timeout_s: float
) -> dict[str, bytes]:
    count = topic_partitions(bootstrap, topic, security=security)
    if count is None:
        return {}
    consumer = Consumer(
        consumer_config(
            bootstrap,
            f"kiq-reader-{topic}",
            security=security,
            **{"enable.auto.offset.store": False},
        )
    )
    try:
        ends: dict[int, int] = {}
        for p in range(count):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s, cached=False
            )
            if high > low:
                ends[p] = high
        if not ends:
            return {}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        latest: dict[str, bytes] = {}
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise KiqError(f"could not read topic {topic!r} to its end within {timeout_s:.0f}s")
            for msg in consumer.consume(500, timeout=0.5):
                err = msg.error()
                if err is not None:
                    # No group is used (assign, no commits): its lookup may be refused.
                    if err.code() in (
                        KafkaError._PARTITION_EOF,
                        KafkaError.GROUP_AUTHORIZATION_FAILED,
                    ):
                        continue
                    if transient(err):  # the client fetches again; the deadline bounds it
                        continue
                    raise KiqError(f"reading topic {topic!r}: {err.str()}")
                key = (msg.key() or b"").decode("utf-8", "replace")
                value = msg.value()
                if value is None:
                    latest.pop(key, None)
                else:
                    latest[key] = value
                offset = msg.offset() or 0
                partition = msg.partition() or 0
                if partition in ends and offset + 1 >= ends[partition]:
                    del ends[partition]
        return latest
    finally:
        consumer.close()


def put(
    bootstrap: str,
    topic: str,
    records: Mapping[str, bytes | None],
    *,
    security: KafkaSecurity = PLAINTEXT,
    timeout_s: float = 30.0,
) -> None:
    """Write ``records`` (None: a tombstone) and wait until the broker has every one."""
    producer = Producer(producer_config(bootstrap, security=security))
    failures: list[str] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(err.str())

    for key, value in records.items():
        producer.produce(topic, key=key.encode(), value=value, on_delivery=delivered)
    left = producer.flush(timeout_s)
    if left or failures:
        reason = failures[0] if failures else f"{left} records unacknowledged after {timeout_s}s"
        raise KiqError(f"could not write to topic {topic!r}: {reason}")


class Publisher:
    """Puts records without waiting for them, on one producer kept open: for state written
    every few seconds (a query's progress), where the next put supersedes one that was lost.
    ``failures`` counts records the broker did not take."""

    def __init__(self, bootstrap: str, topic: str, *, security: KafkaSecurity = PLAINTEXT) -> None:
        self._topic = topic
        self._producer = Producer(producer_config(bootstrap, security=security))
        self.failures = 0
        self.last_error = ""

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self.failures += 1
            self.last_error = err.str()

    def put(self, records: Mapping[str, bytes | None]) -> None:
        for key, value in records.items():
            self._producer.produce(
                self._topic, key=key.encode(), value=value, on_delivery=self._delivered
            )
        self._producer.poll(0)

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (a stopped query's last record), for ``timeout_s`` at most."""
        self._producer.flush(timeout_s)


class Follower:
    """Tails a one-partition compacted topic from its start, for as long as it runs: every
    record (None: a tombstone) goes to ``on_records`` in the order written, a batch at a
    time with the records' offsets (for messages about one), on the follower's own thread.

    Nodes follow the table catalog so: a version a pipeline declares, an alias ``kiq
    switch`` moves, a version ``kiq retire`` removes, all reach every node within a fetch
    (at most 100 ms) of being written, with no coordinator but the topic; ``poll_s`` only
    bounds how soon ``stop`` is heard. With ``idle_s``,
    ``on_records`` is also called with no records at most that often while none arrive
    (for work that waits on something else). ``position`` is the
    next offset not yet handed over, so a writer that knows its record's offset can wait
    until this follower has passed it.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        on_records: Callable[[list[tuple[str, bytes | None]], list[int]], None],
        *,
        security: KafkaSecurity = PLAINTEXT,
        poll_s: float = 0.5,
        idle_s: float | None = None,
        name: str = "kiq-follow",
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._on_records = on_records
        self._security = security
        self._poll_s = poll_s
        self._idle_s = idle_s
        self.position = 0
        self._advanced = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def wait_past(self, offset: int, timeout_s: float) -> bool:
        """Whether the record at ``offset`` was handed over within ``timeout_s``."""
        with self._advanced:
            return self._advanced.wait_for(lambda: self.position > offset, timeout_s)

    def _run(self) -> None:
        consumer = Consumer(
            consumer_config(
                self._bootstrap,
                f"kiq-reader-{self._topic}",  # never joined: Describe on kiq-reader-* covers it
                security=self._security,
                # the broker may hold an empty fetch this long: what a switch can wait, at most
                **{"enable.auto.offset.store": False, "fetch.wait.max.ms": 100},
            )
        )
        try:
            consumer.assign([TopicPartition(self._topic, 0, OFFSET_BEGINNING)])
            called = time.monotonic()
            while not self._stop.is_set():
                # poll returns at the first record; consume(0) takes what came with it
                first = consumer.poll(self._poll_s)
                messages = [] if first is None else [first, *consumer.consume(500, timeout=0)]
                records: list[tuple[str, bytes | None]] = []
                offsets: list[int] = []
                last = -1
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        if err.code() not in (
                            KafkaError._PARTITION_EOF,
                            KafkaError.GROUP_AUTHORIZATION_FAILED,
                            KafkaError.UNKNOWN_TOPIC_OR_PART,
                        ):
                            log.warning("following topic %s: %s", self._topic, err.str())
                        continue
                    records.append(((msg.key() or b"").decode("utf-8", "replace"), msg.value()))
                    offsets.append(msg.offset() or 0)
                    last = max(last, offsets[-1])
                idle = self._idle_s is not None and time.monotonic() - called >= self._idle_s
                if records or idle:
                    called = time.monotonic()
                    try:
                        self._on_records(records, offsets)
                    except Exception:  # the next records still arrive; the log has the stack
                        log.exception("applying records of topic %s failed", self._topic)
                if last >= 0:
                    with self._advanced:
                        self.position = last + 1
                        self._advanced.notify_all()
        finally:
            consumer.close()
