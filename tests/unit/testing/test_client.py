"""kiq.testing.TestClient: an application's routes on one in-process node, tables given as dicts.

The node behind it is kiq's own (create_app, the node, its materializer): lookups answer
with kiq's headers and errors, writes to a table's topic show in the table, and with a
principal the node checks tokens as one with --auth jwt does.
"""

from __future__ import annotations

import threading

import orjson
import pytest

from kiq import BadRequest, Reply, Request, Routes, WriteFailed, json_reply
from kiq.apps.wordcount.api import routes as word_routes
from kiq.testing import Response, TestClient, Written, caller

PRICES = {"AAPL": {"symbol": "AAPL", "last": 189.1}, "MSFT": {"symbol": "MSFT", "last": 411.2}}
COMPANIES = {"AAPL": {"name": "Apple"}}
ORDERS = {
    "alice|2026-11-22T10:00": {"customer": "alice", "total": 10},
    "alice|2026-11-22T11:00": {"customer": "alice", "total": 20},
    "bob|2026-11-22T10:30": {"customer": "bob", "total": 5},
}


async def price(request: Request) -> Reply:
    symbol = request.path_params["symbol"].upper()

    async def with_name(value: dict) -> dict:
        company = await request.tables.get_json("companies", symbol)
        return {**value, "name": company["name"] if company else None}

    return request.lookup("prices", symbol, enrich=with_name)


async def watchlist(request: Request) -> Reply:
    wanted = [s for s in request.query.get("symbols", "").split(",") if s]
    if not wanted:
        raise BadRequest("give symbols=AAPL,MSFT,...")
    many = await request.tables.get_many("prices", wanted)
    last = {symbol: value["last"] for symbol, value in many.parsed().items()}
    return json_reply({"last": last, "missing": many.missing})


async def my_orders(request: Request) -> Reply:
    """A caller's own orders: the prefix is the verified subject, never a parameter."""
    assert request.principal is not None
    page = await request.tables.range("orders", prefix=request.principal.subject + "|")
    return json_reply({"orders": page.parsed(), "tier": request.principal.claims.get("tier")})


async def set_price(request: Request) -> Reply:
    body = await request.json()
    partition, offset = await request.write("prices", body["symbol"], orjson.dumps(body))
    return json_reply({"partition": partition, "offset": offset}, status=201)


async def drop_price(request: Request) -> Reply:
    partition, offset = await request.delete("prices", request.path_params["symbol"])
    return json_reply({"partition": partition, "offset": offset})


def routes(app: Routes) -> None:
    app.get("/v1/prices/{symbol}", price)
    app.get("/v1/watchlist", watchlist)
    app.get("/v1/my-orders", my_orders)
    app.post("/v1/prices", set_price)
    app.add("DELETE", "/v1/prices/{symbol}", drop_price)


@pytest.fixture
def client():
    with TestClient(routes, tables={"prices": PRICES, "companies": COMPANIES}) as c:
        yield c


def test_a_lookup_answers_as_a_node_does_headers_and_all(client: TestClient):
    found = client.get("/v1/prices/aapl")
    assert found.status_code == 200
    assert found.json() == {"symbol": "AAPL", "last": 189.1, "name": "Apple"}
    assert found.headers["content-type"] == "application/json"
    assert found.headers["x-kiq-served-by"] == "kiq-testing"
    assert found.headers["x-kiq-lag"] == "0"
    assert found.headers["x-kiq-partition"] == "0"

    missing = client.get("/v1/prices/ibm")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"

    assert client.get("/v1/tables/prices/keys/MSFT").json() == PRICES["MSFT"]


def test_reads_of_many_keys_and_the_errors_handlers_raise(client: TestClient):
    answer = client.get("/v1/watchlist", params={"symbols": "AAPL,MSFT,IBM"})
    assert answer.json() == {"last": {"AAPL": 189.1, "MSFT": 411.2}, "missing": ["IBM"]}
    refused = client.get("/v1/watchlist")
    assert refused.status_code == 400
    assert refused.json() == {"error": "bad_request", "message": "give symbols=AAPL,MSFT,..."}
    assert client.get("/v1/nowhere").status_code == 404


def test_a_table_not_given_is_not_served(client: TestClient):
    with TestClient(routes, tables={"prices": PRICES}) as bare:
        answer = bare.get("/v1/prices/AAPL")  # reads companies, which this node lacks
    assert answer.status_code == 404
    assert answer.json()["error"] == "unknown_table"


def test_writes_and_deletes_are_recorded_and_reach_the_table_of_their_topic(
    client: TestClient,
):
    created = client.post("/v1/prices", json={"symbol": "NVDA", "last": 135.0})
    assert created.status_code == 201
    assert created.json() == {"partition": 0, "offset": 2}
    assert client.get("/v1/prices/NVDA").json() == {"symbol": "NVDA", "last": 135.0, "name": None}

    assert client.delete("/v1/prices/AAPL").json() == {"partition": 0, "offset": 3}
    assert client.get("/v1/prices/AAPL").status_code == 404
    assert client.writes == [
        Written("prices", b"NVDA", b'{"symbol":"NVDA","last":135.0}', 0, 2),
        Written("prices", b"AAPL", None, 0, 3),
    ]


