"""Thin wrappers over confluent-kafka: the only package that imports it."""

from kiq.kafka.admin import broker_count, create_topics, delete_topics, ping, topic_partitions
from kiq.kafka.config import consumer_config, producer_config

__all__ = [
    "broker_count",
    "consumer_config",
    "create_topics",
    "delete_topics",
    "ping",
    "producer_config",
    "topic_partitions",
]
