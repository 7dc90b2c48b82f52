"""The pipelines' progress in a node's /metrics (``kiq.progress.ProgressMetrics``): what the
stalled and failed pipeline alerts watch, read from records as their drivers publish them."""

from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kiq.progress import STALE_S, ProgressMetrics, ProgressReader, QueryProgress


def scraped(*records: QueryProgress) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What /metrics shows of ``records``, as a node reading them shows it: sample name and
    labels → value."""
    topic = {r.key: r.encode() for r in records}
    reader = ProgressReader("b:9092", "shop", read_latest=lambda *a, **k: dict(topic))
    registry = CollectorRegistry()
    registry.register(ProgressMetrics(reader))
    reader.queries()  # read: a scrape shows the last read, never waits for one
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def names(query: str, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"app": "shop", "pipeline": "orders", "query": query, **more}.items()))


def test_a_running_query_heard_of_lately_is_not_stale_and_one_gone_quiet_is():
    now = int(time.time() * 1000)
    fresh = QueryProgress(app="shop", pipeline="orders", query="q1", published_ms=now, behind=7)
    quiet_ms = now - int((STALE_S + 30) * 1000)
    quiet = QueryProgress(app="shop", pipeline="orders", query="q2", published_ms=quiet_ms)
    other_app = QueryProgress(app="bank", pipeline="orders", query="q3", published_ms=0)
    found = scraped(fresh, quiet, other_app)

    assert found[("kiq_pipeline_stale", names("q1"))] == 0
    assert found[("kiq_pipeline_stale", names("q2"))] == 1
    assert found[("kiq_pipeline_progress_age_seconds", names("q1"))] < 5
    assert STALE_S + 30 <= found[("kiq_pipeline_progress_age_seconds", names("q2"))] < STALE_S + 35
    assert found[("kiq_pipeline_behind_records", names("q1"))] == 7
    assert ("kiq_pipeline_behind_records", names("q2")) not in found  # not known
    assert found[("kiq_pipeline_state", names("q1", state="running"))] == 1
    assert found[("kiq_pipeline_state", names("q1", state="failed"))] == 0
    assert not any(dict(labels)["app"] == "bank" for _, labels in found)  # the node's app only


def test_a_query_that_ended_shows_its_state_and_is_never_stale():
    failed = QueryProgress(app="shop", pipeline="orders", query="q", state="failed", error="x")
    found = scraped(failed)
    assert found[("kiq_pipeline_state", names("q", state="failed"))] == 1
    assert found[("kiq_pipeline_state", names("q", state="running"))] == 0
    assert found[("kiq_pipeline_stale", names("q"))] == 0  # published at 0, but not running


def test_no_queries_no_series():
    assert scraped() == {}


def test_a_scrape_never_waits_for_kafka_and_the_next_shows_what_was_read():
    record = QueryProgress(app="shop", pipeline="orders", query="q", published_ms=1)
    reads: list[float] = []
    release = threading.Event()

    def slow_read(*args: object, **kwargs: object) -> dict[str, bytes]:
        reads.append(time.monotonic())
        release.wait(10)
        return {record.key: record.encode()}

    reader = ProgressReader("b:9092", "shop", ttl_s=0, read_latest=slow_read)
    registry = CollectorRegistry()
    registry.register(ProgressMetrics(reader))
    before = time.monotonic()
    assert "kiq_pipeline_stale{" not in generate_latest(registry).decode()  # none read yet
    assert "kiq_pipeline_stale{" not in generate_latest(registry).decode()  # one read at once
    assert time.monotonic() - before < 1 and len(reads) == 1
    release.set()
    deadline = time.monotonic() + 5
    while "kiq_pipeline_stale{" not in generate_latest(registry).decode():
        assert time.monotonic() < deadline, "the read's queries never shown"
        time.sleep(0.01)
