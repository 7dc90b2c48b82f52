"""Limits counted once for a node of several processes: the shared bucket table."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kiq.api import limits
from kiq.api.limits import NodeWideLimiter, RateLimiter, count_node_wide
from kiq.api.node_buckets import WAYS, BucketTable
from kiq.settings import LimitsSettings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def table(tmp_path: Path) -> Iterator[BucketTable]:
    made = BucketTable.create(tmp_path / "limits", clients=64)
    yield made
    made.close()


def test_it_keeps_the_buckets_as_the_local_limiter_does(table):
    clock = Clock()
    limiter = NodeWideLimiter(table.region(0), rate=10, burst=3, clock=clock)
    assert [limiter.retry_after("a") for _ in range(3)] == [0, 0, 0]
    assert limiter.retry_after("a") == pytest.approx(0.1)
    assert limiter.would_wait("a") == pytest.approx(0.1)
    assert limiter.retry_after("b") == 0  # callers apart
    assert len(limiter) == 2
    clock.now += 0.1
    assert limiter.would_wait("a") == 0
    assert limiter.retry_after("a") == 0
    assert limiter.retry_after("a") > 0
    assert len(limiter) == 1  # b's bucket is full again: as good as none


def test_two_processes_views_of_one_table_share_each_callers_burst(table):
    """A worker attaches to the table its node made: a burst spent through one is spent."""
    clock = Clock()
    home = NodeWideLimiter(table.region(0), rate=1, burst=5, clock=clock)
    other = BucketTable.attach(table.path)
    try:
        worker = NodeWideLimiter(other.region(0), rate=1, burst=5, clock=clock)
        passed = [(home if i % 2 else worker).retry_after("10.0.0.9") == 0 for i in range(60)]
        assert sum(passed) == 5
        assert worker.would_wait("10.0.0.9") > 0
    finally:
        other.close()


def test_the_regions_count_apart(table):
    clock = Clock()
    rate = NodeWideLimiter(table.region(0), rate=1, burst=1, clock=clock)
    failures = NodeWideLimiter(table.region(1), rate=1, burst=1, clock=clock)
    assert rate.retry_after("a") == 0
    assert failures.retry_after("a") == 0
    assert rate.retry_after("a") > 0


def test_a_full_set_gives_a_new_caller_the_entry_closest_to_full(tmp_path):
    """The table is bounded: more callers than it holds cost the others at most a refill."""
    small = BucketTable.create(tmp_path / "small", clients=1)  # one set of WAYS entries
    clock = Clock()
    limiter = NodeWideLimiter(small.region(0), rate=1, burst=2, clock=clock)
    try:
        callers = [f"c{i}" for i in range(WAYS)]
        for i, caller in enumerate(callers):
            for _ in range(2 if i == 0 else 1):  # c0 spent its burst, the others half of it
                assert limiter.retry_after(caller) == 0
        assert limiter.retry_after("c0") > 0
        assert limiter.retry_after("new") == 0
        assert len(limiter) == WAYS
        assert limiter.retry_after("c0") > 0  # the most spent bucket was kept
    finally:
        small.close()


def test_a_file_that_is_not_a_table_is_refused(tmp_path):
    bogus = tmp_path / "bogus"
    bogus.write_bytes(b"x" * 4096)
    with pytest.raises(ValueError, match="not a kiq bucket table"):
        BucketTable.attach(bogus)


def test_the_table_is_the_users_alone(table):
    assert table.path.stat().st_mode & 0o777 == 0o600


def test_limiters_made_after_count_node_wide_share_the_table(table):
    conf = LimitsSettings(rate_limit=1, rate_burst=2)
    count_node_wide(table)
    try:
        assert isinstance(RateLimiter.of(conf), NodeWideLimiter)
        assert isinstance(RateLimiter.for_failures(conf), NodeWideLimiter)
        first, second = RateLimiter.of(conf), RateLimiter.of(conf)  # as two processes' apps
        assert first is not None and second is not None
        assert [first.retry_after("a"), second.retry_after("a")] == [0, 0]
        assert second.retry_after("a") > 0 and first.retry_after("a") > 0
    finally:
        count_node_wide(None)
    assert type(RateLimiter.of(conf)) is RateLimiter
    assert limits._node_wide is None


def _spend(path: str, start: Any, tries: int) -> int:
    table = BucketTable.attach(Path(path))
    limiter = NodeWideLimiter(table.region(0), rate=0.001, burst=5)
    start.wait()
    return sum(limiter.retry_after("one caller") == 0 for _ in range(tries))


def test_processes_at_once_let_through_one_burst_in_all(table):
    """Four processes asking at the same moment: the lock makes it exactly the burst."""
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(4) as pool:
        start = manager.Event()
        results = [pool.apply_async(_spend, (str(table.path), start, 2000)) for _ in range(4)]
        start.set()
        passed = [r.get(timeout=60) for r in results]
    assert sum(passed) == 5, passed
