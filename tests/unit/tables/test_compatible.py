"""Which declaration changes a table's old records survive (kiq.tables.compatible, issue 38)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from kiq.tables.compatible import compatible_changes, incompatible, next_version, refusal
from kiq.tables.declared import Declared, ValueField

COUNT = ValueField(name="count", type="bigint", nullable=False)
WORD = ValueField(name="word", type="string")
BASE = Declared(
    table="word-counts",
    topic="word-counts",
    key=("word",),
    app="wc",
    pipeline="wordcount",
    query="word-counts",
    key_types=("string",),
    value_fields=(WORD, COUNT),
)


def changed(**fields: Any) -> Declared:
    return msgspec.structs.replace(BASE, **fields)


@pytest.mark.parametrize(
    ("new", "said"),
    [
        (changed(key=("word", "lang"), sep="|"), "key: word → word|lang"),
        (changed(key=("lang",)), "key: word → lang"),
        (changed(key_types=("int",)), "key column word: string → int"),
        (changed(window="window"), "kind: plain keys → windowed (window=window)"),
        (changed(partitioning="input"), "partitioning: key → input"),
        (
            changed(value_fields=(WORD, ValueField(name="count", type="string"))),
            "value field count: bigint → string",
        ),
        (
            changed(value_fields=(WORD, COUNT, ValueField(name="n", type="int", nullable=False))),
            "value field n: (absent) → int not null",
        ),
        (changed(value_fields=None, value_type="string"), "value: a JSON object of word string"),
    ],
)
def test_an_incompatible_change_is_named_old_to_new(new: Declared, said: str) -> None:
    found = incompatible(BASE, new)
    assert len(found) == 1
    assert found[0].startswith(said)


def test_a_composite_keys_separator_and_key_order_count() -> None:
    two = changed(key=("word", "lang"), sep="|", key_types=("string", "string"))
    assert incompatible(two, msgspec.structs.replace(two, sep=":")) == ["key separator: '|' → ':'"]
    assert incompatible(two, msgspec.structs.replace(two, key=("lang", "word"))) == [
        "key: word|lang → lang|word"
    ]


@pytest.mark.parametrize(
    "new",
    [
        changed(),
        changed(key_types=("string",), checkpoint="/elsewhere/wordcount"),
        changed(value_fields=(WORD, COUNT, ValueField(name="lang", type="string"))),  # nullable
        changed(value_fields=(WORD,)),  # a field removed: old records keep it
        changed(value_fields=(WORD, ValueField(name="count", type="int", nullable=False))),
        changed(topic="word-counts-2", ttl_ms=60_000, rank_by="count", query="q", partitions=6),
        changed(key_types=("string",), value_fields=None),  # one side did not record it
        changed(key_types=()),
    ],
)
def test_a_compatible_change_is_not_refused(new: Declared) -> None:
    assert incompatible(BASE, new) == []


def test_integer_widths_are_one_key_type_and_numbers_one_value_type() -> None:
    ints = changed(key_types=("int",))
    assert incompatible(ints, changed(key_types=("bigint",))) == []
    assert incompatible(ints, changed(key_types=("double",))) == ["key column word: int → double"]
    money = changed(value_fields=(ValueField(name="spent", type="double"),))
    assert (
        incompatible(money, changed(value_fields=(ValueField(name="spent", type="float"),))) == []
    )
    decimal = ValueField(name="spent", type="decimal(20,2)")
    assert incompatible(money, changed(value_fields=(decimal,))) == []
    text = ValueField(name="spent", type="string")
    assert incompatible(money, changed(value_fields=(text,))) == [
        "value field spent: double → string"
    ]


def test_a_plain_value_compares_its_type() -> None:
    plain = changed(value_fields=None, value_type="bigint")
    assert incompatible(plain, changed(value_fields=None, value_type="int")) == []
    assert incompatible(plain, changed(value_fields=None, value_type="string")) == [
        "value: bigint → string"
    ]


def test_several_changes_are_all_named() -> None:
    new = changed(key=("w",), window="window", value_fields=(ValueField(name="w", type="string"),))
    assert [c.split(":")[0] for c in incompatible(BASE, new)] == ["key", "kind"]


def test_what_changed_compatibly_is_said_for_the_log() -> None:
    new = changed(topic="t2", value_fields=(COUNT, ValueField(name="lang", type="string")))
    assert compatible_changes(BASE, new) == [
        "topic: word-counts → t2",
        "value field lang: (absent) → added",
        "value field word: removed",
    ]
    assert compatible_changes(BASE, changed(checkpoint="/x")) == []


def test_the_refusal_names_the_table_the_change_and_both_ways_out() -> None:
    new = changed(key=("word", "lang"), sep="|")
    message = refusal(BASE, new, incompatible(BASE, new), taken={"v1", "v2"})
    assert message.startswith("table word-counts (application wc) changed incompatibly")
    assert "key: word → word|lang" in message
    assert "kiq pipeline run --version v3" in message  # v2 is taken
    assert '[pipeline] version = "v3"' in message
    assert "kiq topics reset word-counts (" in message
    assert "docs/guides/changing-tables.md" in message
    assert "\n" not in message
    v2 = msgspec.structs.replace(new, version="v2")
    assert "kiq topics reset word-counts --version v2" in refusal(BASE, v2, ["x"])


@pytest.mark.parametrize(
    ("version", "taken", "expected"),
    [("v1", (), "v2"), ("v9", (), "v10"), ("v1", ("v2", "v3"), "v4"), ("blue", (), "NEW")],
)
def test_the_next_version_suggested(version: str, taken: tuple[str, ...], expected: str) -> None:
    assert next_version(version, taken) == expected


def test_a_declaration_with_its_shape_passes_its_schema_and_one_without_decodes() -> None:
    BASE.check(BASE.catalog_key)
    old = msgspec.json.encode({"table": "t", "topic": "t", "key": ["k"], "app": "wc"})
    decoded = msgspec.json.decode(old, type=Declared)
    assert (decoded.key_types, decoded.value_fields, decoded.value_type) == ((), None, None)
    assert incompatible(decoded, BASE) == ["key: k → word"]
