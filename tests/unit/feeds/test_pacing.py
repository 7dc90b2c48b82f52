from __future__ import annotations

import itertools
import time

import pytest

from kiq.feeds import StopReason, pace


class Sink:
    """A producer stand-in that acknowledges every tick at once."""

    def __init__(self) -> None:
        self.produced = self.delivered = self.failed = 0
        self.times: list[float] = []

    def produce(self, tick) -> None:
        self.produced += 1
        self.delivered += 1
        self.times.append(time.monotonic())

    def poll(self, timeout_s: float = 0.0) -> int:
        if timeout_s:
            time.sleep(timeout_s)
        return 0


def test_rate_and_duration_give_exactly_rate_times_duration():
    sink = Sink()
    before = time.monotonic()
    stats = pace(itertools.repeat({}), sink, rate=5000, duration_s=0.5)
    assert stats.produced == sink.produced == 2500
    assert stats.stopped is StopReason.DURATION
    assert 0.5 <= stats.elapsed_s < 2.0  # late only when the machine is busy
    # Never ahead of schedule: tick i goes out no sooner than (i + 1) / rate after the start,
    # so the rate is steady, not a burst per second.
    assert all(t - before >= (i + 1) / 5000 - 1e-9 for i, t in enumerate(sink.times))


def test_no_rate_goes_as_fast_as_it_can_until_the_source_ends():
    stats = pace(({"n": i} for i in range(50_000)), Sink())
    assert stats.produced == 50_000
    assert stats.stopped is StopReason.EXHAUSTED
    assert stats.rate > 5_000


def test_a_limit_stops_the_run():
    stats = pace(itertools.repeat({}), Sink(), rate=100_000, limit=1234)
    assert stats.produced == 1234 and stats.stopped is StopReason.LIMIT


def test_stop_interrupts_and_progress_is_reported():
    seen = []
    deadline = time.monotonic() + 0.3
    stats = pace(
        itertools.repeat({}),
        Sink(),
        rate=1000,
        stop=lambda: time.monotonic() > deadline,
        on_progress=seen.append,
        progress_every_s=0.05,
    )
    assert stats.stopped is StopReason.INTERRUPTED
    assert 200 <= stats.produced <= 1000 * stats.elapsed_s + 1
    assert len(seen) >= 2 and seen[-1] == stats
    assert [s.produced for s in seen] == sorted(s.produced for s in seen)


def test_rate_must_be_positive():
    with pytest.raises(ValueError, match="rate must be positive"):
        pace([], Sink(), rate=0)
