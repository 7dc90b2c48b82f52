"""How a stopped pipeline's error is shortened for a terminal and kept for `kiq up`."""

from __future__ import annotations

from pathlib import Path

from kiq.runtime.pipeline_errors import PipelineFailure, brief

SPARK = """[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [PYTHON_EXCEPTION] \
An exception was thrown from the Python worker: Traceback (most recent call last):
  File "worker.py", line 1, in main
    func = read_udfs(
           ^^^^^^^^^^
ValueError: bad word 'ada'
 SQLSTATE: 38000
\tat org.apache.spark.Foo.bar(Foo.scala:1)
\tat org.apache.spark.Foo.baz(Foo.scala:2)

=== Streaming Query ===
Identifier: q
Current Committed Offsets: {}
"""


def test_brief_keeps_the_cause_and_drops_plan_frames_and_traceback():
    assert brief(SPARK) == (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [PYTHON_EXCEPTION] "
        "An exception was thrown from the Python worker:\nValueError: bad word 'ada'\n"
        " SQLSTATE: 38000"
    )


def test_brief_caps_a_long_message():
    text = brief("\n".join(f"line {i}" for i in range(40)))
    assert text.splitlines()[-1] == "... (28 more lines in the log)"
    assert brief("") == "(no message)"


def test_a_failure_says_pipeline_query_and_hint_and_survives_its_file(tmp_path: Path):
    failure = PipelineFailure(
        "shop.build", "StreamingQueryException", "boom\nmore", "counts", "\n(hint)"
    )
    assert (
        failure.summary() == "pipeline shop.build stopped: query counts failed: boom\nmore\n(hint)"
    )
    assert failure.log_line().splitlines()[0] == (
        "pipeline failed pipeline=shop.build query=counts "
        "error=StreamingQueryException message=boom"
    )
    failure.write(tmp_path / "pipeline.error.json")
    assert PipelineFailure.read(tmp_path / "pipeline.error.json") == failure
    assert PipelineFailure.read(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{")
    assert PipelineFailure.read(tmp_path / "bad.json") is None
