"""Consistent queries (``ctx.write_table(consistent=True)``): which topics and partitions get
a batch's markers, that they follow the batch's write, the sink options the batch write
shares with the streaming sink, and Real-Time Mode refused."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kiq.errors import ConfigError
from kiq.kafka import batch_markers
from kiq.kafka.batch_markers import MarkerFailed, MarkerProducer, marker_records
from kiq.kafka.security import KafkaSecurity
from kiq.markers import MARKER_KEY, batch_of
from kiq.pipelines import consistent
from kiq.pipelines.consistent import MarkedBatches
from kiq.pipelines.kafka_io import StreamOptions, sink_options
from kiq.pipelines.realtime import refuse_consistent, runs_in_realtime


def test_a_batch_marks_every_partition_of_every_topic_once():
    records = marker_records([("a", 3), ("b", 1)], 41)
    assert [(t, p) for t, p, _, _ in records] == [("a", 0), ("a", 1), ("a", 2), ("b", 0)]
    assert {k for _, _, k, _ in records} == {MARKER_KEY}
    assert {batch_of(v) for _, _, _, v in records} == {41}


class _Topic:
    def __init__(self, partitions: int, error: object = None) -> None:
        self.partitions = dict.fromkeys(range(partitions))
        self.error = error


class _Message:
    def __init__(self, topic: str, partition: int) -> None:
        self._topic, self._partition = topic, partition

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition


class FakeProducer:
    """confluent-kafka's Producer as ``MarkerProducer`` uses it: topics with partition counts,
    and the records produced, delivered (or failed) at flush."""

    topics: Mapping[str, int] = {}
    fail: str | None = None

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.conf = dict(conf)
        self.produced: list[tuple[str, int, bytes, bytes]] = []
        self._pending: list[tuple[Any, _Message]] = []

    def list_topics(self, topic: str, timeout: float) -> Any:
        found = {topic: _Topic(self.topics[topic])} if topic in self.topics else {}
        return type("Metadata", (), {"topics": found})()

    def produce(
        self, topic: str, *, key: bytes, value: bytes, partition: int, headers, on_delivery
    ):
        assert headers == [("kiq-format", b"1")]  # the marker's format (kiq.formats)
        self.produced.append((topic, partition, key, value))
        self._pending.append((on_delivery, _Message(topic, partition)))

    def flush(self, timeout: float) -> int:
        for callback, msg in self._pending:
            callback(self.fail, msg)
        self._pending.clear()
        return 0


@pytest.fixture
def producer(monkeypatch: pytest.MonkeyPatch) -> type[FakeProducer]:
    monkeypatch.setattr(batch_markers, "Producer", FakeProducer)
    monkeypatch.setattr(FakeProducer, "topics", {"accounts": 6, "totals": 2})
    monkeypatch.setattr(FakeProducer, "fail", None)
    return FakeProducer


def test_markers_are_produced_to_each_partition_the_broker_names(producer):
    markers = MarkerProducer("127.0.0.1:1")
    assert markers.mark(["accounts", "totals"], 7) == 8
    produced = markers._producer.produced  # type: ignore[attr-defined]
    assert sorted((t, p) for t, p, _, _ in produced) == sorted(
        [("accounts", p) for p in range(6)] + [("totals", p) for p in range(2)]
    )
    assert {(k, v) for _, _, k, v in produced} == {(MARKER_KEY, b"7")}
    conf = markers._producer.conf  # type: ignore[attr-defined]
    assert conf["acks"] == "all" and conf["bootstrap.servers"] == "127.0.0.1:1"


def test_a_marker_not_acknowledged_fails_the_batch(producer):
    producer.fail = "broker down"
    with pytest.raises(MarkerFailed, match=r"batch 3: 6 markers failed: accounts\[0\]: broker"):
        MarkerProducer("127.0.0.1:1").mark(["accounts"], 3)
    producer.fail = None
    with pytest.raises(MarkerFailed, match="no partitions of gone"):
        MarkerProducer("127.0.0.1:1").mark(["gone"], 3)


class FakeBatch:
    """A micro-batch's DataFrame: ``.write.format(f).options(...).save()`` recorded."""

    def __init__(self, log: list[tuple[str, Any]]) -> None:
        self._log = log
        self.written: dict[str, str] = {}

    @property
    def write(self) -> FakeBatch:
        return self

    def format(self, name: str) -> FakeBatch:
        self._log.append(("format", name))
        return self

    def options(self, **options: str) -> FakeBatch:
        self.written.update(options)
        return self

    def save(self) -> None:
        self._log.append(("save", dict(self.written)))


