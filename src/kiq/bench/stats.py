"""Percentiles and the printed/JSON report every benchmark shares."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def cpu_seconds(pids: Sequence[int | None]) -> float | None:
    """User + system CPU seconds the processes used so far; None where /proc is missing."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        if pid is None:
            return None
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / tick


def with_children(pids: Sequence[int | None]) -> list[int | None]:
    """``pids`` and their children now (a node's read workers), for ``cpu_seconds``."""
    wanted = {pid for pid in pids if pid is not None}
    children: list[int | None] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) in wanted and fields[0] != "Z":
            children.append(int(entry.name))
    return [*pids, *children]


@contextmanager
def machine_load(every_s: float = 5.0) -> Iterator[dict[str, float]]:
    """The 1-minute load average over a run, filled in when it ends: at its start (the
    machine's other work, before the run starts anything), its mean and its highest.

    On a shared machine a figure means little without it: the same command has measured
    twice as slow with other work on the cores.
    """
    first = os.getloadavg()[0]
    samples = [first]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(every_s):
            samples.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample, name="kiq-bench-load", daemon=True)
    sampler.start()
    figures: dict[str, float] = {}
    try:
        yield figures
    finally:
        done.set()
        sampler.join()
        samples.append(os.getloadavg()[0])
        figures["load_average_at_start"] = round(first, 2)
        figures["load_average_mean"] = round(sum(samples) / len(samples), 2)
        figures["load_average_max"] = round(max(samples), 2)


def report(title: str, result: dict[str, Any], json_path: Path | None, console: Console) -> None:
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        shown = f"{value:,.2f}" if isinstance(value, float) else str(value)
        table.add_row(key, shown)
    console.print(table)
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {json_path}")
