"""Tombstones from a pipeline: the records ``table_records`` makes of rows that delete a key.

A null value is a tombstone (the serving nodes delete the key). A row becomes one when its
``value`` column is null, or when its table's ``delete`` column is true. The records are
checked on a local SparkSession with batch DataFrames: the same columns the Kafka sink gets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from kiq.errors import ConfigError
from kiq.pipelines.tables import TableOutput, table_records


def test_a_missing_delete_column_is_named_before_the_query_starts():
    with pytest.raises(ConfigError, match=r"no column 'gone' .*\(its columns: id, name\)"):
        TableOutput("t", "t", ("id",), delete="gone").check(["id", "name"])
    TableOutput("t", "t", ("id",), delete="gone").check(["id", "name", "gone"])


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pyspark = pytest.importorskip("pyspark.sql")
    session = (
        pyspark.SparkSession.builder.master("local[1]")
        .appName("kiq-unit-tombstones")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    yield session
    session.stop()


ROWS = [("a", "Ann", False), ("b", "Bob", True), ("c", None, None)]


def records(frame: Any) -> dict[str, tuple[str, Any]]:
    """key → (topic, value as text or None) of what the sink would write."""
    out = {}
    for row in frame.collect():
        value = None if row["value"] is None else bytes(row["value"]).decode()
        out[bytes(row["key"]).decode()] = (row["topic"], value)
    return out


@pytest.mark.spark
def test_rows_whose_delete_column_is_true_become_tombstones(spark):
    df = spark.createDataFrame(ROWS, "id string, name string, gone boolean")
    table = TableOutput("people", "people-topic", ("id",), delete="gone")
    got = records(table_records(df, [table], "dlq"))
    assert got["b"] == ("people-topic", None)  # the key kept, the value null
    # null or false keeps the value; the flag itself is not part of it
    assert orjson.loads(got["a"][1]) == {"id": "a", "name": "Ann"}
    assert orjson.loads(got["c"][1]) == {"id": "c", "name": None}


@pytest.mark.spark
def test_a_null_value_column_writes_a_tombstone(spark):
    df = spark.createDataFrame(ROWS, "id string, name string, gone boolean")
    got = records(table_records(df, [TableOutput("n", "names", ("id",), value="name")], "dlq"))
    assert got == {"a": ("names", "Ann"), "b": ("names", "Bob"), "c": ("names", None)}


@pytest.mark.spark
def test_a_delete_column_with_one_value_column_and_with_several_tables(spark):
    df = spark.createDataFrame(
        [("a", "Ann", True, "people"), ("a", "Ann", True, "names"), ("b", "Bob", None, "people")],
        "id string, name string, gone boolean, which string",
    )
    people = TableOutput("people", "people-topic", ("id",), delete="gone")
    names = TableOutput("names", "names-topic", ("id",), value="name")  # no delete column
    out = table_records(df, [people, names], "dlq", table_column="which").collect()
    got = {(r["topic"], bytes(r["key"]).decode()): r["value"] for r in out}
    assert got[("people-topic", "a")] is None
    assert bytes(got[("names-topic", "a")]).decode() == "Ann"  # gone is not names' column
    assert orjson.loads(bytes(got[("people-topic", "b")])) == {"id": "b", "name": "Bob"}
    only = TableOutput("n", "names", ("id",), value="name", delete="gone")
    got = records(table_records(df.where("which = 'people'"), [only], "dlq"))
    assert got == {"a": ("names", None), "b": ("names", "Bob")}


@pytest.mark.spark
def test_a_delete_column_that_is_not_boolean_is_a_config_error(spark):
    df = spark.createDataFrame([("a", 1)], "id string, gone int")
    with pytest.raises(ConfigError, match="delete='gone' must name a boolean column"):
        table_records(df, [TableOutput("t", "t", ("id",), delete="gone")], "dlq")
