"""Thin wrappers over confluent-kafka: the only package that imports it."""

from kiq.kafka.admin import create_topics, delete_topics, ping, topic_partitions
from kiq.kafka.config import consumer_config, producer_config

__all__ = [
    "consumer_config",
    "create_topics",
    "delete_topics",
    "ping",
    "producer_config",
    "topic_partitions",
]
