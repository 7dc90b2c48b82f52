"""Which trigger a query gets, and the task slots Real-Time Mode needs."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest

from kiq.errors import ConfigError
from kiq.pipelines import context
from kiq.pipelines.context import Context
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.realtime import (
    local_slots,
    realtime_local_master,
    runs_in_realtime,
)


def test_local_masters_have_their_thread_count_as_slots():
    assert local_slots("local") == 1
    assert local_slots("local[8]") == 8
    assert local_slots("local[4,2]") == 4
    assert local_slots("local[*]") == (os.cpu_count() or 1)
    assert local_slots("spark://10.0.0.1:7077") is None


def test_the_local_master_for_realtime_fits_several_queries_with_letters_and_shuffle():
    # 30 inputs for the tables, 30 for their dead letters, 1 shuffle partition; 4 such queries
    assert realtime_local_master(30, 1) == f"local[{max(4 * 61, os.cpu_count() or 1)}]"


def test_microbatch_is_never_realtime():
    assert not runs_in_realtime("microbatch", "q", [], 1, 100, "local[100]")


def test_auto_and_realtime_run_what_fits():
    assert runs_in_realtime("auto", "q", [], 31, 31, "local[31]")
    assert runs_in_realtime("realtime", "q", [], 31, 31, "local[31]")


def test_auto_falls_back_with_one_line_that_says_why(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.INFO, "kiq.pipelines.realtime"):
        assert not runs_in_realtime("auto", "q", [], 32, 31, "local[31]")
        assert not runs_in_realtime("auto", "j", ["Sort"], 1, 31, "local[31]")
    assert [r.getMessage() for r in caplog.records] == [
        "query q runs in micro-batches, not Real-Time Mode: it needs 32 task slots at once "
        "(each input partition and shuffle partition runs for the whole batch) and master "
        "local[31] has 31 left",
        "query j runs in micro-batches, not Real-Time Mode: Spark does not run Sort in "
        "Real-Time Mode",
    ]


def test_realtime_asked_for_is_an_error_when_it_cannot_be():
    with pytest.raises(ConfigError, match=r"query q cannot run .* needs 32 task slots.*local\[N\]"):
        runs_in_realtime("realtime", "q", [], 32, 31, "local[31]")
    with pytest.raises(ConfigError, match=r"Sort, Window in Real-Time Mode; use --trigger micro"):
        runs_in_realtime("realtime", "q", ["Sort", "Window"], 1, 31, "local[31]")


class _Conf:
    def get(self, _key: str) -> str:
        return "1"  # spark.sql.shuffle.partitions


class _SparkContext:
    def __init__(self, master: str) -> None:
        self.master = master
        self.defaultParallelism = 2


class _Spark:
    def __init__(self, master: str) -> None:
        self.conf = _Conf()
        self.sparkContext = _SparkContext(master)


def _context(monkeypatch: pytest.MonkeyPatch, master: str, blocked: set[str]) -> Context:
    """A context whose queries' plans are stand-ins: ``df`` is the query's name, every query
    keeps state, and those in ``blocked`` hold an operator Real-Time Mode refuses."""
    monkeypatch.setattr(context, "stateful", lambda df: True)
    monkeypatch.setattr(context, "realtime_blockers", lambda df: ["Sort"] if df in blocked else [])
    opts = StreamOptions(bootstrap="b:9092", checkpoint_root="/tmp/cp", trigger="auto")
    return Context(spark=_Spark(master), opts=opts, pipeline="p")  # type: ignore[arg-type]


def _reads(partitions: int, letters: bool) -> list[Any]:
    read = context._Read(
        "in", partitions, frozenset(), None, "in-dlq" if letters else None, (None, ())
    )  # type: ignore[arg-type]
    return [read]


def test_a_micro_batch_query_beside_real_time_ones_holds_slots_too(
    monkeypatch: pytest.MonkeyPatch,
):
    ctx = _context(monkeypatch, "local[30]", blocked={"sorted"})
    # 6 inputs, 1 shuffle partition, 6 dead-letter tasks: 13
    assert ctx._realtime("latest", "latest", _reads(6, letters=True))  # type: ignore[arg-type]
    # micro-batches (a sort), holding 7: 10 left
    assert not ctx._realtime("sorted", "sorted", _reads(6, letters=False))  # type: ignore[arg-type]
    # a real-time query of 7 fits in them: 3 left, where the next one fits in neither mode
    assert ctx._realtime("third", "third", _reads(6, letters=False))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"needs 7 task slots, but master local\[30\] has 3"):
        ctx._realtime("fourth", "fourth", _reads(6, letters=False))  # type: ignore[arg-type]


def test_a_micro_batch_query_that_would_take_a_real_time_querys_slots_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
):
    ctx = _context(monkeypatch, "local[13]", blocked={"sorted"})
    assert ctx._realtime("latest", "latest", _reads(6, letters=True))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"query sorted runs in micro-batches beside real-time"):
        ctx._realtime("sorted", "sorted", _reads(6, letters=False))  # type: ignore[arg-type]


def test_micro_batches_alone_take_any_slots(monkeypatch: pytest.MonkeyPatch):
    ctx = _context(monkeypatch, "local[2]", blocked={"a", "b"})
    assert not ctx._realtime("a", "a", _reads(6, letters=False))  # type: ignore[arg-type]
    assert not ctx._realtime("b", "b", _reads(6, letters=False))  # type: ignore[arg-type]


class _IO:
    """Records the reads and queries a context starts."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, bool]] = []
        self.started: list[tuple[str, bool, str | None]] = []

    def read(self, topic: str, *, realtime: bool) -> str:
        self.reads.append((topic, realtime))
        return topic

    def start(self, frame: Any, name: str, *, realtime: bool, interval: str | None = None) -> str:
        self.started.append((name, realtime, interval))
        return name


def test_a_real_time_querys_dead_letters_leave_in_micro_batches_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
):
    # In Real-Time Mode they took a task per input partition and parsed every record again
    # as it came; in micro-batches every few seconds, one task on a local master.
    for name in ("parse_records", "dead_letters"):
        monkeypatch.setattr(context.records, name, lambda frame, *_: frame)
    monkeypatch.setattr(context, "letters_records", lambda frame, _topic: frame)
    io = _IO()
    opts = StreamOptions(
        bootstrap="b:9092", checkpoint_root="/tmp/cp", trigger="auto", input_tasks=1
    )
    ctx = Context(spark=_Spark("local[64]"), opts=opts, pipeline="p", io=io)  # type: ignore[arg-type]
    ctx._carry("frame", "frame", _reads(30, letters=True), realtime=True)  # type: ignore[arg-type]
    assert io.reads == [("in", False)]
    assert io.started == [("in-dlq", False, "5 seconds")]
    assert ctx.triggers == {"in-dlq": "microbatch"}
    assert ctx._letters_tasks(_reads(30, letters=True)[0]) == 1
