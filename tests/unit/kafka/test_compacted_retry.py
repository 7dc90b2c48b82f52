"""kiq.kafka.compacted.read_latest: retried while Kafka answers "not leader", within the
caller's own timeout."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from kiq.errors import KafkaUnavailable
from kiq.kafka import compacted

NOT_LEADER = KafkaError(
    KafkaError.NOT_LEADER_FOR_PARTITION,
    "Failed to get watermark offsets: Broker: Not leader for partition",
)


def test_a_read_is_asked_again_until_the_leader_is_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def read(bootstrap: str, topic: str, *_: object) -> dict[str, bytes]:
        calls.append(topic)
        if len(calls) < 3:
            raise KafkaException(NOT_LEADER)
        return {"k": b"v"}

    monkeypatch.setattr(compacted, "_read_latest", read)
    assert compacted.read_latest("b:9092", "kiq-catalog", timeout_s=5) == {"k": b"v"}
    assert calls == ["kiq-catalog"] * 3


def test_a_short_timeout_bounds_the_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's progress read asks with 5 s behind an HTTP request: never held for the
    commands' 30 s."""

    def read(*_: object) -> dict[str, bytes]:
        raise KafkaException(NOT_LEADER)

    monkeypatch.setattr(compacted, "_read_latest", read)
    began = time.monotonic()
    with pytest.raises(KafkaUnavailable, match="NOT_LEADER_FOR_PARTITION"):
        compacted.read_latest("b:9092", "kiq-progress", timeout_s=0.5)
    assert time.monotonic() - began < 2
