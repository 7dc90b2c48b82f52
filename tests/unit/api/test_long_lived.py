"""What open streams hold is kept out of the collector's full passes, and what they leave
behind is collected after a turnover (``api/long_lived.py``)."""

from __future__ import annotations

import gc
import weakref

import pytest

from kiq.api.long_lived import LEAST, LongLived


class Recorder:
    """The three collector calls ``LongLived`` makes, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def collect(self, generation: int = 2) -> int:
        self.calls.append(f"collect({generation})")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")


def test_nothing_is_frozen_below_the_least_streams():
    gc_ = Recorder()
    streams = LongLived(gc_)
    for _ in range(LEAST - 1):
        streams.opened()
    for _ in range(LEAST - 1):
        streams.closed()
    assert gc_.calls == [] and streams.open == 0


def test_frozen_at_the_least_then_at_each_quarter_more():
    gc_ = Recorder()
    streams = LongLived(gc_)
    for _ in range(LEAST):
        streams.opened()
    assert gc_.calls == ["collect(1)", "freeze"]
    for _ in range(LEAST // 4 - 1):
        streams.opened()
    assert len(gc_.calls) == 2  # not yet a quarter more
    streams.opened()
    assert gc_.calls[2:] == ["collect(1)", "freeze"]


def test_half_of_them_ended_thaws_collects_whole_and_freezes_again():
    gc_ = Recorder()
    streams = LongLived(gc_)
    for _ in range(2 * LEAST):
        streams.opened()  # frozen at 1,000 and at 1,250, 1,563 ... 1,954 open
    gc_.calls.clear()
    for _ in range(976):  # half of 1,954 less one
        streams.closed()
    assert gc_.calls == []
    streams.closed()
    assert gc_.calls == ["unfreeze", "collect(2)", "collect(1)", "freeze"]


def test_a_thaw_below_the_least_leaves_everything_frozen_as_start_up_did():
    gc_ = Recorder()
    streams = LongLived(gc_)
    for _ in range(LEAST):
        streams.opened()
    gc_.calls.clear()
    for _ in range(LEAST // 2):
        streams.closed()
    assert gc_.calls == ["unfreeze", "collect(2)", "freeze"]
    for _ in range(LEAST // 2):  # none frozen by it any more: closing thaws nothing
        streams.closed()
    assert gc_.calls == ["unfreeze", "collect(2)", "freeze"] and streams.open == 0


class Cycle:
    """What a stream may leave behind: objects that hold each other."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def thawed():
    yield
    gc.unfreeze()  # the test process's collector as it was


def test_a_cycle_frozen_with_its_stream_is_freed_after_the_turnover(thawed):
    streams = LongLived()
    held = [Cycle() for _ in range(LEAST)]
    for _ in held:
        streams.opened()
    assert gc.get_freeze_count() > 0
    gone = [weakref.ref(c) for c in held]
    del held  # the streams end: their cycles are garbage the full passes do not see
    gc.collect()
    assert all(ref() is not None for ref in gone)  # frozen: kept until the turnover
    for _ in range(LEAST):
        streams.closed()
    assert all(ref() is None for ref in gone)
