"""GET /v1/stocks/top: today's (UTC) most traded symbols, from the day statistics ranked by
volume within today's window, on two in-process nodes; ``by`` other than volume is a 400."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from kiq.apps.stocks.api import DAY_STATS, day_key
from kiq.tables import parse_table
from tests.unit import stand_ins
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

PARTITIONS = 4
SYMBOLS = [f"S{i:02d}" for i in range(12)]


def _ranked(text: str, default_standby: int = 1) -> Any:
    spec = parse_table(text, default_standby)
    return dataclasses.replace(spec, rank_by="volume") if spec.name == DAY_STATS else spec


def _day(symbol: str, date: str, volume: int) -> dict[str, Any]:
    return {
        "symbol": symbol,
        "date": date,
        "open": 1.0,
        "high": 2.0,
        "low": 0.5,
        "volume": volume,
        "vwap": 1.5,
        "trades": 3,
    }


@pytest.fixture
def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalNode, ...]]:
    monkeypatch.setattr(stand_ins, "parse_table", _ranked)
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.join("n2", "http://n2.test")
    cluster.assign("n1", [(DAY_STATS, 0), (DAY_STATS, 1)])
    cluster.assign("n2", [(DAY_STATS, 2), (DAY_STATS, 3)])
    tables = {f"{DAY_STATS}={DAY_STATS},store=memory,sep=|,retention=7 days": PARTITIONS}
    nodes = (
        start_node(tmp_path, cluster, tables, "n1"),
        start_node(tmp_path, cluster, tables, "n2"),
    )
    for node in nodes:
        wait_until(serving(node.node), what=f"{node.node.node_id} serving")
        held = node.node.replica
        wait_until(lambda: all(held(DAY_STATS, p) for p in range(PARTITIONS)), what="replicas")  # noqa: B023
    yield nodes
    for node in nodes:
        node.node.stop()


def test_the_most_traded_symbols_today(pair):
    today = time.strftime("%Y-%m-%d", time.gmtime())
    yesterday = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d")
    days = {}
    for i, s in enumerate(SYMBOLS):
        days[day_key(s, today)] = _day(s, today, (i * 5) % 7 * 100)  # ties
        days[day_key(s, yesterday)] = _day(s, yesterday, 10_000 + i)  # more, but not today
    for node in pair:
        for offset, (key, value) in enumerate(days.items(), 1):
            node.put(DAY_STATS, key, orjson.dumps(value), offset)
    expected = sorted(
        (v for v in days.values() if v["date"] == today), key=lambda v: (-v["volume"], v["symbol"])
    )
    for node in pair:
        reply = asyncio.run(call(node.app, "GET", "/v1/stocks/top?by=volume&n=5"))
        assert reply.status == 200, reply.body
        assert reply.json() == {"date": today, "by": "volume", "stocks": expected[:5]}
        default = asyncio.run(call(node.app, "GET", "/v1/stocks/top")).json()
        assert default["stocks"] == expected[:10]


def test_by_other_than_volume_is_a_400_naming_what_is_allowed(pair):
    n1, _ = pair
    reply = asyncio.run(call(n1.app, "GET", "/v1/stocks/top?by=trades"))
    assert (reply.status, reply.json()["error"]) == (400, "bad_request")
    assert "by must be one of volume, got 'trades'" in reply.json()["message"]
    assert asyncio.run(call(n1.app, "GET", "/v1/stocks/top?n=0")).status == 400
    document = asyncio.run(call(n1.app, "GET", "/openapi.json")).json()
    operation = document["paths"]["/v1/stocks/top"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {"by", "n"}
    assert set(operation["responses"]) >= {"200", "400", "404", "503"}


def test_day_key_is_the_windowed_key():
    assert day_key("AAPL", "2026-11-21") == (
        "AAPL|2026-11-21T00:00:00.000Z|2026-11-22T00:00:00.000Z"
    )
