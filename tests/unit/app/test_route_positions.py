"""An application route keeps one position per request: seeded from its X-Kiq-After, every
read through ``Tables`` at or past it, what each read and write saw merged in, and the
answer's X-Kiq-Position naming it all."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from kiq import Reply, Request, Routes, json_reply
from kiq.partitioning import partition_for
from kiq.positions import decode
from kiq.replicas import ReplicaState
from tests.unit.app.test_endpoints import AUTH, CUSTOMERS, ORDERS, PARTITIONS, TABLES, customer
from tests.unit.stand_ins import Cluster, LocalNode, Response, call, serving, start_node, wait_until

FIRST = "c0"
FIRST_PARTITION = partition_for(FIRST, PARTITIONS)


async def one(request: Request) -> Reply:
    value = await request.tables.get_json("customers", request.path_params["id"])
    return json_reply({"value": value, "position": request.position})


async def many(request: Request) -> Reply:
    found = await request.tables.get_many("customers", list(CUSTOMERS))
    return json_reply(len(found.found))


async def rename(request: Request) -> Reply:
    """Writes a customer, then reads it back: the read must be at or past the write."""
    cid = request.path_params["id"]
    partition, offset = await request.write("customers", cid, b'{"name": "new"}')
    value = await request.tables.get_json("customers", cid, wait_ms=int(request.query["wait"]))
    return json_reply({"partition": partition, "offset": offset, "value": value})


def routes(app: Routes) -> None:
    app.get("/v1/one/{id}", one)
    app.get("/v1/many", many)
    app.get("/v1/customers/{id}", customer)
    app.post("/v1/rename/{id}", rename)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[LocalNode]:
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    for topic in ("customers", "orders"):
        cluster.assign("n1", [(topic, p) for p in range(PARTITIONS)])
    made = start_node(tmp_path, cluster, TABLES, "n1", endpoints=[routes], standby_replicas=0)
    wait_until(serving(made.node, ReplicaState.ACTIVE), what="active replicas")
    for offset, (key, value) in enumerate([*CUSTOMERS.items(), *ORDERS.items()]):
        made.put("orders" if "|" in key else "customers", key, orjson.dumps(value), 100 + offset)
    yield made
    made.node.stop()


def ask(node: LocalNode, method: str, target: str, after: str | None = None) -> Response:
    headers = [AUTH] + ([(b"x-kiq-after", after.encode())] if after is not None else [])
    return asyncio.run(call(node.app, method, target, headers=headers))


def applied(node: LocalNode, table: str, partition: int) -> int:
    replica = node.node.replica(table, partition)
    assert replica is not None
    return replica.applied_offset


def test_a_routes_answer_names_what_its_reads_saw(node):
    answer = ask(node, "GET", f"/v1/one/{FIRST}")
    assert answer.status == 200, answer.body
    seen = {("customers", FIRST_PARTITION): applied(node, "customers", FIRST_PARTITION)}
    assert decode(answer.headers["x-kiq-position"]) == seen
    assert answer.json()["position"] == answer.headers["x-kiq-position"]
    every = ask(node, "GET", "/v1/many")
    held = {("customers", p): applied(node, "customers", p) for p in range(PARTITIONS)}
    assert decode(every.headers["x-kiq-position"]) == {k: o for k, o in held.items() if o >= 0}
    assert len(decode(every.headers["x-kiq-position"])) > 1


def test_a_lookup_route_merges_its_own_answer_with_the_routes_reads(node):
    answer = ask(node, "GET", f"/v1/customers/{FIRST}")  # a lookup, enriched by a range
    assert answer.status == 200, answer.body
    assert decode(answer.headers["x-kiq-position"]) == {
        ("customers", FIRST_PARTITION): applied(node, "customers", FIRST_PARTITION),
        ("orders", FIRST_PARTITION): applied(node, "orders", FIRST_PARTITION),
    }
    assert list(answer.headers).count("x-kiq-position") == 1


def test_the_requests_x_kiq_after_bounds_its_reads_and_comes_back(node):
    ahead = f"customers:{FIRST_PARTITION}={applied(node, 'customers', FIRST_PARTITION) + 5}"
    refused = ask(node, "GET", f"/v1/one/{FIRST}", after=ahead)
    assert refused.status == 503, refused.body
    assert ask(node, "GET", f"/v1/customers/{FIRST}", after=ahead).status == 503
    elsewhere = "other:0=99"  # no read of this request touches it: answered, and kept
    answer = ask(node, "GET", f"/v1/one/{FIRST}", after=elsewhere)
    assert answer.status == 200
    assert ("other", 0) in decode(answer.headers["x-kiq-position"])
    assert ask(node, "GET", f"/v1/one/{FIRST}", after="nonsense").status == 400
    # a route's query is the application's own: ?after= is no token to it
    assert ask(node, "GET", f"/v1/one/{FIRST}?after=t:x").status == 200


def test_a_write_is_in_the_position_and_the_read_after_it_waits_for_it(node):
    # The stand-in writer puts every record at partition 0, offset 0, 1, ...
    key = next(f"k{i}" for i in range(100) if partition_for(f"k{i}", PARTITIONS) == 0)
    node.put("customers", key, b'{"name": "old"}', 50)  # the replica has applied 50
    answer = ask(node, "POST", f"/v1/rename/{key}?wait=0")
    assert answer.status == 200, answer.body
    assert answer.json() == {"partition": 0, "offset": 0, "value": {"name": "old"}}
    assert decode(answer.headers["x-kiq-position"]) == {("customers", 0): 50}
    # A write the replica has not applied yet: the read after it is refused, not stale.
    replica = node.node.replica("customers", 0)
    assert replica is not None
    replica.position = 1  # as if the replica had applied offset 0 only
    late = ask(node, "POST", f"/v1/rename/{key}?wait=50")
    assert late.status == 503, late.body
    assert late.json()["error"] == "unavailable"


async def as_of_a_batch(request: Request) -> Reply:
    found = await request.tables.get_many("customers", list(CUSTOMERS), consistent="batch")
    names = {k: orjson.loads(v)["name"] for k, v in found.found.items()}
    return json_reply({"batch": found.batch, "names": names, "unavailable": found.unavailable})


def test_tables_reads_as_of_a_batch_and_within_the_requests_position(tmp_path: Path) -> None:
    import time
    from functools import partial

    from kiq.replicas.reads import entry

    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    for topic in ("customers", "orders"):
        cluster.assign("n1", [(topic, p) for p in range(PARTITIONS)])

    def batch_routes(app: Routes) -> None:
        app.get("/v1/batch", as_of_a_batch)
        app.get("/v1/many", many)

    made = start_node(tmp_path, cluster, TABLES, "n1", endpoints=[batch_routes], standby_replicas=0)
    try:
        wait_until(serving(made.node, ReplicaState.ACTIVE), what="active replicas")
        for offset, (key, value) in enumerate(CUSTOMERS.items()):
            made.put("customers", key, orjson.dumps(value), 100 + offset)
        for p in range(PARTITIONS):  # batch 3 marked everywhere, then a write after it
            replica = made.node.replica("customers", p)
            assert replica is not None
            replica.batches.mark(3, replica.applied_offset, time.monotonic())
            mine = [k for k in CUSTOMERS if partition_for(k, PARTITIONS) == p]
            at = replica.applied_offset + 1
            changes = [(k.encode(), b'{"name": "later"}', at) for k in mine]
            replica.batches.before_write(partial(entry, replica), changes)
            replica.store.apply(changes, at)
            replica.position = at + 1
        answer = ask(made, "GET", "/v1/batch")
        assert answer.status == 200, answer.body
        got = answer.json()
        assert got["batch"] == 3 and not got["unavailable"]
        assert got["names"] == {k: v["name"] for k, v in CUSTOMERS.items()}
        # The request's position bounds a read across partitions too: one partition
        # behind it is not answered from here.
        ahead = f"customers:{FIRST_PARTITION}={applied(made, 'customers', FIRST_PARTITION) + 5}"
        every = ask(made, "GET", "/v1/many").json()
        bounded = ask(made, "GET", "/v1/many", after=ahead).json()
        behind = [k for k in CUSTOMERS if partition_for(k, PARTITIONS) == FIRST_PARTITION]
        assert every == len(CUSTOMERS) and bounded == len(CUSTOMERS) - len(behind)
    finally:
        made.node.stop()


async def two_tables(request: Request) -> Reply:
    """Reads two tables one query writes, each as of a batch: the same one."""
    customers = await request.tables.get_many("customers", list(CUSTOMERS), consistent="batch")
    orders = await request.tables.range("orders", limit=1000, consistent="batch")
    return json_reply({"customers": customers.batch, "orders": orders.batch})


def test_two_tables_of_one_query_are_read_as_of_the_same_batch(tmp_path: Path) -> None:
    import dataclasses
    import time

    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    for topic in ("customers", "orders"):
        cluster.assign("n1", [(topic, p) for p in range(PARTITIONS)])
    made = start_node(
        tmp_path,
        cluster,
        TABLES,
        "n1",
        endpoints=[lambda app: app.get("/v1/both", two_tables)],
        standby_replicas=0,
    )
    try:
        wait_until(serving(made.node, ReplicaState.ACTIVE), what="active replicas")
        one_query = {"consistent": True, "pipeline": "shop", "query": "q"}
        for name in ("customers", "orders"):
            runtime = made.node.tables[name]
            declared = dataclasses.replace(runtime.spec, declared=one_query)
            made.node.tables[name] = made.node.current[name] = dataclasses.replace(
                runtime, spec=declared
            )
        now = time.monotonic()
        for name in ("customers", "orders"):
            for p in range(PARTITIONS):
                replica = made.node.replica(name, p)
                assert replica is not None
                replica.batches.mark(7, replica.applied_offset, now)
                if name == "orders":  # orders applied batch 8 already; customers not yet
                    replica.batches.mark(8, replica.applied_offset, now)
        answer = ask(made, "GET", "/v1/both")
        assert answer.status == 200, answer.body
        assert answer.json() == {"customers": 7, "orders": 7}
        # Declared by two queries, each table is read as of its own newest batch.
        for name, query in (("customers", "q1"), ("orders", "q2")):
            runtime = made.node.tables[name]
            other = dataclasses.replace(runtime.spec, declared={**one_query, "query": query})
            made.node.tables[name] = made.node.current[name] = dataclasses.replace(
                runtime, spec=other
            )
        assert ask(made, "GET", "/v1/both").json() == {"customers": 7, "orders": 8}
        # One query again, customers a batch ahead that orders never gets: asked again for
        # a second, then a 503 to retry, never orders as of another batch.
        for name in ("customers", "orders"):
            runtime = made.node.tables[name]
            same = dataclasses.replace(runtime.spec, declared=one_query)
            made.node.tables[name] = made.node.current[name] = dataclasses.replace(
                runtime, spec=same
            )
        for p in range(PARTITIONS):
            replica = made.node.replica("customers", p)
            assert replica is not None
            replica.batches.mark(9, replica.applied_offset, time.monotonic())
        started = time.monotonic()
        refused = ask(made, "GET", "/v1/both")
        assert refused.status == 503 and refused.headers["retry-after"] == "1", refused.body
        assert 0.9 < time.monotonic() - started < 5
    finally:
        made.node.stop()
