"""kiq.testing.run_pipeline: a pipeline over rows given in Python, in a local Spark batch.

The Context is kiq's own, so what is checked here is what a stream writes: the tables'
final states, the dead letters with kiq's reasons and headers, the catalog declarations,
the partition each record would go to. tests/integration/test_testing_agrees.py runs one
pipeline both ways and finds them equal.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from kiq import Context
from kiq.errors import ConfigError
from kiq.partitioning import partition_for
from kiq.tables.declared import Declared, ValueField
from kiq.testing import Message, Record, TestClient, run_pipeline

pytestmark = pytest.mark.spark

PARTITIONS = 3
ORDER = (
    "order_id STRING NOT NULL, customer STRING NOT NULL, amount DOUBLE NOT NULL, ts BIGINT NOT NULL"
)
T0 = 1795341600000  # 2026-11-22T10:00:00Z


def orders_pipeline(ctx: Context) -> None:
    from pyspark.sql import functions as F

    orders = ctx.read("orders", schema=ORDER, reject=[("amount <= 0", "amount must be positive")])
    totals = orders.groupBy("customer").agg(
        F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("spent")
    )
    ctx.write_table("customer-totals", totals, key="customer")
    at = F.date_format(F.timestamp_millis("ts"), "yyyy-MM-dd'T'HH:mm:ss.SSS").alias("at")
    by_time = orders.select("customer", at, "order_id", "amount")
    ctx.write_table("orders-by-time", by_time, key=("customer", "at", "order_id"))


def order(i: int, customer: str, amount: float) -> tuple[str, dict]:
    return customer, {"order_id": f"o-{i}", "customer": customer, "amount": amount, "ts": T0 + i}


ORDERS = [
    order(1, "alice", 10.5),
    order(2, "bob", 3.0),
    order(3, "alice", 2.0),
    ("carol", "not json"),
    ("dave", {"order_id": "o-4", "customer": "dave", "ts": T0}),  # no amount
    order(5, "erin", -1.0),
    order(6, "x|y", 1.25),  # a customer whose name holds the separator
]


def offsets(rows: list) -> list[tuple[int, int]]:
    """(partition, offset) of each keyed row, as run_pipeline places them."""
    seen: dict[int, int] = {}
    out = []
    for key, _ in rows:
        p = partition_for(key, PARTITIONS)
        out.append((p, seen.get(p, 0)))
        seen[p] = seen.get(p, 0) + 1
    return out


@pytest.fixture(scope="module")
def run():
    return run_pipeline(orders_pipeline, {"orders": ORDERS}, partitions=PARTITIONS)


def test_each_table_is_its_final_state_by_key(run):
    assert run.tables["customer-totals"] == {
        "alice": {"customer": "alice", "orders": 2, "spent": 12.5},
        "bob": {"customer": "bob", "orders": 1, "spent": 3.0},
        "x|y": {"customer": "x|y", "orders": 1, "spent": 1.25},  # one column: no separator
    }
    assert run.tables["orders-by-time"] == {
        "alice|2026-11-22T10:00:00.001|o-1": {
            "customer": "alice",
            "at": "2026-11-22T10:00:00.001",
            "order_id": "o-1",
            "amount": 10.5,
        },
        "bob|2026-11-22T10:00:00.002|o-2": {
            "customer": "bob",
            "at": "2026-11-22T10:00:00.002",
            "order_id": "o-2",
            "amount": 3.0,
        },
        "alice|2026-11-22T10:00:00.003|o-3": {
            "customer": "alice",
            "at": "2026-11-22T10:00:00.003",
            "order_id": "o-3",
            "amount": 2.0,
        },
    }


def test_dead_letters_carry_kiqs_reasons_and_where_they_came_from(run):
    placed = offsets(ORDERS)
    bad = {3: "not JSON, or a field of the wrong type", 4: "missing or malformed field amount"}
    bad[5] = "amount must be positive"
    expected = [
        Record(
            "orders-dlq",
            ORDERS[i][0].encode(),
            ORDERS[i][1].encode() if isinstance(ORDERS[i][1], str) else None,
            0,
            {
                "kiq.reason": reason,
                "kiq.source.topic": "orders",
                "kiq.source.partition": str(placed[i][0]),
                "kiq.source.offset": str(placed[i][1]),
            },
        )
        for i, reason in bad.items()
    ]
    letters = run.dead_letters
    assert [(r.topic, r.key, r.partition, r.headers) for r in letters[:3]] == [
        (r.topic, r.key, r.partition, r.headers) for r in expected
    ]
    assert letters[0].value == b"not json"
    assert letters[1].json() == ORDERS[4][1]
    assert [r.reason for r in letters] == [*bad.values(), letters[3].reason]
    unkeyed = letters[3]
    assert unkeyed.topic == "orders-by-time-dlq"
    assert unkeyed.reason == "key column customer contains the separator '|'"
    assert unkeyed.headers["kiq.table"] == "orders-by-time"
    assert unkeyed.key == b"x|y|2026-11-22T10:00:00.006|o-6"
    assert unkeyed.json()["customer"] == "x|y"


def test_the_catalog_declarations_and_the_partition_of_each_record(run):
    assert run.declared == (
        Declared(
            table="customer-totals",
            topic="customer-totals",
            key=("customer",),
            partitions=PARTITIONS,
            pipeline=f"{__name__}.orders_pipeline",
            query="customer-totals",
            # its query's dead letters, then its input's
            dead_letters=("customer-totals-dlq", "orders-dlq"),
            # the shape readers rely on, compared at each start (kiq.tables.compatible)
            key_types=("string",),
            value_fields=(
                ValueField(name="customer", type="string"),
                ValueField(name="orders", type="bigint", nullable=False),
                ValueField(name="spent", type="double"),
            ),
        ),
        Declared(
            table="orders-by-time",
            topic="orders-by-time",
            key=("customer", "at", "order_id"),
            sep="|",
            partitions=PARTITIONS,
            pipeline=f"{__name__}.orders_pipeline",
            query="orders-by-time",
            dead_letters=("orders-by-time-dlq", "orders-dlq"),
            key_types=("string", "string", "string"),
            value_fields=tuple(
                ValueField(name=n, type="double" if n == "amount" else "string")
                for n in ("customer", "at", "order_id", "amount")
            ),
        ),
    )
    assert run.queries == ("customer-totals", "orders-by-time")
    for record in run.topics["orders-by-time"]:  # a composite key: its first part's partition
        assert record.key is not None
        assert record.partition == partition_for(record.key.split(b"|")[0], PARTITIONS)
    for record in run.topics["customer-totals"]:
        assert record.partition == partition_for(record.key or b"", PARTITIONS)


def test_a_projection_keeps_the_last_row_of_each_key_in_the_order_given():
    def latest(ctx: Context) -> None:
        ctx.write_table("latest", ctx.read("ticks", "symbol STRING, px INT"), key="symbol")

    rows = [{"symbol": f"S{i % 3}", "px": i} for i in range(30)]
    run = run_pipeline(latest, {"ticks": rows}, partitions=4)
    assert run.tables["latest"] == {f"S{s}": {"symbol": f"S{s}", "px": 27 + s} for s in range(3)}
    assert [r.json()["px"] for r in run.topics["latest"]] == list(range(30))


def test_tombstones_delete_keys_and_a_checked_read_rejects_them():
    def mirror(ctx: Context) -> None:
        from pyspark.sql import functions as F

        raw = ctx.read("kv").select(F.col("__key").alias("k"), F.col("__value").alias("v"))
        ctx.write_table("kv", raw, key="k", value="v")
        ctx.write_table("checked", ctx.read("kv2", "n INT"), key="n")

    run = run_pipeline(
        mirror,
        {
            "kv": [("a", "1"), ("b", "2"), ("a", None), ("c", "three")],
            "kv2": [("x", None), ("y", {"n": 7})],
        },
    )
    assert run.tables["kv"] == {"b": 2, "c": "three"}  # not JSON: the text
    assert run.tables["checked"] == {"7": {"n": 7}}
    assert [(r.key, r.reason) for r in run.dead_letters] == [(b"x", "no value")]


def test_streams_keyless_records_and_the_kafka_timestamp():
    def stream(ctx: Context) -> None:
        from pyspark.sql import functions as F

        events = ctx.read("events", "name STRING")
        seen = events.select("name", F.unix_millis("__timestamp").alias("at"), "__offset")
        ctx.write_topic("seen", seen)

    when = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    run = run_pipeline(
        stream,
        {
            "events": [
                Message({"name": "a"}, timestamp=when),
                Message({"name": "b"}, key="k", timestamp=1795341600123),
                {"name": "c"},
            ]
        },
    )
    records = run.topics["seen"]
    assert [r.partition for r in records] == [None, None, None]  # keyless: Kafka spreads them
    assert [r.json()["at"] for r in records[:2]] == [1795341600000, 1795341600123]
    assert [r.json()["name"] for r in records] == ["a", "b", "c"]
    assert all("__offset" not in r.json() for r in records)  # kiq's columns stay out of values
    assert run.tables == {} and run.declared == ()


def test_a_shipped_pipeline_by_target_then_its_routes_on_the_tables():
    words = [(w, w) for w in ["kafka", "spark", "kafka", "kiq", "kafka"]] + [(None, "keyless")]
    run = run_pipeline("kiq.apps.wordcount.pipeline:build", {"words": words}, partitions=2)
    assert run.tables["word-counts"] == {
        "kafka": {"word": "kafka", "count": 3},
        "spark": {"word": "spark", "count": 1},
        "kiq": {"word": "kiq", "count": 1},
    }
    assert run.declared[0].pipeline == "wordcount"
    with TestClient("kiq.apps.wordcount.api:routes", tables=run.tables) as client:
        assert client.get("/v1/words/Kafka").json() == {"word": "kafka", "count": 3}


def test_mistakes_fail_as_they_do_under_kiq_pipeline_run():
    def nothing(ctx: Context) -> None:
        ctx.read("orders", ORDER)

    with pytest.raises(ConfigError, match="started no query"):
        run_pipeline(nothing, {"orders": []})

    def no_column(ctx: Context) -> None:
        ctx.write_table("t", ctx.read("orders", ORDER), key="nope")

    with pytest.raises(ConfigError, match="no column 'nope'"):
        run_pipeline(no_column, {"orders": []})
    with pytest.raises(ConfigError, match="tuple"):
        run_pipeline(orders_pipeline, {"orders": [("a", "b", "c")]})
    with pytest.raises(ConfigError, match="partitions"):
        run_pipeline(orders_pipeline, {}, partitions=0)


def test_a_warm_run_takes_seconds(run):
    started = time.monotonic()
    again = run_pipeline(orders_pipeline, {"orders": ORDERS}, partitions=PARTITIONS)
    took = time.monotonic() - started
    assert again.tables == run.tables
    assert took < 30, f"a run on a warm session took {took:.1f} s"
