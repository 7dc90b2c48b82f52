"""Which windowed aggregations Spark runs in Real-Time Mode on the pinned runtime
(docs/guides/pipelines.md, "Windowed tables"): tumbling and sliding windows run for real
there, and kiq's own check (``realtime_blockers``) agrees; session windows Spark aggregates
in append mode only, so ``ctx.write_table`` refuses them before a query starts."""

from __future__ import annotations

import pytest

from kiq.pipelines.plans import realtime_blockers
from tests.integration.kafka_io import drain, produce
from tests.integration.test_spark_compat import _read, _start

pytestmark = pytest.mark.spark

T0 = 1795600800000  # 2026-11-25T10:00:00Z


def _windowed(spark, bootstrap: str, topic: str, kind: str):
    from pyspark.sql import functions as F

    raw = _read(spark, bootstrap, topic)
    views = raw.select(
        F.col("key").cast("string").alias("user"),
        F.timestamp_millis(F.col("value").cast("string").cast("long")).alias("at"),
    )
    window = {
        "tumbling": F.window("at", "1 minute"),
        "sliding": F.window("at", "2 minutes", "1 minute"),
        "session": F.session_window("at", "1 minute"),
    }[kind]
    counts = views.groupBy("user", window.alias("w")).count()
    return counts.select(
        F.concat_ws("|", "user", F.col("w.start").cast("string")).alias("key"),
        F.to_json(F.struct("user", "count")).alias("value"),
    )


@pytest.fixture
def one_shuffle_partition(spark):
    """One shuffle partition for this test, the session's own setting again after it: the
    session is shared, and later tests start their queries with what it holds."""
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", previous)


@pytest.mark.parametrize("kind", ["tumbling", "sliding"])
@pytest.mark.usefixtures("one_shuffle_partition")
def test_a_windowed_aggregation_in_real_time_mode(spark, bootstrap, make_topic, checkpoint, kind):
    source = make_topic("win-in", partitions=1)
    sink = make_topic("win-out", partitions=1)
    produce(bootstrap, source, [("u", str(T0 + i * 20_000)) for i in range(5)])
    frame = _windowed(spark, bootstrap, source, kind)
    blockers = realtime_blockers(frame)
    query = _start(frame, bootstrap, sink, checkpoint, {"realTime": "60 seconds"})
    try:
        records = drain(bootstrap, sink, expected=1, timeout_s=60)
        ran = bool(records) and query.exception() is None
    except Exception:
        ran = False
    finally:
        error = query.exception()
        query.stop()
    print(kind, "ran" if ran else f"refused: {error}", "kiq blockers:", blockers)
    assert ran == (not blockers), (kind, blockers, error)


def test_a_session_window_table_is_refused_before_it_starts(
    spark, bootstrap, make_topic, checkpoint
):
    from pyspark.sql import functions as F

    from kiq.errors import ConfigError
    from kiq.pipelines.tables import with_window_parts

    source = make_topic("win-in", partitions=1)
    frame = _read(spark, bootstrap, source).select(
        F.col("key").cast("string").alias("user"), F.col("timestamp").alias("at")
    )
    sessions = frame.groupBy("user", F.session_window("at", "1 minute").alias("w")).count()
    with pytest.raises(ConfigError, match="session window"):
        with_window_parts(sessions, "visits", "w")
    # and Spark itself would refuse it in update mode, in either trigger
    counts = sessions.select(
        F.col("user").alias("key"), F.col("count").cast("string").alias("value")
    )
    with pytest.raises(Exception, match="session window"):
        _start(
            counts,
            bootstrap,
            make_topic("win-out", partitions=1),
            checkpoint,
            {"processingTime": "0 seconds"},
        ).stop()
