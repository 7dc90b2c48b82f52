"""Pipeline options that decide how much fixed work each micro-batch costs."""

from __future__ import annotations

from typing import Any

from kiq.pipelines.kafka_io import StreamOptions, read_topics
from kiq.pipelines.runner import stale_state_hint
from kiq.settings import SparkSettings


def test_one_input_task_per_batch_on_a_local_master_only():
    assert SparkSettings(master="local[2]").input_tasks_per_batch == 1
    assert SparkSettings(master="spark://h:7077").input_tasks_per_batch is None
    assert SparkSettings(master="local[2]", input_tasks=4).input_tasks_per_batch == 4
    assert SparkSettings(master="spark://h:7077", input_tasks=8).input_tasks_per_batch == 8


def test_reads_never_wait_on_the_brokers_fetch_timeout():
    opts = StreamOptions(bootstrap="b:9092", checkpoint_root="/tmp/cp")
    assert opts.fetch_max_wait_ms == 0
    assert opts.input_tasks is None


class _Reader:
    """Records the options of a streaming read, as Spark's DataStreamReader takes them."""

    def __init__(self) -> None:
        self.given: dict[str, str] = {}
        self.coalesced: int | None = None

    def format(self, _name: str) -> _Reader:
        return self

    def option(self, key: str, value: str) -> _Reader:
        self.given[key] = value
        return self

    def options(self, **more: str) -> _Reader:
        self.given.update(more)
        return self

    def load(self) -> _Reader:
        return self

    def coalesce(self, n: int) -> _Reader:
        self.coalesced = n
        return self


class _Spark:
    def __init__(self) -> None:
        self.readStream = _Reader()


def _read(realtime: bool) -> _Reader:
    spark = _Spark()
    opts = StreamOptions(bootstrap="b:9092", checkpoint_root="/tmp/cp", input_tasks=1)
    frame: Any = read_topics(spark, opts, "ticks", realtime=realtime)  # type: ignore[arg-type]
    assert frame is spark.readStream
    return spark.readStream


def test_a_real_time_read_long_polls_where_a_micro_batch_read_never_waits():
    # 0 for a micro-batch read (its offset requests queue behind a held fetch); a real-time
    # read polls for the whole batch, and at 0 an idle partition is a busy loop on the broker.
    batch, realtime = _read(realtime=False), _read(realtime=True)
    assert batch.given["kafka.fetch.max.wait.ms"] == "0"
    assert realtime.given["kafka.fetch.max.wait.ms"] == "100"
    assert (batch.coalesced, realtime.coalesced) == (1, None)


def test_a_checkpoint_from_another_version_of_the_query_says_what_to_do():
    error = "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] The provided value schema does not match"
    hint = stale_state_hint(error, "/var/kiq/checkpoints")
    assert "/var/kiq/checkpoints" in hint and "delete" in hint
    assert stale_state_hint("[KAFKA] broker went away", "/var/kiq/checkpoints") == ""


def test_a_checkpoint_written_under_another_trigger_says_what_to_do():
    # micro-batches carry the dead letters in the query (two reads of the input); Real-Time
    # Mode runs them apart, so the same query has one source there
    error = (
        "assertion failed: There are [2] sources in the checkpoint offsets and now there "
        "are [1] sources requested by the query. Cannot continue."
    )
    hint = stale_state_hint(error, "/var/kiq/checkpoints")
    assert "/var/kiq/checkpoints" in hint and "another trigger" in hint


def test_ctx_opts_kafka_is_the_kafka_security_as_spark_options():
    """``.options(**ctx.opts.kafka)`` is how a pipeline's own reader connects as kiq does
    (docs/guides/security.md, examples/point_of_sale): the name is public API."""
    from kiq.kafka import KafkaSecurity

    assert StreamOptions("127.0.0.1:9092", "/tmp/c").kafka == {}
    sasl = KafkaSecurity(protocol="SASL_PLAINTEXT", username="kiq", password="pw")
    options = StreamOptions("127.0.0.1:9092", "/tmp/c", security=sasl).kafka
    assert options["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert 'username="kiq"' in options["kafka.sasl.jaas.config"]


class _Writer:
    """Records a streaming write's options and trigger, as Spark's DataStreamWriter takes them."""

    def __init__(self) -> None:
        self.given: dict[str, str] = {}
        self.trigger_given: dict[str, str] = {}

    def __getattr__(self, _name: str) -> Any:
        return lambda *_args: self  # format, queryName, outputMode

    def option(self, key: str, value: str) -> _Writer:
        self.given[key] = value
        return self

    def options(self, **more: str) -> _Writer:
        self.given.update(more)
        return self

    def trigger(self, **kind: str) -> _Writer:
        self.trigger_given = kind
        return self

    def start(self) -> _Writer:
        return self


class _Frame:
    def __init__(self) -> None:
        self.writeStream = _Writer()


def _write(realtime: bool, interval: str | None = None) -> _Writer:
    from kiq.pipelines.kafka_io import write_topic

    frame = _Frame()
    opts = StreamOptions(bootstrap="b:9092", checkpoint_root="/tmp/cp")
    write_topic(frame, opts, None, "q", realtime=realtime, interval=interval)  # type: ignore[arg-type]
    return frame.writeStream


def test_a_real_time_write_lingers_a_little_where_a_micro_batch_write_does_not():
    # Real-Time Mode sends each changed row as it is made: at linger 0 each is a produce
    # request of its own; a micro-batch flushes its batch at the end of its task anyway.
    realtime, batch = _write(realtime=True), _write(realtime=False)
    assert realtime.given["kafka.linger.ms"] == "5"
    assert "kafka.linger.ms" not in batch.given
    assert realtime.trigger_given == {"realTime": "5 minutes"}
    assert batch.trigger_given == {"processingTime": "0 seconds"}
    assert _write(realtime=False, interval="5 seconds").trigger_given == {
        "processingTime": "5 seconds"
    }
