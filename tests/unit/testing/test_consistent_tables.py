"""``consistent=True`` through kiq's own Context over a local Spark batch: the query is asked to
mark its table topics (each once, a version's own, never the dead letters), the declaration
records it, and a query without it marks nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kiq import Context
from kiq.pipelines.kafka_io import StreamOptions
from kiq.testing._pipeline import BatchIO
from kiq.testing._session import local_session

pytestmark = pytest.mark.spark

TRANSFER = "src STRING NOT NULL, dst STRING NOT NULL, amount BIGINT NOT NULL"
ROWS = [{"src": "a1", "dst": "a2", "amount": 5}, {"src": "a2", "dst": "a3", "amount": 2}]


class MarkingIO(BatchIO):
    """kiq.testing's IO, keeping what each query was asked to mark."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.markers: dict[str, tuple[str, ...]] = {}

    def start(self, frame, name, *, markers: Sequence[str] = (), **kwargs: Any):  # type: ignore[override]
        self.markers[name] = tuple(markers)
        return super().start(frame, name, **kwargs)


def _run(build, version: str = "v1") -> tuple[MarkingIO, Context]:
    spark = local_session()
    io = MarkingIO(spark, {"transfers": ROWS}, 3)
    opts = StreamOptions(bootstrap="kiq.testing:0", checkpoint_root="", trigger="microbatch")
    ctx = Context(spark, opts, "bank", 3, {}, io=io, version=version)
    build(ctx)
    return io, ctx


def _balances(ctx: Context):
    from pyspark.sql import functions as F

    t = ctx.read("transfers", schema=TRANSFER)
    moves = t.select(
        F.explode(
            F.array(
                F.struct(F.col("src").alias("account"), (-F.col("amount")).alias("delta")),
                F.struct(F.col("dst").alias("account"), F.col("amount").alias("delta")),
            )
        ).alias("m")
    ).select("m.*")
    return moves.groupBy("account").agg(F.sum("delta").alias("balance"))


def test_a_consistent_table_marks_its_topic_and_declares_it():
    def build(ctx: Context) -> None:
        ctx.write_table("accounts", _balances(ctx), key="account", consistent=True)
        ctx.write_table("plain", _balances(ctx), key="account")

    io, _ = _run(build)
    assert io.markers == {"accounts": ("accounts",), "plain": ()}
    declared = {d.table: d.consistent for d in io.declared}
    assert declared == {"accounts": True, "plain": False}
    written = {r.key.decode(): r.value for r in io.records if r.topic == "accounts"}
    assert written == {
        "a1": b'{"account":"a1","balance":-5}',
        "a2": b'{"account":"a2","balance":3}',
        "a3": b'{"account":"a3","balance":2}',
    }


def test_one_query_of_several_tables_marks_each_of_its_topics_not_its_dead_letters():
    from pyspark.sql import functions as F

    def build(ctx: Context) -> None:
        rows = _balances(ctx).select(
            F.explode(F.array(F.lit("low"), F.lit("high"))).alias("table"), "account", "balance"
        )
        ctx.write_tables(
            rows,
            "table",
            key={"low": "account", "high": "account"},
            query="q",
            topics={"low": "t-low", "high": "t-high"},
            consistent=True,
        )

    io, _ = _run(build, version="v2")
    assert io.markers == {"q": ("t-low.v2", "t-high.v2")}  # a version's own topics
    assert {r.topic for r in io.records} == {"t-low.v2", "t-high.v2"}
    assert {d.table for d in io.declared if d.consistent} == {"low", "high"}
