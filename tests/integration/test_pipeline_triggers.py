"""Triggers through ctx on the test session (local[2], 4 shuffle partitions): a query runs
in Real-Time Mode when its tasks fit in the slots, in micro-batches under ``auto`` when they
do not (its dead letters in the same query), and ``realtime`` then refuses to start it."""

from __future__ import annotations

import json

import pytest

from kiq.errors import ConfigError
from tests.integration.kafka_io import drain, produce

pytestmark = pytest.mark.spark

GOOD = [(w, json.dumps({"who": w})) for w in ["a", "b", "a", "c", "a"]]


def _ctx(spark, bootstrap, checkpoint, trigger):
    from kiq.pipelines.context import Context
    from kiq.pipelines.kafka_io import StreamOptions

    # Long Real-Time Mode batches: what a query writes before the first ends came out
    # as the records arrived.
    opts = StreamOptions(
        bootstrap=bootstrap,
        checkpoint_root=checkpoint,
        trigger=trigger,
        realtime_batch="60 seconds",
    )
    return Context(spark, opts, "rt")


def test_a_table_that_does_not_fit_falls_back_to_microbatches_under_auto(
    spark, bootstrap, make_topic, checkpoint
):
    source = make_topic("rt", partitions=1)
    table = f"{source}-counts"
    produce(bootstrap, source, [*GOOD, ("x", "{broken")])
    ctx = _ctx(spark, bootstrap, checkpoint, "auto")
    counts = ctx.read(source, "who STRING NOT NULL").groupBy("who").count()
    query = ctx.write_table(table, counts, key="who")
    try:
        # 1 input + 4 shuffle + 1 dead-letter task > 2 slots: one micro-batch query
        assert [q.name for q in ctx.queries] == [table]
        assert query.lastProgress is None or "realTime" not in str(query.lastProgress)
        query.processAllAvailable()
    finally:
        query.stop()
    written = {r.key.decode(): json.loads(r.value) for r in drain(bootstrap, table, 3)}
    assert written == {
        "a": {"who": "a", "count": 3},
        "b": {"who": "b", "count": 1},
        "c": {"who": "c", "count": 1},
    }
    letters = drain(bootstrap, f"{source}-dlq", 1, timeout_s=60)
    assert [r.headers["kiq.reason"].decode() for r in letters] == [
        "not JSON, or a field of the wrong type"
    ]


def test_realtime_refuses_a_query_whose_tasks_do_not_fit(spark, bootstrap, make_topic, checkpoint):
    source = make_topic("rt", partitions=1)
    ctx = _ctx(spark, bootstrap, checkpoint, "realtime")
    counts = ctx.read(source, "who STRING NOT NULL").groupBy("who").count()
    with pytest.raises(ConfigError, match=r"needs 6 task slots .* local\[2\] has 2 left"):
        ctx.write_table(f"{source}-counts", counts, key="who")
    assert ctx.queries == []


def test_a_stateless_query_runs_in_realtime_mode(spark, bootstrap, make_topic, checkpoint):
    from pyspark.sql import functions as F

    source = make_topic("rt", partitions=1)
    produce(bootstrap, source, [*GOOD, ("x", "{broken")])
    ctx = _ctx(spark, bootstrap, checkpoint, "realtime")
    upper = ctx.read(source, "who STRING NOT NULL").select(F.upper("who").alias("who"))
    query = ctx.write_topic(f"{source}-upper", upper, key="who")
    try:
        # Its dead letters in a real-time query of their own: one read twice in a union
        # is another thing Spark refuses in Real-Time Mode.
        assert [q.name for q in ctx.queries] == [f"{source}-dlq", f"{source}-upper"]
        got = drain(bootstrap, f"{source}-upper", len(GOOD), timeout_s=60)
        letters = drain(bootstrap, f"{source}-dlq", 1, timeout_s=60)
        assert all(q.isActive for q in ctx.queries), [q.exception() for q in ctx.queries]
        assert query.lastProgress is None, "a 60-second batch ended before the records came"
    finally:
        for q in ctx.queries:
            q.stop()
    assert sorted(r.key.decode() for r in got) == ["A", "A", "A", "B", "C"]
    assert len(letters) == 1


def test_a_join_with_a_static_side_spark_will_not_broadcast_stays_in_micro_batches(
    spark, bootstrap, make_topic
):
    """Spark plans a sort-merge join for it, which Real-Time Mode refuses once the query
    runs; kiq sees it first. A small or hinted static side is broadcast, and allowed."""
    from pyspark.sql import functions as F

    from kiq.pipelines.plans import realtime_blockers

    topic = make_topic(partitions=1)
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .selectExpr("CAST(key AS STRING) AS k")
    )
    table = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "offset")
    )
    assert realtime_blockers(stream.join(table, "k", "left")) == [
        "a join with a static side it does not broadcast (a sort-merge join)"
    ]
    assert realtime_blockers(stream.join(F.broadcast(table), "k", "left")) == []
    small = spark.range(10).selectExpr("CAST(id AS STRING) AS k")
    assert realtime_blockers(stream.join(small, "k")) == []
