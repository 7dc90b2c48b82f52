"""Steady pacing: hand ticks to a producer at a rate, for a time or a count.

Time is cut into 10 ms slots. At each slot the target is ``rate * elapsed``
ticks since the start, so a slow slot is made up in the next ones and the rate
does not drift; between slots the producer serves its delivery reports. With no
rate, ticks go as fast as the producer takes them.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

SLOT_S = 0.010
_MAX_BURST = 2_000  # ticks between two looks at the clock, stop flag and progress


class Sink(Protocol):
    """What pacing needs of a producer (``kiq.feeds.TickProducer`` is one)."""

    produced: int
    delivered: int
    failed: int

    def produce(self, tick: Mapping[str, Any]) -> None: ...

    def poll(self, timeout_s: float = 0.0) -> int: ...


class StopReason(enum.Enum):
    DURATION = "duration reached"
    LIMIT = "count reached"
    EXHAUSTED = "source exhausted"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class RunStats:
    """Where a paced run stands (during it) or ended (``stopped`` set)."""

    produced: int
    delivered: int
    failed: int
    elapsed_s: float
    stopped: StopReason | None = None

    @property
    def rate(self) -> float:
        """Ticks per second achieved so far."""
        return self.produced / self.elapsed_s if self.elapsed_s > 0 else 0.0


def pace(
    ticks: Iterable[Mapping[str, Any]],
    sink: Sink,
    *,
    rate: float | None = None,
    duration_s: float | None = None,
    limit: int | None = None,
    stop: Callable[[], bool] = lambda: False,
    on_progress: Callable[[RunStats], None] | None = None,
    progress_every_s: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
) -> RunStats:
    """Produce ``ticks`` into ``sink`` until the source ends, time or ``limit`` runs out, or stop.

    With ``rate`` and ``duration_s``, exactly ``int(rate * duration_s)`` ticks
    are produced when the source and the machine keep up. Returns the final
    counts; the caller flushes the producer.
    """
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    source = iter(ticks)
    start = clock()
    next_progress = start + progress_every_s
    produced = 0
    reason: StopReason | None = None

    def stats(now: float, stopped: StopReason | None = None) -> RunStats:
        return RunStats(produced, sink.delivered, sink.failed, now - start, stopped)

    while reason is None:
        if stop():
            reason = StopReason.INTERRUPTED
            break
        now = clock()
        elapsed = now - start
        if rate is None:
            target = produced + _MAX_BURST
        else:
            target = int(rate * (min(elapsed, duration_s) if duration_s is not None else elapsed))
        if limit is not None:
            target = min(target, limit)
        goal = min(target, produced + _MAX_BURST)
        while produced < goal:
            tick = next(source, None)
            if tick is None:
                reason = StopReason.EXHAUSTED
                break
            sink.produce(tick)
            produced += 1
        if reason is not None:
            break
        if limit is not None and produced >= limit:
            reason = StopReason.LIMIT
        elif (
            duration_s is not None
            and elapsed >= duration_s
            and (rate is None or produced >= int(rate * duration_s))
        ):
            reason = StopReason.DURATION
        if on_progress is not None and now >= next_progress:
            on_progress(stats(now))
            next_progress = now + progress_every_s
        if reason is None and rate is not None and produced >= target:
            _wait_for_next_slot(sink, clock, start)
        else:
            sink.poll(0)
    final = stats(clock(), reason)
    if on_progress is not None:
        on_progress(final)
    return final


def _wait_for_next_slot(sink: Sink, clock: Callable[[], float], start: float) -> None:
    """Serve delivery reports until the next slot boundary (measured from ``start``)."""
    now = clock()
    boundary = start + (int((now - start) / SLOT_S) + 1) * SLOT_S
    while (left := boundary - now) > 0:
        sink.poll(left)
        now = clock()
