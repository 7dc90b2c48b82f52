"""`kiq up`'s view of its pipelines: the figures the driver published, a row or line a query."""

from __future__ import annotations

import io
import time

from rich.console import Console

from kiq.cli.progress_view import ProgressView, progress_lines, progress_table
from kiq.progress import ProgressReader, QueryProgress

NOW = 1_800_000_000_000
RUNNING = QueryProgress(
    app="a",
    pipeline="stocks",
    query="stock-tables",
    input_rows_per_s=512.25,
    processed_rows_per_s=2048.5,
    batch_ms=840,
    behind=1234,
    published_ms=NOW,
)
REALTIME = QueryProgress(
    app="a", pipeline="stocks", query="stock-ticks-dlq", trigger="realtime", published_ms=0
)


def rendered(table: object) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(table)
    return console.export_text()


def test_the_table_shows_rates_batch_time_and_offsets_behind():
    text = rendered(progress_table([RUNNING, REALTIME], NOW))
    row = next(line for line in text.splitlines() if "stocks/stock-tables" in line)
    assert all(f in row for f in ("running", "512.2", "2,048.5", "840 ms", "1,234")), row
    late = next(line for line in text.splitlines() if "stock-ticks-dlq" in line)
    assert "stale?" in late and "real-time" in late  # not heard of since the epoch


def test_no_query_yet_says_so():
    assert "no progress published yet" in rendered(progress_table([], NOW))


def test_off_a_terminal_it_prints_a_line_per_query_from_the_topic():
    now = int(time.time() * 1000)
    record = QueryProgress(app="a", pipeline="p", query="q", batch_ms=12, published_ms=now)

    def read_latest(*args: object, **kwargs: object) -> dict[str, bytes]:
        return {record.key: record.encode()}

    out = io.StringIO()
    console = Console(file=out, width=200)
    assert not console.is_terminal
    with ProgressView(ProgressReader("b", "a", read_latest=read_latest), console) as view:
        view.tick()  # not due yet: once per half minute into a file
        view.update("waiting (1s): no data yet in t")  # a new note: not into a file
        view.update("waiting (2s): no data yet in t")
    assert (
        out.getvalue().splitlines()
        == progress_lines([record], now)
        == ["p/q running: input 0.0 rows/s, processed 0.0 rows/s, batch 12 ms, behind -"]
    )


def test_on_a_terminal_the_table_is_drawn_under_the_note():
    def read_latest(*args: object, **kwargs: object) -> dict[str, bytes]:
        return {RUNNING.key: RUNNING.encode()}

    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=True, color_system=None)
    reader = ProgressReader("b", "a", ttl_s=0, read_latest=read_latest)
    with ProgressView(reader, console, "Spark warming up ...") as view:
        view.update("waiting (12s): no data yet in word-counts")
    drawn = out.getvalue()
    assert "Spark warming up" in drawn and "waiting (12s): no data yet in word-counts" in drawn
    assert "stocks/stock-tables" in drawn and "2,048.5" in drawn
