"""A consistent query on the test session (real Kafka, real Spark): after each micro-batch
every partition of its table topic gets the batch's marker, the same batch ids in every
partition, in order, each batch's records between the marker before and its own; its dead
letters get none.

Each output record carries the input partition and offset it came from, and the query's
progress says which input offsets each batch read, so each record's batch is known."""

from __future__ import annotations

import json

import pytest

from kiq.markers import MARKER_KEY
from tests.integration.bank.ledger import marked, read_log
from tests.integration.kafka_io import drain, produce

pytestmark = pytest.mark.spark

PARTITIONS = 3
PER_ROUND = 45


def _offsets(text: object, topic: str) -> dict[int, int]:
    """A Kafka source's offsets in a progress report: {partition: offset}."""
    found = json.loads(text) if isinstance(text, str) else text
    if not found:  # the first batch starts from none ("null")
        return {}
    return {int(p): int(o) for p, o in found.get(topic, {}).items()}


def _batch_of_input(progress: list, topic: str) -> dict[tuple[int, int], int]:
    """(input partition, offset) → the batch that read it, from the query's progress."""
    out: dict[tuple[int, int], int] = {}
    for report in progress:
        for source in report.sources:
            start = _offsets(source.startOffset, topic)
            for p, end in _offsets(source.endOffset, topic).items():
                for offset in range(start.get(p, 0), end):
                    out.setdefault((p, offset), report.batchId)
    return out


def test_each_batch_is_marked_in_every_partition_after_its_records(
    spark, bootstrap, make_topic, checkpoint
):
    from pyspark.sql import functions as F

    from kiq.pipelines.context import Context
    from kiq.pipelines.kafka_io import StreamOptions

    source = make_topic("consistent", partitions=PARTITIONS)
    table = f"{source}-marked"
    # 30 records a batch at most: each round of 46 takes two batches or more.
    opts = StreamOptions(
        bootstrap=bootstrap,
        checkpoint_root=checkpoint,
        trigger="microbatch",
        max_offsets_per_trigger=30,
    )
    ctx = Context(spark, opts, "consistent")
    rows = ctx.read(source, "k STRING NOT NULL")
    out = rows.select(
        F.concat_ws(
            ":", F.col("__partition").cast("string"), F.col("__offset").cast("string")
        ).alias("at"),
        F.col("__partition").alias("p"),
        F.col("__offset").alias("o"),
    )
    query = ctx.write_table(table, out, key="at", consistent=True)
    try:
        for r in range(3):
            good = [(f"k{r}-{i}", json.dumps({"k": f"{r}-{i}"})) for i in range(PER_ROUND)]
            produce(bootstrap, source, [*good, ("bad", "{broken")])
            query.processAllAvailable()
        progress = list(query.recentProgress)
    finally:
        query.stop()

    batch_of = _batch_of_input(progress, source)
    assert len(batch_of) == 3 * (PER_ROUND + 1), "the progress accounts for every input record"
    ran = sorted({r.batchId for r in progress})
    assert len(ran) >= 6

    logs = read_log(bootstrap, table)
    assert set(logs) == set(range(PARTITIONS))
    data = 0
    for p, log in logs.items():
        # Every batch marked once, in order, in every partition (no batch was run again).
        assert marked(log) == ran, f"partition {p}"
        before: int | None = None  # the batch of the last marker passed
        pending: list[int] = []  # batches of the records since
        for e in log:
            if e.key == MARKER_KEY:
                assert all(b == e.batch for b in pending), (p, e.offset, e.batch, pending)
                before, pending = e.batch, []
                continue
            value = json.loads(e.value)
            b = batch_of[(value["p"], value["o"])]
            assert before is None or b > before, (p, e.offset, b, before)
            pending.append(b)
            data += 1
        assert pending == [], f"partition {p} ends in records no marker follows"
    assert data == 3 * PER_ROUND

    letters = drain(bootstrap, f"{source}-dlq", 3, timeout_s=30)
    assert [r.key for r in letters] == [b"bad"] * 3  # and no marker among them
