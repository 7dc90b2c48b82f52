"""``ctx.write_table(..., index=[...])``'s checks against the DataFrame's schema (issue 41):
each indexed field a top-level text or numeric field of the JSON value, named once, at most
eight, not the window column; a plain string refused. Schemas only: no Spark session."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kiq.errors import ConfigError
from kiq.pipelines.context import Context
from kiq.pipelines.indexes import index_fields
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.tables import TableOutput
from kiq.tables.spec import IndexField

WINDOW = StructType([StructField("start", TimestampType()), StructField("end", TimestampType())])
BOOKING = StructType(
    [
        StructField("id", StringType()),
        StructField("hotel", StringType()),
        StructField("guest", StringType()),
        StructField("nights", IntegerType()),
        StructField("price", DecimalType(10, 2)),
        StructField("rating", DoubleType()),
        StructField("paid", BooleanType()),
        StructField("tags", ArrayType(StringType())),
        StructField("stay", WINDOW),
        StructField("gone", BooleanType()),
        StructField("kind", StringType()),
        StructField("__kiq_window_start", StringType()),
    ]
)
# The same fields in a struct column written as the value (``value="booking"``).
NESTED = StructType(
    [
        StructField("id", StringType()),
        StructField("booking", BOOKING),
        StructField("total", LongType()),
    ]
)


def test_text_and_number_fields_are_indexed_in_the_order_named():
    assert index_fields(BOOKING, "b", ["hotel", "price", "nights", "rating"]) == (
        IndexField("hotel", "text"),
        IndexField("price", "number"),
        IndexField("nights", "number"),
        IndexField("rating", "number"),
    )
    assert index_fields(BOOKING, "b", ("id",)) == (IndexField("id", "text"),)
    assert index_fields(BOOKING, "b", None) == () and index_fields(BOOKING, "b", []) == ()


def test_a_struct_values_fields_are_the_ones_indexed():
    assert index_fields(NESTED, "b", ["hotel"], value="booking") == (IndexField("hotel", "text"),)
    with pytest.raises(ConfigError, match=r"'total' is not a top-level field .*\(its fields: id,"):
        index_fields(NESTED, "b", ["total"], value="booking")


@pytest.mark.parametrize(
    ("index", "said"),
    [
        (
            ["paid"],
            r"table b: index field 'paid' is boolean; an index covers a text field \(string\) "
            r"or a number field \(tinyint",
        ),
        (["tags"], "index field 'tags' is array<string>; an index covers a text field"),
        (["stay"], "index field 'stay' is the window column"),
        (["hotel", "price", "hotel"], "index names 'hotel' twice"),
        ([f"f{i}" for i in range(9)], "index names 9 fields; a table has at most 8 indexes"),
        (
            ["city"],
            r"index field 'city' is not a top-level field of the JSON value \(its fields: id,",
        ),
        (["gone"], "index field 'gone' is not a top-level field"),  # the delete column
        (["kind"], "index field 'kind' is not a top-level field"),  # write_tables' table column
        (["__kiq_window_start"], "'__kiq_window_start' is not a top-level field"),
        (["hotel.name"], "'hotel.name' is not a top-level field"),
        ("hotel", r"index='hotel' is one name, not a list: .*index=\['hotel'\]"),
        ([3], "index must be a list of value field names, got \\[3\\]"),
        ({"hotel"}, "index must be a list of value field names"),
    ],
)
def test_what_cannot_be_indexed_is_refused_naming_the_field(index: object, said: str):
    with pytest.raises(ConfigError, match=said):
        index_fields(BOOKING, "b", index, window="stay", exclude=("gone", "kind"))


def test_a_value_that_is_no_object_has_no_fields_to_index():
    with pytest.raises(ConfigError, match="value='id' is not a struct column \\(string\\)"):
        index_fields(NESTED, "b", ["id"], value="id")
    with pytest.raises(ConfigError, match="value='nope' is not a struct column \\(missing\\)"):
        index_fields(NESTED, "b", ["id"], value="nope")


def test_a_field_name_the_catalog_would_refuse_is_refused_first():
    odd = StructType([StructField("x" * 101, StringType()), StructField("a\tb", StringType())])
    for name in odd.fieldNames():
        with pytest.raises(ConfigError, match="1-100 printable characters"):
            index_fields(odd, "b", [name])


class _Frame:
    """What ``Context._output`` reads of a DataFrame: its schema and columns."""

    schema = BOOKING
    columns = BOOKING.fieldNames()


def _output(index: list[str]) -> TableOutput:
    frame: Any = _Frame()
    return Context._output(
        "b", frame, "b", ("id",), "|", None, "gone", None, None, None, None, index
    )


def test_the_context_records_the_checked_index_on_the_table_output():
    assert _output(["hotel"]).index == (IndexField("hotel", "text"),)
    with pytest.raises(ConfigError, match="index field 'gone' is not a top-level field"):
        _output(["gone"])  # the delete column is not in the value


def test_write_table_refuses_a_plain_string_before_anything_is_declared():
    opts = StreamOptions(bootstrap="127.0.0.1:1", checkpoint_root="/tmp/ck")
    ctx = Context(spark=None, opts=opts, pipeline="p", partitioner_jar=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="pass a list of value fields, index=\\['hotel'\\]"):
        ctx.write_table("b", _Frame(), key="id", index="hotel")  # type: ignore[arg-type]
    assert ctx.declared == []
