"""An application's own routes, declared with the public API, on two in-process nodes.

``customers`` and ``orders`` (composite keys ``customer|time``) are split between
n1 and n2 with no standbys, so a key is only where its partition's owner is: a
route that answers every key from either node has routed its reads across nodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from kiq import (
    BadRequest,
    Reply,
    Request,
    Routes,
    Unavailable,
    WriteFailed,
    json_reply,
)
from kiq.app.targets import resolve
from kiq.errors import ConfigError
from kiq.partitioning import partition_for
from kiq.positions import decode
from kiq.replicas import ReplicaState
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

PARTITIONS = 4
CUSTOMERS = {f"c{i}": {"id": f"c{i}", "name": f"customer {i}"} for i in range(8)}
ORDERS = {
    f"{c}|2026-11-{day:02d}": {"customer": c, "day": day, "total": i * 10 + day}
    for i, c in enumerate(CUSTOMERS)
    for day in (1, 2, 3)
}
AUTH = (b"authorization", b"Bearer token-1")


async def customer(request: Request) -> Reply:
    async def with_orders(value: dict) -> dict:
        page = await request.tables.range("orders", prefix=value["id"] + "|")
        return {**value, "orders": len(page.items)}

    return request.lookup("customers", request.path_params["id"], enrich=with_orders)


async def orders(request: Request) -> Reply:
    who = request.path_params["id"]
    page = await request.tables.range(
        "orders",
        prefix=f"{who}|",
        start=f"{who}|{request.query['from']}" if "from" in request.query else None,
        cursor=request.query.get("cursor"),
        limit=request.int_param("limit", 1, 10) or 10,
    )
    return json_reply({"orders": page.fragments(), "next": page.next_cursor})


async def names(request: Request) -> Reply:
    many = await request.tables.get_many("customers", request.query["ids"].split(","))
    return json_reply({k: v["name"] for k, v in many.parsed().items()} | {"missing": many.missing})


async def one(request: Request) -> Reply:
    tables = request.tables
    value = await tables.get_json("customers", request.path_params["id"])
    raw = await tables.get("customers", request.path_params["id"])
    return json_reply({"value": value, "same": raw is None or orjson.loads(raw) == value})


async def place(request: Request) -> Reply:
    body = await request.json()
    if "customer" not in body:
        raise BadRequest("give a customer", field="customer")
    try:
        partition, offset = await request.write("orders-in", body["customer"], orjson.dumps(body))
    except WriteFailed as exc:
        raise Unavailable(str(exc)) from exc
    return json_reply({"partition": partition, "offset": offset}, status=202)


async def not_a_reply(request: Request) -> Reply:
    return {"oops": True}  # type: ignore[return-value]


def routes(app: Routes) -> None:
    app.get("/v1/customers/{id}", customer)
    app.get("/v1/customers/{id}/orders", orders)
    app.get("/v1/names", names)
    app.get("/v1/one/{id}", one)
    app.post("/v1/orders", place)
    app.get("/v1/broken", not_a_reply)


TABLES = {"customers=customers": PARTITIONS, "orders=orders,sep=|": PARTITIONS}


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Cluster, LocalNode, LocalNode]]:
    cluster = Cluster()
    for node_id in ("n1", "n2"):
        cluster.join(node_id, f"http://{node_id}.test")
    for topic in ("customers", "orders"):
        cluster.assign("n1", [(topic, p) for p in range(PARTITIONS) if p % 2 == 0])
        cluster.assign("n2", [(topic, p) for p in range(PARTITIONS) if p % 2 == 1])
    n1, n2 = (
        start_node(tmp_path, cluster, TABLES, n, endpoints=[routes], standby_replicas=0)
        for n in ("n1", "n2")
    )
    for node in (n1, n2):
        wait_until(serving(node.node, ReplicaState.ACTIVE), what="active replicas")
    for offset, (key, value) in enumerate([*CUSTOMERS.items(), *ORDERS.items()]):
        table = "orders" if "|" in key else "customers"
        owner = n1 if partition_for(key.split("|")[0], PARTITIONS) % 2 == 0 else n2
        owner.put(table, key, orjson.dumps(value), offset)
    yield cluster, n1, n2
    for node in (n1, n2):
        node.node.stop()


def get(node: LocalNode, target: str, headers=(AUTH,)):
    return asyncio.run(call(node.app, "GET", target, headers=headers))


def owner(key: str) -> str:
    return "n1" if partition_for(key, PARTITIONS) % 2 == 0 else "n2"


def test_both_owners_hold_customers():
    assert {owner(c) for c in CUSTOMERS} == {"n1", "n2"}


def test_a_lookup_route_answers_as_the_table_api_from_either_node(pair):
    _, n1, n2 = pair
    for node in (n1, n2):
        for cid, value in CUSTOMERS.items():
            table = get(node, f"/v1/tables/customers/keys/{cid}")
            mine = get(node, f"/v1/customers/{cid}")
            # the route's position: the lookup's, and the range its enrichment read
            read = decode(mine.headers.pop("x-kiq-position"))
            assert decode(table.headers.pop("x-kiq-position")).items() <= read.items()
            assert {t for t, _ in read} == {"customers", "orders"}
            assert (mine.status, mine.headers) == (200, table.headers)
            assert mine.headers["x-kiq-served-by"] == owner(cid)
            assert mine.json() == {**value, "orders": 3}
        missing = get(node, "/v1/customers/nobody")
        table = get(node, "/v1/tables/customers/keys/nobody")
        assert (missing.status, missing.body, missing.headers) == (404, table.body, table.headers)


def test_the_lookup_honours_the_table_apis_parameters(pair):
    _, n1, _ = pair
    remote = next(c for c in CUSTOMERS if owner(c) == "n2")
    redirect = get(n1, f"/v1/customers/{remote}?redirect=true")
    assert redirect.status == 307
    assert redirect.headers["location"] == f"http://n2.test/v1/customers/{remote}"
    assert get(n1, f"/v1/customers/{remote}?max_lag=x").status == 400


def test_reads_route_across_nodes_and_never_carry_the_callers_token(pair):
    cluster, n1, n2 = pair
    for node in (n1, n2):
        ids = ",".join([*CUSTOMERS, "nobody"])
        got = get(node, f"/v1/names?ids={ids}").json()
        assert got == {c: v["name"] for c, v in CUSTOMERS.items()} | {"missing": ["nobody"]}
        for cid, value in CUSTOMERS.items():
            assert get(node, f"/v1/one/{cid}").json() == {"value": value, "same": True}
    assert get(n1, "/v1/one/nobody").json() == {"value": None, "same": True}
    forwarded = [headers for _, path, headers in cluster.transport.sent if "/internal/" in path]
    assert forwarded, "some reads went to the other node"
    # A node without authentication has no caller to name, and passes on no token.
    assert all("authorization" not in h and "x-kiq-principal" not in h for h in forwarded)


def test_a_range_reads_one_customers_orders_in_key_order_with_cursors(pair):
    _, n1, n2 = pair
    for node in (n1, n2):
        for cid in CUSTOMERS:
            want = [v for k, v in sorted(ORDERS.items()) if k.startswith(cid + "|")]
            assert get(node, f"/v1/customers/{cid}/orders").json() == {
                "orders": want,
                "next": None,
            }
            first = get(node, f"/v1/customers/{cid}/orders?limit=2").json()
            assert first["orders"] == want[:2] and first["next"]
            rest = get(node, f"/v1/customers/{cid}/orders?cursor={first['next']}").json()
            assert rest["orders"] == want[2:]
            since = get(node, f"/v1/customers/{cid}/orders?from=2026-11-02").json()
            assert since["orders"] == want[1:]
    assert get(n1, "/v1/customers/c1/orders?limit=11").status == 400


def test_a_read_whose_owner_is_down_is_unavailable(pair):
    cluster, n1, _ = pair
    remote = next(c for c in CUSTOMERS if owner(c) == "n2")
    cluster.down.add("http://n2.test")
    answer = get(n1, f"/v1/one/{remote}")
    assert (answer.status, answer.json()["error"]) == (503, "unavailable")


def test_writes_go_through_the_nodes_writer(pair):
    _, n1, _ = pair
    body = b'{"customer": "c1", "total": 5}'
    answer = asyncio.run(call(n1.app, "POST", "/v1/orders", body))
    assert (answer.status, answer.json()) == (202, {"partition": 0, "offset": 0})
    assert answer.headers["content-type"] == "application/json"
    assert n1.writer.records == [("orders-in", b"c1", orjson.dumps(orjson.loads(body)))]
    n1.writer.fail = WriteFailed("broker gone")
    assert asyncio.run(call(n1.app, "POST", "/v1/orders", body)).status == 503


def test_errors_answer_as_on_every_route(pair):
    _, n1, _ = pair
    bad = asyncio.run(call(n1.app, "POST", "/v1/orders", b'{"total": 5}'))
    assert (bad.status, bad.json()) == (
        400,
        {"error": "bad_request", "message": "give a customer", "field": "customer"},
    )
    not_json = asyncio.run(call(n1.app, "POST", "/v1/orders", b"{"))
    assert (not_json.status, not_json.json()["message"]) == (400, "the body must be JSON")
    assert get(n1, "/v1/broken").status == 500
    assert get(n1, "/v1/customers").json()["error"] == "no_route"
    assert asyncio.run(call(n1.app, "POST", "/v1/names")).json()["error"] == "no_route"
    # The application's routes replace the shipped ones.
    assert get(n1, "/v1/stocks/AAPL").json()["error"] == "no_route"


def test_an_unknown_table_is_a_404(tmp_path: Path):
    async def lost(request: Request) -> Reply:
        await request.tables.get("nope", "k")
        return json_reply({})

    cluster = Cluster()
    node = start_node(tmp_path, cluster, {"t=t": 1}, endpoints=[lambda app: app.get("/x", lost)])
    try:
        answer = get(node, "/x")
        assert (answer.status, answer.json()["error"]) == (404, "unknown_table")
    finally:
        node.node.stop()


def test_routes_refuse_core_paths_duplicates_and_unknown_methods():
    app = Routes()
    app.get("/v1/mine", customer)
    for method, path in [
        ("GET", "/v1/tables/x/summary"),
        ("POST", "/v1/internal/lookups"),
        ("GET", "/metrics"),
        ("GET", "/v1/mine"),
        ("FETCH", "/v1/other"),
        ("GET", "no-slash"),
    ]:
        with pytest.raises(ConfigError):
            app.add(method, path, customer)
    assert [(r.method, r.path) for r in app] == [("GET", "/v1/mine")]


def test_targets_name_a_module_or_a_file_beside_the_application_file(tmp_path: Path):
    assert resolve("kiq.apps.stocks.api:routes", "endpoints").__name__ == "routes"
    (tmp_path / "mine.py").write_text("def routes(app):\n    app.get('/v1/mine', None)\n")
    found = resolve("mine.py:routes", "endpoints", str(tmp_path))
    declared = Routes()
    found(declared)
    assert [r.path for r in declared] == ["/v1/mine"]
    for bad, why in [
        ("nocolon", "module:function"),
        ("kiq.apps.stocks.api:nothing", "no function"),
        ("no.such.module:f", "cannot import"),
        ("missing.py:routes", "no file"),
    ]:
        with pytest.raises(ConfigError, match=why):
            resolve(bad, "endpoints", str(tmp_path))
