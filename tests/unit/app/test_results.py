"""The results of ``kiq.Tables`` reads name their values' forms the same way: ``parsed()`` is
Python objects (indexable), ``fragments()`` JSON to embed in a ``json_reply`` unparsed."""

from __future__ import annotations

import asyncio
import base64

import orjson
import pytest

from kiq import Many, Page, Read, Served, json_reply
from kiq.tables import TableRuntime, codec_for, parse_table

JSON_TABLE = TableRuntime(parse_table("t=t"), codec_for(parse_table("t=t")), 4)
RAW_SPEC = parse_table("r=r,format=raw")
RAW_TABLE = TableRuntime(RAW_SPEC, codec_for(RAW_SPEC), 4)
VALUES = {"a": b'{"x": 1, "tags": ["p"]}', "b": b'{"x": 2, "tags": []}'}
SERVED = (Served(0, "n1", 0, False, 10), Served(3, "n2", 7, True, 41))


def rendered(value: object) -> object:
    """What a client gets back from ``json_reply(value)``."""
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(json_reply(value).send({"type": "http"}, None, send))  # type: ignore[arg-type]
    return orjson.loads(b"".join(m.get("body", b"") for m in sent))


def test_many_parsed_values_index_like_python_and_fragments_embed_as_stored():
    many = Many(JSON_TABLE, dict(VALUES), ["c"], [], SERVED)
    assert many.parsed()["a"]["x"] == 1  # the reported TypeError: indexing what parsed() gives
    fragments = many.fragments()
    assert all(isinstance(v, orjson.Fragment) for v in fragments.values())
    with pytest.raises(TypeError):
        fragments["a"]["x"]  # a fragment is for embedding only
    assert orjson.dumps(fragments) == b'{"a":' + VALUES["a"] + b',"b":' + VALUES["b"] + b"}"
    assert rendered({"found": fragments}) == {"found": many.parsed()}


def test_a_page_gives_keys_parsed_values_fragments_and_the_range_apis_items():
    page = Page(JSON_TABLE, list(VALUES.items()), "Yg", SERVED)
    assert page.keys() == ["a", "b"]
    assert [v["x"] for v in page.parsed()] == [1, 2]
    assert orjson.dumps(page.fragments()) == b"[" + b",".join(VALUES.values()) + b"]"
    assert rendered(page.fragment_items()) == [
        {"key": k, "value": orjson.loads(v)} for k, v in VALUES.items()
    ]


def test_a_read_gives_its_one_value_both_ways():
    read = Read(JSON_TABLE, "a", VALUES["a"], 2, 17, 0, False, "n1")
    assert read.parsed()["tags"] == ["p"]
    assert orjson.dumps({"v": read.fragment()}) == b'{"v":' + VALUES["a"] + b"}"


def test_a_raw_tables_values_parse_to_their_bytes_and_embed_as_base64():
    raw = {"k": b"\x00\xffbin"}
    many = Many(RAW_TABLE, raw, [], [])
    assert many.parsed() == raw
    assert many.fragments() == {"k": base64.b64encode(raw["k"]).decode()}
    page = Page(RAW_TABLE, list(raw.items()), None)
    assert page.parsed() == [raw["k"]] and page.fragments() == [base64.b64encode(raw["k"]).decode()]
    read = Read(RAW_TABLE, "k", raw["k"], 0, 1, 0, False, "n1")
    assert (read.parsed(), read.fragment()) == (raw["k"], base64.b64encode(raw["k"]).decode())


def test_staleness_is_told_per_partition_and_over_all():
    many = Many(JSON_TABLE, {}, [], [], SERVED)
    page = Page(JSON_TABLE, [], None, SERVED)
    for result in (many, page):
        assert (result.stale, result.lag) == (True, 7)
        assert [s.served_by for s in result.served] == ["n1", "n2"]
    fresh = Page(JSON_TABLE, [], None, SERVED[:1])
    assert (fresh.stale, fresh.lag) == (False, 0)
    assert (Many(JSON_TABLE, {}, [], []).stale, Many(JSON_TABLE, {}, [], []).lag) == (False, 0)


def test_the_old_unparsed_names_are_gone_for_one_naming_scheme():
    for old in ("json_values", "json_items"):
        assert not hasattr(Page, old)
    assert not hasattr(Many, "json_found")
