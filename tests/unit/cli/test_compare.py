"""The pure comparison behind `kiq diff`: merge order, field paths, ignore, tolerance, samples."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from rich.console import Console

from kiq.cli.compare import (
    ABSENT,
    OutOfOrder,
    PathChange,
    Rules,
    compare,
    diff_values,
    field_of,
    merge,
)


def test_merge_walks_both_sides_in_key_order():
    left = [("a", 1), ("c", 3), ("d", 4)]
    right = [("b", 2), ("c", 30), ("e", 5)]
    assert list(merge(left, right)) == [
        ("a", 1, ABSENT),
        ("b", ABSENT, 2),
        ("c", 3, 30),
        ("d", 4, ABSENT),
        ("e", ABSENT, 5),
    ]


def test_merge_uses_byte_order_not_case_or_locale():
    # UTF-8 byte order: "B" (0x42) < "a" (0x61) < "é" (0xC3 0xA9) < "€" (0xE2 ...).
    keys = ["B", "a", "é", "€"]
    assert [k for k, _, _ in merge([(k, 0) for k in keys], [])] == keys
    assert sorted(k.encode() for k in keys) == [k.encode() for k in keys]


def test_merge_of_empty_sides():
    assert list(merge([], [])) == []
    assert list(merge([], [("k", 1)])) == [("k", ABSENT, 1)]


def test_merge_reads_each_side_lazily():
    read: list[str] = []

    def side(name: str, keys: list[str]) -> Iterator[tuple[str, Any]]:
        for k in keys:
            read.append(f"{name}:{k}")
            yield k, k

    merged = merge(side("l", ["a", "b", "c"]), side("r", ["a", "b", "c"]))
    assert next(merged) == ("a", "a", "a")
    assert read == ["l:a", "r:a"], "one item per side in memory, not the whole stream"


def test_merge_refuses_keys_out_of_order():
    with pytest.raises(OutOfOrder, match="v2: key 'a' came after 'b'"):
        list(merge([("a", 1)], [("b", 1), ("a", 1)], ("v1", "v2")))
    with pytest.raises(OutOfOrder):
        list(merge([("a", 1), ("a", 2)], []))


def test_changed_fields_have_dotted_paths_and_both_values():
    old = {"symbol": "ABC", "close": 10.5, "stats": {"n": 3, "hi": 11}}
    new = {"symbol": "ABC", "close": 10.6, "stats": {"n": 3, "hi": 12}}
    assert diff_values(old, new) == [
        PathChange("close", 10.5, 10.6),
        PathChange("stats.hi", 11, 12),
    ]


def test_list_paths_index_each_item():
    old = {"a": {"b": [{"c": 1}, {"c": 2}, {"c": 3}]}}
    new = {"a": {"b": [{"c": 1}, {"c": 2}, {"c": 4}]}}
    assert diff_values(old, new) == [PathChange("a.b[2].c", 3, 4)]
    assert diff_values([1, 2], [1, 2, 3]) == [PathChange("[2]", ABSENT, 3)]
    assert diff_values({"l": [[1, 2]]}, {"l": [[1, 5]]}) == [PathChange("l[0][1]", 2, 5)]


def test_absent_is_not_null_and_types_matter():
    assert diff_values({"a": None}, {}) == [PathChange("a", None, ABSENT)]
    assert diff_values({}, {"a": None}) == [PathChange("a", ABSENT, None)]
    assert diff_values({"a": True}, {"a": 1}) == [PathChange("a", True, 1)]
    assert diff_values({"a": "1"}, {"a": 1}) == [PathChange("a", "1", 1)]
    assert diff_values({"a": {"b": 1}}, {"a": [1]}) == [PathChange("a", {"b": 1}, [1])]
    assert diff_values("x", "y") == [PathChange("", "x", "y")]
    assert diff_values({"a": 1}, {"a": 1.0}) == [], "1 and 1.0 are the same JSON number"


def test_ignore_drops_a_path_and_everything_below_it():
    old = {"ts": 1, "meta": {"at": 1, "by": "x"}, "v": 1}
    new = {"ts": 2, "meta": {"at": 2, "by": "y"}, "v": 1}
    assert diff_values(old, new, Rules(frozenset({"ts", "meta"}))) == []
    assert diff_values(old, new, Rules(frozenset({"meta.at"}))) == [
        PathChange("ts", 1, 2),
        PathChange("meta.by", "x", "y"),
    ]


def test_ignore_with_star_covers_every_index():
    old = {"items": [{"ts": 1, "q": 1}, {"ts": 1, "q": 2}]}
    new = {"items": [{"ts": 2, "q": 1}, {"ts": 3, "q": 5}]}
    assert diff_values(old, new, Rules(frozenset({"items[*].ts"}))) == [
        PathChange("items[1].q", 2, 5)
    ]
    assert diff_values(old, new, Rules(frozenset({"items[0].ts"})))[0] == PathChange(
        "items[1].ts", 1, 3
    )


def test_tolerance_is_absolute_and_only_for_numbers():
    rules = Rules(tolerance=0.01)
    assert diff_values({"p": 10.0}, {"p": 10.005}, rules) == []
    assert diff_values({"p": 10.0}, {"p": 10.02}, rules) == [PathChange("p", 10.0, 10.02)]
    assert diff_values({"p": 100}, {"p": 100.01}, rules) == []
    assert diff_values({"p": False}, {"p": 0}, Rules(tolerance=1)) == [PathChange("p", False, 0)]
    assert diff_values({"p": 1}, {"p": 2}) == [PathChange("p", 1, 2)], "no tolerance by default"


def test_field_of_folds_indices():
    assert field_of("a.b[2].c[10]") == "a.b[*].c[*]"
    assert field_of("x") == "x"


def _rows(n: int, f: Any = lambda i: {"v": i}) -> list[tuple[str, Any]]:
    return [(f"k{i:04d}", f(i)) for i in range(n)]


def test_counts_are_exact_and_examples_bounded_by_sample():
    left = _rows(100)
    right = [(k, {"v": v["v"] + 1} if i % 4 == 0 else v) for i, (k, v) in enumerate(left)]
    right = right[:90] + [(f"z{i}", {"v": i}) for i in range(7)]
    found = compare(left, right, table="t", old="v1", new="v2", sample=3)
    # keys 0..89 on both (23 of them, every 4th, changed), 90..99 only in v1, 7 only in v2
    assert (found.equal, found.changed, found.only_old, found.only_new) == (67, 23, 10, 7)
    assert found.compared == 107 and not found.same
    assert len(found.changed_examples) == 3
    assert len(found.only_old_examples) == 3 and len(found.only_new_examples) == 3
    assert [k for k, _ in found.changed_examples] == ["k0000", "k0004", "k0008"]
    assert found.fields == {"v": 23}


def test_sample_zero_still_counts():
    found = compare(_rows(5), [], table="t", old="a", new="b", sample=0)
    assert found.only_old == 5 and found.only_old_examples == []


def test_field_counts_count_keys_per_field():
    left = [("a", {"l": [1, 2, 3], "x": 1}), ("b", {"l": [1], "x": 1})]
    right = [("a", {"l": [9, 9, 3], "x": 2}), ("b", {"l": [2], "x": 1})]
    found = compare(left, right, table="t", old="v1", new="v2")
    assert found.fields == {"l[*]": 2, "x": 1}


def test_equal_streams_are_same():
    found = compare(_rows(10), _rows(10), table="t", old="v1", new="v2")
    assert found.same and found.equal == 10 and found.changed == 0


def test_json_document():
    left = [("a", {"p": 1, "gone": 1}), ("b", {"p": 1}), ("c", {"p": 1})]
    right = [("a", {"p": 2}), ("c", {"p": 1.0001}), ("d", {"p": 1})]
    found = compare(
        left, right, table="t", old="v1", new="v2", rules=Rules(frozenset({"q"}), 0.001)
    )
    doc = orjson.loads(orjson.dumps(found.to_json()))
    assert doc["equal"] is False
    assert doc["counts"] == {
        "compared": 4,
        "equal": 1,
        "changed": 1,
        "only_from": 1,
        "only_to": 1,
    }
    assert doc["examples"]["changed"] == [
        {"key": "a", "changes": [{"path": "p", "old": 1, "new": 2}, {"path": "gone", "old": 1}]}
    ]
    assert doc["examples"]["only_from"] == [{"key": "b", "value": {"p": 1}}]
    assert doc["examples"]["only_to"] == [{"key": "d", "value": {"p": 1}}]
    assert doc["fields"] == {"p": 1, "gone": 1}
    assert doc["ignore"] == ["q"] and doc["tolerance"] == 0.001


def test_text_rendering_says_what_differs():
    left = [("a", {"p": 1}), ("b", {"p": 1})]
    right = [("a", {"p": 2}), ("c", {"p": 1})]
    out = io.StringIO()
    compare(left, right, table="bars", old="v1", new="v2", sample=1).render(
        Console(file=out, width=120)
    )
    text = out.getvalue()
    assert "bars: v1 vs v2: different" in text
    assert "3 keys: 0 equal, 1 changed, 1 only in v1, 1 only in v2" in text
    assert "p: 1 -> 2" in text
    assert "only in v1 (all 1)" in text and 'b {"p":1}' in text
