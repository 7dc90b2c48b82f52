"""`kiq bench`'s progress on stderr: a line per phase into a log, a redrawn line on a terminal
drawn off the scenario's thread, and figures that cost the scenario a dict write."""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
import time

import pytest
from rich.console import Console

from kiq.bench.progress import Reporter, reporter, rss_mb


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_a_line_per_phase_and_one_at_the_end():
    out, clock = io.StringIO(), Clock()
    sent = [0]
    console = Console(file=out, width=40)  # narrower than the lines: never wrapped
    assert not console.is_terminal
    with Reporter("soak", console, clock=clock) as show:
        show.watch("reads", lambda: sent[0], rate=True)
        show.set("errors", 0)
        show.phase("starting the broker")
        clock.now += 12
        started = clock.now
        show.phase("measuring", 1800, since=started)
        for i in range(1000):  # updates: nothing written
            sent[0] = 180 * (i + 1)
            show.set("errors", i % 2)
        clock.now += 600
        show.set("n1 RSS", 172.34, "MB")
        show.set("not yet", None)  # None: not shown
        show.phase("restart n2", 1800, since=started)
        clock.now += 3725
    assert out.getvalue().splitlines() == [
        "soak 0:00 starting the broker: reads 0, errors 0",
        "soak 0:12 measuring (0:00 / 30:00): reads 0 (0.0/s), errors 0",
        "soak 10:12 restart n2 (10:00 / 30:00): reads 180,000 (300/s), errors 1, n1 RSS 172.3 MB",
        # at the end, the rate over the whole run
        "soak done in 1:12:17: reads 180,000 (42/s), errors 1, n1 RSS 172.3 MB",
    ]
    assert show.phases == ["starting the broker", "measuring", "restart n2"]


def test_a_failed_run_says_in_which_phase():
    out, clock = io.StringIO(), Clock()
    with (
        pytest.raises(TimeoutError),
        Reporter("lookups", Console(file=out), clock=clock) as show,
    ):
        show.phase("catching up")
        show.watch("broken", lambda: 1 // 0)  # a figure that cannot be read shows as "?"
        clock.now += 3
        raise TimeoutError
    assert out.getvalue().splitlines()[-1] == (
        "lookups stopped after 0:03, during catching up: broken ?"
    )


def test_silent_writes_nothing_and_still_keeps_the_phases():
    with Reporter.silent("restore") as show:
        show.phase("loading")
        show.set("keys", 10)
        show.phase("restoring", 5)
    assert show.phases == ["loading", "restoring"]
    given = Reporter.silent()
    assert reporter(given, "x") is given


def test_by_default_progress_goes_to_stderr(capsys: pytest.CaptureFixture[str]):
    with reporter(None, "watch") as show:
        show.phase("connecting")
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout is the results' alone
    assert "watch 0:00 connecting" in captured.err and "watch done in" in captured.err


def test_on_a_terminal_updates_draw_nothing_on_the_callers_thread():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    reads_from: list[int] = []

    def probe() -> int:
        reads_from.append(threading.get_ident())
        return 7

    show = Reporter("lookups", console, refresh_per_second=50)
    with show:
        show.watch("probe", probe)
        show.phase("kiq: measuring", 10)  # a phase line: drawn here, once
        mark = len(reads_from)
        began = time.perf_counter()
        for i in range(100_000):
            show.set("sent", i)
        took = time.perf_counter() - began
        deadline = time.monotonic() + 5
        while len(reads_from) < mark + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        drawn_by = set(reads_from[mark:])
    assert drawn_by, "the refresh thread drew nothing"
    assert threading.get_ident() not in drawn_by
    assert took < 1.0, f"100,000 updates took {took:.3f} s"  # a dict write each, ~0.1 µs
    # The live line went away at the end, the closing line stayed, with the last figures.
    assert "lookups done in 0:00: probe 7, sent 99,999" in out.getvalue()


def test_the_live_line_shows_the_phase_its_bar_and_the_figures():
    clock = Clock()
    show = Reporter("soak", Console(file=io.StringIO(), width=160), clock=clock)
    show.set("reads", 1234)
    show.phase("measuring", 1800, since=clock.now - 600)
    screen = Console(file=io.StringIO(), width=160, record=True)
    screen.print(show._render())
    line = screen.export_text()
    assert line.startswith("soak 0:00 measuring ━")
    assert "10:00 / 30:00" in line and line.rstrip().endswith("reads 1,234")


def test_rss_of_a_process_from_proc():
    mine = rss_mb(os.getpid())
    assert mine is not None and mine > 1
    assert rss_mb(None) is None


def test_on_a_terminal_log_lines_go_above_the_live_line():
    out, stderr = io.StringIO(), sys.stderr
    handler = logging.StreamHandler(stderr)  # as logging.basicConfig sets one up
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with Reporter("restore", Console(file=out, force_terminal=True, width=120)) as show:
            show.phase("loading")
            logging.getLogger("kiq.test").warning("broker started")
            assert handler.stream is not stderr  # rich's stand-in while the line is live
    finally:
        root.removeHandler(handler)
    assert handler.stream is stderr  # given back
    assert "broker started" in out.getvalue()


def test_off_a_terminal_a_long_phase_is_told_again_every_interval():
    out = io.StringIO()
    console = Console(file=out, width=200)
    with Reporter("soak", console, log_every_s=0.05) as show:
        show.set("reads", 7)
        show.phase("measuring", 1800)
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    again = [line for line in lines[1:-1] if "measuring" in line and "reads 7" in line]
    assert len(again) >= 3, lines  # the phase's line, then again while it lasts
    assert lines[-1].startswith("soak done in")
