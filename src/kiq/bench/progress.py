"""What a running `kiq bench` scenario is doing, on stderr: so a half-hour soak is not half an
hour of silence.

A scenario names its phase ("starting the broker", "measuring", "restart n2"), with the
duration it plans for it when it has one, and keeps a few running figures (requests sent,
errors, RSS). Results go to stdout (the table, or JSON); this goes to stderr and never into
them. Figures are a dict write (``set``) or a function read when the line is drawn
(``watch``), so a measured loop pays nothing for being shown: on a terminal, one line is
redrawn in place by rich's own refresh thread, twice a second; into a file or a pipe (a CI
log), one line per phase and one at the end, nothing in between.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TextIO

from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

Figure = int | float | str | None
_PAGE = 4096
_RATE_WINDOW_S = 5.0  # a rate over the last few seconds: steadier than between two redraws


class Reporter:
    """A scenario's phase, elapsed time and running figures (see the module's docstring).

    ``console``: where to draw (None: nowhere, for tests and embedding); ``clock``: for
    tests. Used as a context manager: the live line on a terminal runs inside it, and the
    closing line says how long the whole run took.
    """

    def __init__(
        self,
        scenario: str,
        console: Console | None = None,
        *,
        refresh_per_second: float = 2.0,
        log_every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scenario = scenario
        self.phases: list[str] = []  # every phase so far, in order
        self._console = console
        self._refresh_per_second = refresh_per_second
        self._clock = clock
        self._started = clock()
        # (name, planned seconds, since): one attribute, so a redraw never sees half a change
        self._current: tuple[str, float | None, float] = ("", None, self._started)
        self._figures: dict[str, Figure | Callable[[], Figure]] = {}
        self._units: dict[str, str] = {}
        self._rated: set[str] = set()
        self._history: dict[str, deque[tuple[float, float]]] = {}
        self._first: dict[str, tuple[float, float]] = {}  # a rate's first sample: the run's
        self._lock = threading.Lock()  # between the refresh thread and a phase line
        self._live: Live | None = None
        # Off a terminal (a CI log): the line again every ``log_every_s``, so a long phase
        # still says where it is.
        self._log_every_s = log_every_s
        self._ticker: threading.Thread | None = None
        self._done = threading.Event()
        self._rerouted: list[tuple[logging.StreamHandler[TextIO], TextIO]] = []

    @classmethod
    def to_stderr(cls, scenario: str) -> Reporter:
        return cls(scenario, Console(stderr=True))

    @classmethod
    def silent(cls, scenario: str = "") -> Reporter:
        return cls(scenario, None)

    # What the scenario calls: cheap, and nothing drawn on its thread but a phase line.

    def set(self, name: str, value: Figure, unit: str = "") -> None:
        """A figure's value now (None: not shown); the line shows it at its next redraw."""
        self._figures[name] = value
        if unit:
            self._units[name] = unit

    def watch(
        self, name: str, read: Callable[[], Figure], unit: str = "", rate: bool = False
    ) -> None:
        """A figure read when drawn (off the caller's thread on a terminal): a counter the
        scenario keeps anyway costs nothing more. ``rate``: its rate per second too."""
        self._figures[name] = read
        if unit:
            self._units[name] = unit
        if rate:
            self._rated.add(name)

    def phase(
        self, name: str, planned_s: float | None = None, *, since: float | None = None
    ) -> None:
        """A new phase, written as a line; ``planned_s`` draws a bar of its elapsed time, which
        counts from ``since`` (a ``time.monotonic()``; default: now), so phases that interrupt
        a longer one (a restart during a soak) can show its clock."""
        now = self._clock()
        self._current = (name, planned_s, now if since is None else since)
        self.phases.append(name)
        if self._console is not None:
            self._console.print(self._line(now), highlight=False, markup=False, soft_wrap=True)

    # Context: the live line, and the closing line.

    def __enter__(self) -> Reporter:
        self._started = self._clock()
        self._current = (self._current[0], self._current[1], self._started)
        if self._console is not None and self._console.is_terminal:
            self._live = Live(
                get_renderable=self._render,
                console=self._console,
                refresh_per_second=self._refresh_per_second,
                transient=True,  # replaced by the closing line
                redirect_stdout=False,  # the results' stream: never through this console
            )
            self._live.start()
            self._route_logs()
        elif self._console is not None and self._log_every_s > 0:
            self._done.clear()
            self._ticker = threading.Thread(target=self._tick, name="bench-progress", daemon=True)
            self._ticker.start()
        return self

    def _tick(self) -> None:
        while not self._done.wait(self._log_every_s):
            if self._console is not None:
                line = self._line(self._clock())
                self._console.print(line, highlight=False, markup=False, soft_wrap=True)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
            self._ticker = None
        for handler, stream in self._rerouted:
            handler.setStream(stream)
        self._rerouted = []
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._console is None:
            return
        now = self._clock()
        took = _clock_text(now - self._started)
        if kind is None:
            head = f"{self.scenario} done in {took}"
        else:
            head = f"{self.scenario} stopped after {took}, during {self._current[0] or 'set-up'}"
        line = self._joined(head, now, whole_run=True)
        self._console.print(line, highlight=False, markup=False, soft_wrap=True)

    def _route_logs(self) -> None:
        """Log lines (the broker's, librdkafka's) above the live line rather than through it:
        the root logger's handlers on stderr write to rich's stand-in for it while it runs."""
        real = getattr(sys.stderr, "rich_proxied_file", None)
        if real is None:  # stderr not redirected: nothing to do
            return
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is real:
                self._rerouted.append((handler, real))
                handler.setStream(sys.stderr)

    # Drawing.

    def _line(self, now: float) -> str:
        name, planned, since = self._current
        head = f"{self.scenario} {_clock_text(now - self._started)} {name}"
        if planned:
            head += f" ({_clock_text(now - since)} / {_clock_text(planned)})"
        return self._joined(head, now)

    def _joined(self, head: str, now: float, whole_run: bool = False) -> str:
        figures = self._shown(now, whole_run)
        return f"{head}: {', '.join(figures)}" if figures else head

    def _render(self) -> RenderableType:
        """The live line: called on rich's refresh thread."""
        now = self._clock()
        name, planned, since = self._current
        grid = Table.grid(padding=(0, 1))
        cells: list[RenderableType] = [
            Text.assemble(
                (self.scenario, "bold"), " ", (_clock_text(now - self._started), "dim"), " "
            )
            + Text(name, style="bold cyan")
        ]
        bar = 24 if self._console is None or self._console.width >= 120 else 10
        if planned:
            elapsed = now - since
            cells.append(ProgressBar(total=planned, completed=min(elapsed, planned), width=bar))
            cells.append(Text(f"{_clock_text(elapsed)} / {_clock_text(planned)}"))
        for cell in cells:
            width = cell.cell_len if isinstance(cell, Text) else bar
            grid.add_column(no_wrap=True, min_width=width)
        # the figures last, cut at the edge rather than wrapped onto a second line
        grid.add_column(no_wrap=True, overflow="ellipsis")
        cells.append(Text("  ".join(self._shown(now)), no_wrap=True, overflow="ellipsis"))
        grid.add_row(*cells)
        return grid

    def _shown(self, now: float, whole_run: bool = False) -> list[str]:
        """Each figure as text, rates computed (over the last seconds, or ``whole_run``):
        under a lock, as two threads may draw."""
        out = []
        with self._lock:
            for name, held in self._figures.copy().items():
                try:
                    value = held() if callable(held) else held
                except Exception:  # a figure unreadable now: shown so, never raised here
                    value = "?"
                if value is None:
                    continue
                text = f"{name} {_value_text(value)}"
                if unit := self._units.get(name):
                    text += f" {unit}"
                if name in self._rated and isinstance(value, int | float):
                    per_s = self._rate(name, now, float(value), whole_run)
                    if per_s is not None:
                        text += f" ({per_s:,.0f}/s)" if per_s >= 10 else f" ({per_s:.1f}/s)"
                out.append(text)
        return out

    def _rate(self, name: str, now: float, value: float, whole_run: bool) -> float | None:
        samples = self._history.setdefault(name, deque())
        if samples and value < samples[-1][1]:
            samples.clear()  # counted again from zero (a new round)
            self._first.pop(name, None)
        samples.append((now, value))
        self._first.setdefault(name, (now, value))
        while len(samples) > 2 and now - samples[1][0] >= _RATE_WINDOW_S:
            samples.popleft()
        then, before = self._first[name] if whole_run else samples[0]
        return (value - before) / (now - then) if now > then else None


def reporter(progress: Reporter | None, scenario: str) -> Reporter:
    """The reporter a scenario was given, or one to stderr: the CLI's and scripts' default."""
    return progress if progress is not None else Reporter.to_stderr(scenario)


def rss_mb(pid: int | None) -> float | None:
    """A process's resident memory in MB (None: gone or unknown), for a watched figure."""
    if pid is None:
        return None
    try:
        return round(int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE / 2**20, 1)
    except (OSError, IndexError, ValueError):
        return None


def peak_rss_mb(pid: int | None) -> float | None:
    """A process's peak resident memory so far in MB (the kernel's VmHWM); None: unknown."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)  # kB
    except (OSError, IndexError, ValueError):
        return None
    return None


def _clock_text(seconds: float) -> str:
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _value_text(value: Figure) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):  # enough digits for a ratio (0.879), one for MB (172.3)
        if abs(value) >= 10_000:
            return f"{value:,.0f}"
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return str(value)
