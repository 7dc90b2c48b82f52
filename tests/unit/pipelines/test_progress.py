"""A query's progress as the driver publishes it and the nodes read it: Spark's report made
kiq's record, offsets behind against the log end, and the reader's cache."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kiq.catalog import PROGRESS_TOPIC
from kiq.errors import KiqError
from kiq.pipelines.progress import behind, from_spark, offsets_of, with_busy_time
from kiq.progress import STALE_S, ProgressReader, QueryProgress, decode_progress

# As Spark 4 writes a micro-batch's progress (StreamingQueryProgress.json), trimmed.
SPARK = {
    "id": "3f1c6a52-9d7e-4c7e-a0d2-5f1f0c1e2b3a",
    "runId": "8a9b0c1d-2e3f-4a5b-8c7d-9e0f1a2b3c4d",
    "name": "stock-tables",
    "timestamp": "2026-11-22T10:00:05.250Z",
    "batchId": 41,
    "batchDuration": 812,
    "numInputRows": 1200,
    "inputRowsPerSecond": 600.0,
    "processedRowsPerSecond": 1477.8,
    "durationMs": {"addBatch": 700, "triggerExecution": 812},
    "sources": [
        {
            "description": "KafkaV2[Subscribe[stock-ticks]]",
            "startOffset": {"stock-ticks": {"0": 100, "1": 200}},
            "endOffset": {"stock-ticks": {"0": 700, "1": 800}},
            "latestOffset": {"stock-ticks": {"0": 700, "1": 810}},
            "numInputRows": 1200,
            "metrics": {"avgOffsetsBehindLatest": "5.0"},
        }
    ],
    "sink": {"description": "org.apache.spark.sql.kafka010.KafkaSourceProvider$KafkaTable"},
}


def test_a_spark_progress_becomes_the_published_record():
    ends = {"stock-ticks": {0: 750, 1: 800}}
    record = from_spark(
        SPARK, app="stocks", pipeline="stocks", trigger="microbatch", log_ends=ends, now_ms=7
    )
    assert record.key == "stocks/stocks/stock-tables"
    assert (record.batch, record.input_rows, record.batch_ms) == (41, 1200, 812)
    assert (record.input_rows_per_s, record.processed_rows_per_s) == (600.0, 1477.8)
    assert record.behind == 50  # 750 - 700 on partition 0, none on 1
    assert record.sources[0].source == "KafkaV2[Subscribe[stock-ticks]]"
    assert record.reported_ms == 1795305600000 + 10 * 3_600_000 + 5_250  # 2026-11-22T00:00Z +
    assert record.published_ms == 7
    assert record.state == "running" and record.trigger == "microbatch"


def test_behind_falls_back_to_the_latest_offsets_spark_saw():
    source = SPARK["sources"][0]
    assert behind(source, {}) == 10  # 810 - 800 on partition 1
    assert behind(source, {"other-topic": {0: 5}}) == 10
    # Offsets as JSON text (how some Spark versions report them), and a non-Kafka source.
    as_text = {**source, "endOffset": json.dumps(source["endOffset"])}
    assert behind(as_text, {"stock-ticks": {0: 701, 1: 802}}) == 3
    assert behind({"description": "RateStream", "endOffset": 17}, {}) is None
    assert offsets_of("not json") == {} and offsets_of({"t": {"x": 1}}) == {}


def test_a_log_end_below_the_batch_end_counts_nothing():
    # The log end is asked after the batch was planned, but a deleted, recreated topic says less.
    assert behind(SPARK["sources"][0], {"stock-ticks": {0: 10, 1: 10}}) == 0


def test_rates_spark_could_not_measure_are_zero_and_no_batch_time_is_none():
    odd: dict[str, Any] = {
        **SPARK,
        "inputRowsPerSecond": float("nan"),
        "processedRowsPerSecond": None,
        "sources": [],
    }
    del odd["batchDuration"]
    odd["durationMs"] = {}
    record = from_spark(odd, app="a", pipeline="p", trigger="realtime")
    assert (record.input_rows_per_s, record.processed_rows_per_s) == (0.0, 0.0)
    assert record.batch_ms is None and record.behind is None and record.sources == ()


def test_records_round_trip_and_other_apps_and_unreadable_ones_are_left_out():
    mine = from_spark(SPARK, app="stocks", pipeline="stocks", trigger="microbatch")
    other = QueryProgress(app="other", pipeline="p", query="q")
    records = {mine.key: mine.encode(), other.key: other.encode(), "x/y/z": b"{not json"}
    assert decode_progress(records, "stocks") == [mine]
    assert decode_progress(records) == [other, mine]  # by key


def test_a_running_query_not_heard_of_is_stale_and_a_stopped_one_never():
    q = QueryProgress(app="a", pipeline="p", query="q", published_ms=1_000_000)
    assert not q.stale(1_000_000 + int(STALE_S * 1000))
    assert q.stale(1_000_001 + int(STALE_S * 1000))
    stopped = QueryProgress(app="a", pipeline="p", query="q", state="stopped", published_ms=0)
    assert not stopped.stale(10**12)


class Topic:
    """The progress topic's records, read as ``kiq.kafka.compacted.read_latest`` reads them."""

    def __init__(self, records: dict[str, bytes]) -> None:
        self.records = records
        self.reads = 0
        self.down = False

    def read_latest(self, bootstrap: str, topic: str, **kwargs: Any) -> dict[str, bytes]:
        assert topic == PROGRESS_TOPIC
        self.reads += 1
        if self.down:
            raise KiqError("could not read topic 'kiq-progress' to its end within 5s")
        return dict(self.records)


def test_the_reader_reads_the_topic_once_per_interval_and_keeps_the_last_read_on_failure():
    first = QueryProgress(app="stocks", pipeline="p", query="q", batch=1)
    topic = Topic({first.key: first.encode()})
    reader = ProgressReader("b:9092", "stocks", ttl_s=3600, read_latest=topic.read_latest)
    assert reader.queries() == ([first], "")
    assert reader.queries() == ([first], "") and topic.reads == 1  # cached

    fresh = ProgressReader("b:9092", "stocks", ttl_s=0, read_latest=topic.read_latest)
    fresh.queries()
    topic.down = True
    queries, error = fresh.queries()
    assert queries == [first] and "kiq-progress" in error

    summary = fresh.summary()
    assert summary["app"] == "stocks" and summary["error"]
    (row,) = summary["queries"]
    assert row["query"] == "q" and row["batch"] == 1 and row["stale"] is True


@pytest.mark.parametrize("state", ["stopped", "failed"])
def test_the_summary_says_a_query_that_ended_is_not_stale(state: str):
    ended = QueryProgress(app="a", pipeline="p", query="q", state=state, error="boom")  # type: ignore[arg-type]
    topic = Topic({ended.key: ended.encode()})
    row = ProgressReader("b", "a", read_latest=topic.read_latest).summary()["queries"][0]
    assert (row["state"], row["stale"], row["error"]) == (state, False, "boom")


def test_an_idle_batch_keeps_the_time_of_the_last_batch_that_read_rows():
    busy: dict[str, QueryProgress] = {}
    idle = QueryProgress(app="a", pipeline="p", query="q", input_rows=0, batch_ms=1)
    assert with_busy_time(idle, busy).batch_ms == 1  # nothing better known yet
    worked = QueryProgress(app="a", pipeline="p", query="q", input_rows=500, batch_ms=900)
    assert with_busy_time(worked, busy) == worked
    later = with_busy_time(idle, busy)
    assert later.batch_ms == 900 and later.input_rows == 0 and later.input_rows_per_s == 0
