"""Top-K across every partition (issue 26, seed 001): ``GET /v1/words/top`` through every node of
a real cluster equals the top words of the texts posted, counted here, and follows a later post.

The word-count pipeline declares ``word-counts`` with ``rank_by="count"`` in the table catalog;
the nodes read it there, so each replica keeps its partition's words by count, and a top read
merges the six partitions' heads across the three nodes.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from kiq.runtime.pipelines import LocalPipeline
from tests.integration.test_serving import Cluster
from tests.integration.test_wordcount import TEXTS

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 6


def reference(counts: Counter[str], n: int) -> list[dict[str, object]]:
    """The top ``n`` as the route must answer it: highest count first, ties by word."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
    return [{"word": word, "count": count} for word, count in ranked]


def wait_declared(bootstrap: str, table: str, timeout_s: float = 120) -> None:
    """Until the pipeline has declared ``table`` in the table catalog (before its query runs)."""
    from kiq.catalog import CATALOG_TOPIC
    from kiq.kafka import compacted
    from kiq.tables.declared import decode_catalog

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        declared = decode_catalog(compacted.read_latest(bootstrap, CATALOG_TOPIC)).get(table)
        if declared is not None and declared.rank_by == "count":
            return
        time.sleep(1)
    raise AssertionError(f"{table} not declared ranked by count in {timeout_s:.0f}s")


def post(url: str, text: str) -> list[str]:
    resp = httpx.post(f"{url}/v1/words", json={"text": text}, timeout=10)
    assert resp.status_code == 202, resp.text
    return [w["word"] for w in resp.json()["written"]]


def tops(urls: list[str], n: int) -> list[object]:
    """What every node answers for the top ``n`` (a status and body where it is no 200)."""
    out: list[object] = []
    for url in urls:
        resp = httpx.get(f"{url}/v1/words/top", params={"n": n}, timeout=10)
        out.append(
            resp.json()["words"] if resp.status_code == 200 else (resp.status_code, resp.text)
        )
    return out


def wait_top(urls: list[str], expected: list[dict[str, object]], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        got = tops(urls, len(expected))
        if all(g == expected for g in got) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert got == [expected] * len(urls)


def test_top_words_through_every_node(bootstrap: str, tmp_path: Path):
    from kiq.kafka import create_topics, delete_topics
    from kiq.pipelines.runner import COMPACTED

    # The app's topics have fixed names: start from none, as the other word-count tests do.
    delete_topics(bootstrap, ["words", "word-counts"])
    create_topics(bootstrap, {"words": PARTITIONS})
    create_topics(bootstrap, {"word-counts": PARTITIONS}, config=COMPACTED)
    pipeline = LocalPipeline(
        ("wordcount",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        partitions=PARTITIONS,
    )
    # No topic given: the table as the catalog declares it, rank_by included.
    cluster = Cluster(bootstrap, tmp_path, ["word-counts"])
    try:
        pipeline.start()
        wait_declared(bootstrap, "word-counts")
        for i in (1, 2, 3):
            cluster.add(f"n{i}")
        cluster.wait_ready()
        urls = cluster.live_urls()
        tables = httpx.get(f"{urls[0]}/v1/tables", timeout=10).json()["tables"]
        counts_table = next(t for t in tables if t["name"] == "word-counts")
        assert counts_table["declared"]["rank_by"] == "count"

        counts: Counter[str] = Counter()
        for i, text in enumerate(TEXTS * 5):
            counts.update(post(urls[i % 3], text))
        counts.update(post(urls[1], "Kafka"))
        expected = reference(counts, 5)
        # Ties decide it: "the" 20 times, then five words 10 times each, four of them shown.
        assert [w["count"] for w in expected] == [20, 10, 10, 10, 10]
        assert expected[1:] == [{"word": w, "count": 10} for w in ("be", "dog", "fox", "streams")]
        wait_top(urls, expected)
        # n counts, and its default is 10.
        wait_top(urls, reference(counts, 12))
        resp = httpx.get(f"{urls[2]}/v1/words/top", timeout=10)
        assert resp.json()["words"] == reference(counts, 10)
        assert httpx.get(f"{urls[0]}/v1/words/top?n=0", timeout=10).status_code == 400
        # The table API answers the same order, the stored values as they are.
        raw = httpx.get(f"{urls[1]}/v1/tables/word-counts/top", params={"n": 5}, timeout=10)
        assert raw.json()["rank_by"] == "count"
        assert [(i["key"], i["value"]["count"]) for i in raw.json()["items"]] == [
            (w["word"], w["count"]) for w in expected
        ]

        # A later post moves a word to the top and another out of the five.
        counts.update(post(urls[2], " ".join(["to"] * 11 + ["kiq"] * 30)))
        later = reference(counts, 5)
        assert [w["word"] for w in later] == ["kiq", "to", "the", "be", "dog"]
        wait_top(urls, later)
    finally:
        pipeline.stop()
        cluster.shutdown()
        delete_topics(bootstrap, ["words", "word-counts"])