def test_a_batch_is_written_then_marked_with_its_id(monkeypatch: pytest.MonkeyPatch):
    log: list[tuple[str, Any]] = []

    class Markers:
        made = 0

        def __init__(self, bootstrap: str, *, security: KafkaSecurity) -> None:
            Markers.made += 1
            log.append(("producer", bootstrap))

        def mark(self, topics, batch_id: int) -> int:
            log.append(("mark", (tuple(topics), batch_id)))
            return len(topics)

    monkeypatch.setattr(consistent, "MarkerProducer", Markers)
    sink = {"kafka.bootstrap.servers": "b:1", "kafka.acks": "all"}
    write = MarkedBatches(sink, ["t1", "t2", "t1"], "b:1", KafkaSecurity())
    write(FakeBatch(log), 0)  # type: ignore[arg-type]
    write(FakeBatch(log), 1)  # type: ignore[arg-type]
    assert log == [
        ("format", "kafka"),
        ("save", sink),
        ("producer", "b:1"),
        ("mark", (("t1", "t2"), 0)),
        ("format", "kafka"),
        ("save", sink),
        ("mark", (("t1", "t2"), 1)),
    ]
    assert Markers.made == 1  # one producer for the query's life


def test_a_failed_write_writes_no_marker(monkeypatch: pytest.MonkeyPatch):
    marked: list[int] = []

    class Markers:
        def __init__(self, bootstrap: str, *, security: KafkaSecurity) -> None: ...

        def mark(self, topics, batch_id: int) -> int:
            marked.append(batch_id)
            return 0

    class Failing(FakeBatch):
        def save(self) -> None:
            raise RuntimeError("Kafka write failed")

    monkeypatch.setattr(consistent, "MarkerProducer", Markers)
    write = MarkedBatches({}, ["t"], "b:1", KafkaSecurity())
    with pytest.raises(RuntimeError):
        write(Failing([]), 5)  # type: ignore[arg-type]
    assert marked == []


def test_the_batch_write_takes_the_streaming_sinks_options():
    security = KafkaSecurity(protocol="SASL_PLAINTEXT", username="u", password="p")
    opts = StreamOptions(bootstrap="b:9092", checkpoint_root="/ck", security=security)
    partitioner = {"kafka.partitioner.class": "P", "kafka.kiq.key.separator.t": "|"}
    written = sink_options(opts, None, partitioner)
    assert written["kafka.bootstrap.servers"] == "b:9092"
    assert written["kafka.acks"] == "all"
    assert written["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert 'username="u"' in written["kafka.sasl.jaas.config"]
    assert partitioner.items() <= written.items()
    assert "topic" not in written  # each row's topic column
    assert sink_options(opts, "t", None)["topic"] == "t"


def test_realtime_mode_refuses_a_consistent_query_and_says_what_to_do():
    with pytest.raises(ConfigError) as refused:
        refuse_consistent("realtime", "accounts")
    text = str(refused.value)
    assert "query accounts cannot run in Real-Time Mode" in text
    assert "minutes" in text and "--trigger microbatch" in text and "consistent=True" in text
    refuse_consistent("auto", "accounts")
    refuse_consistent("microbatch", "accounts")
    with pytest.raises(ConfigError, match="consistent=True"):
        runs_in_realtime("realtime", "q", [], 1, 100, "local[100]", consistent=True)


def test_auto_runs_a_consistent_query_in_microbatches(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.INFO, "kiq.pipelines.realtime"):
        assert not runs_in_realtime("auto", "q", [], 1, 100, "local[100]", consistent=True)
        assert runs_in_realtime("auto", "q", [], 1, 100, "local[100]")
    assert ["consistent=True" in r.getMessage() for r in caplog.records] == [True]


def test_the_realtime_refusal_comes_before_anything_is_declared(tmp_path: Path):
    from kiq.pipelines.context import Context

    class Nothing:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"io.{name} called before the refusal")

    opts = StreamOptions(bootstrap="127.0.0.1:1", checkpoint_root=str(tmp_path), trigger="realtime")
    ctx = Context(spark=None, opts=opts, pipeline="p", io=Nothing())  # type: ignore[arg-type]

    class Frame:
        columns = ("who", "n")

    with pytest.raises(ConfigError, match="query t cannot run in Real-Time Mode"):
        ctx.write_table("t", Frame(), key="who", consistent=True)  # type: ignore[arg-type]
    assert ctx.declared == [] and ctx.queries == []
