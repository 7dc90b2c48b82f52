"""Versions of a table, on paper: their names, their catalog records, and which tables a
node makes of a catalog holding several versions of one table."""

from __future__ import annotations

import msgspec
import pytest

from kiq.errors import ConfigError
from kiq.tables import parse_table
from kiq.tables.declared import (
    Declared,
    catalog_key,
    declared_fields,
    decode_catalog,
    parse_served,
    resolve_tables,
    serves,
    spec_for,
)
from kiq.tables.spec import TableSpec
from kiq.tables.versions import (
    DEFAULT_VERSION,
    Alias,
    alias_key,
    check_version,
    current_version,
    decode_aliases,
    internal_name,
    public_name,
    run_name,
    split_internal,
    versioned_topic,
)

V1 = Declared(
    table="totals",
    topic="totals",
    key=("customer",),
    partitions=6,
    app="shop",
    pipeline="orders",
    query="totals",
    checkpoint="/ck/orders",
)
V2 = Declared(
    table="totals",
    topic="totals.v2",
    key=("customer",),
    partitions=6,
    app="shop",
    pipeline="orders",
    query="totals",
    version="v2",
    checkpoint="/ck/orders@v2",
)
OTHER_APP_V2 = Declared(table="totals", topic="totals.v2", key=("k",), app="other", version="v2")


def records(*items: Declared | Alias) -> dict[str, bytes]:
    return {item.catalog_key: item.encode() for item in items}


# -- names -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v2", "V_2", "2026-11-25", "a" * 40, "v1"])
def test_a_version_name_is_1_to_40_letters_digits_dashes_underscores(version: str):
    assert check_version(version) == version


@pytest.mark.parametrize("bad", ["", "v 2", "v@2", "v.2", "a" * 41, "ü", None, 2])
def test_another_version_name_is_refused_saying_what_is_allowed(bad: object):
    with pytest.raises(ConfigError, match=r"\[pipeline\] version: .* is not a version name"):
        check_version(bad, "[pipeline] version")  # type: ignore[arg-type]


def test_v1_keeps_the_names_kiq_always_used_and_another_version_adds_its_own():
    assert DEFAULT_VERSION == "v1"
    assert internal_name("totals", "v1") == "totals"
    assert internal_name("totals", "v2") == "totals@v2"
    assert versioned_topic("totals", "v1") == "totals"
    assert versioned_topic("totals", "v2") == "totals.v2"
    assert versioned_topic("totals-dlq", "v2") == "totals-dlq.v2"
    assert run_name("stocks", "v1") == "stocks"
    assert run_name("stocks", "v2") == "stocks@v2"


@pytest.mark.parametrize(
    ("table", "version"), [("totals", "v1"), ("totals", "v2"), ("stock-bars-1m", "2026_11")]
)
def test_split_internal_undoes_internal_name(table: str, version: str):
    name = internal_name(table, version)
    assert split_internal(name) == (table, version)
    assert public_name(name) == table


def test_a_table_spec_knows_its_table_and_version_from_its_name():
    v2 = TableSpec(name="totals@v2", topic="totals.v2")
    assert (v2.table, v2.version) == ("totals", "v2")
    v1 = parse_table("totals=totals")
    assert (v1.name, v1.table, v1.version) == ("totals", "totals", "v1")


def test_a_name_a_user_gives_has_no_version_mark():
    with pytest.raises(ConfigError, match="no '@'"):
        parse_table("totals@v2=totals.v2")
    with pytest.raises(ConfigError, match="no '@'"):
        parse_served("totals@v2")


# -- aliases -------------------------------------------------------------------------------


def test_an_alias_is_keyed_by_app_and_table_and_decodes_back():
    alias = Alias(table="totals", version="v2", app="shop", switched_at_ms=7, previous="v1")
    assert alias.catalog_key == alias_key("totals", "shop") == "alias:shop/totals"
    read = {
        **records(alias, Alias(table="totals", version="v3", app="other"), V1),
        "alias:shop/broken": b"{not json",
    }
    assert decode_aliases(read, app="shop") == {"totals": alias}
    everyone = decode_aliases(read)
    assert set(everyone) == {"totals"}  # by table name: the last app's wins without a filter
    assert decode_aliases(read, app="nobody") == {}


def test_current_version_follows_an_alias_whose_version_exists():
    to_v2 = Alias(table="totals", version="v2")
    assert current_version(["v1", "v2"], to_v2) == "v2"
    assert current_version(["v1", "v2"], Alias(table="totals", version="v9")) == "v1"
    assert current_version(["v1", "v2"], None) == "v1"
    assert current_version([], to_v2) is None


