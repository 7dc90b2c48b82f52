"""Word count (seed 001): words posted to any node, counted by Spark, read from any node."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from kiq.runtime.pipelines import LocalPipeline
from tests.integration.test_serving import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TEXTS = [
    "The quick brown fox jumps over the lazy dog",
    "the dog barks; the FOX runs",
    "Kafka streams, Spark streams, kiq serves",
    "to be or not to be",
]


def test_word_counts_are_exact(bootstrap: str, tmp_path: Path):
    from kiq.kafka import create_topics
    from kiq.pipelines.runner import COMPACTED

    create_topics(bootstrap, {"words": 6})
    create_topics(bootstrap, {"word-counts": 6}, config=COMPACTED)
    pipeline = LocalPipeline(
        ("wordcount",), bootstrap, tmp_path / "checkpoints", tmp_path / "pipeline.log", partitions=6
    )
    cluster = Cluster(bootstrap, tmp_path, ["word-counts=word-counts"])
    try:
        pipeline.start()
        for i in (1, 2, 3):
            cluster.add(f"n{i}")
        cluster.wait_ready()
        urls = cluster.live_urls()
        expected: Counter[str] = Counter()
        for i, text in enumerate(TEXTS * 5):
            resp = httpx.post(f"{urls[i % 3]}/v1/words", json={"text": text}, timeout=10)
            assert resp.status_code == 202, resp.text
            written = resp.json()["written"]
            assert all(w["offset"] >= 0 and 0 <= w["partition"] < 6 for w in written)
            expected.update(w["word"] for w in written)
        single = httpx.post(f"{urls[0]}/v1/words", json={"word": "Kafka"}, timeout=10)
        assert single.status_code == 202
        expected["kafka"] += 1
        assert expected["the"] == 20 and expected["fox"] == 10 and expected["be"] == 10

        deadline = time.monotonic() + 180
        while True:
            got = {}
            for i, word in enumerate(sorted(expected)):
                resp = httpx.get(f"{urls[i % 3]}/v1/words/{word}", timeout=10)
                got[word] = resp.json()["count"] if resp.status_code == 200 else None
            if got == dict(expected) or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert got == dict(expected)
        never = httpx.get(f"{urls[1]}/v1/words/zyzzyva", timeout=10)
        assert never.status_code == 404
        bad = httpx.post(f"{urls[2]}/v1/words", json={"nope": 1}, timeout=10)
        assert bad.status_code == 400
        # A graceful stop: the driver stops its queries and Spark, and says so.
        pipeline.stop()
        log = (tmp_path / "pipeline.log").read_text()
        assert "pipeline stopped name=wordcount" in log
        assert "Traceback" not in log, log[log.find("Traceback") :][:2000]
    finally:
        pipeline.stop()
        cluster.shutdown()
