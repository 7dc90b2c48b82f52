from __future__ import annotations

import pytest

from kiq.kafka import consumer_config, producer_config


def test_producer_uses_java_compatible_partitioner():
    conf = producer_config("h:1")
    assert conf["partitioner"] == "murmur2_random"
    assert conf["bootstrap.servers"] == "h:1"
    assert conf["acks"] == "all" and conf["enable.idempotence"] is True


def test_producer_refuses_other_partitioners():
    with pytest.raises(ValueError, match="murmur2_random"):
        producer_config("h:1", partitioner="consistent_random")


def test_overrides_apply():
    assert producer_config("h:1", **{"linger.ms": 0})["linger.ms"] == 0
    conf = consumer_config("h:1", "g", **{"auto.offset.reset": "latest"})
    assert conf["group.id"] == "g" and conf["auto.offset.reset"] == "latest"
    assert conf["enable.auto.commit"] is False
