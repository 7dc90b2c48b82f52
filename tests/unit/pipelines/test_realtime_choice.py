"""Which trigger a query gets, and the task slots Real-Time Mode needs."""

from __future__ import annotations

import logging
import os

import pytest

from kiq.errors import ConfigError
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


def test_the_local_master_for_realtime_fits_tables_letters_and_shuffle():
    # 30 inputs for the tables, 30 for their dead letters, 1 shuffle partition
    assert realtime_local_master(30, 1) == f"local[{max(61, os.cpu_count() or 1)}]"


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
