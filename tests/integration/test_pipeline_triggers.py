"""`--trigger realtime` through ctx: Spark 4.2 runs stateless queries in Real-Time Mode
only, so a stateful table runs in micro-batches and its input's dead letters get a
real-time query of their own; nothing is lost either way."""

from __future__ import annotations

import json

import pytest

from tests.integration.kafka_io import drain, produce

pytestmark = pytest.mark.spark


def test_a_stateful_table_in_realtime_mode(
    spark, spark_settings, bootstrap, make_topic, checkpoint
):
    from kiq.pipelines.context import Context
    from kiq.pipelines.kafka_io import StreamOptions

    source = make_topic("rt", partitions=1)
    table = f"{source}-counts"
    good = [(w, json.dumps({"who": w})) for w in ["a", "b", "a", "c", "a"]]
    produce(bootstrap, source, [*good, ("x", "{broken")])

    opts = StreamOptions(
        bootstrap=bootstrap,
        checkpoint_root=checkpoint,
        trigger="realtime",
        realtime_batch="5 seconds",
    )
    ctx = Context(spark, opts, "rt")
    counts = ctx.read(source, "who STRING NOT NULL").groupBy("who").count()
    query = ctx.write_table(table, counts, key="who")
    try:
        assert [q.name for q in ctx.queries] == [f"{source}-dlq", table]
        query.processAllAvailable()
        letters = drain(bootstrap, f"{source}-dlq", 1, timeout_s=60)
    finally:
        for q in ctx.queries:
            q.stop()
    written = {r.key.decode(): json.loads(r.value) for r in drain(bootstrap, table, 3)}
    assert written == {
        "a": {"who": "a", "count": 3},
        "b": {"who": "b", "count": 1},
        "c": {"who": "c", "count": 1},
    }
    assert [r.headers["kiq.reason"].decode() for r in letters] == [
        "not JSON, or a field of the wrong type"
    ]
