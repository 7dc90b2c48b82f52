"""The tick contract as Spark checks it: every reason a tick goes to the dead-letter topic.

The stock application declares the contract (a schema and its rules); ``ctx.read``
applies it through ``kiq.pipelines.records``, exercised here on a static frame.
"""

from __future__ import annotations

import json

import pytest

from kiq.apps.stocks.pipeline import DEFAULT_EXCHANGES
from kiq.apps.stocks.ticks import TICK_SCHEMA, tick_rules
from kiq.pipelines.records import dead_letters, good_records, parse_records
from tests.unit.feeds.samples import TRADE

pytestmark = pytest.mark.spark

GOOD = TRADE  # a valid tick with a trade: each case changes what it needs


def tick(**changes) -> bytes:
    body = {**GOOD, **changes}
    return json.dumps({k: v for k, v in body.items() if v is not ...}).encode()


CASES = [
    ("AAPL", tick(), None),
    ("AAPL", tick(last=None, last_size=None), None),
    ("BRK.B", tick(symbol="BRK.B"), None),
    ("AAPL", b"{not json", "not JSON, or a field of the wrong type"),
    ("AAPL", tick(bid="cheap"), "not JSON, or a field of the wrong type"),
    ("AAPL", tick(ask=...), "missing or malformed field ask"),
    ("AAPL", tick(ts=...), "missing or malformed field ts"),
    ("AAPL", tick(ts=0), "ts outside 2000-2049"),
    ("AAPL", tick(ts=2_524_608_000_000), "ts outside 2000-2049"),
    ("MSFT", tick(), "key is not the symbol"),
    (None, tick(), "key is not the symbol"),
    ("aapl", tick(symbol="aapl"), "symbol not [A-Z0-9.-]{1,12}"),
    ("AAPL", tick(exchange="MOON"), "unknown exchange MOON"),
    ("AAPL", tick(bid=0.0), "non-positive price"),
    ("AAPL", tick(ask_size=-5), "non-positive size"),
    ("AAPL", tick(bid=190.0), "bid > ask"),
    ("AAPL", tick(last=None), "last and last_size must come together"),
    ("AAPL", tick(last=-1.0), "non-positive trade"),
]


def parse_ticks(raw, exchanges):
    parsed = parse_records(raw, TICK_SCHEMA, tick_rules(exchanges))
    return parsed.withColumnsRenamed({"__offset": "offset", "__reason": "reason"})


def valid_ticks(parsed):
    return good_records(parsed.withColumnsRenamed({"offset": "__offset", "reason": "__reason"}))


def test_every_reason(spark):
    rows = [
        (k.encode() if k else None, v, "stock-ticks", 0, i) for i, (k, v, _) in enumerate(CASES)
    ]
    raw = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long"
    )
    parsed = parse_ticks(raw, DEFAULT_EXCHANGES)
    reasons = {r["offset"]: r["reason"] for r in parsed.select("offset", "reason").collect()}
    assert [reasons[i] for i in range(len(CASES))] == [want for _, _, want in CASES]

    valid = valid_ticks(parsed).collect()
    assert len(valid) == 3 and "_corrupt" not in valid[0].asDict()
    renamed = parsed.withColumnsRenamed({"offset": "__offset", "reason": "__reason"})
    letters = dead_letters(renamed).collect()
    assert len(letters) == len(CASES) - 3
    first = {h["key"]: bytes(h["value"]).decode() for h in letters[0]["headers"]}
    assert first["kiq.reason"] == CASES[3][2]
    assert first["kiq.source.offset"] == "3" and first["kiq.source.topic"] == "stock-ticks"
