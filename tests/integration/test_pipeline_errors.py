"""A stopped pipeline says why where the user looks, and an orderly stop says nothing.

A pipeline whose function raises stops `kiq up` with the exception's message on its
terminal (not "see pipeline.log"); a query that fails at run time ends `kiq pipeline run`
with the query's name and its error, and leaves both in the error file `kiq up` reads. A
driver stopped by a SIGTERM (as `kiq up` stops it) or a Ctrl-C (SIGINT to its group) while
a Real-Time Mode batch runs, which the stop interrupts, writes no ERROR line to its log.

Each case runs `kiq up` or `kiq pipeline run` as a process on the suite's broker; every
process it starts carries a mark of the test's and is ended with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kiq.runtime.pipeline_errors import ERROR_FILE_ENV, PipelineFailure
from kiq.runtime.reaper import add_mark, end_marked
from tests.integration.kafka_io import produce
from tests.integration.test_up import start_up

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RAISES = """
def build(ctx):
    ctx.read("{topic}")
    raise ValueError("no column named 'wrod' in {topic}")
"""

# A query that fails on its first record: a check on the data, in the JVM.
FAILS = """
from pyspark.sql import functions as F


def build(ctx):
    words = ctx.read("{topic}", "who STRING NOT NULL")
    checked = F.assert_true(F.col("who") != "ada", F.lit("cannot shout 'ada'"))
    shouted = words.select(F.coalesce(checked.cast("string"), F.upper("who")).alias("who"))
    ctx.write_topic("{topic}-out", shouted, key="who")
"""

# Real-Time Mode: a batch always runs, so a stop always interrupts one.
RUNS = """
from pyspark.sql import functions as F


def build(ctx):
    words = ctx.read("{topic}", "who STRING NOT NULL")
    ctx.write_topic("{topic}-upper", words.select(F.upper("who").alias("who")), key="who")
"""


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    """The environment of the processes a test starts: marked, ended with the test; wide
    enough a terminal that a message is not wrapped."""
    env = dict(os.environ, COLUMNS="400")
    mark = add_mark(env)
    yield env
    end_marked(mark, grace_s=5)


def finish(proc: subprocess.Popen[bytes], timeout_s: float = 180) -> int:
    try:
        return proc.wait(timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def pipeline_run(tmp_path: Path, bootstrap: str, target: str, *flags: str) -> list[str]:
    return [
        sys.executable,
        *("-m", "kiq", "pipeline", "run", target),
        *("--bootstrap", bootstrap, "--master", "local[2]", "--partitions", "1"),
        *("--checkpoint", str(tmp_path / "checkpoints"), *flags),
    ]


def test_a_pipeline_that_raises_stops_kiq_up_with_its_message(
    bootstrap: str, make_topic: Callable[..., str], tmp_path: Path, env: dict[str, str]
):
    topic = make_topic("raises")
    (tmp_path / "bad.py").write_text(RAISES.format(topic=topic))
    config = tmp_path / "kiq.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [app]
            name = "raises-{uuid.uuid4().hex[:6]}"
            bootstrap = "{bootstrap}"
            pipelines = ["bad.py:build"]
            home = "{tmp_path}/home"
            """
        )
    )
    out = tmp_path / "up.txt"
    up = start_up([sys.executable, "-m", "kiq", "up", "--config", str(config)], tmp_path, env, out)
    code = finish(up)
    text = out.read_text()
    assert code == 1, text
    assert (
        f"error: pipeline bad.build stopped: ValueError: no column named 'wrod' in {topic} "
        "(at bad.py:4 in build)"
    ) in text, text
    assert f"(the whole log: {tmp_path / 'home' / 'pipeline.log'})" in text, text
    assert "Traceback" not in text and "see " not in text, text
    log = (tmp_path / "home" / "pipeline.log").read_text()
    assert "pipeline failed pipeline=bad.build query=- error=ValueError" in log, log


def test_a_failed_query_ends_pipeline_run_with_its_name_and_error(
    bootstrap: str, make_topic: Callable[..., str], tmp_path: Path, env: dict[str, str]
):
    topic = make_topic("fails")
    produce(bootstrap, topic, [("a", '{"who": "ada"}')])
    (tmp_path / "fails.py").write_text(FAILS.format(topic=topic))
    error_file = tmp_path / "pipeline.error.json"
    env[ERROR_FILE_ENV] = str(error_file)
    out = tmp_path / "out.txt"
    argv = pipeline_run(tmp_path, bootstrap, "fails.py:build", "--trigger", "microbatch")
    code = finish(start_up(argv, tmp_path, env, out))
    text = out.read_text()
    assert code == 1, text
    last = text.strip().splitlines()
    ends = "\n".join(last[last.index(next(x for x in last if x.startswith("error: "))) :])
    assert ends.startswith(f"error: pipeline fails.build stopped: query {topic}-out failed: "), ends
    assert "cannot shout 'ada'" in ends, ends
    assert "=== Streaming Query ===" not in ends and "\tat " not in ends, ends
    assert "Traceback" not in text.split("error: pipeline", 1)[1], ends
    failure = PipelineFailure.read(error_file)
    assert failure is not None and failure.query == f"{topic}-out", failure
    assert failure.pipeline == "fails.build" and "cannot shout 'ada'" in failure.message
    assert f"pipeline failed pipeline=fails.build query={topic}-out" in text


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_an_orderly_stop_writes_no_error_line(
    bootstrap: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    env: dict[str, str],
    sig: signal.Signals,
):
    topic = make_topic("runs")
    produce(bootstrap, topic, [(w, f'{{"who": "{w}"}}') for w in ("ada", "bob", "cy")])
    (tmp_path / "runs.py").write_text(RUNS.format(topic=topic))
    log = tmp_path / "pipeline.log"
    argv = pipeline_run(tmp_path, bootstrap, "runs.py:build", "--trigger", "realtime")
    proc = start_up(argv, tmp_path, env, log)
    try:
        deadline = time.monotonic() + 120
        while "query started" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        time.sleep(5)  # its Real-Time Mode batches under way, the first records written
        if sig is signal.SIGINT:
            os.killpg(proc.pid, sig)  # Ctrl-C in a terminal: the whole group
        else:
            proc.send_signal(sig)  # the driver alone, as `kiq up` stops it
    finally:
        code = finish(proc, 60)
    text = log.read_text()
    assert code == 0, text
    assert "pipeline stopped name=runs.build" in text, text
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert errors == [], text
