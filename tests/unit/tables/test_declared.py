"""Tables declared once: the catalog's records, and what a node makes of them with its
``[serve] tables`` (a filter, overrides, and a clash named on both sides)."""

from __future__ import annotations

import re

import pytest

from kiq.errors import ConfigError
from kiq.tables.declared import (
    Declared,
    Started,
    decode_catalog,
    decode_started,
    parse_served,
    resolve_tables,
)

ORDERS = Declared(
    table="orders-by-time",
    topic="orders-by-time",
    key=("customer", "at", "order_id"),
    sep="|",
    partitions=6,
    app="shop",
    pipeline="orders_pipeline.build",
    query="orders-by-time",
)
TOTALS = Declared(
    table="customer-totals",
    topic="totals-topic",
    key=("customer",),
    app="shop",
    pipeline="orders_pipeline.build",
)
OTHER_APP = Declared(table="elsewhere", topic="elsewhere", key=("k",), app="other")


def catalog_of(*tables: Declared) -> dict[str, Declared]:
    records = {t.catalog_key: t.encode() for t in tables}
    started = Started(pipeline="orders_pipeline.build", tables=("a",), started_at_ms=5)
    records[started.catalog_key] = started.encode()
    records["table:broken"] = b"{not json"  # a record kiq cannot read is skipped
    assert decode_started(records) == {"orders_pipeline.build": started}
    return decode_catalog(records)


def test_no_serve_tables_serves_every_table_of_the_app_with_the_pipelines_key_rules():
    catalog = catalog_of(ORDERS, TOTALS, OTHER_APP)
    tables = resolve_tables([], catalog, app="shop", default_standby=2)
    assert [(t.name, t.topic, t.key_separator, t.standby_replicas) for t in tables] == [
        ("customer-totals", "totals-topic", None, 2),
        ("orders-by-time", "orders-by-time", "|", 2),
    ]
    assert tables[1].partition_key("alice|2026-11-22T10:00|o-1") == "alice"
    assert tables[1].declared is not None
    assert tables[1].declared["key"] == ["customer", "at", "order_id"]
    assert resolve_tables([], catalog, app="nobody") == []


def test_serve_tables_filter_and_override_what_the_catalog_declares():
    catalog = catalog_of(ORDERS, TOTALS)
    served = [parse_served("orders-by-time,store=memory,standby=0")]
    (only,) = resolve_tables(served, catalog, app="shop")
    assert (only.name, only.topic, only.key_separator) == ("orders-by-time", "orders-by-time", "|")
    assert (only.store, only.standby_replicas) == ("memory", 0)
    # "*" keeps every declared table besides the entries; a plain topic joins them.
    served = [parse_served("stores=stores,global")]
    tables = resolve_tables(served, catalog, app="shop", every_declared=True)
    assert [t.name for t in tables] == ["customer-totals", "orders-by-time", "stores"]
    assert tables[2].global_ and tables[2].declared is None


def test_a_serving_side_declaration_that_disagrees_names_both_sides():
    catalog = catalog_of(ORDERS, TOTALS)
    with pytest.raises(ConfigError) as caught:
        resolve_tables([parse_served("orders-by-time,sep=/")], catalog, app="shop")
    message = str(caught.value)
    assert "sep='/' here" in message and "'|' in the pipeline" in message
    assert "orders_pipeline.build" in message and "customer|at|order_id" in message
    with pytest.raises(
        ConfigError, match=re.escape("topic 'wrong' here, 'totals-topic' in the pipeline")
    ):
        resolve_tables([parse_served("customer-totals=wrong")], catalog, app="shop")
    with pytest.raises(ConfigError, match=re.escape("sep='|' here, none")):
        resolve_tables([parse_served("customer-totals,sep=|")], catalog, app="shop")
    # Saying what the pipeline says is fine.
    (same,) = resolve_tables(
        [parse_served("orders-by-time=orders-by-time,sep=|")], catalog, app="shop"
    )
    assert same.key_separator == "|"


def test_a_table_nobody_declared_needs_its_topic():
    with pytest.raises(ConfigError, match=r"not in the table catalog.*declare it as t=TOPIC"):
        resolve_tables([parse_served("t")], {}, app="shop")
    (plain,) = resolve_tables([parse_served("t=topic-t,sep=:")], {}, app="shop")
    assert (plain.topic, plain.key_separator, plain.declared) == ("topic-t", ":", None)


def test_two_applications_may_each_declare_a_table_of_the_same_name():
    mine = Declared(table="totals", topic="shop-totals", key=("c",), app="shop")
    theirs = Declared(table="totals", topic="bank-totals", key=("acct",), sep="/", app="bank")
    assert mine.catalog_key != theirs.catalog_key  # both records survive compaction
    records = {d.catalog_key: d.encode() for d in (mine, theirs)}
    for app, topic in (("shop", "shop-totals"), ("bank", "bank-totals")):
        catalog = decode_catalog(records, app)
        (spec,) = resolve_tables([parse_served("totals")], catalog, app=app)
        assert spec.topic == topic
    started = [
        Started(pipeline="pipeline.build", started_at_ms=n, app=a)
        for n, a in ((1, "shop"), (2, "bank"))
    ]
    records = {s.catalog_key: s.encode() for s in started}
    assert decode_started(records, "shop")["pipeline.build"].started_at_ms == 1
    assert decode_started(records, "bank")["pipeline.build"].started_at_ms == 2
