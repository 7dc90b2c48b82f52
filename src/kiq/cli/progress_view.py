"""`kiq up`'s live view of its pipelines: a line per streaming query, as the nodes' /ui has it.

Read from where the Spark driver publishes it (``kiq.progress``), so the
console, the dashboard and GET /v1/pipelines show the same figures. On a terminal it is
a table redrawn in place; into a file or a pipe, a line per query every half minute.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kiq.progress import ProgressReader, QueryProgress

# What a rate not known yet shows: never 0.0, which a query doing nothing would show.
UNKNOWN = "—"
# Why, and where a Real-Time Mode query's input rate comes from (``QueryProgress``).
RATES_NOTE = (
    "— : not measured yet (Spark counts a batch when it ends; a Real-Time Mode batch lasts "
    "minutes). kafka: input rows/s are rows arriving on the inputs over the last 30 s, "
    "counted by kiq; processed rows/s the last batch's."
)


def _rate(value: float) -> str:
    return f"{value:,.1f}"


def _input_rate(q: QueryProgress) -> str:
    if q.rates_from == "none":
        return UNKNOWN
    return (
        f"{_rate(q.input_rows_per_s)} (kafka)"
        if q.rates_from == "kafka"
        else _rate(q.input_rows_per_s)
    )


def _processed_rate(q: QueryProgress) -> str:
    # Counted by Spark when a batch ends: unknown before the first.
    unknown = q.rates_from == "none" or (q.rates_from == "kafka" and q.batch < 0)
    return UNKNOWN if unknown else _rate(q.processed_rows_per_s)


def _batch(q: QueryProgress) -> str:
    if q.trigger == "realtime":
        return "real-time"
    if q.batch_ms is None:
        return "-"
    return f"{q.batch_ms} ms" if q.batch_ms < 10_000 else f"{q.batch_ms / 1000:.1f} s"


def _state(q: QueryProgress, now_ms: int) -> str:
    return "stale?" if q.stale(now_ms) else q.state


def progress_table(queries: Sequence[QueryProgress], now_ms: int) -> Table:
    """The queries as a table: input and processed rows/s, batch time, offsets behind."""
    table = Table(title="pipelines", title_justify="left", expand=False)
    for name in ("pipeline/query", "state", "input rows/s", "processed rows/s", "batch", "behind"):
        table.add_column(name, justify="left" if name in ("pipeline/query", "state") else "right")
    for q in queries:
        table.add_row(
            f"{q.pipeline}/{q.query}",
            _state(q, now_ms),
            _input_rate(q),
            _processed_rate(q),
            _batch(q),
            f"{q.behind:,}" if q.behind is not None else "-",
        )
    if not queries:
        table.add_row("no progress published yet", "", "", "", "", "")
    if any(q.rates_from != "spark" for q in queries):
        table.caption = RATES_NOTE
        table.caption_justify = "left"
    return table


def progress_lines(queries: Sequence[QueryProgress], now_ms: int) -> list[str]:
    """The same, a line per query (for a log)."""
    return [
        f"{q.pipeline}/{q.query} {_state(q, now_ms)}: input {_input_rate(q)} rows/s, "
        f"processed {_processed_rate(q)} rows/s, batch {_batch(q)}, "
        f"behind {q.behind if q.behind is not None else '-'}"
        for q in queries
    ]


class ProgressView:
    """Redrawn every ``every_s`` on a terminal, under a ``note`` (what `kiq up` waits for);
    printed every ``print_every_s`` elsewhere, without it."""

    def __init__(
        self,
        reader: ProgressReader,
        console: Console,
        note: str = "",
        every_s: float = 2.0,
        print_every_s: float = 30.0,
    ) -> None:
        self._reader = reader
        self._console = console
        self._note = note
        self._every_s = every_s if console.is_terminal else print_every_s
        self._next_at = 0.0
        self._live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self._console.is_terminal:
            self._live = Live(console=self._console, auto_refresh=False)
            self._live.start()
        self.tick()
        return self

    def update(self, note: str) -> None:
        """A new note, shown at once ("": none)."""
        if note != self._note:
            self._note = note
            if self._live is not None:  # a log gets its lines every half minute regardless
                self._next_at = 0.0
        self.tick()

    def tick(self) -> None:
        if time.monotonic() < self._next_at:
            return
        self._next_at = time.monotonic() + self._every_s
        queries, error = self._reader.queries()
        now = int(time.time() * 1000)
        if self._live is not None:
            table = progress_table(queries, now)
            if error:
                table.caption = f"progress unavailable: {error}"
                table.caption_justify = "left"
            shown: RenderableType = Group(Text(self._note), table) if self._note else table
            self._live.update(shown, refresh=True)
        else:
            for line in progress_lines(queries, now):
                self._console.print(line, highlight=False)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()
