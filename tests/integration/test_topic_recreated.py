"""A table's topic deleted and made again: the nodes serve the new log, not the old one.

Before, a replica's applied offsets (from the old log) made it skip the new log's
records as already applied, and it served the deleted data as current.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest

from kiq.kafka import create_topics, delete_topics
from kiq.runtime import LocalNode
from tests.integration.kafka_io import produce

pytestmark = pytest.mark.integration

PARTITIONS = 3


def _value(node: LocalNode, key: str) -> object:
    r = httpx.get(f"{node.url}/v1/tables/t/keys/{key}", timeout=5)
    return r.json().get("v") if r.status_code == 200 else r.status_code


def test_a_recreated_topic_replaces_the_table(bootstrap: str, tmp_path: Path) -> None:
    topic = f"recreated-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {topic: PARTITIONS})
    produce(bootstrap, topic, [(f"k{i}", json.dumps({"v": 1})) for i in range(60)])
    nodes = [
        LocalNode(
            node_id=f"n{i}",
            bootstrap=bootstrap,
            tables=[f"t={topic}"],
            data_dir=tmp_path / f"n{i}",
            log_file=tmp_path / f"n{i}.log",
            extra_args=["--cluster", f"kiq-recreate-{topic}"],
            env={"KIQ_SERVE_VIEW_REFRESH_MS": "200", "KIQ_SERVE_SESSION_TIMEOUT_MS": "3000"},
        ).start()
        for i in (1, 2)
    ]
    try:
        for node in nodes:
            node.wait_ready(60)
        deadline = time.monotonic() + 30
        while any(_value(n, "k59") != 1 for n in nodes):
            assert time.monotonic() < deadline, "the first log was never served"
            time.sleep(0.2)

        delete_topics(bootstrap, [topic])
        create_topics(bootstrap, {topic: PARTITIONS})
        produce(bootstrap, topic, [(f"k{i}", json.dumps({"v": 2})) for i in range(10)])

        def serves_new_log(node: LocalNode) -> bool:
            new = all(_value(node, f"k{i}") == 2 for i in range(10))
            return new and all(_value(node, f"k{i}") == 404 for i in range(10, 60))

        deadline = time.monotonic() + 90
        while not all(serves_new_log(n) for n in nodes):
            assert all(n.running for n in nodes), [n.tail() for n in nodes]
            assert time.monotonic() < deadline, [n.tail() for n in nodes]
            time.sleep(0.5)
    finally:
        for node in nodes:
            node.stop()
