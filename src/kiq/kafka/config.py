"""librdkafka settings that every kiq client shares.

``partitioner=murmur2_random`` is not optional: librdkafka's default
(``consistent_random``, CRC32) would put keys in other partitions than Spark's
Kafka sink and the Java clients do, and kiq's routing would look in the wrong
place (see ``kiq.partitioning``).
"""

from __future__ import annotations

from typing import Any

from kiq.kafka.logs import KAFKA_LOG
from kiq.kafka.security import PLAINTEXT, KafkaSecurity, librdkafka_config

PARTITIONER = "murmur2_random"


def client_config(
    bootstrap: str, *, security: KafkaSecurity = PLAINTEXT, **overrides: Any
) -> dict[str, Any]:
    """What every kiq client sets: where to connect, with which ``security`` (the
    caller's, ``kiq.kafka.security``), and logs and errors through ``KAFKA_LOG``."""
    return {
        "bootstrap.servers": bootstrap,
        **librdkafka_config(security),
        **KAFKA_LOG.client_config(),
        **overrides,
    }


def producer_config(
    bootstrap: str, *, security: KafkaSecurity = PLAINTEXT, **overrides: Any
) -> dict[str, Any]:
    """Producer settings: Java-compatible partitioning, idempotent, no lost writes."""
    conf: dict[str, Any] = {
        **client_config(bootstrap, security=security),
        "partitioner": PARTITIONER,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
    }
    conf.update(overrides)
    if conf["partitioner"] != PARTITIONER:
        raise ValueError(
            f"partitioner must be {PARTITIONER!r} to agree with Kafka's Java default; "
            f"got {conf['partitioner']!r}"
        )
    return conf


def consumer_config(
    bootstrap: str, group_id: str, *, security: KafkaSecurity = PLAINTEXT, **overrides: Any
) -> dict[str, Any]:
    """Consumer settings: kiq commits by itself, and reads from the start by default."""
    conf: dict[str, Any] = {
        **client_config(bootstrap, security=security),
        "group.id": group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    }
    conf.update(overrides)
    return conf