def test_without_v1_the_current_version_is_the_first_in_name_order():
    assert current_version(["v3", "v2"], None) == "v2"
    # natural order: v2 before v10
    assert current_version(["v2", "v10"], None) == "v2"
    assert current_version(iter(["v3", "v2"]), Alias(table="t", version="v3")) == "v3"


# -- declarations -----------------------------------------------------------------------------


def test_a_declaration_names_its_version_run_and_catalog_key():
    assert (V1.version, V1.name, V1.run, V1.catalog_key) == (
        "v1",
        "totals",
        "orders",
        "table:shop/totals",
    )
    assert (V2.version, V2.name, V2.run, V2.catalog_key) == (
        "v2",
        "totals@v2",
        "orders@v2",
        "table:shop/totals@v2",
    )
    assert catalog_key("totals", "shop") == "table:shop/totals"
    assert catalog_key("totals", "shop", "v2") == "table:shop/totals@v2"


def test_a_declaration_from_an_older_kiq_is_v1_with_no_checkpoint():
    old = msgspec.json.encode({"table": "totals", "topic": "totals", "key": ["customer"]})
    declared = decode_catalog({"table:kiq/totals": old})["totals"]
    assert (declared.version, declared.checkpoint, declared.name) == ("v1", "", "totals")


def test_decode_catalog_keeps_every_version_by_its_internal_name():
    read = {**records(V1, V2, OTHER_APP_V2), "table:shop/totals@v3": b"{nope"}
    assert decode_catalog(read, app="shop") == {"totals": V1, "totals@v2": V2}
    assert decode_catalog(read, app="other") == {"totals@v2": OTHER_APP_V2}
    round_trip = decode_catalog(records(V2))["totals@v2"]
    assert (round_trip.version, round_trip.checkpoint) == ("v2", "/ck/orders@v2")


def test_declared_fields_say_the_version():
    assert declared_fields(V2)["version"] == "v2"
    assert declared_fields(V2)["pipeline"] == "orders"


# -- what a node serves ------------------------------------------------------------------------


def test_a_node_with_no_serve_tables_serves_every_version_as_a_table_of_its_own():
    catalog = {**decode_catalog(records(V1, V2)), "x@v2": OTHER_APP_V2}
    tables = resolve_tables([], catalog, app="shop", default_standby=2)
    assert [(t.name, t.topic, t.table, t.version, t.standby_replicas) for t in tables] == [
        ("totals", "totals", "totals", "v1", 2),
        ("totals@v2", "totals.v2", "totals", "v2", 2),
    ]
    assert tables[1].declared is not None and tables[1].declared["version"] == "v2"


def test_a_served_entry_covers_every_version_of_its_table_with_its_options():
    catalog = decode_catalog(records(V1, V2))
    entry = parse_served("totals,store=memory,standby=0")
    tables = resolve_tables([entry], catalog, app="shop")
    assert [(t.name, t.topic, t.store, t.standby_replicas) for t in tables] == [
        ("totals", "totals", "memory", 0),
        ("totals@v2", "totals.v2", "memory", 0),
    ]


def test_a_served_topic_agrees_with_each_versions_own_topic():
    catalog = decode_catalog(records(V1, V2))
    tables = resolve_tables([parse_served("totals=totals")], catalog, app="shop")
    assert [t.topic for t in tables] == ["totals", "totals.v2"]


def test_a_served_topic_that_disagrees_names_the_version_it_disagrees_with():
    catalog = decode_catalog(records(V2))  # only v2 declared so far
    with pytest.raises(ConfigError) as raised:
        resolve_tables([parse_served("totals=elsewhere")], catalog, app="shop")
    message = str(raised.value)
    assert "'elsewhere' here, 'totals.v2' in the pipeline" in message
    assert "table totals:" in message


def test_serves_a_version_declared_later_when_it_serves_the_table():
    totals, others = parse_served("totals"), parse_served("others=others")
    assert serves([], False, V2, "shop")
    assert serves([others], True, V2, "shop")  # "*" in [serve] tables
    assert serves([totals], False, V2, "shop")
    assert not serves([others], False, V2, "shop")
    assert not serves([], False, V2, "other")
    assert not serves([totals], True, OTHER_APP_V2, "shop")


def test_spec_for_a_later_version_takes_the_entrys_options_and_checks_it():
    spec = spec_for([parse_served("totals,store=memory,standby=0")], V2, default_standby=3)
    assert (spec.name, spec.topic, spec.store, spec.standby_replicas) == (
        "totals@v2",
        "totals.v2",
        "memory",
        0,
    )
    plain = spec_for([], V2, default_standby=3)
    assert (plain.name, plain.store, plain.standby_replicas) == ("totals@v2", "rocksdb", 3)
    with pytest.raises(ConfigError, match=r"'other' here, 'totals\.v2' in the pipeline"):
        spec_for([parse_served("totals=other")], V2, default_standby=1)
