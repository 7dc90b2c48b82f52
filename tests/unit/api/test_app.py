"""The app of one node, called in process against real stores (memory and RocksDB)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from kiq.errors import WriteFailed
from kiq.peers.wire import INTERNAL_SCAN, Scan, decode_scan_result, encode
from kiq.replicas import ReplicaState
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

PARTITIONS = 4
PRICES = {"AAPL": b'{"px":189.1}', "MSFT": b'{"px":411.2}', "NVDA": b'{"px":135.0}'}
NO_ROUTE = b'{"error":"no_route","message":"no such path; see /v1/tables and /v1/metadata"}'


@pytest.fixture(params=["memory", "rocksdb"])
def one(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalNode]:
    """One node owning every partition of ``prices``, holding PRICES at offsets 0, 1, 2."""
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("prices", p) for p in range(PARTITIONS)] + [("raw-topic", 0)])
    table = f"prices=prices,store={request.param}"
    node = start_node(tmp_path, cluster, {table: PARTITIONS, "raw=raw-topic,format=raw": 1})
    wait_until(serving(node.node, ReplicaState.ACTIVE), what="active replicas")
    for offset, (key, value) in enumerate(PRICES.items()):
        node.put("prices", key, value, offset)
    node.put("raw", "blob", b"\x00\xff", 7)
    yield node
    node.node.stop()


def get(node: LocalNode, target: str, **kw):
    return asyncio.run(call(node.app, "GET", target, **kw))


def post(node: LocalNode, target: str, body: bytes):
    return asyncio.run(call(node.app, "POST", target, body))


def test_a_lookup_answers_the_value_with_its_headers(one: LocalNode):
    r = get(one, "/v1/tables/prices/keys/MSFT")
    assert r.status == 200 and r.body == PRICES["MSFT"]
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-kiq-served-by"] == "n1"
    assert r.headers["x-kiq-offset"] == "1"
    assert r.headers["x-kiq-lag"] == "0"
    assert 0 <= int(r.headers["x-kiq-partition"]) < PARTITIONS
    assert "x-kiq-stale" not in r.headers


def test_the_general_path_answers_as_the_fast_one(one: LocalNode):
    fast = get(one, "/v1/tables/prices/keys/AAPL")
    general = get(one, "/v1/tables/prices/keys/AAPL?max_lag=10")
    assert (general.status, general.body, general.headers) == (fast.status, fast.body, fast.headers)


def test_a_raw_table_answers_octets(one: LocalNode):
    r = get(one, "/v1/tables/raw/keys/blob")
    assert (r.status, r.body) == (200, b"\x00\xff")
    assert r.headers["content-type"] == "application/octet-stream"


def test_lookup_errors(one: LocalNode):
    missing = get(one, "/v1/tables/prices/keys/IBM")
    assert missing.status == 404
    assert missing.json()["error"] == "not_found" and missing.json()["key"] == "IBM"
    assert "x-kiq-partition" in missing.headers
    unknown = get(one, "/v1/tables/nope/keys/AAPL")
    assert (unknown.status, unknown.json()["error"]) == (404, "unknown_table")
    assert get(one, "/v1/tables/prices/keys/%FF").status == 400
    assert get(one, "/v1/tables/prices/keys/" + "k" * 5000).status == 400
    assert get(one, "/v1/tables/prices/keys/AAPL?max_lag=x").status == 400


def test_tables_metadata_health_and_metrics(one: LocalNode):
    tables = get(one, "/v1/tables").json()["tables"]
    assert [(t["name"], t["partitions"]) for t in tables] == [("prices", 4), ("raw", 1)]
    meta = get(one, "/v1/metadata").json()
    assert meta["node"] == {"id": "n1", "url": "http://n1.test"}
    parts = meta["tables"]["prices"]["partitions"]
    assert [p["active"] for p in parts] == ["n1"] * PARTITIONS
    assert all(p["local"]["state"] == "active" for p in parts)
    live = get(one, "/v1/health/live")
    assert (live.status, live.body) == (200, b'{"live":true}')
    ready = get(one, "/v1/health/ready")
    assert (ready.status, ready.json()) == (200, {"ready": True, "reason": "ok"})
    get(one, "/v1/tables/prices/keys/AAPL")
    metrics = get(one, "/metrics")
    assert metrics.status == 200
    assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert b'kiq_requests_total{route="get",status="200"}' in metrics.body


def test_not_ready_outside_the_group(one: LocalNode):
    one.node._group.joined = False  # type: ignore[union-attr]
    r = get(one, "/v1/health/ready")
    assert (r.status, r.json()["ready"]) == (503, False)


def test_multiget_and_range(one: LocalNode):
    r = post(one, "/v1/tables/prices/multiget", orjson.dumps({"keys": ["AAPL", "IBM", "NVDA"]}))
    assert r.status == 200
    assert r.json() == {"found": {"AAPL": {"px": 189.1}, "NVDA": {"px": 135.0}}, "missing": ["IBM"]}
    assert post(one, "/v1/tables/prices/multiget", b"{").status == 400
    page = get(one, "/v1/tables/prices/range?limit=2").json()
    assert [i["key"] for i in page["items"]] == ["AAPL", "MSFT"]
    rest = get(one, f"/v1/tables/prices/range?limit=2&cursor={page['next_cursor']}").json()
    assert [i["key"] for i in rest["items"]] == ["NVDA"] and rest["next_cursor"] is None


def test_internal_scan_checks_its_request(one: LocalNode):
    r = post(one, INTERNAL_SCAN, b"not msgpack")
    assert (r.status, r.json()["error"]) == (400, "bad_request")
    r = post(one, INTERNAL_SCAN, encode(Scan("prices", 0, None, None, 10)))
    assert r.status == 200
    assert all(k in PRICES for k, _ in decode_scan_result(r.body).items)


def test_unknown_paths_and_methods_are_no_route(one: LocalNode):
    for method, target in [
        ("GET", "/nope"),
        ("POST", "/v1/tables"),
        ("HEAD", "/v1/tables"),
        ("GET", "/v1/tables/prices/multiget"),
        ("GET", "/v1/tables/"),
        ("DELETE", "/v1/tables/prices/keys/AAPL"),
    ]:
        r = asyncio.run(call(one.app, method, target))
        assert (r.status, r.body) == (404, NO_ROUTE), (method, target)
        assert r.headers["content-type"] == "application/json"


def test_words_are_written_through_the_writer(one: LocalNode):
    r = post(one, "/v1/words", b'{"text": "To be or not"}')
    assert r.status == 202
    assert r.json()["words"] == 4
    assert [k for _, k, _ in one.writer.records] == [b"to", b"be", b"or", b"not"]
    assert post(one, "/v1/words", b'{"nope": 1}').status == 400
    one.writer.fail = WriteFailed("broker said no")
    r = post(one, "/v1/words", b'{"word": "kafka"}')
    assert (r.status, r.json()["error"]) == (503, "unavailable")
    counts = get(one, "/v1/words/kafka")
    assert (counts.status, counts.json()["error"]) == (404, "unknown_table")


def test_stock_routes_without_the_stock_tables(one: LocalNode):
    for target in ["/v1/stocks/AAPL", "/v1/stocks?symbols=AAPL", "/v1/stocks/AAPL/bars"]:
        r = get(one, target)
        assert (r.status, r.json()["error"]) == (404, "unknown_table"), target


def test_an_unexpected_error_is_a_500_that_says_nothing_of_it(
    one: LocalNode, caplog: pytest.LogCaptureFixture
):
    one.writer.fail = RuntimeError("secret at /srv/kiq/db")
    r = post(one, "/v1/words", b'{"word": "kafka"}')
    assert r.status == 500
    assert r.json()["error"] == "internal" and b"secret" not in r.body
    assert "secret at /srv/kiq/db" in caplog.text, "the log has it"


def test_lifespan_starts_and_stops_the_writer_and_peers(one: LocalNode):
    async def run() -> list[str]:
        messages = asyncio.Queue()
        for kind in ("lifespan.startup", "lifespan.shutdown"):
            messages.put_nowait({"type": kind})
        sent: list[str] = []

        async def send(message):
            sent.append(message["type"])

        await one.app({"type": "lifespan"}, messages.get, send)
        return sent

    assert asyncio.run(run()) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert one.writer.closed
