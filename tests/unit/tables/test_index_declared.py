"""A table's secondary indexes in its catalog record (issue 41): recorded and read back, none
in a record from before them, a hostile list refused with the record, carried to the node's
``TableSpec`` and to ``GET /v1/tables``, and a changed index a compatible change."""

from __future__ import annotations

import logging

import msgspec
import pytest

from kiq.api.bodies import Declaration
from kiq.catalog import CATALOG_TOPIC
from kiq.errors import ConfigError
from kiq.tables.compatible import compatible_changes, incompatible
from kiq.tables.declared import (
    Declared,
    IndexedField,
    declared_fields,
    decode_catalog,
    parse_served,
    resolve_tables,
    spec_of,
)
from kiq.tables.spec import IndexField, TableSpec

HOTEL = IndexedField(field="hotel", type="text")
PRICE = IndexedField(field="price", type="number")
BOOKINGS = Declared(
    table="bookings",
    topic="bookings",
    key=("id",),
    partitions=6,
    app="stay",
    pipeline="stay",
    index=(HOTEL, PRICE),
)


def _read(value: bytes) -> Declared | None:
    return decode_catalog({BOOKINGS.catalog_key: value}).get("bookings")


def _with_index(index: object) -> bytes:
    record = msgspec.to_builtins(BOOKINGS)
    record["index"] = index
    return msgspec.json.encode(record)


def test_the_index_is_recorded_as_fields_and_types_and_read_back():
    encoded = msgspec.json.decode(BOOKINGS.encode())
    assert encoded["index"] == [
        {"field": "hotel", "type": "text"},
        {"field": "price", "type": "number"},
    ]
    assert _read(BOOKINGS.encode()) == BOOKINGS


def test_a_record_from_before_indexes_reads_as_none():
    old = msgspec.json.decode(BOOKINGS.encode())
    del old["index"]
    read = _read(msgspec.json.encode(old))
    assert read is not None and read.index == ()
    assert spec_of(read).index == ()


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("hotel", "index"),
        ([{"field": "hotel", "type": "date"}], "index"),
        ([{"field": "", "type": "text"}], "an indexed field must not be empty"),
        ([{"field": "h" * 101, "type": "text"}], "at most 100 characters"),
        ([{"field": "a\x1bb", "type": "text"}], "holds control characters"),
        ([{"field": "hotel", "type": "text"}] * 2, "index names field 'hotel' twice"),
        ([{"field": f"f{i}", "type": "number"} for i in range(9)], "list of at most 8"),
        ([{"field": ["hotel"], "type": "text"}], "index"),
    ],
)
def test_a_hostile_index_refuses_the_record_and_says_why(
    bad: object, said: str, caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.WARNING, logger="kiq.tables.checks"):
        assert _read(_with_index(bad)) is None
    refusals = [r.getMessage() for r in caplog.records if "catalog record refused" in r.message]
    assert len(refusals) == 1 and CATALOG_TOPIC in refusals[0] and said in refusals[0]


def test_eight_indexes_are_the_most_a_record_may_hold():
    eight = [{"field": f"f{i}", "type": "number"} for i in range(8)]
    read = _read(_with_index(eight))
    assert read is not None and [i.field for i in read.index] == [f"f{i}" for i in range(8)]


def test_a_node_serves_the_table_indexed_as_declared():
    spec = spec_of(BOOKINGS)
    assert spec.index == (IndexField("hotel", "text"), IndexField("price", "number"))
    (served,) = resolve_tables(
        [parse_served("bookings,store=memory")], {BOOKINGS.name: BOOKINGS}, app="stay"
    )
    assert served.store == "memory" and served.index == spec.index


def test_get_tables_shows_the_index_in_the_documented_shape():
    fields = declared_fields(BOOKINGS)
    assert fields["index"] == [
        {"field": "hotel", "type": "text"},
        {"field": "price", "type": "number"},
    ]
    shown = msgspec.convert(fields, Declaration)  # the schema GET /v1/tables documents
    assert [(i.field, i.type) for i in shown.index] == [("hotel", "text"), ("price", "number")]
    plain = msgspec.structs.replace(BOOKINGS, index=())
    assert declared_fields(plain)["index"] == []
    assert msgspec.convert(declared_fields(plain), Declaration).index == []


@pytest.mark.parametrize(
    ("index", "said"),
    [
        ((IndexField("hotel", "date"),), "type 'date' is not one of text, number"),  # type: ignore
        ((IndexField("", "text"),), "must not be empty"),
        ((IndexField("a\tb", "text"),), "holds control characters"),
        ((IndexField("x", "text"), IndexField("x", "number")), "names field 'x' twice"),
        (tuple(IndexField(f"f{i}", "number") for i in range(9)), "at most 8"),
        ([IndexField("x", "text")], "must be a tuple of IndexField"),
        (("hotel",), "must be a tuple of IndexField"),
    ],
)
def test_a_spec_checks_its_index(index: object, said: str):
    with pytest.raises(ConfigError, match=f"table t: .*{said}"):
        TableSpec("t", "t", index=index)  # type: ignore[arg-type]


def test_an_index_needs_json_values():
    with pytest.raises(ConfigError, match="an index needs JSON values, not raw"):
        TableSpec("t", "t", format="raw", index=(IndexField("hotel", "text"),))
    assert TableSpec("t", "t", index=(IndexField("hotel", "text"),)).index[0].kind == "text"


@pytest.mark.parametrize(
    ("new", "said"),
    [
        ((HOTEL,), "index: hotel text, price number → hotel text"),
        ((), "index: hotel text, price number → (none)"),
        ((PRICE, HOTEL), "index: hotel text, price number → price number, hotel text"),
        ((IndexedField(field="hotel", type="number"), PRICE), "→ hotel number, price number"),
    ],
)
def test_a_changed_index_is_a_compatible_change_that_is_logged(
    new: tuple[IndexedField, ...], said: str
):
    changed = msgspec.structs.replace(BOOKINGS, index=new)
    assert incompatible(BOOKINGS, changed) == []
    (logged,) = compatible_changes(BOOKINGS, changed)
    assert said in logged
    plain = msgspec.structs.replace(BOOKINGS, index=())
    assert compatible_changes(plain, BOOKINGS) == ["index: (none) → hotel text, price number"]
    assert compatible_changes(BOOKINGS, BOOKINGS) == []
