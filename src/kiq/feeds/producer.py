"""Ticks into a Kafka topic: keyed by symbol, JSON values, murmur2 partitioning."""

from __future__ import annotations

from typing import Any

from kiq.kafka.records import DeliveryHook, JsonProducer

__all__ = ["DeliveryHook", "TickProducer"]


class TickProducer(JsonProducer):
    """A ``JsonProducer`` keyed by the tick's symbol; the hook gets the symbol as key."""

    def __init__(self, bootstrap: str, topic: str, **options: Any) -> None:
        super().__init__(bootstrap, topic, key_field="symbol", **options)
