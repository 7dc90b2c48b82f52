"""How long a node's read worker takes to see a write its node applied (``--workers``).

A worker follows its node's stores (``kiq.workers``): what it answers may trail what
the node answers by one follow. Two kept-alive connections, one the node holds and one
a worker holds (``GET /v1/health/live`` says which process a connection reached), read
a key after each write until it shows its new value; the difference of the two times
is what the worker adds.
"""

from __future__ import annotations

import time

import httpx
import orjson

from kiq.bench.dataset import TABLE, quote
from kiq.errors import KiqError
from kiq.kafka.records import JsonProducer

POLL_S = 0.0005


def worker_lag(
    url: str, bootstrap: str, topic: str, key: str, writes: int = 50
) -> dict[str, object]:
    """Milliseconds from a write to its value at the node and at a worker, p50 and max."""
    node, worker = _connection(url, "node"), _connection(url, "worker")
    producer = JsonProducer(bootstrap, topic, key_field="symbol", linger_ms=0)
    at_node: list[float] = []
    at_worker: list[float] = []
    try:
        for n in range(writes):
            value = {**quote(key), "bench_write": n}
            started = time.perf_counter()
            producer.produce(value)
            producer.flush(10)
            seen = {"node": 0.0, "worker": 0.0}
            while not all(seen.values()):
                for name, client in (("node", node), ("worker", worker)):
                    if not seen[name] and _shows(client, key, n):
                        seen[name] = (time.perf_counter() - started) * 1000
                if time.perf_counter() - started > 10:
                    raise KiqError(f"write {n} not seen in 10 s: {seen}")
                time.sleep(POLL_S)
            at_node.append(seen["node"])
            at_worker.append(seen["worker"])
    finally:
        node.close()
        worker.close()
    lag = sorted(w - n for w, n in zip(at_worker, at_node, strict=True))
    return {
        "worker_writes": writes,
        "node_sees_write_p50_ms": round(sorted(at_node)[len(at_node) // 2], 2),
        "worker_sees_write_p50_ms": round(sorted(at_worker)[len(at_worker) // 2], 2),
        "worker_behind_node_p50_ms": round(lag[len(lag) // 2], 2),
        "worker_behind_node_max_ms": round(lag[-1], 2),
    }


def _shows(client: httpx.Client, key: str, n: int) -> bool:
    resp = client.get(f"/v1/tables/{TABLE}/keys/{key}")
    return resp.status_code == 200 and orjson.loads(resp.content).get("bench_write") == n


def _connection(url: str, which: str, tries: int = 200) -> httpx.Client:
    """A client whose one kept-alive connection ``which`` (node or worker) holds."""
    for _ in range(tries):
        client = httpx.Client(base_url=url, limits=httpx.Limits(max_connections=1), timeout=5)
        body = client.get("/v1/health/live").json()
        if ("worker" in body) == (which == "worker"):
            return client
        client.close()
    raise KiqError(f"no connection to {url} reached the {which} in {tries} tries")
