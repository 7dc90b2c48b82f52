"""``kiq.tables.retire``: a retire deletes only the topics kiq derives for the version, and
none that another declaration, table, query or kiq itself uses, whatever a record claims."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kiq.catalog import CATALOG_TOPIC, PROGRESS_TOPIC
from kiq.tables.declared import Declared
from kiq.tables.retire import input_topics, retire_topics, sharing_run


def declared(table: str, version: str, topic: str, **more: Any) -> Declared:
    return Declared(table=table, topic=topic, key=("k",), app="shop", version=version, **more)


PRICES_V1 = declared("prices", "v1", "prices", pipeline="feed", dead_letters=("prices-dlq",))
PRICES_V2 = declared("prices", "v2", "prices.v2", pipeline="feed")
ORDERS_V1 = declared("orders", "v1", "orders", pipeline="shop", dead_letters=("orders-dlq",))
OTHER_APP = Declared(
    table="bars", topic="bars.v2", key=("k",), app="elsewhere", version="v2", pipeline="p"
)


def catalog(*tables: Declared) -> dict[str, bytes]:
    return {d.catalog_key: d.encode() for d in tables}


def retire(target: Declared, records: dict[str, bytes], **more: Any) -> tuple[list, dict]:
    found = retire_topics(
        key=target.catalog_key,
        topic=target.topic,
        version=target.version,
        dead_letters=target.dead_letters,
        catalog=records,
        **more,
    )
    return list(found.delete), {k.topic: k.reason for k in found.kept}


def test_a_versions_own_topic_and_dead_letters_are_deleted():
    forged = declared("prices", "v3", "prices.v3", dead_letters=("prices-dlq.v3", "ticks-dlq"))
    deleted, kept = retire(forged, catalog(PRICES_V1, PRICES_V2, forged))
    # an input's dead letters are declared as read (no version), and written with it
    assert (deleted, kept) == (["prices.v3", "prices-dlq.v3", "ticks-dlq.v3"], {})
    deleted, kept = retire(PRICES_V1, catalog(PRICES_V1, PRICES_V2))
    assert (deleted, kept) == (["prices", "prices-dlq"], {})
    # no dead letters recorded (an older record): the default ones
    deleted, _ = retire(PRICES_V2, catalog(PRICES_V1, PRICES_V2))
    assert deleted == ["prices.v2", "prices-dlq.v2"]


def test_a_forged_declaration_naming_another_tables_live_topic_deletes_nothing_of_it():
    # table prices v3, declared with orders' live topic, and another version's
    for topic in ("orders", "prices.v2", "prices"):
        forged = declared("prices", "v3", topic)
        deleted, kept = retire(forged, catalog(PRICES_V1, PRICES_V2, ORDERS_V1, forged))
        assert topic not in deleted, topic
        assert topic in kept, topic
    # a version's topic that ends as kiq derives it, but another declaration names
    clash = declared("orders", "v2", "prices.v2")
    deleted, kept = retire(clash, catalog(PRICES_V1, PRICES_V2, clash))
    assert "prices.v2" not in deleted
    assert kept["prices.v2"] == "the declaration table:shop/prices@v2 names it"


def test_v1_keeps_topics_others_name_and_kiqs_own():
    forged = declared(
        "evil",
        "v1",
        "orders",  # another table's
        dead_letters=("prices-dlq", CATALOG_TOPIC, PROGRESS_TOPIC, "__consumer_offsets", "ok-dlq"),
    )
    deleted, kept = retire(forged, catalog(PRICES_V1, ORDERS_V1, forged))
    assert deleted == ["ok-dlq"]
    assert set(kept) == {
        "orders",
        "prices-dlq",
        CATALOG_TOPIC,
        PROGRESS_TOPIC,
        "__consumer_offsets",
    }
    assert kept[CATALOG_TOPIC] == "one of Kafka's or kiq's own topics"
    # v1's dead letters: only NAME-dlq, never any other topic a record names
    odd = declared("evil", "v1", "evil", dead_letters=("live-ledger",))
    deleted, kept = retire(odd, catalog(odd))
    assert deleted == ["evil"] and "live-ledger" in kept


def test_another_applications_declaration_protects_its_topics_too():
    forged = declared("bars", "v2", "bars.v2")  # app shop; app elsewhere serves bars.v2
    deleted, kept = retire(forged, catalog(OTHER_APP, forged))
    assert deleted == []
    assert kept == {  # its default dead letters too: the same names
        "bars.v2": "the declaration table:elsewhere/bars@v2 names it",
        "bars-dlq.v2": "the declaration table:elsewhere/bars@v2 names it",
    }


def test_served_and_input_topics_are_kept():
    forged = declared("prices", "v2", "prices.v2", dead_letters=("prices-dlq.v2",))
    deleted, kept = retire(
        forged,
        catalog(forged),
        served={"quotes@v2": "prices.v2"},
        inputs={"prices-dlq.v2"},
    )
    assert deleted == []
    assert kept == {
        "prices.v2": "table quotes@v2 on this node serves it",
        "prices-dlq.v2": "a pipeline's query reads it",
    }


def test_a_record_kiq_cannot_read_strictly_still_protects_what_it_names():
    forged = declared("prices", "v2", "orders.v2")
    records = catalog(forged)
    records["table:shop/orders@v2"] = b'{"topic": "orders.v2", "key": 7, "future": true}'
    records["table:shop/junk"] = b"not json"
    deleted, kept = retire(forged, records)
    assert "orders.v2" in kept and "orders.v2" not in deleted


def test_input_topics_come_from_the_queries_progress():
    queries = [
        {"sources": [{"source": "KafkaV2[Subscribe[ticks, quotes]]"}, {"source": "Rate"}]},
        {"sources": None},
        {},
    ]
    assert input_topics(queries) == {"ticks", "quotes"}


def test_sharing_run_finds_the_runs_other_tables_and_its_checkpoint():
    mine = declared("prices", "v2", "prices.v2", pipeline="feed", checkpoint="/ck/feed@v2")
    same_run = declared("quotes", "v2", "quotes.v2", pipeline="feed")
    same_place = declared("x", "v9", "x.v9", pipeline="other", checkpoint="/ck/feed@v2")
    args = {"key": mine.catalog_key, "app": "shop", "run": "feed@v2", "checkpoint": "/ck/feed@v2"}
    assert sharing_run(catalog=catalog(mine, PRICES_V1), **args) is None
    assert sharing_run(catalog=catalog(mine, same_run), **args) == same_run.catalog_key
    assert sharing_run(catalog=catalog(mine, same_place), **args) == same_place.catalog_key


names = st.text(alphabet="abcdefv1234.-_/@ ", min_size=0, max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(["v1", "v2", "v10"]),
    topic=names,
    letters=st.lists(names, max_size=4),
    others=st.lists(st.tuples(names, st.sampled_from(["v1", "v2"]), names), max_size=4),
)
def test_a_retire_never_deletes_what_another_declaration_names(version, topic, letters, others):
    target = declared("t", version, topic, dead_letters=tuple(letters))
    records = catalog(target)
    protected = {CATALOG_TOPIC, PROGRESS_TOPIC}
    for i, (their_topic, their_version, their_letters) in enumerate(others):
        d = declared(f"o{i}", their_version, their_topic, dead_letters=(their_letters,))
        records[d.catalog_key] = d.encode()
        protected |= {their_topic, their_letters}
    deleted, _ = retire(target, records)
    assert not set(deleted) & protected
    own = {topic, *(letters or [f"{topic}-dlq"])}  # none recorded: the default
    for name in deleted:
        assert name.endswith(f".{version}") or (version == "v1" and name in own)