def test_a_write_kafka_does_not_take_is_the_answer_a_node_gives(client: TestClient):
    client.write_error = WriteFailed("the broker is gone")
    answer = client.post("/v1/prices", json={"symbol": "NVDA", "last": 135.0})
    assert answer.status_code == 503
    assert answer.json()["error"] == "unavailable"
    client.write_error = None
    assert client.post("/v1/prices", json={"symbol": "NVDA", "last": 1.0}).status_code == 201


def test_load_changes_a_table_between_requests(client: TestClient):
    client.load("prices", {"AAPL": {"symbol": "AAPL", "last": 190.0}, "MSFT": None})
    assert client.get("/v1/prices/AAPL").json()["last"] == 190.0
    assert client.get("/v1/prices/MSFT").status_code == 404
    with pytest.raises(KeyError, match="nope"):
        client.load("nope", {})


def test_a_value_the_table_cannot_serve_is_a_dead_letter_of_the_node():
    with TestClient(routes, tables={"prices": {"BAD": b"not json", **PRICES}}) as c:
        assert c.get("/v1/tables/prices/keys/BAD").status_code == 404
        assert [(d.topic, d.key, d.value) for d in c.dead_letters] == [
            ("prices", b"BAD", b"not json")
        ]


def test_with_a_principal_a_caller_reads_only_their_own_rows():
    alice = caller("alice", "kiq:read:orders", tier="gold")
    with TestClient(routes, tables={"orders": ORDERS, "prices": PRICES}, principal=alice) as c:
        mine = c.get("/v1/my-orders")
        assert mine.status_code == 200
        assert mine.json() == {
            "orders": [{"customer": "alice", "total": 10}, {"customer": "alice", "total": 20}],
            "tier": "gold",
        }
        bob = c.get("/v1/my-orders", principal=caller("bob", "kiq:read"))
        assert bob.json()["orders"] == [{"customer": "bob", "total": 5}]

        anonymous = c.get("/v1/my-orders", principal=None)
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        assert c.get("/v1/my-orders", principal=caller("eve", "kiq:read:prices")).status_code == 403
        # a route's write needs kiq:write, a table lookup read on its table
        assert c.post("/v1/prices", json={"symbol": "X", "last": 1}).status_code == 403
        assert c.get("/v1/tables/prices/keys/AAPL").status_code == 403
        writer = caller("w", "kiq:write")
        assert c.post("/v1/prices", json={"symbol": "X"}, principal=writer).status_code == 201
        token = {"authorization": c.token(caller("alice", "kiq:read:prices"))}
        assert c.get("/v1/tables/prices/keys/AAPL", headers=token).status_code == 200


def test_a_principal_needs_a_node_that_checks_tokens():
    with pytest.raises(ValueError, match="auth"):
        TestClient(routes, principal=caller("alice"), auth=False)
    with TestClient(routes, tables={"orders": ORDERS}, auth=True) as c:
        assert c.get("/v1/my-orders").status_code == 401
        assert c.get("/v1/my-orders", principal=caller("bob", "kiq:read")).status_code == 200
    with TestClient(routes, tables={"orders": ORDERS}) as c, pytest.raises(ValueError):
        c.get("/v1/my-orders", principal=caller("bob", "kiq:read"))


def test_a_shipped_application_by_target_the_word_count():
    with TestClient(
        ["kiq.apps.wordcount.api:routes"], tables={"word-counts": {"kafka": {"count": 3}}}
    ) as c:
        assert c.get("/v1/words/Kafka").json() == {"count": 3}
        posted = c.post("/v1/words", json={"text": "Kafka and Spark"})
        assert posted.status_code == 202
        assert [(w.topic, w.text()) for w in c.writes] == [
            ("words", "kafka"),
            ("words", "and"),
            ("words", "spark"),
        ]
    with TestClient(word_routes) as c:  # a function, no tables: word-counts not served
        assert c.get("/v1/words/kafka").status_code == 404


def test_the_client_must_be_started_and_stops_its_node():
    c = TestClient(routes, tables={"prices": PRICES})
    with pytest.raises(RuntimeError, match="start"):
        c.get("/v1/prices/AAPL")
    with c:
        answer: Response = c.get("/v1/tables/prices/keys/MSFT")
        assert {"kiq-testing-loop", "kiq-materializer"} <= _threads()
    assert answer.status_code == 200
    assert not {"kiq-testing-loop", "kiq-materializer", "kiq-view"} & _threads()


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate()}
