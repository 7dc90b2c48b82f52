"""Producing from the event loop: await the broker's acknowledgement of each record.

A poll thread serves librdkafka's delivery reports and hands each result to the
awaiting coroutine, so request handlers can answer with the partition and
offset a record got (what `min_offset` read-your-writes needs).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from kiq.errors import KiqError
from kiq.kafka.config import producer_config
from kiq.kafka.security import KafkaSecurity


class ProduceFailed(KiqError):
    """The broker did not acknowledge a record; nothing was written."""


# A record's headers, as confluent-kafka takes them.
Headers = list[tuple[str, str | bytes | None]]

# An API write waits for the broker this long, then fails: librdkafka's default (5 minutes)
# would hold the HTTP request through a whole broker outage.
DELIVERY_TIMEOUT_MS = 10_000


class AsyncProducer:
    def __init__(
        self,
        bootstrap: str,
        *,
        security: KafkaSecurity,
        delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS,
    ) -> None:
        conf = producer_config(
            bootstrap,
            security=security,
            **{"linger.ms": 1, "message.timeout.ms": delivery_timeout_ms},
        )
        self._producer = Producer(conf)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="kiq-producer", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)

    async def send(self, topic: str, key: bytes, value: bytes | None) -> tuple[int, int]:
        """Write one record; returns (partition, offset) once the broker has it."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[tuple[int, int]] = loop.create_future()

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                result = ProduceFailed(f"writing to {topic} failed: {err}")
                loop.call_soon_threadsafe(_settle, done, None, result)
            else:
                loop.call_soon_threadsafe(_settle, done, (msg.partition(), msg.offset()), None)

        try:
            self._producer.produce(topic, key=key, value=value, on_delivery=delivered)
        except (BufferError, KafkaException) as exc:
            raise ProduceFailed(f"writing to {topic} failed: {exc}") from exc
        return await done

    def send_all(
        self,
        records: Sequence[tuple[str, int, bytes, bytes | None, Headers | None]],
        timeout_s: float = DELIVERY_TIMEOUT_MS / 1000,
    ) -> None:
        """Write (topic, partition, key, value, headers) records from a thread that is
        not the event loop's, once the broker has every one; ``ProduceFailed`` if not."""
        pending = len(records)
        failed: list[str] = []
        done = threading.Event()
        lock = threading.Lock()

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            nonlocal pending
            with lock:
                if err is not None:
                    failed.append(str(err))
                pending -= 1
                if pending == 0:
                    done.set()

        if not records:
            return
        for topic, partition, key, value, headers in records:
            try:
                self._producer.produce(
                    topic,
                    key=key,
                    value=value,
                    partition=partition,
                    headers=headers,
                    on_delivery=delivered,
                )
            except (BufferError, KafkaException) as exc:
                raise ProduceFailed(f"writing to {topic} failed: {exc}") from exc
        if not done.wait(timeout_s + 1):
            raise ProduceFailed(f"{pending} records not acknowledged in {timeout_s:.0f}s")
        if failed:
            raise ProduceFailed(f"{len(failed)} records failed: {failed[0]}")

    def close(self, timeout_s: float = 10.0) -> None:
        self._producer.flush(timeout_s)
        self._stop.set()
        self._thread.join(timeout=5)


def _settle(fut: asyncio.Future[Any], value: object, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)
