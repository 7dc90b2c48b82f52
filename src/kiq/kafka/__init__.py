"""Thin wrappers over confluent-kafka: the only package that imports it.

Every wrapper that connects takes the ``KafkaSecurity`` to connect with.
"""

from kiq.kafka.admin import (
    broker_count,
    create_topics,
    delete_topics,
    end_offsets,
    ping,
    topic_partitions,
)
from kiq.kafka.config import consumer_config, producer_config
from kiq.kafka.security import PLAINTEXT, KafkaSecurity

__all__ = [
    "PLAINTEXT",
    "KafkaSecurity",
    "broker_count",
    "consumer_config",
    "create_topics",
    "delete_topics",
    "end_offsets",
    "ping",
    "producer_config",
    "topic_partitions",
]
