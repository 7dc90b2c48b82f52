"""A Real-Time Mode query's rates, from progress Spark really wrote (realtime_progress.json:
captured from a run, see its ``_about``): none while its first batch runs, Spark's once a
batch ends, and meanwhile kiq's own count of the rows arriving on its inputs."""

from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kiq.cli.progress_view import RATES_NOTE, progress_lines, progress_table
from kiq.pipelines.progress import from_spark, with_rates
from kiq.pipelines.rates import ArrivalRate, arrived, subscribed_topics
from kiq.progress import QueryProgress, decode_progress

CAPTURED = json.loads((Path(__file__).parent / "realtime_progress.json").read_text())
REALTIME: list[dict[str, Any]] = CAPTURED["realtime"]
MICROBATCH: list[dict[str, Any]] = CAPTURED["microbatch"]


def _ms(progress: dict[str, Any]) -> int:
    return int(
        datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
    )


def _end(progress: dict[str, Any]) -> int:
    """Where the batch left its input: its source's end offsets, summed."""
    return arrived(
        {
            t: {int(p): o for p, o in parts.items()}
            for t, parts in progress["sources"][0]["endOffset"].items()
        }
    )


def rendered(table: object) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(table)
    return console.export_text()


def test_before_its_first_batch_ends_a_realtime_query_has_no_rates_not_zero():
    # What the publisher makes of a query whose lastProgress is None, nothing counted yet.
    waiting = with_rates(QueryProgress(app="a", pipeline="p", query="q", trigger="realtime"), None)
    assert waiting.rates_from == "none"
    text = rendered(progress_table([waiting], 0))
    row = next(line for line in text.splitlines() if "p/q" in line)
    assert "0.0" not in row and row.count("—") == 2, row
    assert "not measured yet" in text  # the caption says why
    assert "input — rows/s, processed — rows/s" in progress_lines([waiting], 0)[0]


def test_while_its_batch_runs_the_input_rate_is_kiqs_count_and_processed_stays_unknown():
    counted = with_rates(QueryProgress(app="a", pipeline="p", query="q", trigger="realtime"), 97.1)
    assert (counted.rates_from, counted.input_rows_per_s, counted.batch) == ("kafka", 97.1, -1)
    row = next(
        line for line in rendered(progress_table([counted], 0)).splitlines() if "p/q" in line
    )
    assert "97.1 (kafka)" in row and "—" in row, row
    # the record as every node reads it back: the field survives its schema check
    assert decode_progress({counted.key: counted.encode()}) == [counted]


@pytest.mark.parametrize("progress", REALTIME, ids=lambda p: f"batch{p['batchId']}")
def test_once_a_batch_ended_its_processed_rate_is_sparks_and_the_input_rate_kiqs(progress):
    record = from_spark(progress, app="a", pipeline="p", trigger="realtime")
    assert record.processed_rows_per_s == progress["processedRowsPerSecond"] > 0
    assert with_rates(record, None) == record and record.rates_from == "spark"
    live = with_rates(record, 99.0)
    assert (live.rates_from, live.input_rows_per_s) == ("kafka", 99.0)
    assert live.processed_rows_per_s == record.processed_rows_per_s
    text = rendered(progress_table([live], 0))
    row = next(line for line in text.splitlines() if "p/realtime-q" in line)
    assert "99.0 (kafka)" in row and f"{record.processed_rows_per_s:,.1f}" in row, row


@pytest.mark.parametrize("progress", MICROBATCH, ids=lambda p: f"batch{p['batchId']}")
def test_micro_batch_rates_stay_sparks(progress):
    record = with_rates(from_spark(progress, app="a", pipeline="p", trigger="microbatch"), 5.0)
    assert record.rates_from == "spark"
    assert record.input_rows_per_s == progress["inputRowsPerSecond"]
    assert record.processed_rows_per_s == progress["processedRowsPerSecond"]
    assert RATES_NOTE not in rendered(progress_table([record], 0))


def test_the_arrival_rate_over_30_s_agrees_with_sparks_own_batch_rates():
    # The input's offsets at each batch end, when it ended: rows that had arrived by then.
    rate = ArrivalRate()
    measured = [rate.add(_ms(p), _end(p)) for p in REALTIME[1:]]
    assert measured[0] is None  # one sample: no span yet
    # Batches 2..5 read 100 rows every 0.5 s as they came; Spark said 85.6-97.8 rows/s.
    spark = [p["inputRowsPerSecond"] for p in REALTIME[2:]]
    assert all(r is not None and 80 <= r <= 110 for r in measured[1:]), (measured, spark)
    # after batch 5: from batch 2's end, the newest sample 30 s old or older
    last, base = REALTIME[-1], REALTIME[2]
    expected = (_end(last) - _end(base)) * 1000 / (_ms(last) - _ms(base))
    assert measured[-1] == round(expected, 1)


def test_a_short_span_says_nothing_and_a_shrinking_total_starts_afresh():
    rate = ArrivalRate(window_s=30, min_span_s=3)
    assert rate.add(1_000, 500) is None
    assert rate.add(2_000, 700) is None  # 1 s apart: too short to say
    assert rate.add(5_000, 1_300) == 200.0
    assert rate.add(6_000, 10) is None  # a topic made again: the count restarts
    assert rate.add(10_000, 410) == 100.0
    assert rate.add(9_000, 500) is None  # a clock that went back, too


def test_the_topics_come_from_the_sources_descriptions():
    described = [s["description"] for p in REALTIME for s in p["sources"]]
    assert subscribed_topics(described) == ["src"]
    assert subscribed_topics(CAPTURED["running_sources"]) == ["src", "src-b"]
    assert subscribed_topics(["KafkaV2[SubscribePattern[src.*]]", "RateStream"]) == []


def test_an_unbounded_rates_from_is_refused():
    forged = QueryProgress(app="a", pipeline="p", query="q", rates_from="x" * 41)
    assert decode_progress({forged.key: forged.encode()}) == []
