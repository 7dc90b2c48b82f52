"""Multi-key reads and byte-ordered scans, spread over the partitions' replicas.

POST /v1/tables/{table}/multiget groups keys by partition and asks each owner
once; GET /v1/tables/{table}/range asks every partition it may touch (one, when
the prefix fixes the partition) and merges the answers in key order.
"""

from __future__ import annotations

import asyncio
import base64
import heapq
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from kiq.api.errors import BadRequest, NotHere, Unavailable, UnknownTable
from kiq.api.params import check_key, decode_cursor, encode_cursor, int_param, prefix_end
from kiq.node import Node
from kiq.routing import LOCAL, Forwarder, Router
from kiq.routing.router import servable
from kiq.tables import TableRuntime

log = logging.getLogger(__name__)

MAX_MULTIGET_KEYS = 10_000
MAX_RANGE_LIMIT = 1000


def value_json(runtime: TableRuntime, value: bytes) -> Any:
    """A stored value inside a JSON response: embedded as is, or base64 for raw tables."""
    if runtime.spec.format == "raw":
        return base64.b64encode(value).decode()
    return orjson.Fragment(value)


class Batches:
    def __init__(self, node: Node, router: Router, forwarder: Forwarder) -> None:
        self.node = node
        self.router = router
        self.forwarder = forwarder

    def _table(self, name: str) -> TableRuntime:
        runtime = self.node.tables.get(name)
        if runtime is None:
            raise UnknownTable(f"no table named {name!r}", table=name)
        return runtime

    # -- multiget ----------------------------------------------------------------

    async def multiget(self, table: str, body: bytes, forwarded: bool, auth: str | None) -> bytes:
        runtime = self._table(table)
        try:
            keys = orjson.loads(body)["keys"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise BadRequest('body must be {"keys": ["...", ...]}') from exc
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise BadRequest('"keys" must be a list of strings')
        if len(keys) > MAX_MULTIGET_KEYS:
            raise BadRequest(f"at most {MAX_MULTIGET_KEYS} keys per request", count=len(keys))
        found, missing, unavailable = await self.get_many(runtime, keys, forwarded, auth)
        out: dict[str, Any] = {"found": found, "missing": missing}
        if unavailable:
            out["unavailable"] = unavailable
        return orjson.dumps(out)

    async def get_many(
        self, runtime: TableRuntime, keys: list[str], forwarded: bool, auth: str | None
    ) -> tuple[dict[str, Any], list[str], list[str]]:
        """(found, missing, unavailable): one call per owner, fallbacks per partition."""
        table = runtime.spec.name
        by_partition: dict[int, list[str]] = defaultdict(list)
        for key in dict.fromkeys(keys):
            check_key(key.encode())
            by_partition[self.node.partition_of(runtime, key)].append(key)

        found: dict[str, Any] = {}
        missing: list[str] = []
        unavailable: list[str] = []
        pending = {p: self._targets(table, p, forwarded) for p in by_partition}
        while pending:
            groups: dict[str, list[int]] = defaultdict(list)
            for p, targets in list(pending.items()):
                if not targets:
                    unavailable.extend(by_partition[p])
                    del pending[p]
                else:
                    groups[targets.pop(0)].append(p)
            jobs = [self._fetch(runtime, t, ps, by_partition, auth) for t, ps in groups.items()]
            results = await asyncio.gather(*jobs)
            for parts, result in zip(groups.values(), results, strict=True):
                if result is None:  # the whole target failed: its partitions try the next one
                    continue
                got, miss, refused = result
                found.update(got)
                missing.extend(miss)
                for p in parts:
                    if not any(k in refused for k in by_partition[p]):
                        pending.pop(p, None)
        return found, missing, unavailable

    def _targets(self, table: str, partition: int, forwarded: bool) -> list[str]:
        local = self.node.replica(table, partition)
        if forwarded:
            return [LOCAL] if local is not None and servable(local, None) else []
        return self.router.targets(self.node.view, table, partition, local)

    async def _fetch(
        self, runtime: TableRuntime, target: str, partitions: list[int],
        by_partition: dict[int, list[str]], auth: str | None,
    ) -> tuple[dict[str, Any], list[str], set[str]] | None:  # fmt: skip
        keys = [k for p in partitions for k in by_partition[p]]
        if target == LOCAL:
            found: dict[str, Any] = {}
            missing: list[str] = []
            for p in partitions:
                replica = self.node.replica(runtime.spec.name, p)
                for k in by_partition[p]:
                    got = replica.store.get(k.encode()) if replica else None
                    if got is None:
                        missing.append(k)
                    else:
                        found[k] = value_json(runtime, got[0])
            return found, missing, set()
        url = f"{target}/v1/tables/{runtime.spec.name}/multiget"
        try:
            reply = await self.forwarder.send("POST", url, auth, orjson.dumps({"keys": keys}))
        except ConnectionError:
            self.router.failed(target)
            return None
        if reply.status != 200:
            return None
        data = orjson.loads(reply.body)
        found = {k: (v if runtime.spec.format == "raw" else orjson.Fragment(orjson.dumps(v)))
                 for k, v in data["found"].items()}  # fmt: skip
        return found, data["missing"], set(data.get("unavailable", ()))

    # -- range ---------------------------------------------------------------------

    async def range(self, table: str, params: dict[str, str], auth: str | None) -> bytes:
        runtime = self._table(table)
        limit = int_param(params, "limit", 1, MAX_RANGE_LIMIT) or 100
        items, last_key = await self.scan(
            runtime,
            prefix=params.get("prefix", "").encode(),
            start=params.get("from", "").encode() or None,
            end=params.get("to", "").encode() or None,
            cursor=params.get("cursor"),
            limit=limit,
            auth=auth,
        )
        out = [{"key": k.decode(), "value": v} for k, v in items]
        next_cursor = encode_cursor(last_key) if last_key is not None else None
        return orjson.dumps({"items": out, "next_cursor": next_cursor})

    async def scan(
        self, runtime: TableRuntime, prefix: bytes, start: bytes | None, end: bytes | None,
        cursor: str | None, limit: int, auth: str | None,
    ) -> tuple[list[tuple[bytes, Any]], bytes | None]:  # fmt: skip
        """Up to ``limit`` (key, value) in key order, and the cursor key when there may be more."""
        if prefix:
            start = max(start or prefix, prefix)
            upper = prefix_end(prefix)
            end = upper if end is None else (min(end, upper) if upper else end)
        if cursor:
            after = decode_cursor(cursor) + b"\x00"
            start = after if start is None else max(start, after)
        partitions = range(runtime.partitions)
        fixed = runtime.spec.partition_key(prefix.decode()) if prefix else None
        if fixed is not None and fixed != prefix.decode():
            partitions = [self.node.partition_of(runtime, prefix.decode())]
        pages = await asyncio.gather(
            *(self._scan(runtime, p, start, end, limit, auth) for p in partitions)
        )
        merged = list(heapq.merge(*pages, key=lambda item: item[0]))
        more = len(merged) > limit or any(len(page) >= limit for page in pages)
        merged = merged[:limit]
        return merged, (merged[-1][0] if more and merged else None)

    async def _scan(
        self, runtime: TableRuntime, partition: int, start: bytes | None, end: bytes | None,
        limit: int, auth: str | None,
    ) -> list[tuple[bytes, Any]]:  # fmt: skip
        for target in self._targets(runtime.spec.name, partition, forwarded=False):
            if target == LOCAL:
                return self.local_scan(runtime, partition, start, end, limit)
            qs = f"limit={limit}"
            if start is not None:
                qs += f"&start={encode_cursor(start)}"
            if end is not None:
                qs += f"&end={encode_cursor(end)}"
            url = (
                f"{target}/v1/internal/tables/{runtime.spec.name}/partitions/{partition}/scan?{qs}"
            )
            try:
                reply = await self.forwarder.send("GET", url, auth)
            except ConnectionError:
                self.router.failed(target)
                continue
            if reply.status != 200:
                log.warning(
                    "scan refused table=%s partition=%d target=%s status=%d body=%s",
                    runtime.spec.name,
                    partition,
                    target,
                    reply.status,
                    reply.body[:200],
                )
                continue
            return [(base64.urlsafe_b64decode(k + "=" * (-len(k) % 4)), _refragment(runtime, v))
                    for k, v in orjson.loads(reply.body)["items"]]  # fmt: skip
        log.warning(
            "scan unavailable table=%s partition=%d replicas=%s",
            runtime.spec.name,
            partition,
            self.node.view.of(runtime.spec.name, partition),
        )
        raise Unavailable(
            f"no replica of {runtime.spec.name}[{partition}] could scan", partition=partition
        )

    def local_scan(
        self, runtime: TableRuntime, partition: int, start: bytes | None, end: bytes | None,
        limit: int,
    ) -> list[tuple[bytes, Any]]:  # fmt: skip
        replica = self.node.replica(runtime.spec.name, partition)
        if replica is None or not servable(replica, None):
            raise NotHere(f"{self.node.node_id} holds no usable replica of partition {partition}")
        return [(k, value_json(runtime, v)) for k, v, _ in replica.store.scan(start, end, limit)]

    async def internal_scan(self, table: str, partition: int, params: dict[str, str]) -> bytes:
        runtime = self._table(table)
        start = decode_cursor(params["start"]) if params.get("start") else None
        end = decode_cursor(params["end"]) if params.get("end") else None
        limit = int_param(params, "limit", 1, MAX_RANGE_LIMIT) or MAX_RANGE_LIMIT
        items = self.local_scan(runtime, partition, start, end, limit)
        return orjson.dumps({"items": [[encode_cursor(k), v] for k, v in items]})


def _refragment(runtime: TableRuntime, value: Any) -> Any:
    return value if runtime.spec.format == "raw" else orjson.Fragment(orjson.dumps(value))


Handler = Callable[..., Awaitable[bytes]]
