"""Values of 1 MiB: stored, answered locally and forwarded, in multiget and range, intact.

Kafka's defaults refuse records over 1 MB, so the topic and the producer raise
their limits, as a user with such values must (the README says how).
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from kiq.kafka import create_topics, producer_config
from kiq.runtime import LocalNode

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
KEYS = [f"doc-{i:02d}" for i in range(16)]


def _value(key: str) -> bytes:
    """~1 MiB of JSON whose content depends on the key."""
    seed = hashlib.sha256(key.encode()).hexdigest()
    return b'{"key": "%s", "blob": "%s"}' % (key.encode(), (seed * (MIB // 64)).encode())


def test_one_mib_values_round_trip(bootstrap: str, tmp_path: Path) -> None:
    topic = f"large-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {topic: 4}, config={"max.message.bytes": str(4 * MIB)})
    producer = Producer(producer_config(bootstrap, **{"message.max.bytes": 4 * MIB}))
    for key in KEYS:
        producer.produce(topic, key=key.encode(), value=_value(key))
    assert producer.flush(60) == 0
    assert len(_value(KEYS[0])) >= MIB

    nodes = [
        LocalNode(
            node_id=f"n{i}",
            bootstrap=bootstrap,
            tables=[f"docs={topic}"],
            data_dir=tmp_path / f"n{i}",
            log_file=tmp_path / f"n{i}.log",
            extra_args=["--cluster", f"kiq-large-{topic}", "--standby-replicas", "0"],
        ).start()
        for i in (1, 2)
    ]
    try:
        for node in nodes:
            node.wait_ready(90)
        with httpx.Client(timeout=30) as http:
            for node in nodes:  # half the keys are the other node's: forwarded
                for key in KEYS:
                    r = http.get(f"{node.url}/v1/tables/docs/keys/{key}")
                    assert r.status_code == 200, (node.node_id, key, r.text[:200])
                    assert r.content == _value(key)
            r = http.post(f"{nodes[0].url}/v1/tables/docs/multiget", json={"keys": KEYS[:6]})
            found = r.json()["found"]
            assert sorted(found) == KEYS[:6] and found[KEYS[3]]["key"] == KEYS[3]
            page = http.get(f"{nodes[1].url}/v1/tables/docs/range", params={"limit": 3}).json()
            assert [i["key"] for i in page["items"]] == KEYS[:3]
        assert all(n.running for n in nodes)
    finally:
        for node in nodes:
            node.stop()
