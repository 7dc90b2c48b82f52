"""A pipeline records its tables' shape and refuses an incompatible change (issue 38, 3).

``Context`` records each table's key types and value fields in its declaration; the Kafka
IO compares a declaration with the catalog's before it writes anything, and refuses one
whose key or shape changed with the message that names both ways out. The catalog is a
dict here (kiq.kafka.compacted's stand-in); Spark runs ``kiq.testing``'s batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import pytest

from kiq.errors import ConfigError
from kiq.pipelines import io as pipeline_io
from kiq.pipelines.context import Context
from kiq.pipelines.io import KafkaIO
from kiq.pipelines.kafka_io import StreamOptions
from kiq.tables.declared import Declared, ValueField


class _Catalog:
    """``kiq.kafka.compacted`` over a dict: what is put, and what a read finds."""

    def __init__(self, found: Mapping[str, bytes]) -> None:
        self.found = dict(found)
        self.puts: list[dict[str, bytes | None]] = []

    def ensure(self, *_: Any, **__: Any) -> None: ...

    def read_latest(self, *_: Any, **__: Any) -> dict[str, bytes]:
        return dict(self.found)

    def put(self, _bootstrap: str, _topic: str, records: dict[str, Any], **__: Any) -> None:
        self.puts.append(records)


OLD = Declared(
    table="totals",
    topic="totals",
    key=("customer",),
    app="shop",
    pipeline="shop",
    query="totals",
    key_types=("string",),
    value_fields=(ValueField(name="customer", type="string"), ValueField(name="n", type="bigint")),
)


def _declare(monkeypatch: pytest.MonkeyPatch, new: Declared, *found: Declared) -> _Catalog:
    catalog = _Catalog({d.catalog_key: d.encode() for d in found})
    monkeypatch.setattr(pipeline_io, "compacted", catalog)
    opts = StreamOptions(bootstrap="b:1", checkpoint_root="/ck/shop")
    KafkaIO(None, opts, None).declare([new])  # type: ignore[arg-type]
    return catalog


def test_a_changed_key_is_refused_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    new = msgspec.structs.replace(OLD, key=("customer", "day"), key_types=("string", "date"))
    v2 = msgspec.structs.replace(OLD, topic="totals.v2", version="v2")
    catalog = _Catalog({d.catalog_key: d.encode() for d in (OLD, v2)})
    monkeypatch.setattr(pipeline_io, "compacted", catalog)
    with pytest.raises(ConfigError) as refused:
        KafkaIO(None, StreamOptions(bootstrap="b:1", checkpoint_root="/ck"), None).declare([new])  # type: ignore[arg-type]
    assert catalog.puts == []
    message = str(refused.value)
    assert message.startswith("table totals (application shop) changed incompatibly")
    assert "key: customer → customer|day" in message
    assert "kiq pipeline run --version v3" in message  # v2 exists
    assert "kiq topics reset totals" in message


def test_a_compatible_change_is_declared_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    added = (*(OLD.value_fields or ()), ValueField(name="last", type="timestamp"))
    new = msgspec.structs.replace(OLD, value_fields=added)
    with caplog.at_level(logging.WARNING, logger=pipeline_io.__name__):
        catalog = _declare(monkeypatch, new, OLD)
    assert list(catalog.puts[0]) == [OLD.catalog_key]
    assert "value field last: (absent) → added" in caplog.text


def test_an_older_record_gains_its_shape_quietly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    older = msgspec.structs.replace(OLD, key_types=(), value_fields=None, checkpoint="")
    with caplog.at_level(logging.WARNING, logger=pipeline_io.__name__):
        catalog = _declare(monkeypatch, OLD, older)
    assert list(catalog.puts[0]) == [OLD.catalog_key]
    assert not caplog.records


# -- what Context records -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from kiq.testing._session import local_session, stop_session

    yield local_session()
    stop_session()


ORDERS = [
    ("a", {"customer": "a", "amount": 2.5, "ts": "2026-01-01T00:00:10Z"}),
    ("b", {"customer": "b", "amount": 1.0, "ts": "2026-01-01T00:01:10Z"}),
]
ORDER = "customer STRING NOT NULL, amount DOUBLE NOT NULL, ts TIMESTAMP NOT NULL"


def _declared(spark: Any, build: Any) -> list[Declared]:
    from kiq.testing._pipeline import BatchIO

    io = BatchIO(spark, {"orders": ORDERS}, partitions=2)
    ctx = Context(spark, StreamOptions(bootstrap="b:1", checkpoint_root="/ck/shop"), "shop", io=io)
    build(ctx)
    return list(io.declared)


@pytest.mark.spark
def test_each_table_is_declared_with_its_key_types_and_value_fields(spark: Any) -> None:
    from pyspark.sql import functions as F

    def build(ctx: Context) -> None:
        orders = ctx.read("orders", schema=ORDER)
        totals = orders.groupBy("customer").agg(
            F.count("*").alias("n"), F.sum("amount").alias("spent")
        )
        ctx.write_table("totals", totals, key="customer")
        minutes = orders.groupBy("customer", F.window("ts", "1 minute")).count()
        ctx.write_table("minutes", minutes, key="customer", window="window")
        ctx.write_table(
            "amounts", orders.select("customer", "amount"), key="customer", value="amount"
        )

    totals, minutes, amounts = _declared(spark, build)
    assert totals.key_types == ("string",)
    assert [(f.name, f.type, f.nullable) for f in totals.value_fields or ()] == [
        ("customer", "string", True),
        ("n", "bigint", False),
        ("spent", "double", True),
    ]
    assert minutes.key == ("customer",) and minutes.key_types == ("string",)
    assert [f.name for f in minutes.value_fields or ()] == ["customer", "window", "count"]
    assert (amounts.value_fields, amounts.value_type) == (None, "double")
    for d in (totals, minutes, amounts):
        d.check(d.catalog_key)
