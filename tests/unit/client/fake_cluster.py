"""Two nodes answering kiq's read API in-process, through httpx's MockTransport: what the
client's own logic (routing, retries, failover, watch reconnects) is tested against.
The integration tests (tests/integration/test_client.py) hold it to real nodes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import httpx
import orjson

from kiq.partitioning import partition_for

PARTITIONS = 4
NODES = {"n1": "http://n1.test", "n2": "http://n2.test"}


@dataclass
class FakeCluster:
    values: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)  # nodes whose connections fail
    failing: dict[str, int] = field(default_factory=dict)  # node → 503s still to answer
    refuse_metadata: bool = False
    view_version: int = 1
    swapped: bool = False  # every partition's active and standby trade places (a failover)
    asked: list[tuple[str, str, str]] = field(default_factory=list)  # (node, method, path)
    headers: list[httpx.Headers] = field(default_factory=list)
    streams: dict[str, Callable[[httpx.Request], httpx.Response]] = field(default_factory=dict)

    def owners(self, partition: int) -> list[str]:
        """[active, standby] of a partition: n1 actives the even ones, n2 the odd."""
        order = ["n1", "n2"] if partition % 2 == 0 else ["n2", "n1"]
        return order[::-1] if self.swapped else order

    def active_url(self, key: str) -> str:
        return NODES[self.owners(partition_for(key, PARTITIONS))[0]]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def calls(self, path_part: str) -> list[tuple[str, str, str]]:
        return [a for a in self.asked if path_part in a[2]]

    def handle(self, request: httpx.Request) -> httpx.Response:
        node = next(n for n, u in NODES.items() if request.url.host == u[7:])
        path = request.url.raw_path.decode().split("?")[0]
        self.asked.append((node, request.method, path))
        self.headers.append(request.headers)
        if node in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if self.failing.get(node, 0) > 0:
            self.failing[node] -= 1
            return _json(503, {"error": "unavailable", "message": "try again"})
        if path == "/v1/metadata":
            if self.refuse_metadata:
                return _json(403, {"error": "insufficient_scope", "message": "kiq:admin"})
            return _json(200, self.metadata(node))
        if path == "/v1/tables":
            tables = [
                {"name": "t", "partitions": PARTITIONS, "format": "json", "sep": None},
                {"name": "raw", "partitions": PARTITIONS, "format": "raw", "sep": None},
            ]
            return _json(200, {"tables": tables})
        parts = path.split("/")  # ['', 'v1', 'tables', T, ...]
        table = parts[3]
        if table not in ("t", "raw"):
            return _json(404, {"error": "unknown_table", "message": f"no table {table}"})
        if path.endswith("/watch"):
            return self.streams[node](request)
        if parts[4] == "multiget":
            keys = orjson.loads(request.content)["keys"]
            found = {k: self.values[k] for k in keys if k in self.values}
            return _json(200, {"found": found, "missing": [k for k in keys if k not in found]})
        key = unquote(parts[5])
        return self.lookup(node, table, key)

    def lookup(self, node: str, table: str, key: str) -> httpx.Response:
        partition = partition_for(key, PARTITIONS)
        live = [n for n in self.owners(partition) if n not in self.down]
        served_by = live[0]  # the active answers; a node asked in its place forwards to it
        headers = {"x-kiq-partition": str(partition), "x-kiq-served-by": served_by}
        store = self.raw if table == "raw" else self.values
        if key == "bad key":
            return _json(400, {"error": "bad_request", "message": "no"}, headers)
        if key not in store:
            body = {"error": "not_found", "message": "no such key", "key": key}
            return _json(404, body, headers)
        headers |= {"x-kiq-offset": "7", "x-kiq-lag": "0"}
        if served_by != self.owners(partition)[0]:
            headers["x-kiq-stale"] = "true"
        if table == "raw":
            headers["content-type"] = "application/octet-stream"
            return httpx.Response(200, content=self.raw[key], headers=headers)
        return _json(200, self.values[key], headers)

    def metadata(self, node: str) -> dict[str, Any]:
        parts = [
            {
                "partition": p,
                "active": self.owners(p)[0],
                "standbys": self.owners(p)[1:],
                "urls": {n: NODES[n] for n in self.owners(p)},
            }
            for p in range(PARTITIONS)
        ]
        return {
            "node": {"id": node, "url": NODES[node]},
            "view_version": self.view_version,
            "nodes": [{"id": n, "url": u} for n, u in NODES.items()],
            "tables": {"t": {"partitions": parts}, "raw": {"partitions": parts}},
        }


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status,
        content=orjson.dumps(body),
        headers={"content-type": "application/json", **(headers or {})},
    )


def event_stream(chunks: list[bytes], then: Exception | None = None) -> Iterator[bytes]:
    """A response body that yields ``chunks``, then raises ``then`` (a lost connection)."""
    yield from chunks
    if then is not None:
        raise then
